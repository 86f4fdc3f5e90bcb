"""Defaults that fit the run (issue 55, item 2): a checkpoint run's default ``--batch`` is what the
text gives, said in one stderr line; an explicit ``--batch`` the text cannot fill stays a refusal."""

from __future__ import annotations

import json
from argparse import Namespace
from pathlib import Path
from types import SimpleNamespace

import pytest

from rankdyn import UsageError
from rankdyn._commands._excerpts import count_excerpts_before_loading, excerpts_after_loading
from tests.checkpoint_models import write_tokenizer

LINE = "--batch: the text gives 2 excerpts of 16 tokens; using --batch 2 (give --batch to choose)"


def _bert_tokenizer_only(folder: Path) -> Path:
    """A BERT's config.json and tokenizer.json, no weights: the pre-check reads nothing else."""
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "bert", "max_position_embeddings": 24}))
    write_tokenizer(folder)
    return folder


def _args(folder, text, batch):
    return Namespace(checkpoint=folder, text=text, input_ids=None, n=16, batch=batch)


def test_default_batch_is_what_the_text_gives_and_an_explicit_one_is_refused(tmp_path, capsys):
    folder = _bert_tokenizer_only(tmp_path / "ckpt")
    text = tmp_path / "short.txt"
    text.write_text(" ".join(f"w{i}" for i in range(30)))  # 30 tokens: 2 excerpts of 14 at n=16
    args = _args(folder, text, 256)  # the default: --batch not given
    count_excerpts_before_loading(args, {"n": "--n"})
    assert args.batch == 2
    out, err = capsys.readouterr()
    assert err.strip() == LINE and out == ""
    # A default the text fills is kept, silently.
    args = _args(folder, text, 1)
    count_excerpts_before_loading(args, {"n": "--n"})
    assert args.batch == 1 and capsys.readouterr().err == ""
    # An explicit --batch above what the text allows stays a refusal, and nothing is printed.
    args = _args(folder, text, 64)
    with pytest.raises(UsageError, match="30 tokens: only 2 excerpts of 14"):
        count_excerpts_before_loading(args, {"n": "--n", "batch": "--batch"})
    assert args.batch == 64 and capsys.readouterr().err == ""
    # A text with no excerpt at all is refused even under the default.
    text.write_text("w1 w2 w3")
    with pytest.raises(UsageError, match="not even one excerpt"):
        count_excerpts_before_loading(_args(folder, text, 256), {"n": "--n"})


def test_the_full_check_after_loading_fits_the_default_too(tmp_path, capsys):
    """Checkpoints the pre-check cannot read (MPNet's slices, a GGUF's tokenizer) are fitted after
    loading, by the full check's own tokenisation (rankdyn._trained._text.excerpts)."""
    from rankdyn._trained._text import excerpts

    folder = _bert_tokenizer_only(tmp_path / "ckpt")
    tok = (folder / "tokenizer.json").read_text()
    ckpt = SimpleNamespace(
        tokenizer_json=tok,
        _specials=lambda: (1, 2),
        tokenize_text=lambda text, n, batch, where: excerpts(tok, text, n, batch, (1, 2), where),
    )
    text = " ".join(f"w{i}" for i in range(30))
    args = Namespace(batch=256)
    ids = excerpts_after_loading(args, ckpt, {}, text, 16, where="--text t")
    assert ids.shape == (2, 16) and args.batch == 2
    assert capsys.readouterr().err.strip() == LINE
    with pytest.raises(UsageError, match="only 2 excerpts of 14"):
        excerpts_after_loading(Namespace(batch=3), ckpt, {"batch": "--batch"}, text, 16, where="--text t")
    assert capsys.readouterr().err == ""
