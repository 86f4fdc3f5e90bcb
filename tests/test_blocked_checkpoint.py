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
    # The block size is the attention strategy's static field: a copy with smaller blocks, so that
    # an n of the tiny checkpoint's 32 positions spans several blocks, the last one ragged.
    from rankdyn._model._attention import BlockedAttention

    c = copy.copy(layer)
    object.__setattr__(c, "path", BlockedAttention(size))
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
        "--num-layers",
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


def _numpy_llama(folder, positions):
    """A one-layer Llama (d = 8, two heads) written with NumPy (no torch), ``positions`` long."""
    import json

    from safetensors.numpy import save_file

    d, f, vocab = 8, 8, 16
    folder.mkdir()
    config = dict(model_type="llama", hidden_size=d, num_attention_heads=2, num_key_value_heads=2)
    config |= dict(num_hidden_layers=1, intermediate_size=f, vocab_size=vocab, rope_theta=1e4)
    (folder / "config.json").write_text(json.dumps(config | dict(max_position_embeddings=positions)))
    rng = np.random.default_rng(0)
    shapes = {"embed_tokens": (vocab, d), "norm": (d,)}
    shapes |= {f"layers.0.self_attn.{p}_proj": (d, d) for p in "qkvo"}
    shapes |= {
        "layers.0.mlp.gate_proj": (f, d),
        "layers.0.mlp.up_proj": (f, d),
        "layers.0.mlp.down_proj": (d, f),
    }
    shapes |= {"layers.0.input_layernorm": (d,), "layers.0.post_attention_layernorm": (d,)}
    tensors = {f"model.{k}.weight": rng.standard_normal(s).astype(np.float32) for k, s in shapes.items()}
    save_file(tensors, str(folder / "model.safetensors"))


def test_checkpoint_memory_estimate_follows_the_attention_path(tmp_path, monkeypatch, capsys):
    # 8192 tokens, two heads, 1 GiB free: the dense path's (n, n) scores (3 GiB in float64) do not
    # fit, the blocked path's O(n) working set does. Both answer before any compute (simulate is a
    # stub); with the dense estimate on both paths (the fault this fixes) the blocked run is refused.
    import rankdyn._run._simulate
    from rankdyn._errors import UsageError
    from rankdyn._run import _memory
    from rankdyn.cli import main

    n = 8192
    _numpy_llama(tmp_path / "ckpt", n)
    np.save(tmp_path / "ids.npy", np.zeros((1, n), np.int32))
    monkeypatch.setattr(_memory, "available_memory", lambda backend=None: (2**30, "host RAM"))

    def stub(layer, *a, **k):
        raise UsageError(f"reached simulate on the {layer.attention_path} path")

    monkeypatch.setattr(rankdyn._run._simulate, "simulate", stub)
    argv = ["simulate", "--checkpoint", str(tmp_path / "ckpt"), "--input-ids", str(tmp_path / "ids.npy")]
    argv += ["--num-layers", "1", "--metrics", "mu", "--no-progress", "--out", str(tmp_path / "out")]
    for path, says in (("blocked", "reached simulate on the blocked path"), ("dense", "needs about")):
        assert main(argv + ["--attention", path]) == 2
        # The stub is reached after the "compiling ..." line (say_compiling), which is not an error.
        err = [ln for ln in capsys.readouterr().err.strip().splitlines() if ": compiling " not in ln]
        assert len(err) == 1 and says in err[0], (path, err)
    assert "working set of one chunk" in err[0] and "1.0 GiB of host RAM" in err[0], err
