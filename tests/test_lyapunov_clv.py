"""Covariant Lyapunov vectors (Ginelli): linear maps with known eigenvectors, a product of random
matrices against a NumPy re-implementation, Hénon, a layer, and the refusals."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import rankdyn
from rankdyn.lyapunov import CovariantVectors, covariant_vectors, covariant_vectors_map


def _colinear(a, b):
    """|cos| between matching columns of a and b (..., m, k)."""
    num = np.abs(np.sum(a * b, axis=-2))
    return num / (np.linalg.norm(a, axis=-2) * np.linalg.norm(b, axis=-2))


def _numpy_ginelli(mats, k, discard, discard_backward, seed):
    """Ginelli's algorithm in NumPy (Householder QR with a positive diagonal, triangular solves)
    on the sequence ``mats`` (t, m, m); its own random starts. Returns (V (T, m, k), exponents)."""
    rng = np.random.default_rng(seed)
    m = mats.shape[1]
    q = np.linalg.qr(rng.normal(size=(m, k)))[0]
    qs, rs, logs = [], [], []
    for t, a in enumerate(mats):
        q1, r = np.linalg.qr(a @ q)
        s = np.sign(np.diag(r))
        q1, r = q1 * s, s[:, None] * r
        if discard <= t:
            rs.append(r)
        if discard <= t < len(mats) - discard_backward:
            qs.append(q)
            logs.append(np.log(np.diag(r)))
        q = q1
    c = np.triu(rng.normal(size=(k, k))) + np.eye(k)
    vs = []
    for i in range(len(rs) - 1, -1, -1):
        c = np.linalg.solve(rs[i], c)
        c /= np.linalg.norm(c, axis=0)
        if i < len(qs):
            vs.append(qs[i] @ c)
    return np.array(vs[::-1]), np.mean(logs, axis=0)


def _henon_np(x):
    """Hénon's map (a = 1.4, b = 0.3) in NumPy on ``(..., 2)``, and its Jacobian in closed form
    ``[[-2.8 x_1, 1], [0.3, 0]]`` ``(..., 2, 2)``: the oracle of the covariance check."""
    f = np.stack([1 - 1.4 * x[..., 0] ** 2 + x[..., 1], 0.3 * x[..., 0]], axis=-1)
    jac = np.zeros(x.shape + (2,))
    jac[..., 0, 0], jac[..., 0, 1], jac[..., 1, 0] = -2.8 * x[..., 0], 1.0, 0.3
    return f, jac


@eqx.filter_jit
def _layer_jacobians(layer, states):
    """Jacobians of the flattened layer map at each of ``states`` ``(T, n, d)``: one compiled
    program (op by op, jacfwd of the layer compiles a program per op)."""
    return jax.vmap(jax.jacfwd(lambda z: layer(z)[0].reshape(-1)))(states)


def test_linear_map_vectors_are_the_eigenvectors():
    # Non-orthogonal eigenvectors, one negative eigenvalue: V_t = the eigenvectors (up to sign) at
    # every step, exponents log|mu|, and the angle between span(v1, v2) (unstable) and v3.
    evecs = np.array([[1.0, 1.0, 0.3], [0.0, 1.0, 1.0], [0.0, 0.2, 1.0]])
    mus = np.array([3.0, -1.5, 0.4])
    mat = evecs @ np.diag(mus) @ np.linalg.inv(evecs)
    r = covariant_vectors_map(
        lambda x: jnp.asarray(mat) @ x,
        jnp.zeros((2, 3)),
        20,
        discard=60,
        discard_backward=60,
        key=jax.random.key(0),
    )
    assert (
        isinstance(r, CovariantVectors) and r.vectors.shape == (2, 20, 3, 3) and r.states.shape == (2, 20, 3)
    )
    np.testing.assert_allclose(r.exponents, np.tile(np.log(np.abs(mus)), (2, 1)), atol=1e-10)
    np.testing.assert_allclose(_colinear(np.asarray(r.vectors), evecs), 1.0, atol=1e-10)
    np.testing.assert_allclose(np.linalg.norm(r.vectors, axis=-2), 1.0, atol=1e-12)
    basis = np.linalg.qr(evecs[:, :2])[0]
    v3 = evecs[:, 2] / np.linalg.norm(evecs[:, 2])
    want = np.arcsin(np.linalg.norm(v3 - basis @ (basis.T @ v3)))
    assert np.all(np.asarray(r.num_unstable) == 2)
    np.testing.assert_allclose(r.angles, want, atol=1e-10)
    np.testing.assert_allclose(r.min_angle, want, atol=1e-10)
    assert bool(np.all(np.asarray(r.result == rankdyn.RESULTS.successful)))
    # The Gram-Schmidt vectors are orthogonal: if the backward pass were skipped, columns 2-3
    # would not be eigenvectors (this matrix's eigenvectors are far from orthogonal).
    assert abs(evecs[:, 0] @ evecs[:, 1]) / np.linalg.norm(evecs[:, 1]) > 0.5


def test_random_matrix_product_against_numpy_ginelli():
    m, steps, fwd, bwd = 4, 30, 40, 40
    rng = np.random.default_rng(3)
    # Growth rates spread apart so that both transients converge to round-off in 40 steps.
    mats = rng.normal(size=(fwd + steps + bwd, m, m)) * np.array([2.0, 1.0, 0.5, 0.25])[:, None]
    mats = np.einsum("tij,tjk->tik", mats, rng.normal(size=(fwd + steps + bwd, m, m)))
    a = jnp.asarray(mats)
    step = lambda x, t: a[t] @ x  # noqa: E731
    r = covariant_vectors_map(
        step,
        jnp.zeros((2, m)),
        steps,
        discard=fwd,
        discard_backward=bwd,
        time_dependent=True,
        key=jax.random.key(1),
    )
    two = covariant_vectors_map(
        step,
        jnp.zeros(m),
        steps,
        k=2,
        discard=fwd,
        discard_backward=bwd,
        time_dependent=True,
        key=jax.random.key(2),
    )
    want, exps = _numpy_ginelli(mats, m, fwd, bwd, seed=0)
    v = np.asarray(r.vectors)
    # Two trajectories (different random starts) and NumPy's own starts agree: the vectors do
    # not depend on the start once both transients are over.
    np.testing.assert_allclose(_colinear(v, want[None]), 1.0, atol=1e-8)
    np.testing.assert_allclose(r.exponents, np.tile(exps, (2, 1)), atol=1e-10)
    # k < m: the first k covariant vectors, the same as those of the full set.
    np.testing.assert_allclose(_colinear(np.asarray(two.vectors), want[..., :2]), 1.0, atol=1e-8)
    # Covariance: A_t V_t = V_{t+1} diag(gamma_t), and the mean log growth gives the exponents
    # up to the boundary terms (O(1/T) of the log norm at the window's ends).
    grown = np.einsum("tij,tjk->tik", mats[fwd : fwd + steps - 1], v[0, :-1])
    gamma = np.linalg.norm(grown, axis=1)
    np.testing.assert_allclose(_colinear(grown, v[0, 1:]), 1.0, atol=1e-8)
    np.testing.assert_allclose(np.mean(np.log(gamma), axis=0), exps, atol=0.5)
    np.testing.assert_allclose(np.sort(np.mean(np.log(gamma), axis=0))[::-1], np.mean(np.log(gamma), axis=0))


def test_henon_exponents_and_covariance(getkey):
    def henon(x):
        return jnp.stack([1 - 1.4 * x[0] ** 2 + x[1], 0.3 * x[0]])

    x0 = jnp.array([[0.1, 0.1], [0.3, -0.1]])
    r = covariant_vectors_map(henon, x0, 3000, discard=200, discard_backward=100, key=jax.random.key(0))
    exps = np.asarray(r.exponents)
    # Hénon (a = 1.4, b = 0.3): lambda_1 ~ 0.419, and lambda_1 + lambda_2 = log b (det J = -b).
    np.testing.assert_allclose(exps[:, 0], 0.419, atol=0.02)
    np.testing.assert_allclose(exps.sum(axis=1), np.log(0.3), atol=1e-10)
    xs, v = np.asarray(r.states), np.asarray(r.vectors)
    step, jac = _henon_np(xs[:, :-1])
    grown = np.einsum("btij,btjk->btik", jac, v[:, :-1])
    np.testing.assert_allclose(_colinear(grown, v[:, 1:]), 1.0, atol=1e-7)
    np.testing.assert_allclose(step, xs[:, 1:], atol=1e-12)
    # Hénon's attractor has near-tangencies: the angle gets small but is positive.
    assert np.all(np.asarray(r.num_unstable) == 1)
    assert np.all((r.min_angle > 0) & (r.min_angle < 0.1)) and np.all(np.asarray(r.angles) <= np.pi / 2)


@pytest.mark.slow
def test_layer_vectors_are_tangent_and_covariant():
    # tests/test_lyapunov.py's layer: all tokens at e_1 is a stable fixed point (post sphere-LN,
    # skip); from near it the exponents are the log moduli of its multipliers.
    n, d = 4, 3
    wq = 0.3 * jax.random.normal(jax.random.PRNGKey(1), (d, d))
    wk = 0.3 * jax.random.normal(jax.random.PRNGKey(2), (d, d))
    layer = rankdyn.SelfAttentionLayer(np.ones((n, n), bool), wq, wk, np.diag([1.5, 1.0, 0.6]), skip=True)
    fixed = np.tile([1.0, 0.0, 0.0], (n, 1))  # NumPy: the same numbers, no eager programs
    x0 = fixed + 0.3 * np.asarray(jax.random.normal(jax.random.key(3), (n, d)))
    r = covariant_vectors(
        layer, x0, 12, discard=30, discard_backward=30, num_unstable=1, key=jax.random.key(0)
    )
    dim = n * (d - 1)
    assert r.space == "tangent" and r.vectors.shape == (12, n * d, dim) and r.states.shape == (12, n, d)
    moduli = np.sort(np.asarray(rankdyn.stability(layer, fixed).moduli))[::-1]
    np.testing.assert_allclose(r.exponents, np.log(moduli), atol=1e-4)
    v = np.asarray(r.vectors).reshape(12, n, d, dim)
    u = np.asarray(r.states) / np.linalg.norm(np.asarray(r.states), axis=-1, keepdims=True)
    np.testing.assert_allclose(np.einsum("tnd,tndk->tnk", u, v), 0.0, atol=1e-10)  # tangent to the spheres
    jac = np.asarray(_layer_jacobians(layer, r.states[:-1])).reshape(11, n * d, n * d)
    grown = np.einsum("tij,tjk->tik", jac, np.asarray(r.vectors[:-1]))
    np.testing.assert_allclose(_colinear(grown, np.asarray(r.vectors[1:])), 1.0, atol=1e-6)
    assert np.all((np.asarray(r.angles) > 0) & (np.asarray(r.angles) <= np.pi / 2))


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"k": 3}, r"k \(the number of covariant vectors\)"),
        ({"num_unstable": 3}, "num_unstable must be in"),
        ({"discard_backward": -1}, "discard_backward must be"),
        ({"key": None}, "needs key="),
        ({"num_steps": 10**9}, "record fewer steps"),
    ],
)
def test_bad_input_is_refused_before_compute(kwargs, message):
    args = {"num_steps": 10, "key": jax.random.key(0)} | kwargs
    with pytest.raises(rankdyn.UsageError, match=message):
        covariant_vectors_map(lambda x: 2 * x, jnp.ones(2), args.pop("num_steps"), **args)


def test_layer_bad_input_is_refused_before_compute():
    n, d = 3, 3
    layer = rankdyn.SelfAttentionLayer(np.ones((n, n), bool), np.eye(d), np.eye(d), np.eye(d))
    x0 = np.ones((n, d))
    for kwargs, message in (
        ({"discard": -1}, "discard must be an integer >= 0"),
        ({"k": 7}, r"k \(the number of covariant vectors\) must be an integer in \[1, 6\]"),
        ({"num_unstable": 7}, "num_unstable must be in"),
    ):
        with pytest.raises(rankdyn.UsageError, match=message):
            covariant_vectors(layer, x0, 4, key=jax.random.key(0), **kwargs)
    with pytest.raises(rankdyn.UsageError, match="zero token"):
        covariant_vectors(layer, np.where(np.arange(n)[:, None] == 1, 0.0, x0), 4, key=jax.random.key(0))
