"""Attention and hidden dropout (BERT's two dropouts) against a NumPy re-implementation.

The keep-masks are drawn with the same key splits as the layer (key -> attention, attention
output, MLP output), so the reference applies exactly the same dropout; everything else (scores,
softmax, W_O, skip, MLP, LayerNorm) is recomputed in NumPy from the layer's weights.
"""

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest

import rankdyn as rd
from rankdyn._model._layer import SelfAttentionLayer
from rankdyn._reproduce._layer_observers import observe_zero_rows

#: The forward pass with a dropout key, one compiled program per layer structure (called eagerly,
#: each of the layer's operations compiled a program of its own).
_forward = eqx.filter_jit(lambda layer, x, key: layer(x, key=key))
#: The zero-row observer, compiled once per shape (eagerly: about 25 programs per call).
_zero_rows = jax.jit(observe_zero_rows)


def _keep(key, p, shape):
    if p == 0.0:
        return np.ones(shape, bool)
    return np.asarray(jr.bernoulli(key, 1.0 - p, shape))


def _layernorm(x, eps=1e-12):
    xc = x - x.mean(-1, keepdims=True)
    return xc / np.sqrt((xc**2).mean(-1, keepdims=True) + eps)


def _sphere(x):
    nrm = np.linalg.norm(x, axis=-1, keepdims=True)
    return x / np.where(nrm > 0, nrm, 1.0)


def _reference(layer, x, key, ln):
    """NumPy forward pass of a post-LN block with both dropouts (one head, optional W_O/skip/MLP)."""
    w = layer.weights
    wq, wk, wv = (np.asarray(a)[0] for a in (w.w_q, w.w_k, w.w_v))
    mask = np.asarray(layer.mask)
    n = x.shape[0]
    k_att, k_hid, k_mlp = jr.split(key, 3)
    pa, ph = layer.attn_dropout, layer.hidden_dropout
    s = (x @ wq) @ (x @ wk).T / np.sqrt(float(layer.dqk))
    s = np.where(mask, s, -np.inf)
    a = np.exp(s - s.max(-1, keepdims=True))
    a /= a.sum(-1, keepdims=True)
    a = np.where(_keep(k_att, pa, (1, n, n))[0], a / (1 - pa), 0.0)
    sa = a @ x @ wv
    if w.w_o is not None:
        sa = sa @ np.asarray(w.w_o)
    sa = np.where(_keep(k_hid, ph, sa.shape), sa / (1 - ph), 0.0)
    y = ln((x + sa) if layer.skip else sa)
    if w.mlp is not None:
        m = w.mlp
        h = y @ np.asarray(m.w1) + np.asarray(m.b1)
        h = 0.5 * h * (1 + np.tanh(np.sqrt(2 / np.pi) * (h + 0.044715 * h**3)))  # jax.nn.gelu's tanh form
        o = h @ np.asarray(m.w2) + np.asarray(m.b2)
        o = np.where(_keep(k_mlp, ph, o.shape), o / (1 - ph), 0.0)
        y = ln(y + o)
    return y


@pytest.mark.parametrize("pa,ph", [(0.3, 0.0), (0.0, 0.3), (0.3, 0.2)])
def test_dropout_matches_numpy_reference_block(getkey, pa, ph):
    """Full block (W_O, skip, MLP, centred LN): both dropouts where BERT puts them."""
    n, d = 6, 8
    layer = rd.make_layer(
        getkey(),
        n=n,
        d=d,
        mask="causal",
        value="bert",
        qk="gaussian",
        ln="layernorm",
        output_projection=True,
        skip=True,
        mlp=True,
        mlp_ratio=2,
        attn_dropout=pa,
        hidden_dropout=ph,
    )
    x = np.asarray(rd.initial_tokens(getkey(), "bert", n, d))
    key = getkey()
    y, _ = jax.jit(lambda z, k: layer(z, key=k))(jnp.asarray(x), key)
    np.testing.assert_allclose(np.asarray(y), _reference(layer, x, key, _layernorm), atol=1e-12)


@pytest.mark.slow
def test_dropout_matches_numpy_reference_san(getkey):
    """Paper's SAN + sphere LN with attention dropout: exact to rounding (no GELU involved)."""
    n, d, p = 7, 5, 0.4
    layer = rd.make_layer(
        getkey(), n=n, d=d, mask="window", value="gaussian", qk="gaussian", qk_std=2.0, attn_dropout=p
    )
    x = np.asarray(rd.initial_tokens(getkey(), "sphere", n, d))
    for _ in range(3):
        key = getkey()
        y, _ = _forward(layer, jnp.asarray(x), key)
        np.testing.assert_allclose(np.asarray(y), _reference(layer, x, key, _sphere), atol=1e-13)
    # Hidden dropout alone zeroes single entries of A X W_V before the norm.
    layer_h = SelfAttentionLayer(
        layer.mask, layer.weights.w_q, layer.weights.w_k, layer.weights.w_v, dqk=layer.dqk, hidden_dropout=p
    )
    key = getkey()
    y, _ = _forward(layer_h, jnp.asarray(x), key)
    np.testing.assert_allclose(np.asarray(y), _reference(layer_h, x, key, _sphere), atol=1e-13)


def test_dropout_rates_validated_and_properties(getkey):
    for bad in (-0.1, 1.0, 1.5):
        with pytest.raises(ValueError, match="attn_dropout"):
            rd.make_layer(getkey(), n=4, d=4, attn_dropout=bad)
        with pytest.raises(ValueError, match="hidden_dropout"):
            rd.make_layer(getkey(), n=4, d=4, hidden_dropout=bad)
    with pytest.raises(ValueError, match="either dropout or"):
        rd.make_layer(getkey(), n=4, d=4, dropout=0.1, attn_dropout=0.2)
    both = rd.make_layer(getkey(), n=4, d=4, dropout=0.2)
    assert (both.attn_dropout, both.hidden_dropout) == (0.2, 0.2)
    one = rd.make_layer(getkey(), n=4, d=4, hidden_dropout=0.3)
    assert one.dropout == 0.3 and one.has_dropout and one.attn_dropout == 0.0
    off = rd.make_layer(getkey(), n=4, d=4)
    assert off.dropout == 0.0 and not off.has_dropout
    with pytest.raises(ValueError, match="key"):
        one(jnp.ones((4, 4)))


@pytest.mark.slow
def test_zero_row_is_absorbing_under_causal_attention_dropout(getkey):
    """Token 0 attends only to itself (causal): dropping that weight zeroes its row, LN keeps it
    at zero, and it stays zero in every later layer; the observer counts it."""
    n, d = 5, 4
    layer = rd.make_layer(
        getkey(), n=n, d=d, mask="causal", qk="gaussian", ln="layernorm", attn_dropout=0.5, num_layers=12
    )
    x = rd.initial_tokens(getkey(), "bert", n, d)
    key = getkey()
    step = jax.jit(lambda x, t, k: layer(x, t, key=k)[0])

    zero_at = None
    for t in range(12):
        k = jr.fold_in(key, t)
        keep00 = bool(np.asarray(jr.bernoulli(jr.split(k, 3)[0], 0.5, (1, n, n)))[0, 0, 0])
        x = step(x, t, k)
        row0 = np.asarray(x)[0]
        if zero_at is None and not keep00:
            zero_at = t
        assert (np.all(row0 == 0.0)) == (zero_at is not None), (t, zero_at)
        assert int(_zero_rows(0, x, None)["first_zero"]) == int(zero_at is not None)
    assert zero_at is not None  # P(never dropped in 12 layers) = 2^-12: this seed drops it


def test_zero_row_observer_closed_forms():
    """k zero rows and n - k equal rows of norm r: mu = r sqrt(k (n - k) / n), live mu 0."""
    n, d, k = 9, 3, 4
    v = np.array([3.0, 0.0, 4.0])
    x = np.vstack([np.zeros((k, d)), np.tile(v, (n - k, 1))])
    obs = _zero_rows(0, jnp.asarray(x), None)
    assert float(obs["zero_rows"]) == k and float(obs["first_zero"]) == 1.0
    np.testing.assert_allclose(float(obs["mu"]), 5.0 * np.sqrt(k * (n - k) / n), rtol=1e-14)
    assert float(obs["mu_rel_nonzero"]) < 1e-15
    x[-1] = [0.0, 5.0, 0.0]  # one live token orthogonal to the others
    obs = _zero_rows(0, jnp.asarray(x), None)
    assert float(obs["min_cos_nonzero"]) == pytest.approx(0.0, abs=1e-15)
    assert float(obs["mu_rel_nonzero"]) > 0.1
