"""The checkpoint config reader: every refusal names its own cause.

Every field is checked as it is read: a fractional ("8.7"), quoted ("8"), list-valued or zero
size is a `UsageError` naming the checkpoint, config.json and the key; a config whose layer count
differs from the weights' is refused; NaN weights and a negative ``layer_norm_eps`` are refused
naming the tensor or the key, not the tokens. The checkpoints here are written with NumPy (no
torch), so no test compiles.
"""

import json
import re

import numpy as np
import pytest

from rankdyn._errors import UsageError
from rankdyn.checkpoints import load_checkpoint
from rankdyn.cli import main

_D, _F, _VOCAB, _POSITIONS = 4, 6, 10, 8


def _tiny_bert(folder, *, layers=2, weight_layers=None, nan_at=None, **config):
    """A BERT folder (d=4, 2 heads) with random float32 weights for ``weight_layers`` blocks
    (default ``layers``), ``config.json`` claiming ``layers``; ``nan_at`` = (tensor, index) puts a NaN."""
    from safetensors.numpy import save

    rng = np.random.default_rng(0)
    r = lambda *shape: rng.normal(size=shape).astype(np.float32)  # noqa: E731
    t = {
        "embeddings.word_embeddings.weight": r(_VOCAB, _D),
        "embeddings.position_embeddings.weight": r(_POSITIONS, _D),
        "embeddings.token_type_embeddings.weight": r(2, _D),
        "embeddings.LayerNorm.weight": r(_D),
        "embeddings.LayerNorm.bias": r(_D),
    }
    for i in range(layers if weight_layers is None else weight_layers):
        p = f"encoder.layer.{i}."
        for n in (
            "attention.self.query",
            "attention.self.key",
            "attention.self.value",
            "attention.output.dense",
        ):
            t |= {p + n + ".weight": r(_D, _D), p + n + ".bias": r(_D)}
        for n in ("attention.output.LayerNorm", "output.LayerNorm"):
            t |= {p + n + ".weight": r(_D), p + n + ".bias": r(_D)}
        t |= {p + "intermediate.dense.weight": r(_F, _D), p + "intermediate.dense.bias": r(_F)}
        t |= {p + "output.dense.weight": r(_D, _F), p + "output.dense.bias": r(_D)}
    if nan_at is not None:
        t[nan_at[0]][nan_at[1]] = np.nan
    base = dict(model_type="bert", hidden_size=_D, num_attention_heads=2, num_hidden_layers=layers)
    base |= dict(intermediate_size=_F, vocab_size=_VOCAB, max_position_embeddings=_POSITIONS)
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(base | config))
    (folder / "model.safetensors").write_bytes(save(t))
    return folder


def test_config_fields_are_checked_naming_file_and_key(tmp_path):
    """Zero heads or layers, list-valued fields, a fractional or quoted width, negative heads and
    a negative eps: each one UsageError naming the checkpoint, config.json and the key with its
    value, and none of them runs."""
    assert load_checkpoint(_tiny_bert(tmp_path / "ok")).num_layers == 2
    cases = [
        (dict(num_attention_heads=0), "num_attention_heads=0, which must be a positive integer"),
        (dict(num_hidden_layers=0), "num_hidden_layers=0, which must be a positive integer"),
        (dict(num_attention_heads=-1), "num_attention_heads=-1, which must be a positive integer"),
        (dict(hidden_size=[_D]), "hidden_size=[4], which must be a positive integer"),
        (dict(hidden_size=4.7), "hidden_size=4.7, which must be a positive integer"),
        (dict(hidden_size="4"), "hidden_size='4', which must be a positive integer"),
        (dict(intermediate_size=True), "intermediate_size=True, which must be a positive integer"),
        (dict(layer_norm_eps=[1e-12]), "layer_norm_eps=[1e-12], which must be a finite number >= 0"),
        (dict(layer_norm_eps=-1.0), "layer_norm_eps=-1.0, which must be a finite number >= 0"),
        (dict(hidden_act=["gelu"]), "hidden_act=['gelu'], which rankdyn does not implement"),
    ]
    for i, (change, words) in enumerate(cases):
        folder = _tiny_bert(tmp_path / f"c{i}", **change)
        with pytest.raises(UsageError, match=re.escape(f"checkpoint {folder}: config.json has {words}")):
            load_checkpoint(folder)


def test_config_layer_count_must_match_the_weights(tmp_path):
    """A config claiming 1 layer over weights of 3 ran one layer silently; one claiming 3 over 2
    failed on the first missing tensor. Both are refused now, naming both counts and the key."""
    fewer = _tiny_bert(tmp_path / "fewer", layers=1, weight_layers=3)
    with pytest.raises(UsageError, match="num_hidden_layers=1 but model.safetensors holds 3 layers"):
        load_checkpoint(fewer)
    more = _tiny_bert(tmp_path / "more", layers=3, weight_layers=2)
    with pytest.raises(UsageError, match="num_hidden_layers=3 but model.safetensors holds 2 layers"):
        load_checkpoint(more)


def test_nan_weights_and_negative_eps_name_their_own_cause(tmp_path, capsys):
    """NaN in the word embeddings or in a later block, and ``layer_norm_eps`` < 0: each refusal
    names the tensor (and the index) or the config key, not the tokens, in one ``error:`` line,
    exit 2."""
    ids = tmp_path / "ids.npy"
    np.save(ids, np.array([[1, 2, 3, 4]], np.int32))
    embedded = ("embeddings.word_embeddings.weight", (2, 3))
    cases = [
        (dict(nan_at=embedded), "tensor 'embeddings.word_embeddings.weight' holds NaN or infinite values"),
        (dict(layer_norm_eps=-1.0), "config.json has layer_norm_eps=-1.0"),
    ]
    for i, (change, words) in enumerate(cases):
        folder = _tiny_bert(tmp_path / f"c{i}", **change)
        args = ["simulate", "--checkpoint", str(folder), "--input-ids", str(ids), "--n", "4"]
        assert main([*args, "--out", str(tmp_path / f"o{i}")]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and words in err[0] and "x0" not in err[0], err
    later = _tiny_bert(tmp_path / "later", nan_at=("encoder.layer.1.output.dense.weight", (2, 3)))
    with pytest.raises(UsageError, match=r"'encoder.layer.1.output.dense.weight' .*first at index \(2, 3\)"):
        load_checkpoint(later)
