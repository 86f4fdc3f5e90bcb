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


def _stats(ratios, uniform=0.1, heads=2):
    """A synthetic `SinkStats` whose head-mean sink ratio per layer is ``ratios``."""
    import numpy as np

    from rankdyn._run._sinks import SinkStats

    r = np.asarray(ratios, float)
    spread = np.array([0.5, 1.5])[:heads]  # heads differ; their mean is the layer's ratio
    mass = r[:, None] * uniform * spread[None]
    cos = np.linspace(0.1, 0.9, len(r) + 1)
    return SinkStats(mass, mass, uniform, uniform, cos, cos / 2, (0,))


def test_sink_summary_names_the_sink_layers_the_median_and_the_control():
    import numpy as np

    from rankdyn._run._sinks import _ranges, sink_summary

    assert _ranges([1, 2, 3, 5, 7, 8]) == "1-3, 5, 7-8" and _ranges([4]) == "4"
    ratios = [0.5, 3.0, 4.0, np.nan, 2.0, 1.9]  # a NaN layer is counted, never a sink
    control = [1.1, 0.9, 1.0, 1.3, 0.8, 1.2]
    text = sink_summary(_stats(ratios), _stats(control))
    lines = text.splitlines()
    assert len(lines) == 3, text
    assert lines[0].endswith("3 of 6 layers (2-3, 5)"), lines[0]
    med = np.median([r for r in ratios if np.isfinite(r)])  # 2.0, the oracle
    assert f"median ratio {med:.3g} (min 0.5, max 4)" in lines[1], lines[1]
    assert "uniform share of token 0 0.1" in lines[1]
    assert f"median ratio {np.median(control):.3g}" in lines[2] and "sinks in 0 of 6 layers" in lines[2]
    # A random model's run has no control, and says so; a threshold of 1 finds more layers.
    text = sink_summary(_stats(ratios), factor=1.0)
    assert "control: none" in text.splitlines()[2] and "4 of 6 layers (2-3, 5-6)" in text


def test_the_sinks_figure_names_the_model_n_and_text(tmp_path, monkeypatch):
    """`attention_sinks.png`'s title (rendered from synthetic records, as tests/figure_measured.py
    does): the model's name, n and the text file, not "llama full"; the control drawn beside."""
    import matplotlib.pyplot as plt

    import rankdyn._trained._installed as installed
    from rankdyn._commands._checkpoint import run_title
    from rankdyn.plotting import plot_attention_sinks

    ckpt = SimpleNamespace(arch="llama", path=tmp_path / "smollm2.gguf", d=576)
    source = {"text": str(tmp_path / "corpus.txt")}
    unknown = run_title(ckpt, "full", "causal", source, 8, 64)
    assert unknown.startswith("llama smollm2.gguf, full, mask=causal n=64 d=576"), unknown
    monkeypatch.setattr(installed, "known_model_name", lambda p: "SmolLM2-135M" if p == ckpt.path else None)
    title = run_title(ckpt, "full", "causal", source, 8, 64)
    ax = plot_attention_sinks(
        {"this run": _stats([3.0, 5.0]), "scale-matched control": _stats([1.0, 1.1])}, title=title
    )
    fig = ax.figure if hasattr(ax, "figure") else ax
    shown = fig._suptitle.get_text()
    assert shown.startswith("SmolLM2-135M, full") and "n=64" in shown and "corpus.txt" in shown, shown
    assert "llama full" not in shown
    labels = [t.get_text() for a in fig.axes for leg in [a.get_legend()] if leg for t in leg.get_texts()]
    assert "scale-matched control" in labels, labels
    plt.close(fig)


@pytest.mark.slow  # two `rankdyn simulate` runs in process, one of them compiled (about 10 s)
def test_simulate_says_it_compiles_once_on_stderr_and_nothing_of_it_on_stdout(tmp_path, capsys):
    """One line before the first compile, on stderr only (stdout stays for what programs read)."""
    from rankdyn.cli import main

    argv = ["simulate", "--n", "4", "--d", "3", "--num-layers", "2", "--batch", "2", "--metrics", "mu"]
    assert main(argv + ["--no-progress", "--out", str(tmp_path / "s")]) == 0
    out, err = capsys.readouterr()
    said = [line for line in err.splitlines() if "compiling" in line]
    assert said == [
        "rankdyn simulate: compiling the layer program (once per run, before the first result) ..."
    ]
    assert "compiling" not in out and out.splitlines()[-1].startswith("wrote in"), out
    # A refused run says nothing of compiling: the refusal comes first.
    assert main(argv + ["--rank-tol", "2", "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert "compiling" not in err and err.count("error:") == 1, err


def test_long_runs_default_to_the_metrics_without_svd_or_pairwise_cosines(capsys):
    """At n >= 1024 or with --checkpoint an unset --metrics is the cheap list, said on stderr with
    how to ask for all; short runs keep all; a given --metrics (all included) is kept silently."""
    from rankdyn._commands._table import LONG_CONTEXT_METRICS, default_metrics
    from rankdyn._observe._names import SPECTRAL_METRICS, parse_metrics

    args = Namespace(metrics=None)
    note = default_metrics(args, long=True)
    names = parse_metrics(args.metrics)
    assert names == LONG_CONTEXT_METRICS
    assert not set(names) & (set(SPECTRAL_METRICS) | {"min_cos", "mean_abs_cos"})  # no SVD, no (n, n)
    assert "give --metrics all for every metric" in note and "\n" not in note
    for long, given, want in ((False, None, "all"), (True, "all", "all"), (True, "mu", "mu")):
        args = Namespace(metrics=given)
        assert default_metrics(args, long=long) is None and args.metrics == want
    assert capsys.readouterr().err == ""  # the command prints the note, after its refusals
    from rankdyn._commands._table import plot_names

    assert plot_names(None, LONG_CONTEXT_METRICS) == ("mu",)  # as for all: one figure, not six
    assert plot_names(None, ("mu", "eps_min")) == ("mu", "eps_min")  # a list asked for is drawn


def test_simulate_at_n_1024_records_the_cheap_metrics_by_default(tmp_path, capsys, monkeypatch):
    """`rankdyn simulate --n 1024` (parsed by the real parser) chooses the cheap list before compute."""
    import rankdyn._run._simulate as run_simulate
    from rankdyn.cli import main

    seen = {}

    def no_compute(*a, metrics=None, **k):
        seen["metrics"] = metrics
        raise SystemExit(0)

    monkeypatch.setattr(run_simulate, "simulate", no_compute)
    argv = ["simulate", "--n", "1024", "--d", "4", "--num-layers", "1", "--batch", "1", "--no-progress"]
    with pytest.raises(SystemExit):
        main(argv + ["--out", str(tmp_path / "a")])
    assert tuple(seen["metrics"]) == (
        "mu",
        "mu_rel",
        "mu_normalized",
        "row_norm_mean",
        "row_norm_min",
        "eps_min",
    )
    assert "--metrics: mu,mu_rel" in capsys.readouterr().err
    # A refused run says nothing of the default: one error line.
    assert main(argv + ["--rank-tol", "2", "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("rankdyn simulate: error:"), err
