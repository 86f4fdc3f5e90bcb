"""Oracles for the paper's closed-form constructions (docs/theory.md#constructions)."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import jit_call

import rankdyn as rd


def _observe_mu(t, x, args):
    """The observer of the runs below: one function, so runs of one shape share one compiled program
    (a ``lambda`` written in a loop is a new function at each pass, and compiles again)."""
    return {"mu": rd.mu(x)}


def _residual_norms(layer, xs):
    return jax.vmap(lambda x: jnp.linalg.norm(layer(x)[0] - x))(xs)


def _residuals(layer, xs):
    """||F(X) - X||_F for a stack of token matrices (one compiled program per layer structure and
    shape, not one per eager operation)."""
    return np.asarray(jit_call(_residual_norms, layer, xs))


def _all_satisfy(xs, w, condition):
    """Whether every row of ``xs`` satisfies Lemma 13's condition (``w`` and ``condition`` static)."""
    return jnp.all(jax.vmap(lambda x: rd.theory.lemma13_condition(x, w, condition=condition))(xs))


@pytest.mark.slow
def test_rank_k_closed_forms_are_equilibria_of_every_rank():
    """For w >= N every rank k = 1..N has 2^k distinct equilibria (N = d = 5, w = 5).

    docs/theory.md#constructions.
    """
    n = d = 5
    w = 5.5
    eqs = rd.theory.all_closed_form_equilibria(n, d, w)
    layer = rd.theory.uniform_causal_layer(n, d, rd.weights.bidiagonal(d, w))
    ks = np.array([k for k, _ in eqs])
    xs = jnp.stack([x for _, x in eqs])
    assert xs.dtype == jnp.float64
    assert _residuals(layer, xs).max() < 1e-14
    # The oracles below in NumPy on one host copy (eager JAX indexing compiles a program per shape).
    xs_np = np.asarray(xs)
    np.testing.assert_allclose(np.linalg.norm(xs_np, axis=-1), 1.0, atol=1e-15)
    ranks = np.array([np.linalg.matrix_rank(x, tol=1e-10) for x in xs_np])
    np.testing.assert_array_equal(ranks, ks)
    for k in range(1, n + 1):
        group = xs_np[ks == k].reshape(-1, n * d)
        assert group.shape[0] == 2**k
        # pairwise distinct
        dist = np.linalg.norm(group[:, None] - group[None], axis=-1) + np.eye(2**k)
        assert dist.min() > 1e-3


def test_valid_ranks_depend_on_w():
    """For w = 2 and N = 5 only k = 1 (all e_d, any w) and k >= 4 exist; at w = c the sign of
    token c + 1 multiplies zero (k = 4, c = 2), halving the count."""
    eqs = rd.theory.all_closed_form_equilibria(5, 5, 2.0)
    counts = {k: sum(1 for kk, _ in eqs if kk == k) for k in range(1, 6)}
    assert counts == {1: 2, 2: 0, 3: 0, 4: 8, 5: 32}
    layer = rd.theory.uniform_causal_layer(5, 5, rd.weights.bidiagonal(5, 2.0))
    assert _residuals(layer, jnp.stack([x for _, x in eqs])).max() < 1e-14


def test_worked_example_and_closed_form_entries():
    """docs/theory.md#constructions worked example, N = d = 5, w = 2, all s_i = -1 (the default signs)."""
    x = np.asarray(rd.theory.rank_k_equilibrium(5, 5, 5, 2.0))
    want = np.array(
        [
            [0, 0, 0, 0, 1],
            [0, 0, 0, -0.5, -0.866],
            [0, 0, 0.25, 0.433, -0.866],
            [0, -0.125, -0.2165, 0.433, -0.866],
            [0.0625, 0.1083, -0.2165, 0.433, -0.866],
        ]
    )
    np.testing.assert_allclose(x, want, atol=6e-5)
    # exact entries of the closed form X_{i, d-i+1} = (-1/w)^{i-1}
    np.testing.assert_allclose(np.diagonal(x[:, ::-1]), (-0.5) ** np.arange(5), rtol=0, atol=1e-16)
    # the paper's instance has s_2 = -1, s_3 = +1
    x3 = np.asarray(rd.theory.rank_k_equilibrium(3, 3, 3, 2.0, signs=[-1, 1]))
    np.testing.assert_allclose(x3[2], [0.25, math.sqrt(0.25 - 1 / 16), math.sqrt(0.75)], atol=1e-15)
    # flipping the first block's sign and every token sign negates the configuration (F is odd)
    xm = np.asarray(rd.theory.rank_k_equilibrium(5, 5, 5, 2.0, signs=[-1, 1, 1, 1, 1]))
    np.testing.assert_allclose(xm, -x, atol=1e-16)


def test_rank_k_structure_and_d_larger_than_n():
    """Tokens 1..c sit at e_d, token c+1 has (d-1)-th coordinate -c/w; works for d > n."""
    n, d, k, w = 4, 7, 2, 3.5
    x = np.asarray(rd.theory.rank_k_equilibrium(n, d, k, w, signs=[1]))
    c = n - k + 1
    np.testing.assert_array_equal(x[:c], np.tile(np.eye(d)[-1], (c, 1)))
    np.testing.assert_allclose(x[c, -2:], [-c / w, math.sqrt(1 - c**2 / w**2)], atol=1e-16)
    layer = rd.theory.uniform_causal_layer(n, d, rd.weights.bidiagonal(d, w))
    assert _residuals(layer, jnp.asarray(x)[None]).max() < 1e-14


def test_stable_rank_bound_full_rank():
    """App. F.2: 1 <= SRank(X*) <= N / (N - (N-1)/w^2); the closed-form value 1.2042 for N = d = 5, w = 2."""
    for n, w in [(5, 2.0), (5, 5.0), (7, 3.0)]:
        bound = n / (n - (n - 1) / w**2)
        for _, x in rd.theory.all_closed_form_equilibria(n, n, w):
            if np.linalg.matrix_rank(np.asarray(x), 1e-10) != n:
                continue
            sr = float(rd.metrics.stable_rank(rd.metrics.singular_values(x)))
            assert 1.0 <= sr <= bound + 1e-12
    sr = float(rd.metrics.stable_rank(rd.metrics.singular_values(rd.theory.rank_k_equilibrium(5, 5, 5, 2.0))))
    assert abs(sr - 1.2042) < 5e-5


def test_value_errors():
    with pytest.raises(ValueError, match="w >= c"):
        rd.theory.rank_k_equilibrium(5, 5, 3, 2.0)  # c = 3 > w
    with pytest.raises(ValueError, match="rank k"):
        rd.theory.rank_k_equilibrium(5, 5, 0, 9.0)
    with pytest.raises(ValueError, match="rank k"):
        rd.theory.rank_k_equilibrium(5, 5, 6, 9.0)
    with pytest.raises(ValueError, match="d >= k"):
        rd.theory.rank_k_equilibrium(5, 3, 4, 9.0)
    with pytest.raises(ValueError, match="length"):
        rd.theory.rank_k_equilibrium(5, 5, 3, 9.0, signs=[1])
    with pytest.raises(ValueError, match="w > 1"):
        rd.theory.example_2d(1.0)
    with pytest.raises(ValueError, match=r"\(d, d\)"):
        rd.theory.uniform_causal_layer(3, 3, jnp.eye(4))
    # k = 1 (all tokens at e_d) is an equilibrium for every w
    x = rd.theory.rank_k_equilibrium(5, 5, 1, 0.5)
    layer = rd.theory.uniform_causal_layer(5, 5, rd.weights.bidiagonal(5, 0.5))
    assert _residuals(layer, x[None]).max() < 1e-15


def test_uniform_causal_attention():
    """W_Q = W_K = 0 gives A_ij = 1/i for j <= i (1-indexed), docs/theory.md#constructions"""
    layer = rd.theory.uniform_causal_layer(4, 3, jnp.eye(3))
    a = np.asarray(layer.attention(jnp.asarray(np.random.default_rng(0).normal(size=(4, 3))))[0])
    want = np.tril(np.ones((4, 4))) / np.arange(1, 5)[:, None]
    np.testing.assert_allclose(a, want, atol=1e-15)


def test_2d_first_token_ratio_grows_by_w():
    """X_{1,2}/X_{1,1} increases by exactly w per step, the sign of X_{1,1} is kept.

    docs/theory.md#constructions.
    """
    w = 2.0
    ex = rd.theory.example_2d(w)
    layer = rd.theory.uniform_causal_layer(2, 2, ex["W_V"])
    theta = jnp.array([0.3, -1.1, 2.5, 4.0])  # radians, both signs of X_{1,1}
    x1 = jnp.stack([jnp.cos(theta), jnp.sin(theta)], -1)
    x0 = jnp.stack([x1, jnp.broadcast_to(jnp.array([0.6, 0.8]), x1.shape)], axis=1)
    tr = rd.simulate(layer, x0, 20, save_states=True, observe=_observe_mu)
    s = np.asarray(tr.states)  # (4, 21, 2, 2)
    ratio = s[:, :, 0, 1] / s[:, :, 0, 0]
    np.testing.assert_allclose(
        ratio - ratio[:, :1], np.tile(w * np.arange(21.0), (4, 1)), rtol=1e-10, atol=1e-10
    )
    np.testing.assert_array_equal(np.sign(s[:, :, 0, 0]), np.sign(s[:, :1, 0, 0]) * np.ones((1, 21)))


@pytest.mark.slow
def test_2d_points_and_basin_arc():
    """Token 1 frozen at (0, 1) (an exact fixed point): token 2 converges to B iff its angle lies in
    the open arc (theta_A, 270 deg); checked on a 0.5-degree grid for w = 1.5, 2, 3
    (docs/theory.md#constructions)."""
    for w in (1.5, 2.0, 3.0):
        ex = rd.theory.example_2d(w)
        s = math.sqrt(1 - 1 / w**2)
        np.testing.assert_allclose(np.asarray(ex["B"]), [-1 / w, -s], atol=1e-16)
        assert abs(ex["theta_A"] - math.degrees(math.atan2(s, -1 / w))) < 1e-12
        if w == 2.0:
            assert abs(ex["theta_A"] - 120.0) < 1e-12
        layer = rd.theory.uniform_causal_layer(2, 2, ex["W_V"])
        assert _residuals(layer, jnp.stack([ex["X_A"], ex["X_B"]])).max() < 1e-15
        deg = np.arange(0.25, 360.0, 0.5)
        rad = jnp.deg2rad(jnp.asarray(deg))
        x2 = jnp.stack([jnp.cos(rad), jnp.sin(rad)], -1)
        x0 = jnp.stack([jnp.broadcast_to(ex["e"], x2.shape), x2], axis=1)
        tr = rd.simulate(layer, x0, 400, save_every=400, save_states=True, observe=_observe_mu)
        final = np.asarray(tr.states[:, -1])
        np.testing.assert_array_equal(final[:, 0], np.tile([0.0, 1.0], (deg.size, 1)))  # frozen
        to_b = np.linalg.norm(final[:, 1] - np.asarray(ex["B"]), axis=-1) < 1e-8
        to_e = np.linalg.norm(final[:, 1] - np.asarray(ex["e"]), axis=-1) < 1e-2  # algebraic: ~1/(w t)
        in_arc = (deg > ex["theta_A"]) & (deg < 270.0)
        np.testing.assert_array_equal(to_b, in_arc)
        np.testing.assert_array_equal(to_e, ~in_arc)


@pytest.mark.slow
def test_lemma13_sampler_and_conclusion():
    """Samples satisfy Lemma 13 (with the proof's f <= w^2 - 1); for d = 3 token 2 stays at
    X_{2,d-1} <= -1/w at every step and converges towards the rank-2 point (docs/theory.md#constructions)."""
    key = jax.random.PRNGKey(3)
    for d, w in [(3, 2.0), (5, 3.0)]:
        x0 = rd.theory.lemma13_sample(key, d, w, 256)
        assert x0.shape == (256, 2, d)
        np.testing.assert_allclose(np.linalg.norm(np.asarray(x0), axis=-1), 1.0, atol=1e-14)
        assert bool(jit_call(_all_satisfy, x0[:, 1], w, "proof"))
        assert np.all(np.asarray(x0)[:, 0] == np.eye(d)[-1][None])
    paper = rd.theory.lemma13_sample(key, 4, 3.0, 256, condition="paper")
    assert bool(jit_call(_all_satisfy, paper[:, 1], 3.0, "paper"))
    d, w = 3, 2.0
    x0 = rd.theory.lemma13_sample(key, d, w, 128)
    layer = rd.theory.uniform_causal_layer(2, d, rd.weights.bidiagonal(d, w))
    tr = rd.simulate(layer, x0, 300, save_states=True, observe=lambda t, x, args: {"v": x[1, -2]})
    v = np.asarray(tr.metrics["v"])
    assert v.max() <= -1 / w + 1e-12
    assert np.linalg.svd(np.asarray(tr.states[:, -1]), compute_uv=False)[:, -1].min() > 0.3  # rank 2
    np.testing.assert_allclose(v[:, -1], -1 / w, atol=2e-3)  # algebraic approach to -1/w
