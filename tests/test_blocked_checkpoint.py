"""A trained stack on the blocked path equals the dense path (issue 45, item 3): rotary
embeddings, grouped-query heads, RMSNorm and the gated MLP of Llama, at an odd n that no block
size divides, in float64: the states satisfy |x_blocked - x_dense| <= 1e-12 ||x_dense||_F."""

import copy

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rankdyn._model._mask_structure import MaskStructure


def _small_blocks(layer, size):
    # block_size is a static field of the frozen Module: a copy with smaller blocks, so that an
    # n of the tiny checkpoint's 32 positions spans several blocks, the last one ragged.
    c = copy.copy(layer)
    object.__setattr__(c, "block_size", size)
    return c


def _states(layer, x, depth):
    out = []
    for t in range(depth):
        x = layer(x, t)[0]
        out.append(np.asarray(x))
    return np.stack(out)


def _assert_equal(ckpt, ids, depth, block=None):
    n = ids.shape[1]
    dense = ckpt.layers(n, "full")
    assert dense.attention_path == "dense"  # the default, whatever n
    blocked = ckpt.layers(n, "full", attention="blocked")
    assert blocked.attention_path == "blocked" and isinstance(blocked.mask, MaskStructure)
    if block is not None:
        blocked = _small_blocks(blocked, block)
    x0 = ckpt.embed(ids)[0]
    step = jax.jit(lambda l, x, t: l(x, t))
    xd = _states(lambda x, t: step(dense, x, t), x0, depth)
    xb = _states(lambda x, t: step(blocked, x, t), x0, depth)
    fro = np.linalg.norm(xd, axis=(1, 2))
    assert np.all(np.isfinite(xd))
    err = np.abs(xb - xd).max(axis=(1, 2))
    assert np.all(err <= 1e-12 * fro), err / fro


@pytest.mark.slow  # builds a tiny HF Llama (transformers) and compiles two layer maps
def test_tiny_llama_blocked_equals_dense(tmp_path):
    pytest.importorskip("transformers")
    from checkpoint_models import llama

    from rankdyn.checkpoints import load_checkpoint

    llama(tmp_path)
    ckpt = load_checkpoint(tmp_path, dtype=jnp.float64)
    ids = np.random.default_rng(0).integers(0, ckpt.vocab_size, (1, 29))
    _assert_equal(ckpt, ids, depth=4, block=8)


@pytest.mark.slow  # SmolLM2-135M at 255 tokens (odd), 8 layers, when it is installed
def test_smollm2_blocked_equals_dense_at_255_tokens():
    from rankdyn._trained._installed import KNOWN
    from rankdyn.checkpoints import load_checkpoint

    path = KNOWN["smollm2"][1]()
    if path is None:
        pytest.skip("SmolLM2 is not installed (rankdyn checkpoints)")
    ckpt = load_checkpoint(path, dtype=jnp.float64)
    ids = np.random.default_rng(0).integers(0, ckpt.vocab_size, (1, 255))
    _assert_equal(ckpt, ids, depth=8, block=64)


@pytest.mark.slow  # two CLI runs of a tiny HF Llama
def test_cli_checkpoint_reads_attention(tmp_path):
    # --attention reaches a --checkpoint run (it was refused): the blocked run records its path
    # and its mu equals the dense run's (without the flag a trained stack stays dense: above).
    import json

    pytest.importorskip("transformers")
    from checkpoint_models import llama

    from rankdyn.cli import main

    llama(tmp_path / "ckpt")
    np.save(tmp_path / "ids.npy", np.random.default_rng(0).integers(0, 40, (1, 29)))
    base = ["simulate", "--checkpoint", str(tmp_path / "ckpt"), "--input-ids", str(tmp_path / "ids.npy")]
    base += ["--n", "29", "--layers", "2", "--metrics", "mu", "--x64", "--no-progress"]
    runs = {}
    for flags in (["--attention", "blocked"], ["--attention", "dense"]):
        out = tmp_path / flags[1]
        assert main(base + flags + ["--out", str(out)]) == 0
        runs[" ".join(flags)] = json.loads((out / "metrics.json").read_text())
    assert runs["--attention blocked"]["config"]["attention"] == "blocked"
    assert runs["--attention dense"]["config"]["attention"] == "dense"
    mb, md = (
        np.asarray(runs[k]["metrics"]["mu"]["mean"]) for k in ("--attention blocked", "--attention dense")
    )
    assert np.all(np.abs(mb - md) <= 1e-12 * np.abs(md))
