"""NumPy reference tests for the layer's practical-block switches.

The paper's layer (single head, eq. 3) is checked elsewhere; these tests cover what the Fig. 2/6
ablations add on top of it: several heads with an output projection W_O, the skip connection, the
MLP block, pre-LN with attention computed from X instead of LN(X), a fixed attention matrix, the
unfolded query/key branch, matmul precision, and the gain/bias of RMSNorm and centred LayerNorm.
The reference below is written from the formulas, independently of rankdyn's code paths.
"""

import equinox as eqx
import jax.numpy as jnp
import numpy as np
import pytest

import rankdyn as rd
from rankdyn._model._layer import _fold_qk

#: The layer's forward pass as one compiled program per layer structure (called eagerly, each of
#: its operations compiled a program of its own: 10-20 per case).
_forward = eqx.filter_jit(lambda layer, x: layer(x)[0])


# --------------------------------------------------------------------------- the NumPy reference
def _np_softmax_masked(scores, mask):
    s = np.where(mask, scores, -np.inf)
    s = s - s.max(axis=-1, keepdims=True)
    e = np.where(mask, np.exp(s), 0.0)
    return e / e.sum(axis=-1, keepdims=True)


def _np_gelu(x):
    # jax.nn.gelu's default is the tanh approximation.
    return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x**3)))


def _np_norm(kind, x, gain=None, bias=None, eps=0.0):
    if kind == "sphere":
        return x / np.linalg.norm(x, axis=-1, keepdims=True)
    if kind == "rms":
        y = x / np.sqrt(np.mean(x**2, axis=-1, keepdims=True) + eps)
        return y if gain is None else y * gain
    if kind == "layernorm":
        xc = x - x.mean(axis=-1, keepdims=True)
        y = xc / np.sqrt(np.mean(xc**2, axis=-1, keepdims=True) + eps)
        y = y if gain is None else y * gain
        return y if bias is None else y + bias
    raise AssertionError(kind)


def _np_layer(
    x,
    mask,
    wq,
    wk,
    wv,
    *,
    dqk,
    placement,
    norm,
    wo=None,
    mlp=None,
    skip=False,
    from_normalized=True,
    fixed=None,
):
    """One layer from the formulas: heads, W_O, skip, post/pre norm, MLP (all optional)."""
    x_in = norm(x) if placement == "pre" else x
    x_att = x_in if from_normalized else x
    heads = []
    for h in range(wq.shape[0]):
        if fixed is None:
            a = _np_softmax_masked((x_att @ wq[h]) @ (x_att @ wk[h]).T / np.sqrt(dqk), mask)
        else:
            a = fixed
        heads.append(a @ (x_in @ wv[h]))
    sa = heads[0] if wo is None else np.concatenate(heads, axis=-1) @ wo
    y = x + sa if skip else sa
    if placement == "post":
        y = norm(y)
    if mlp is not None:
        w1, b1, w2, b2 = mlp
        h_in = norm(y) if placement == "pre" else y
        m = _np_gelu(h_in @ w1 + b1) @ w2 + b2
        y = y + m if skip else m
        if placement == "post":
            y = norm(y)
    return y


# --------------------------------------------------------------------------- cases
def _weights(rng, heads, d, dk, dv):
    g = lambda *s: rng.standard_normal(s) / np.sqrt(s[-2])
    return g(heads, d, dk), g(heads, d, dk), g(heads, d, dv)


CASES = {
    # name: (layer switches, n, d, dk, heads, norm kind)
    "heads+w_o": (dict(placement="post"), 5, 8, 4, 2, "sphere"),
    "heads+w_o+skip+mlp": (dict(placement="post", skip=True, mlp=True), 5, 8, 4, 2, "sphere"),
    "pre+skip+mlp": (dict(placement="pre", skip=True, mlp=True), 6, 6, 6, 1, "sphere"),
    "pre_from_x": (dict(placement="pre", attention_from_normalized=False), 6, 6, 6, 1, "sphere"),
    "none+skip": (dict(placement="none", skip=True), 6, 6, 6, 1, "sphere"),
    "fixed_attention": (dict(placement="post", fixed=True), 6, 6, 6, 1, "sphere"),
    # d = 8, dk = 2: folding W_Q W_K^T would cost more, so the separate-projection branch runs.
    "unfolded_qk": (dict(placement="post"), 7, 8, 2, 1, "sphere"),
    "rms_gain": (dict(placement="post"), 5, 6, 6, 1, "rms"),
    "layernorm_gain_bias": (dict(placement="post", skip=True), 5, 6, 6, 1, "layernorm"),
    "precision_default": (dict(placement="post", precision="default"), 5, 6, 6, 1, "sphere"),
}


@pytest.mark.parametrize("name", list(CASES))
def test_layer_matches_numpy_reference(name):
    switches, n, d, dk, heads, norm_kind = CASES[name]
    switches = dict(switches)
    rng = np.random.default_rng(sum(map(ord, name)))
    mask = np.tril(np.ones((n, n), bool)) | np.eye(n, k=1, dtype=bool)  # causal plus one look-ahead
    wq, wk, wv = _weights(rng, heads, d, dk, d if heads == 1 else d // heads)
    wo = rng.standard_normal((heads * wv.shape[-1], d)) / np.sqrt(d) if heads > 1 else None
    mlp = None
    if switches.pop("mlp", False):
        f = 2 * d
        mlp = (
            rng.standard_normal((d, f)) / np.sqrt(d),
            0.1 * rng.standard_normal(f),
            rng.standard_normal((f, d)) / np.sqrt(f),
            0.1 * rng.standard_normal(d),
        )
    fixed = None
    if switches.pop("fixed", False):
        fixed = np.where(mask, rng.uniform(0.5, 1.5, (n, n)), 0.0)
        fixed /= fixed.sum(axis=1, keepdims=True)
    gain = 1.0 + 0.3 * rng.standard_normal(d)
    bias = 0.2 * rng.standard_normal(d)
    if norm_kind == "sphere":
        norm = rd.SphereNorm()
        np_norm = lambda v: _np_norm("sphere", v)
    elif norm_kind == "rms":
        norm = rd.RMSNorm(gain=jnp.asarray(gain), eps=1e-6)
        np_norm = lambda v: _np_norm("rms", v, gain=gain, eps=1e-6)
    else:
        norm = rd.LayerNorm(gain=jnp.asarray(gain), bias=jnp.asarray(bias), eps=1e-6)
        np_norm = lambda v: _np_norm("layernorm", v, gain=gain, bias=bias, eps=1e-6)
    dqk = 1.7

    layer = rd.SelfAttentionLayer(
        mask,
        jnp.asarray(wq),
        jnp.asarray(wk),
        jnp.asarray(wv),
        dqk=dqk,
        norm=norm,
        w_o=None if wo is None else jnp.asarray(wo),
        mlp=None if mlp is None else rd.MLPWeights(*map(jnp.asarray, mlp)),
        fixed_attention=None if fixed is None else jnp.asarray(fixed),
        **switches,
    )
    x = rng.standard_normal((n, d))
    got = np.asarray(_forward(layer, jnp.asarray(x)))
    want = _np_layer(
        x,
        mask,
        wq,
        wk,
        wv,
        dqk=dqk,
        placement=switches.get("placement", "post"),
        norm=np_norm,
        wo=wo,
        mlp=mlp,
        skip=switches.get("skip", False),
        from_normalized=switches.get("attention_from_normalized", True),
        fixed=fixed,
    )
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)


def test_unfolded_case_really_takes_the_unfolded_branch():
    # Guards the "unfolded_qk" case above: if the FLOP rule changed, it would silently test the
    # folded branch twice.
    assert not _fold_qk(7, 8, 2)
    assert _fold_qk(5, 6, 6)


def test_fixed_attention_ignores_query_key_weights():
    # With a fixed A the output cannot depend on W_Q, W_K (the paper's W_Q = W_K = 0 constructions).
    rng = np.random.default_rng(3)
    n = d = 4
    mask = np.tril(np.ones((n, n), bool))
    fixed = mask / mask.sum(axis=1, keepdims=True)
    wv = rng.standard_normal((d, d))
    x = jnp.asarray(rng.standard_normal((n, d)))
    layers = [
        rd.SelfAttentionLayer(
            mask,
            jnp.asarray(rng.standard_normal((d, d))),
            jnp.asarray(rng.standard_normal((d, d))),
            jnp.asarray(wv),
            fixed_attention=jnp.asarray(fixed),
        )
        for _ in range(2)
    ]
    outs = [np.asarray(_forward(layer, x)) for layer in layers]  # one program for both
    np.testing.assert_allclose(outs[0], outs[1], rtol=0, atol=0)
