"""A trained stack on the blocked path equals the dense path: rotary
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
    return x0, xd


@pytest.mark.slow  # builds a tiny HF Llama (transformers), two layer maps and one CLI run
def test_tiny_llama_blocked_equals_dense_and_the_cli_reads_attention(tmp_path):
    # The stack: blocked (blocks of 8, n = 29) equals dense. The CLI: --attention reaches a
    # --checkpoint run (it was refused), records its path, and its mu is the dense states' mu.
    import json

    pytest.importorskip("transformers")
    from checkpoint_models import llama

    from rankdyn.checkpoints import load_checkpoint
    from rankdyn.cli import main

    llama(tmp_path / "ckpt")
    ckpt = load_checkpoint(tmp_path / "ckpt", dtype=jnp.float64)
    ids = np.random.default_rng(0).integers(0, ckpt.vocab_size, (1, 29))
    x0, xd = _assert_equal(ckpt, ids, depth=2, block=8)
    np.save(tmp_path / "ids.npy", ids)
    argv = ["simulate", "--checkpoint", str(tmp_path / "ckpt"), "--input-ids", str(tmp_path / "ids.npy")]
    argv += [
        "--n",
        "29",
        "--layers",
        "2",
        "--metrics",
        "mu",
        "--x64",
        "--no-progress",
        "--attention",
        "blocked",
    ]
    assert main(argv + ["--out", str(tmp_path / "out")]) == 0
    res = json.loads((tmp_path / "out" / "metrics.json").read_text())
    assert res["config"]["attention"] == "blocked"
    x = np.concatenate([np.asarray(x0)[None], xd])
    want = np.linalg.norm(x - x.mean(axis=1, keepdims=True), axis=(1, 2))
    np.testing.assert_allclose(res["metrics"]["mu"]["mean"], want, rtol=1e-12)


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
