"""Oracles for the layer map: attention, normalisations, invariances.

(docs/theory.md#the-model, issue 'rankdyn core'.)
"""

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest
from helpers import jit_call, small_layer, sphere_tokens

import rankdyn as rd
from rankdyn._errors import UsageError
from rankdyn._model._params import default_dqk

#: One compiled program per module structure (a layer, a norm, a bound method such as
#: ``layer.attention``): called eagerly, every operation of every new shape compiled its own
#: small program (20-30 per layer call). Python ints among ``args`` (a depth t) are static.


@pytest.mark.parametrize("mask", ["causal", "window", "random"])
def test_attention_rows_sum_to_one_and_vanish_off_mask(getkey, mask):
    layer = small_layer(getkey(), n=7, d=5, mask=mask, qk="gaussian", qk_std=3.0)
    a = jit_call(layer.attention, sphere_tokens(getkey(), 7, 5))
    m = np.asarray(layer.mask)
    np.testing.assert_allclose(np.asarray(a).sum(-1), 1.0, atol=1e-14)
    assert np.all(np.asarray(a)[:, ~m] == 0.0)
    assert np.all(np.asarray(a)[:, m] > 0.0)


def test_masked_softmax_extreme_scores_no_nan():
    mask = rd.masks.causal_mask(3)
    scores = jnp.asarray(np.array([[1e308, -1e308, 0.0], [-1e308, 1e308, 5.0], [0.0, 0.0, 0.0]]))
    a = np.asarray(jit_call(rd.layer.masked_softmax, scores, jnp.asarray(mask)))
    assert np.all(np.isfinite(a))
    np.testing.assert_allclose(a.sum(-1), 1.0)


def test_layer_matches_paper_equation_3(getkey):
    """X+ = D A X W_V with A = softmax_G(X Wq (X Wk)^T / sqrt(dqk)), D = 1/row norms (eq. 3)."""
    n, d = 5, 4
    layer = small_layer(getkey(), n=n, d=d, mask="window", value="gaussian", qk="gaussian", dqk=2.5)
    x = np.asarray(sphere_tokens(getkey(), n, d))
    w = layer.weights
    wq, wk, wv = (np.asarray(a)[0] for a in (w.w_q, w.w_k, w.w_v))
    r = (x @ wq) @ (x @ wk).T / np.sqrt(2.5)
    r = np.where(np.asarray(layer.mask), r, -np.inf)
    a = np.exp(r - r.max(1, keepdims=True))
    a /= a.sum(1, keepdims=True)
    y = a @ x @ wv
    y /= np.linalg.norm(y, axis=1, keepdims=True)
    np.testing.assert_allclose(np.asarray(jit_call(layer, jnp.asarray(x))[0]), y, atol=1e-13)


def test_pre_ln_matches_definition(getkey):
    """Pre-LN: X+ = A LN(X) W_V with A computed from LN(X) (default)."""
    n, d = 4, 4
    layer = small_layer(getkey(), n=n, d=d, mask="complete", placement="pre", value="gaussian")
    x = 3.0 * np.asarray(rd.initial_tokens(getkey(), "gaussian", n, d))
    xn = x / np.linalg.norm(x, axis=1, keepdims=True)
    want = np.asarray(jit_call(layer.attention, jnp.asarray(xn)))[0] @ xn @ np.asarray(layer.weights.w_v[0])
    np.testing.assert_allclose(np.asarray(jit_call(layer, jnp.asarray(x))[0]), want, atol=1e-13)


def test_post_ln_rows_have_unit_norm_and_radius(getkey):
    layer = small_layer(getkey(), n=6, d=6, value="gaussian")
    y, aux = jit_call(layer, rd.initial_tokens(getkey(), "gaussian", 6, 6))
    np.testing.assert_allclose(np.linalg.norm(np.asarray(y), axis=1), 1.0, atol=1e-14)
    assert not bool(aux.degenerate)
    layer8 = rd.make_layer(getkey(), n=6, d=6, ln=rd.SphereNorm(np.sqrt(8.0)))
    y8, _ = jit_call(layer8, rd.initial_tokens(getkey(), "gaussian", 6, 6))
    np.testing.assert_allclose(np.linalg.norm(np.asarray(y8), axis=1), np.sqrt(8.0), atol=1e-13)


def test_rms_and_layernorm_variants(getkey):
    x = jnp.asarray(np.asarray(rd.initial_tokens(getkey(), "gaussian", 5, 7)) * 4.0 + 1.0)
    y, bad = jit_call(rd.RMSNorm(), x)
    np.testing.assert_allclose(np.sqrt(np.mean(np.asarray(y) ** 2, axis=1)), 1.0, atol=1e-13)
    y, bad = jit_call(rd.LayerNorm(eps=0.0), x)
    np.testing.assert_allclose(np.asarray(y).mean(1), 0.0, atol=1e-13)
    np.testing.assert_allclose(np.linalg.norm(np.asarray(y), axis=1), np.sqrt(7.0), atol=1e-12)
    assert not np.any(np.asarray(bad))


def test_zero_row_is_reported_not_nan():
    """2-D example with x2 = -x1 and uniform causal attention: token 2's average is exactly 0."""
    layer = rd.SelfAttentionLayer(rd.masks.causal_mask(2), np.zeros((2, 2)), np.zeros((2, 2)), np.eye(2))
    x = jnp.asarray(np.array([[0.6, 0.8], [-0.6, -0.8]]))
    y, aux = jit_call(layer, x)
    assert bool(aux.degenerate)
    assert np.all(np.isfinite(np.asarray(y)))
    # The flags simulate records for this case: test_cli_simulate.py::test_degenerate_ln_is_counted_not_nan.
    lnx, bad = jit_call(rd.LayerNorm(), jnp.asarray(np.ones((2, 3))))
    assert np.all(np.asarray(bad)) and np.all(np.isfinite(np.asarray(lnx)))


@pytest.mark.slow
def test_ln_dynamics_invariant_to_value_scale(getkey):
    """LN(A X (c W_V)) = LN(A X W_V) for c > 0 (docs/theory.md#the-model): the scale of W_V is irrelevant."""
    key = getkey()
    layer = small_layer(key, n=5, d=5, mask="causal", value="bidiagonal", w=3.0, qk="gaussian")
    scaled = eqx.tree_at(lambda l: l.weights.w_v, layer, jnp.asarray(7.5 * np.asarray(layer.weights.w_v)))
    x0 = sphere_tokens(getkey(), 5, 5, batch=4)
    a = rd.simulate(layer, x0, 20, save_states=True, metrics="mu").states
    b = rd.simulate(scaled, x0, 20, save_states=True, metrics="mu").states
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-12)
    # ... and without LN the scale matters (the test can tell the two apart).
    nl = small_layer(key, n=5, d=5, mask="causal", value="bidiagonal", w=3.0, qk="gaussian", placement="none")
    nl2 = eqx.tree_at(lambda l: l.weights.w_v, nl, jnp.asarray(7.5 * np.asarray(nl.weights.w_v)))
    assert not np.allclose(
        rd.simulate(nl, x0, 3, metrics="mu").summary.mean["mu"],
        rd.simulate(nl2, x0, 3, metrics="mu").summary.mean["mu"],
    )


def test_complete_mask_is_permutation_equivariant(getkey):
    layer = small_layer(getkey(), n=6, d=4, mask="complete", value="gaussian", qk="gaussian")
    x = np.asarray(sphere_tokens(getkey(), 6, 4))
    perm = np.asarray(jr.permutation(getkey(), 6))
    xp, x = jnp.asarray(x[perm]), jnp.asarray(x)  # permuted on the host: exact
    np.testing.assert_allclose(
        np.asarray(jit_call(layer, xp)[0]), np.asarray(jit_call(layer, x)[0])[perm], atol=1e-13
    )
    # The causal mask is not: token 0 sees only itself.
    causal = eqx.tree_at(lambda l: l.mask, layer, jnp.asarray(rd.masks.causal_mask(6)))
    assert not np.allclose(np.asarray(jit_call(causal, xp)[0]), np.asarray(jit_call(causal, x)[0])[perm])


@pytest.mark.slow
def test_causal_jacobian_is_block_lower_triangular(getkey):
    n, d = 5, 3
    layer = small_layer(getkey(), n=n, d=d, mask="causal", value="gaussian", qk="gaussian")
    x = sphere_tokens(getkey(), n, d)
    # (n, d, n, d): d out_i / d x_j, one compiled program (eager, each operation compiled its own)
    jac = np.asarray(jax.jit(jax.jacfwd(lambda z: layer(z)[0]))(x))
    blocks = np.abs(jac).max(axis=(1, 3))
    assert np.all(blocks[np.triu_indices(n, 1)] == 0.0)
    assert np.all(blocks[np.tril_indices(n)] > 0.0)


@pytest.mark.slow
def test_full_block_is_equivariant_and_random_only_through_its_key(getkey):
    """Heads + W_O + skip + MLP + centred LN + both dropouts, under the complete mask: with the
    dropout rates set to zero the block is permutation-equivariant (an oracle that fails if a head,
    the skip or the MLP mixed token positions); with dropout the output is a function of the key."""
    key = getkey()
    block = dict(n=8, d=16, mask="complete", heads=4, output_projection=True, skip=True, mlp=True)
    layer = rd.make_layer(key, **block, dropout=0.1, ln="layernorm", num_layers=3)
    off = rd.make_layer(key, **block, dropout=0.0, ln="layernorm", num_layers=3)  # same weights
    assert layer.num_heads == 4 and layer.num_layers == 3 and layer.has_dropout
    x = rd.initial_tokens(getkey(), "bert", 8, 16)
    # One compiled call per layer (eager dispatch of this layer costs more than its compile).
    call = eqx.filter_jit(lambda lay, x, k: lay(x, 1, key=k)[0])
    k = getkey()
    y1, y1_again, y2 = call(layer, x, k), call(layer, x, k), call(layer, x, getkey())
    np.testing.assert_array_equal(np.asarray(y1), np.asarray(y1_again))
    assert not np.allclose(np.asarray(y1), np.asarray(y2))  # dropout is random, through the key
    with pytest.raises(ValueError, match="key"):
        layer(x, 0)
    weights, weights_off = (jax.tree.leaves(eqx.filter(m, eqx.is_array)) for m in (layer, off))
    assert len(weights) == len(weights_off) and not off.has_dropout
    assert all(np.array_equal(a, b) for a, b in zip(weights, weights_off))
    perm = np.array([3, 0, 7, 1, 6, 2, 5, 4])
    y, y_perm = call(off, x, None), call(off, jnp.asarray(np.asarray(x)[perm]), None)  # host permutation
    np.testing.assert_allclose(np.asarray(y_perm), np.asarray(y)[perm], rtol=1e-12, atol=1e-12)
    assert not np.allclose(np.asarray(y), np.asarray(x))  # the block did something


def test_per_layer_weights_are_used_per_layer(getkey):
    layer = rd.make_layer(getkey(), n=4, d=4, value="gaussian", num_layers=3)
    x = sphere_tokens(getkey(), 4, 4)
    outs = [np.asarray(jit_call(layer, x, jnp.asarray(t))[0]) for t in range(3)]  # t traced: one program
    assert not np.allclose(outs[0], outs[1]) and not np.allclose(outs[1], outs[2])
    single = rd.SelfAttentionLayer(
        layer.mask, layer.weights.w_q[1][0], layer.weights.w_k[1][0], layer.weights.w_v[1][0], dqk=layer.dqk
    )
    np.testing.assert_allclose(np.asarray(jit_call(single, x)[0]), outs[1], atol=1e-14)


def test_bad_layer_inputs_raise(getkey):
    d = 4
    wq = np.zeros((d, 2))
    with pytest.raises(ValueError, match="dqk must be > 0"):
        rd.SelfAttentionLayer(rd.masks.causal_mask(3), wq, wq, np.eye(d), dqk=0.0)
    with pytest.raises(ValueError, match="square w_v"):
        rd.SelfAttentionLayer(rd.masks.causal_mask(3), wq, wq, np.zeros((d, 3)))
    with pytest.raises(ValueError, match="self-loops"):
        rd.SelfAttentionLayer(np.zeros((3, 3), bool), wq, wq, np.eye(d))
    with pytest.raises(ValueError, match="placement"):
        rd.SelfAttentionLayer(rd.masks.causal_mask(3), wq, wq, np.eye(d), placement="middle")
    with pytest.raises(ValueError, match="unknown value family"):
        rd.make_layer(getkey(), n=3, d=4, value="unitary")
    with pytest.raises(ValueError, match="Jordan block size"):
        rd.make_layer(getkey(), n=3, d=4, value="jordan", jordan_k=5)


def test_fixed_attention_outside_the_mask_is_refused_at_construction():
    # A fixed A replaces the masked softmax: weight where the mask has no edge would run another
    # graph than the layer reports, so it is refused before any compute.
    n = d = 3
    mask = rd.masks.causal_mask(n)
    w = np.eye(d)
    with pytest.raises(UsageError, match=r"fixed_attention.*outside the mask.*\(0, 1\).*renormalise"):
        rd.SelfAttentionLayer(mask, w, w, w, fixed_attention=np.full((n, n), 1 / n))
    ok = np.tril(np.ones((n, n))) / np.arange(1, n + 1)[:, None]  # on the mask: accepted
    layer = rd.SelfAttentionLayer(mask, w, w, w, fixed_attention=ok)
    np.testing.assert_array_equal(np.asarray(jit_call(layer.attention, jnp.asarray(np.eye(n, d))))[0], ok)
    # The key width is the default temperature, from the one definition in rankdyn._model._params.
    narrow = rd.SelfAttentionLayer(mask, np.zeros((d, 2)), np.zeros((d, 2)), w)
    assert (float(layer.dqk), float(narrow.dqk)) == (default_dqk(d), default_dqk(2)) == (3.0, 2.0)
