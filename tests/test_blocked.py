"""The blocked attention path: equal to the dense path, and never n x n.

Oracle: the dense path (`masked_softmax` over the (n, n) scores). At an odd n (37, which no block
size of 8 divides: the last block is ragged) and for every mask kind, depth 8 in float64, each
metric satisfies |m_blocked - m_dense| <= 1e-12 (|m_dense| + ||X||_F), integer ranks are equal
and eps_min agrees to 1e-10 relative. A wrong window edge, a missed key block, a forgotten
rescale of the running sums or a padded key let through changes the states at O(1).
"""

import equinox as eqx
import jax
import jax.extend
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest

from rankdyn._errors import UsageError
from rankdyn._model._blocked import AUTO_BLOCKED_MIN_TOKENS, resolve_attention
from rankdyn._model._layer import MLPWeights, SelfAttentionLayer
from rankdyn._model._mask_structure import MaskStructure as MS, make_mask_structure
from rankdyn._model._norms import make_norm
from rankdyn._model._positions import rotary
from rankdyn._observe._metric_observer import MetricObserver
from rankdyn.cli import main

N, D, DEPTH, BLOCK = 37, 6, 8, 8


def _weights(rng, heads, layers=None):
    """Gaussian weights of spectral norm about 1 (NumPy: no compile per draw), ``b_q`` with heads."""
    lead = (layers,) if layers else ()
    dh = D // heads
    g = lambda shape: rng.standard_normal(lead + shape) / np.sqrt(shape[-2])
    w = dict(w_q=g((heads, D, dh)), w_k=g((heads, D, dh)), w_v=g((heads, D, dh)))
    if heads > 1:
        w["w_o"] = g((heads * dh, D))
        w["b_q"] = 0.3 * rng.standard_normal(lead + (heads, dh))
    return w


def _cases(rng):
    """(structure, layer kwargs): every mask kind, and across them every placement, heads + W_O,
    biases, skip, MLP, per-layer weights, a LayerNorm, rotary embeddings, a temperature and QK-norm
    (under Peri-LN)."""
    w1, w2 = rng.standard_normal((D, 2 * D)) / 3, rng.standard_normal((2 * D, D)) / 3
    mlp = MLPWeights(*(jnp.asarray(a) for a in (w1, np.zeros(2 * D), w2, np.zeros(D))))
    masks = [
        MS.complete(N), MS.causal(N), MS.window(N, 3, 1), MS.window(N, 2, 0), MS.dilated(N, 2, 3),
        MS.global_local(N, 2, 2), MS.block_sparse(N, 5, 1, 0),
        make_mask_structure("random", N, degree=3, seed=1),
    ]  # fmt: skip
    extras = [
        dict(placement="post"),
        dict(placement="pre", skip=True, mlp=mlp, **_weights(rng, 2)),
        dict(placement="none", dqk=2.5),
        dict(placement="post", skip=True, norm=make_norm("layernorm", D), **_weights(rng, 1, layers=DEPTH)),
        dict(placement="pre", attention_from_normalized=False, **_weights(rng, 2)),
        dict(placement="post", rotary=rotary(N, D, 10000.0, jnp.float64)),
        dict(placement="post", skip=True, mlp=mlp),
        dict(placement="peri", qk_norm=True, **_weights(rng, 3)),
    ]
    base = {k: v[0] for k, v in _weights(rng, 1).items()}  # (d, d): the paper's single head
    for s, extra in zip(masks, extras):
        yield s, base | extra


def _run(layers, x):
    def body(xs, t):
        out = [l(xi, t) for l, xi in zip(layers, xs)]
        return [o[0] for o in out], ([o[0] for o in out], [o[1].eps_min for o in out])

    return jax.lax.scan(body, [x] * len(layers), jnp.arange(DEPTH))[1]


@pytest.mark.slow
def test_blocked_equals_dense_every_mask_odd_n_depth_8():
    rng = np.random.default_rng(0)
    cases = list(_cases(rng))
    layers = []
    for s, kw in cases:
        layers += [
            SelfAttentionLayer(s, **kw),
            SelfAttentionLayer(s, **kw, attention="blocked", block_size=BLOCK),
        ]
    assert [l.attention_path for l in layers] == ["dense", "blocked"] * len(cases)
    x0 = jnp.asarray(rng.standard_normal((N, D)))
    states, eps = eqx.filter_jit(_run)(layers, x0)
    observe = MetricObserver()
    metrics = jax.jit(jax.vmap(jax.vmap(lambda x: observe(0, x, None))))(jnp.stack(states))  # (layers, depth)
    for c, (s, _) in enumerate(cases):
        xd, xb = states[2 * c], states[2 * c + 1]
        assert np.all(np.isfinite(np.asarray(xd))), s
        fro = jnp.linalg.norm(xd, axis=(1, 2))
        assert np.all(np.abs(xb - xd).max(axis=(1, 2)) <= 1e-12 * fro), s
        for name, m in metrics.items():
            md, mb = m[2 * c], m[2 * c + 1]
            if name == "num_rank":
                assert np.array_equal(md, mb), (s, name)
            else:
                assert np.all(np.abs(mb - md) <= 1e-12 * (np.abs(md) + fro)), (s, name, np.abs(mb - md).max())
        ed, eb = eps[2 * c], eps[2 * c + 1]
        assert np.all(ed > 0), s
        np.testing.assert_allclose(eb, ed, rtol=1e-10, err_msg=str(s))


def _f32(tree):
    # Cast on the host (the same rounding; eagerly each shape compiled a conversion program).
    return jax.tree_util.tree_map(
        lambda a: jnp.asarray(np.asarray(a).astype(np.float32)) if eqx.is_inexact_array(a) else a, tree
    )


@pytest.mark.slow  # one compile of all 16 layers (about 10 s of CPU)
def test_blocked_equals_dense_every_mask_odd_n_float32():
    # The float32 contract: |m_blocked - m_dense| <= 1e-5 (|m_dense| + ||X||_F) for every metric,
    # every mask kind, n = 37, depth 8 (the same cases as float64, cast: one compile). Integer
    # ranks are equal unless a dense singular value lies within 1e-5 sigma_max of the threshold.
    from rankdyn._observe._tolerances import RANK_TOL

    rng = np.random.default_rng(1)
    cases = list(_cases(rng))
    layers = []
    for s, kw in cases:
        layers += [
            _f32(SelfAttentionLayer(s, **kw)),
            _f32(SelfAttentionLayer(s, **kw, attention="blocked", block_size=BLOCK)),
        ]
    x0 = jnp.asarray(rng.standard_normal((N, D)), jnp.float32)
    states, eps = eqx.filter_jit(_run)(layers, x0)
    assert all(st.dtype == jnp.float32 for st in states)
    metrics = jax.jit(jax.vmap(jax.vmap(lambda x: MetricObserver()(0, x, None))))(jnp.stack(states))
    for c, (s, _) in enumerate(cases):
        xd, xb = (np.asarray(states[2 * c + k], np.float64) for k in (0, 1))
        assert np.all(np.isfinite(xd)), s
        fro = np.linalg.norm(xd, axis=(1, 2))
        assert np.all(np.abs(xb - xd).max(axis=(1, 2)) <= 1e-5 * fro), s
        sv = np.linalg.svd(xd, compute_uv=False)  # (depth, d)
        near = np.any(np.abs(sv - RANK_TOL * sv[:, :1]) <= 1e-5 * sv[:, :1], axis=1)
        for name, m in metrics.items():
            md, mb = (np.asarray(m[2 * c + k], np.float64) for k in (0, 1))
            if name == "num_rank":
                assert np.array_equal(md[~near], mb[~near]), (s, name)
            else:
                assert np.all(np.abs(mb - md) <= 1e-5 * (np.abs(md) + fro)), (s, name, np.abs(mb - md).max())
        ed, eb = (np.asarray(eps[2 * c + k], np.float64) for k in (0, 1))
        assert np.all(ed > 0), s
        np.testing.assert_allclose(eb, ed, rtol=1e-4, err_msg=str(s))


def test_blocked_path_has_no_n_by_n_array():
    # Traced only (no compile): no value of the blocked program, inside the block scan included,
    # holds n^2 / 16 numbers; the dense program does (the check can fail).
    n, d = 4096, 8
    w = jnp.eye(d)

    def biggest(layer):
        jaxpr = jax.make_jaxpr(lambda x: layer(x))(jnp.zeros((layer.num_tokens, d)))
        sizes = []

        def walk(j):
            for e in j.eqns:
                sizes.extend(int(np.prod(v.aval.shape)) for v in e.outvars if hasattr(v.aval, "shape"))
                for sub in jax.extend.core.jaxprs_in_params(e.params):
                    walk(sub)

        walk(jaxpr.jaxpr)
        return max(sizes)

    window = MS.window(n, 16, 16)
    assert biggest(SelfAttentionLayer(window, w, w, w, attention="blocked")) < n * n // 16
    assert biggest(SelfAttentionLayer(MS.window(256, 16, 16), w, w, w)) >= 256 * 256
    layer = SelfAttentionLayer(make_mask_structure("window", n, window=16), w, w, w, attention="auto")
    assert layer.attention_path == "blocked" and isinstance(layer.mask, MS)


def test_default_block_size_follows_the_mask():
    # `choose_block_size`: wide masks (complete, causal) take 512-token blocks (about as many
    # touched cells as at 128, each cheaper); a window of +-64 touches about 4x the cells at 512
    # and keeps 128; CSR masks and n <= 128 keep 128. A size the caller gives is kept.
    w = jnp.eye(4)
    size = lambda s, **kw: SelfAttentionLayer(s, w, w, w, attention="blocked", **kw).block_size  # noqa: E731
    assert size(MS.causal(4096)) == size(MS.complete(2048)) == 512
    assert size(MS.window(4096, 64, 64)) == size(MS.window(65536, 16, 16)) == 128
    assert size(make_mask_structure("random", 4096, degree=4)) == size(MS.causal(100)) == 128
    assert size(MS.causal(4096), block_size=64) == 64
    with pytest.raises(UsageError, match="block_size must be a positive"):
        size(MS.causal(64), block_size=0)


def test_default_blocks_equal_dense_causal_ragged():
    # The default size at an n that 512 does not divide (four blocks, the last of 511 tokens),
    # float64, depth 8: the states agree to 1e-12 ||X||_F, as at block size 8.
    n, rng = 2047, np.random.default_rng(3)
    w = {k: v[0] for k, v in _weights(rng, 1).items()}
    dense, blocked = (SelfAttentionLayer(MS.causal(n), **w, attention=a) for a in ("dense", "blocked"))
    assert blocked.block_size == 512
    x0 = jnp.asarray(rng.standard_normal((n, D)))
    xd, xb = (np.stack(s) for s in eqx.filter_jit(_run)([dense, blocked], x0)[0])
    fro = np.linalg.norm(xd, axis=(-2, -1))
    assert np.all(np.abs(xb - xd).max(axis=(-2, -1)) <= 1e-12 * fro)
    assert not np.allclose(xd[0], xd[-1])  # the states move: the comparison is not of constants


def test_refusals_name_the_feature():
    w = jnp.eye(4)
    with pytest.raises(UsageError, match="attn-dropout"):
        SelfAttentionLayer(MS.causal(5), w, w, w, attention="blocked", attn_dropout=0.1)
    with pytest.raises(UsageError, match="fixed_attention"):
        SelfAttentionLayer(
            MS.causal(5), w, w, w, attention="blocked", fixed_attention=np.tril(np.ones((5, 5))) / 5
        )
    with pytest.raises(UsageError, match="logit_bias"):
        SelfAttentionLayer(MS.causal(5), w, w, w, attention="blocked", logit_bias=np.zeros((1, 5, 5)))
    with pytest.raises(UsageError, match="attention must be one of"):
        resolve_attention("flash", 5, attn_dropout=0.0, fixed_attention=False, logit_bias=False)
    # auto never refuses: it keeps the dense path for what the blocked one cannot carry.
    big = AUTO_BLOCKED_MIN_TOKENS
    assert (
        resolve_attention("auto", big, attn_dropout=0.1, fixed_attention=False, logit_bias=False) == "dense"
    )
    assert (
        resolve_attention("auto", big, attn_dropout=0.0, fixed_attention=False, logit_bias=False) == "blocked"
    )
    assert (
        resolve_attention("auto", big - 1, attn_dropout=0.0, fixed_attention=False, logit_bias=False)
        == "dense"
    )


@pytest.mark.parametrize(
    "flags, says",
    [
        (["--attention", "flash"], "invalid choice: 'flash'"),
        (
            ["--attention", "blocked", "--attn-dropout", "0.1"],
            "--attention blocked cannot carry --attn-dropout",
        ),
        (
            ["--attention", "blocked", "--mask", "window", "--window", "32"],
            "--window 32 is not smaller than --n 32",
        ),
        (["--mask", "random", "--mask-degree", "32"], "--mask-degree 32 draws that many keys"),
        (["--mask", "causal", "--mask-degree", "3"], "--mask-degree 3 is ignored by --mask causal"),
    ],
)
def test_cli_refuses_before_compute(flags, says, capsys):
    # One error line and exit 2, before JAX computes anything (n = 32 by default).
    try:
        code = main(["simulate", "--n", "32", *flags])
    except SystemExit as exc:  # argparse's own refusals exit; UsageError returns 2
        code = exc.code
    assert code == 2
    err = capsys.readouterr().err
    assert says in err and sum(line.startswith("rankdyn simulate: error:") for line in err.splitlines()) == 1


def _count_compiles(fn):
    count = [0]

    def listen(event, duration, **kwargs):
        count[0] += event == "/jax/core/compile/backend_compile_duration"

    jax.monitoring.register_event_duration_secs_listener(listen)
    try:
        out = fn()
    finally:
        jax._src.monitoring.unregister_event_duration_listener(listen)
    return out, count[0]


@pytest.mark.slow
def test_one_simulate_call_compiles_at_most_6_programs():
    # The depth in pieces (progress), the fold, the flags and the summary: each one program; no
    # eager helper compiles one more (about 50 programs at n = 2048 if the autotuner timed every candidate).
    from rankdyn import TokenSampler, make_layer, simulate

    layer = make_layer(jr.PRNGKey(0), n=21, d=4, mask="window", window=2, attention="blocked")
    x0 = TokenSampler(jr.PRNGKey(1), "sphere", 21, 4, 3)
    traj, compiles = _count_compiles(lambda: simulate(layer, x0, 3, metrics="mu", progress=True))
    assert np.all(np.isfinite(np.asarray(traj.summary.mean["mu"])))
    assert 1 <= compiles <= 6


@pytest.mark.slow
def test_simulate_blocked_equals_dense_all_metrics():
    # End to end through simulate (the scan's first eps_min, the fold, every metric) with heads,
    # W_O, skip, MLP and pre-LN at an odd n on the causal mask.
    from rankdyn import make_layer, simulate

    kw = dict(n=37, d=6, mask="causal", heads=2, output_projection=True, skip=True, mlp=True, placement="pre")
    x0 = jnp.asarray(np.random.default_rng(2).standard_normal((2, 37, 6)))
    dense = make_layer(jr.PRNGKey(3), attention="dense", **kw)
    w = dense.weights
    blocked = SelfAttentionLayer(
        np.asarray(dense.mask), w.w_q, w.w_k, w.w_v, w_o=w.w_o, mlp=w.mlp, skip=True, placement="pre",
        dqk=dense.dqk, norm=dense.norm, attention="blocked", block_size=8,
    )  # fmt: skip
    td = simulate(dense, x0, 8, metrics="all", per_trajectory=True, save_states=True)
    tb = simulate(blocked, x0, 8, metrics="all", per_trajectory=True, save_states=True)
    fro = np.linalg.norm(np.asarray(td.states), axis=(-2, -1))
    for name, md in td.metrics.items():
        md, mb = np.asarray(md), np.asarray(tb.metrics[name])
        if name == "num_rank":
            assert np.array_equal(md, mb)
        elif name == "eps_min":
            np.testing.assert_allclose(mb, md, rtol=1e-10)
        else:
            assert np.all(np.abs(mb - md) <= 1e-12 * (np.abs(md) + fro)), name


def test_cosine_metrics_by_row_blocks_equal_the_cosine_matrix(monkeypatch):
    # The long-context form (row blocks of the cosine matrix, a ragged last block) against the
    # (n, n) form at n = 37; a wrong diagonal or a padded row let through changes both values.
    from rankdyn._observe import _metrics

    x = np.random.default_rng(4).standard_normal((N, D))
    x[3] = -x[5]  # a cosine of -1: the minimum is known
    x = jnp.asarray(x)
    both = lambda: jax.jit(lambda x: (_metrics.min_cosine(x), _metrics.mean_abs_cosine(x)))(x)  # noqa: E731
    want = both()
    monkeypatch.setattr(_metrics, "COS_BLOCKED_MIN", 2)
    monkeypatch.setattr(_metrics, "COS_BLOCK", 8)
    got = both()  # a new jit: traced again with the patched sizes
    assert float(want[0]) == pytest.approx(-1.0, abs=1e-14)
    np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-14)


def test_a_block_size_on_the_dense_path_is_refused():
    """The dense path has no blocks: a block size it would ignore is refused, naming the fix."""
    s = MS.causal(8)
    w = jnp.eye(4)
    with pytest.raises(UsageError, match="attention=.blocked. or drop block_size"):
        SelfAttentionLayer(s, w, w, w, attention="dense", block_size=4)
    assert SelfAttentionLayer(s, w, w, w, attention="blocked", block_size=4).block_size == 4
