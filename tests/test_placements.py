"""The placement schemes peri, mix, ngpt, lns and QK-norm against a NumPy map written from their
equations (docs/theory.md#normalisation-schemes), in float64 to 1e-10.

The reference below never calls rankdyn: for each depth t it applies the scheme's equation to
the attention sub-block F and then to the MLP sub-block. Each case runs several layers with
per-layer weights through a ``lax.scan`` (t traced, as in `rankdyn.simulate`), so a scheme that
depends on t (mix, lns) is checked at every depth, and an off-by-one in t, a missing or an
extra N, or a wrong residual changes the numbers far beyond the tolerance.
"""

import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest

import rankdyn as rd
from rankdyn._errors import UsageError
from rankdyn._model._layer import MLPWeights, SelfAttentionLayer
from rankdyn._model._norms import make_norm, qk_normalise

TOL = 1e-10
N_TOK, D, HEADS, DEPTH = 5, 4, 2, 4


# --------------------------------------------------------------------------- the NumPy reference
def _softmax(s, mask):
    s = np.where(mask, s, -np.inf)
    e = np.where(mask, np.exp(s - s.max(axis=-1, keepdims=True)), 0.0)
    return e / e.sum(axis=-1, keepdims=True)


def _gelu_tanh(x):
    return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x**3)))


def _np_norm(kind, x):
    if kind == "sphere":
        return x / np.linalg.norm(x, axis=-1, keepdims=True)
    xc = x - x.mean(axis=-1, keepdims=True)  # centred LayerNorm, eps as rankdyn's default
    return xc / np.sqrt(np.mean(xc**2, axis=-1, keepdims=True) + 1e-12)


def _np_attention(h_att, h_in, p, t, mask, dqk, qk_norm):
    outs = []
    for h in range(HEADS):
        q, k = h_att @ p["wq"][t, h], h_att @ p["wk"][t, h]
        if qk_norm:  # per token and head, no gain: |q| = sqrt(d_qk)
            q = q / np.sqrt(np.mean(q**2, axis=-1, keepdims=True))
            k = k / np.sqrt(np.mean(k**2, axis=-1, keepdims=True))
        a = _softmax(q @ k.T / np.sqrt(dqk), mask)
        outs.append(a @ (h_in @ p["wv"][t, h]))
    return np.concatenate(outs, axis=-1) @ p["wo"][t]


def _np_mlp(h, p, t):
    return _gelu_tanh(h @ p["w1"][t] + p["b1"][t]) @ p["w2"][t] + p["b2"][t]


def _np_sublayer(scheme, x, f, nrm, t, k, alpha, skip):
    """y for one sub-block, straight from the equations of the schemes."""
    if scheme == "mix":
        scheme = "post" if t < k else "pre"
    if scheme == "post":
        return nrm(x + f(x, x) if skip else f(x, x))
    if scheme == "pre":
        return x + f(nrm(x), nrm(x)) if skip else f(nrm(x), nrm(x))
    if scheme == "peri":
        return x + nrm(f(nrm(x), nrm(x)))
    if scheme == "ngpt":
        return nrm(x + alpha * (nrm(f(nrm(x), nrm(x))) - nrm(x)))
    if scheme == "lns":
        h = nrm(x) / np.sqrt(t + 1)
        return x + f(h, h)
    raise AssertionError(scheme)


def _np_run(scheme, x, p, mask, *, ln, k=None, alpha=None, skip=False, qk_norm=False, dqk=2.0):
    nrm = lambda v: _np_norm(ln, v)  # noqa: E731
    xs = []
    for t in range(DEPTH):
        att = lambda a, b: _np_attention(a, b, p, t, mask, dqk, qk_norm)  # noqa: E731, B023
        x = _np_sublayer(scheme, x, att, nrm, t, k, alpha, skip)
        x = _np_sublayer(scheme, x, lambda a, b: _np_mlp(b, p, t), nrm, t, k, alpha, skip)  # noqa: B023
        xs.append(x)
    return np.stack(xs)


# --------------------------------------------------------------------------- the rankdyn side
def _weights(seed):
    r = np.random.default_rng(seed)
    dh, f = D // HEADS, 2 * D
    g = lambda *s: r.normal(size=(DEPTH,) + s)  # noqa: E731
    return dict(
        wq=g(HEADS, D, dh), wk=g(HEADS, D, dh), wv=g(HEADS, D, dh) / np.sqrt(D), wo=g(D, D) / np.sqrt(D),
        w1=g(D, f) / np.sqrt(D), b1=0.1 * g(f), w2=g(f, D) / np.sqrt(f), b2=0.1 * g(D),
    )  # fmt: skip


def _layer(p, mask, **kw):
    mlp = MLPWeights(*(jnp.asarray(p[k]) for k in ("w1", "b1", "w2", "b2")))
    j = {k: jnp.asarray(p[k]) for k in ("wq", "wk", "wv", "wo")}
    return SelfAttentionLayer(mask, j["wq"], j["wk"], j["wv"], w_o=j["wo"], mlp=mlp, dqk=2.0, **kw)


@jax.jit
def _scan(layer, x0):
    def step(x, t):
        y, aux = layer(x, t)
        return y, (y, aux.degenerate)

    return jax.lax.scan(step, x0, jnp.arange(DEPTH))[1]


CASES = {
    # name: (scheme, ln, layer arguments, reference arguments)
    "peri": ("peri", "layernorm", {}, {}),
    "mix": ("mix", "layernorm", dict(mix_layers=2, skip=True), dict(k=2, skip=True)),
    "ngpt": ("ngpt", "sphere", dict(ngpt_alpha=0.3), dict(alpha=0.3)),
    "lns": ("lns", "layernorm", {}, {}),
    "qk-norm, pre": ("pre", "sphere", dict(skip=True, qk_norm=True), dict(skip=True, qk_norm=True)),
}


@pytest.mark.parametrize("name", list(CASES))
def test_scheme_equals_numpy_map(name):
    scheme, ln, kw, ref_kw = CASES[name]
    p = _weights(1)
    mask = np.tril(np.ones((N_TOK, N_TOK), bool))
    x0 = np.random.default_rng(2).normal(size=(N_TOK, D))
    layer = _layer(p, mask, placement=scheme, norm=make_norm(ln), **kw)
    xs, bad = _scan(layer, jnp.asarray(x0))
    want = _np_run(scheme, x0, p, mask, ln=ln, **ref_kw)
    assert not np.any(np.asarray(bad))
    np.testing.assert_allclose(np.asarray(xs), want, rtol=0, atol=TOL)
    # The map moves the tokens by O(1) at every depth: the tolerance is far below any change.
    assert np.min(np.abs(np.diff(np.concatenate([x0[None], want]), axis=0)).max(axis=(1, 2))) > 1e-2


def test_mix_with_a_python_depth_equals_the_traced_one():
    """A Python ``t`` takes the other code path (no ``lax.cond``): the same map on both sides of k."""
    p = _weights(3)
    mask = np.ones((N_TOK, N_TOK), bool)
    x0 = np.random.default_rng(4).normal(size=(N_TOK, D))
    layer = _layer(p, mask, placement="mix", mix_layers=1, norm=make_norm("sphere"), skip=True)
    for t in (0, 1):
        got = np.asarray(jax.jit(lambda lay, x, t: lay(x, t)[0], static_argnums=2)(layer, jnp.asarray(x0), t))
        att = lambda a, b: _np_attention(a, b, p, t, mask, 2.0, False)  # noqa: E731, B023
        mlp = lambda a, b: _np_mlp(b, p, t)  # noqa: E731, B023
        sph = lambda v: _np_norm("sphere", v)  # noqa: E731
        y = _np_sublayer("mix", x0, att, sph, t, 1, None, True)
        y = _np_sublayer("mix", y, mlp, sph, t, 1, None, True)
        np.testing.assert_allclose(got, y, rtol=0, atol=TOL)


def test_qk_normalise_gives_rows_of_norm_sqrt_dqk_and_keeps_zero_rows():
    """QK-norm's rows have RMS 1 (|q| = sqrt(d_qk)) whatever their scale; a zero row stays zero."""
    q = np.random.default_rng(0).normal(size=(2, 5, 4)) * np.array([1e-3, 30.0])[:, None, None]
    q[1, 2] = 0.0
    got = np.asarray(jax.jit(qk_normalise)(jnp.asarray(q)))  # one program (eagerly: one per operation)
    norms = np.linalg.norm(got, axis=-1)
    np.testing.assert_allclose(np.delete(norms.ravel(), 7), 2.0, rtol=1e-14)
    assert norms[1, 2] == 0.0
    np.testing.assert_allclose(got[0] * np.linalg.norm(q[0], axis=-1, keepdims=True) / 2.0, q[0], rtol=1e-13)


# --------------------------------------------------------------------------- refusals
@pytest.mark.parametrize(
    "kwargs, needle",
    [
        (dict(placement="mix"), "needs mix_layers"),
        (dict(placement="mix", mix_layers=-1), "mix_layers=-1"),
        (dict(placement="mix", mix_layers=5, num_layers=4), "mix_layers=5 is outside [0, 4]"),
        (dict(placement="ngpt"), "needs ngpt_alpha"),
        (dict(placement="ngpt", ngpt_alpha=0.0), "ngpt_alpha=0.0"),
        (dict(placement="ngpt", ngpt_alpha=1.5), "ngpt_alpha=1.5"),
        (dict(placement="ngpt", ngpt_alpha=0.5, ln="rms"), "ln='rms' with placement='ngpt'"),
        (dict(placement="ngpt", ngpt_alpha=0.5, ln=rd.RMSNorm()), "ln RMSNorm with placement='ngpt'"),
        (dict(qk_norm=True, qk="zero"), "qk_norm with qk='zero'"),
        (dict(placement="post", mix_layers=2), "mix_layers=2 is ignored by placement='post'"),
        (dict(placement="pre", ngpt_alpha=0.5), "ngpt_alpha=0.5 is ignored by placement='pre'"),
    ],
)
def test_bad_scheme_arguments_are_refused(kwargs, needle):
    with pytest.raises(UsageError) as err:
        rd.make_layer(jr.PRNGKey(0), n=4, d=4, **kwargs)
    assert needle in str(err.value)


# --------------------------------------------------------------------------- analyses on the schemes
@pytest.mark.slow
def test_ngpt_lyapunov_spectrum_is_the_closed_form_at_consensus():
    r"""nGPT ends with the sphere norm, so its spectrum lives on the tangent space (n (d - 1)).

    At consensus X* (every token e_1) the attention is uniform, so the linearised sub-block is
    the token mean times W_V / 1.5 followed by N: multipliers 1.0/1.5 and 0.6/1.5 on the mean
    mode, 0 on the 3 (d - 1) = 6 others. nGPT's step makes each $1 - \alpha + \alpha \mu$.
    """
    n, d, alpha = 4, 3, 0.3
    # Host-side arithmetic (the same bits; eagerly each operation compiled a program).
    wq, wk = (jnp.asarray(0.3 * np.asarray(jr.normal(jr.PRNGKey(i), (d, d)))) for i in (1, 2))
    wv = jnp.asarray(np.diag([1.5, 1.0, 0.6]))
    layer = SelfAttentionLayer(np.ones((n, n), bool), wq, wk, wv, placement="ngpt", ngpt_alpha=alpha)
    x = jnp.asarray(np.tile([1.0, 0.0, 0.0], (n, 1)))
    r = rd.lyapunov_spectrum(layer, x, 600, discard=100, key=jax.random.key(0))
    mu = np.array([1.0 / 1.5, 0.6 / 1.5] + [0.0] * 6)
    want = np.sort(np.log(1 - alpha + alpha * mu))[::-1]
    assert r.space == "tangent" and r.dim == n * (d - 1)
    rep = rd.stability(layer, x)  # the equilibria side: ngpt's multipliers on the tangent space
    assert rep.space == "tangent" and rep.residual < 1e-14
    np.testing.assert_allclose(np.sort(rep.moduli)[::-1], np.exp(want), atol=1e-12)
    # Gaps of 0.16 between exponents: after 100 discarded layers the QR error is below 1e-5.
    np.testing.assert_allclose(r.exponents, want, atol=1e-4)


@pytest.mark.slow
@pytest.mark.parametrize("scheme", ["peri", "mix", "lns"])
def test_lyapunov_spectrum_of_the_other_schemes_is_finite_in_the_full_space(scheme):
    kw = dict(mix=dict(mix_layers=1)).get(scheme, {})
    layer = rd.make_layer(jr.PRNGKey(0), n=3, d=3, placement=scheme, num_layers=3, **kw)
    r = rd.lyapunov_spectrum(
        layer, rd.initial_tokens(jr.PRNGKey(1), "sphere", 3, 3), 3, qr_every=1, key=jax.random.key(0)
    )
    assert r.space == "full" and r.dim == 9
    assert np.all(np.isfinite(np.asarray(r.exponents)))


def test_equilibria_refuse_peri_and_lns_and_take_mix_at_one_depth():
    """peri and lns are refused with the reason; mix at depth t is that depth's post or pre map."""
    from rankdyn._model._placements import fixed_point_layer

    n, d = 3, 3
    x = jnp.asarray(np.tile([1.0, 0.0, 0.0], (n, 1)))
    for scheme, reason in (("peri", "never vanishes"), ("lns", "changes with every depth t")):
        layer = rd.make_layer(jr.PRNGKey(0), n=n, d=d, placement=scheme)
        with pytest.raises(UsageError, match=reason):
            rd.find_equilibria(layer, x)
        with pytest.raises(UsageError, match=reason):
            rd.equilibrium_census(layer, jr.PRNGKey(0))
        with pytest.raises(UsageError, match=reason):
            rd.equilibria.continue_branch(lambda p: layer, x, 0.0, 1.0)
    mix = rd.make_layer(jr.PRNGKey(0), n=n, d=d, placement="mix", mix_layers=2)
    with pytest.raises(UsageError, match="find_equilibria"):
        rd.equilibrium_census(mix, jr.PRNGKey(0))
    assert [fixed_point_layer(mix, t).placement for t in (0, 1, 2, 5)] == ["post", "post", "pre", "pre"]
    assert fixed_point_layer(mix, 1).mix_layers is None and mix.placement == "mix"  # a copy


def test_strategies_read_as_names_and_follow_the_name_tables():
    """The layer holds a placement and an attention strategy; ``placement``, ``attention_path``,
    ``block_size``, ``mix_layers`` and ``ngpt_alpha`` read them, one class per name of
    `PLACEMENTS` (residual ones as `RESIDUAL_PLACEMENTS`), and `eqx.tree_at` reaches nGPT's step."""
    import equinox as eqx

    from rankdyn._model._attention import BlockedAttention, DenseAttention
    from rankdyn._model._names import PLACEMENTS, RESIDUAL_PLACEMENTS
    from rankdyn._model._placements import PLACEMENT_SCHEMES, MixLN, make_placement

    assert tuple(PLACEMENT_SCHEMES) == PLACEMENTS
    assert tuple(k for k, c in PLACEMENT_SCHEMES.items() if c.residual) == RESIDUAL_PLACEMENTS
    assert [k for k, c in PLACEMENT_SCHEMES.items() if c.on_spheres] == ["post", "ngpt"]
    assert make_placement("mix", mix_layers=3) == MixLN(3)
    with pytest.raises(UsageError, match="placement must be one of"):
        make_placement("side")
    w = np.eye(3)
    mask = np.tril(np.ones((4, 4), bool))
    nl = SelfAttentionLayer(mask, w, w, w, placement="ngpt", ngpt_alpha=0.5, norm=make_norm("sphere", 3))
    assert (nl.placement, nl.mix_layers, nl.attention_path, nl.skip) == ("ngpt", None, "dense", True)
    assert isinstance(nl.path, DenseAttention)
    nl2 = eqx.tree_at(lambda l: l.ngpt_alpha, nl, jnp.asarray(0.25))
    assert float(nl2.ngpt_alpha) == 0.25 and float(nl.ngpt_alpha) == 0.5
    bl = SelfAttentionLayer(mask, w, w, w, placement="mix", mix_layers=1, attention="blocked", block_size=2)
    assert (bl.placement, bl.mix_layers, bl.ngpt_alpha) == ("mix", 1, None)
    assert (bl.attention_path, bl.block_size, bl.path) == ("blocked", 2, BlockedAttention(2))
