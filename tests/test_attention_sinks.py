"""The attention-sink observable against a Python loop over depth, and the attention-sinks target's checks.

The loop calls the layer itself (`SelfAttentionLayer.attention` on the normalised tokens of a
pre-norm layer, then the layer); the observable must match it to rounding. Reading the attention
from the un-normalised tokens (a plausible bug for pre-norm blocks) must not match.
"""

import dataclasses

import equinox as eqx
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest
from helpers import layer_step

import rankdyn as rd
from rankdyn._reproduce.pretrained import attention_sinks as AS
from rankdyn._run._sinks import SinkStats, attention_sinks


def _layer(key, n=6, d=4, heads=2, layers=3):
    from rankdyn._model._masks import make_mask
    from rankdyn._model._norms import RMSNorm

    k = jr.split(key, 4)
    return rd.SelfAttentionLayer(
        make_mask("causal", n),
        2.0 * jr.normal(k[0], (layers, heads, d, 3)),
        2.0 * jr.normal(k[1], (layers, heads, d, 3)),
        jr.normal(k[2], (layers, heads, d, 3)),
        w_o=jr.normal(k[3], (layers, heads * 3, d)) / 3,
        placement="pre",
        norm=RMSNorm(),
        skip=True,
    )


# The loop's two calls of the layer, each one compiled program (t traced): called eagerly, every
# operation of the layer compiled a program of its own.
_attention = eqx.filter_jit(
    lambda layer, x, t, normalised: layer.attention(layer.norm(x)[0] if normalised else x, t)
)


def _loop(layer, x0, num_layers, normalised=True):
    first, cos = [], []
    xs = np.asarray(x0)

    def cos0(x):
        u = x / np.linalg.norm(x, axis=-1, keepdims=True)
        return np.mean(np.einsum("bd,bnd->bn", u[:, 0], u[:, 1:]))

    cos.append(cos0(xs))
    for t in range(num_layers):
        tj = jnp.asarray(t)
        a = np.stack(
            [np.asarray(_attention(layer, jnp.asarray(x), tj, normalised)) for x in xs]
        )  # (batch, heads, n, n)
        first.append(a[:, :, 1:, 0].mean(axis=(0, 2)))
        xs = np.stack([np.asarray(layer_step(layer, jnp.asarray(x), tj)) for x in xs])
        cos.append(cos0(xs))
    return np.stack(first), np.asarray(cos)


@pytest.mark.slow
def test_sinks_equal_a_loop_over_depth_and_need_the_normalised_tokens(getkey):
    layer = _layer(getkey())
    x0 = jr.normal(getkey(), (3, 6, 4))
    s = attention_sinks(layer, x0, 3)
    first, cos = _loop(layer, x0, 3)
    assert np.allclose(s.mass_first, first, rtol=1e-12, atol=1e-14)
    assert np.allclose(s.cos_first, cos, rtol=1e-12, atol=1e-14)
    # Under the causal mask the only centre is token 0: both masses are the same numbers.
    assert s.centers == (0,) and np.allclose(s.mass_centers, s.mass_first)
    assert np.isclose(s.uniform_first, np.mean([1 / (i + 1) for i in range(1, 6)]))
    wrong, _ = _loop(layer, x0, 3, normalised=False)
    assert np.max(np.abs(wrong - first)) > 1e-3


@pytest.mark.parametrize("placement", ["none", "post", "pre", "peri", "mix", "ngpt", "lns"])
def test_sinks_read_the_attention_input_the_layer_uses(placement, getkey, monkeypatch):
    """The tokens `attention_input` names are those the layer's own forward pass hands its
    attention sub-block, at a depth before and after mix's switch (recorded by wrapping
    `_attention_block`); reading x itself (the old pre-only rule) fails for peri, ngpt and lns."""
    from rankdyn._model._layer import SelfAttentionLayer
    from rankdyn._model._placements import attention_input

    kw = {"mix": dict(mix_layers=1), "ngpt": dict(ngpt_alpha=0.5)}.get(placement, {})
    layer = rd.make_layer(getkey(), n=5, d=4, placement=placement, value="gaussian", mask="causal", **kw)
    seen = []
    block = SelfAttentionLayer._attention_block
    monkeypatch.setattr(
        SelfAttentionLayer, "_attention_block", lambda self, xa, *a: seen.append(xa) or block(self, xa, *a)
    )
    x = jr.normal(getkey(), (5, 4))
    for t in (0, 2):
        seen.clear()
        layer(x, t)
        want = attention_input(layer, x, t, layer.weights_at(t))
        assert len(seen) == 1 and np.allclose(want, seen[0], rtol=1e-13, atol=1e-14), (placement, t)
        if placement in ("peri", "ngpt", "lns"):
            assert np.max(np.abs(np.asarray(seen[0]) - np.asarray(x))) > 1e-3


def _stats(ratio, cos_first, cos_others, u=0.1):
    ratio = np.asarray(ratio, float)
    return SinkStats(
        mass_first=np.repeat((ratio * u)[:, None], 2, axis=1),
        mass_centers=np.repeat((ratio * u)[:, None], 2, axis=1),
        uniform_first=u,
        uniform_centers=u,
        cos_first=np.asarray(cos_first, float),
        cos_others=np.asarray(cos_others, float),
        centers=(0,),
    )


def test_checks_follow_the_numbers():
    sink = _stats([5, 6, 7], [0.1, 0.5, 0.8], [0.1, 0.4, 0.6])
    flat = _stats([1, 1.1, 0.9], [0.1, 0.3, 0.5], [0.1, 0.6, 0.9])
    m = AS.AttentionSinksMeasured(
        {"trained full": sink, "trained san-skip-ln": sink, "scale-matched full": flat}, {}, "causal"
    )
    assert [c.passed for c in AS.checks(m)] == [True, True, True, False]
    # No sink in the trained model, a sink in the random one, directions not toward token 0: all fail.
    swapped = dataclasses.replace(
        m, stats={"trained full": flat, "trained san-skip-ln": flat, "scale-matched full": sink}
    )
    assert [c.passed for c in AS.checks(swapped)] == [False, False, False, False]
    # Not a causal model: nothing is testable.
    bert = dataclasses.replace(m, mask="complete")
    assert all(c.passed is None for c in AS.checks(bert))


@pytest.mark.slow
def test_controls_keep_the_head_groups_and_the_scored_one_the_trained_scale(tmp_path):
    pytest.importorskip("transformers")
    from checkpoint_models import llama

    from rankdyn._reproduce.pretrained import _sink_controls as SC, long_context_sinks as LC
    from rankdyn.checkpoints import load_checkpoint

    llama(tmp_path)
    ckpt = load_checkpoint(tmp_path)
    r = AS.random_init(ckpt, seed=0)
    wk = np.asarray(r.blocks.w_k)
    assert np.array_equal(wk[:, 0], wk[:, 1]) and not np.array_equal(wk[:, 1], wk[:, 2])
    assert abs(float(np.std(np.asarray(r.blocks.w_q))) - AS.INIT_STD) < 0.005
    assert np.all(np.asarray(r.blocks.norm_attn.gain) == 1.0)
    # The scored control (issue 44): one function for both sink targets; every matrix at the
    # trained Frobenius norm per layer, the head groups kept, the trained gains kept.
    assert AS.scale_matched_init is SC.scale_matched_init is LC.scale_matched_init
    c = SC.scale_matched_init(ckpt, seed=0)
    for name in ("w_q", "w_k", "w_v", "w_o"):
        new, old = (np.asarray(getattr(x.blocks, name), float) for x in (c, ckpt))
        norms = [np.linalg.norm(a.reshape(a.shape[0], -1), axis=1) for a in (new, old)]
        np.testing.assert_allclose(norms[0], norms[1], rtol=1e-5)
        assert not np.allclose(new, old)
    wk = np.asarray(c.blocks.w_k)
    assert np.array_equal(wk[:, 0], wk[:, 1]) and not np.array_equal(wk[:, 1], wk[:, 2])
    np.testing.assert_array_equal(np.asarray(c.blocks.norm_attn.gain), np.asarray(ckpt.blocks.norm_attn.gain))


@pytest.mark.slow  # end to end: a simulate run with its figures
def test_simulate_says_it_wrote_the_sink_files(tmp_path, capsys):
    """``--attention-sinks`` writes sinks.json and attention_sinks.png, and the "wrote" line names them."""
    from rankdyn.cli import main

    out = tmp_path / "s"
    argv = ["simulate", "--n", "4", "--d", "3", "--num-layers", "2", "--batch", "2", "--mask", "causal"]
    assert main(argv + ["--attention-sinks", "--no-progress", "--out", str(out)]) == 0
    wrote = [line for line in capsys.readouterr().out.splitlines() if line.startswith("wrote in")]
    assert len(wrote) == 1 and wrote[0].endswith("sinks.json, attention_sinks.png")
    assert (out / "sinks.json").is_file() and (out / "attention_sinks.png").is_file()


def test_sinks_on_the_blocked_path_equal_the_dense_path_at_odd_n():
    """A P for a random probe P (what the sinks and the key-position profile read of A), for causal,
    an asymmetric window and two global tokens, and the whole `SinkStats` with its uniform
    baselines and several centres (block-sparse, each block reading the one before: the first
    block's five tokens): the blocked path (blocks of 8 at n = 37, the last one ragged;
    no (n, n) array) equals the dense path to 1e-12 relative in float64 (two heads, W_O, pre-LN)."""
    import equinox as eqx

    from rankdyn._model._layer import SelfAttentionLayer
    from rankdyn._model._mask_structure import MaskStructure as MS
    from rankdyn._run._sinks import attention_times

    n, d, heads = 37, 6, 2
    rng = np.random.default_rng(0)
    g = lambda *shape: jnp.asarray(rng.standard_normal(shape))  # noqa: E731
    kw = dict(w_q=g(heads, d, 3), w_k=g(heads, d, 3), w_v=g(heads, d, 3), w_o=g(heads * 3, d) / 3)
    kw |= dict(placement="pre", skip=True)
    x0, probe = g(2, n, d), g(n, 3)
    pairs = [
        (SelfAttentionLayer(s, **kw), SelfAttentionLayer(s, **kw, attention="blocked", block_size=8))
        for s in (MS.causal(n), MS.window(n, 3, 1), MS.global_local(n, 2, 2))
    ]
    times = eqx.filter_jit(lambda ls, x: [attention_times(l, x, 1, probe) for pair in ls for l in pair])
    out = times(pairs, x0[0])
    for c in range(len(pairs)):
        assert float(jnp.max(jnp.abs(out[2 * c]))) > 0.1, c
        np.testing.assert_allclose(out[2 * c + 1], out[2 * c], rtol=1e-12, atol=1e-14, err_msg=str(c))
    s = MS.block_sparse(n, 5, 1, 0)
    layers = SelfAttentionLayer(s, **kw), SelfAttentionLayer(s, **kw, attention="blocked", block_size=8)
    dense, blocked = (attention_sinks(layer, x0, 3) for layer in layers)
    assert blocked.centers == dense.centers == (0, 1, 2, 3, 4)
    assert np.all(dense.mass_first > 0) and np.all(dense.mass_centers > dense.mass_first)
    for name in ("mass_first", "mass_centers", "uniform_first", "uniform_centers", "cos_first", "cos_others"):
        np.testing.assert_allclose(getattr(blocked, name), getattr(dense, name), rtol=1e-12, err_msg=name)
