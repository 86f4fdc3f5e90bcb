"""`bifurcation_point`: bifurcation parameters re-solved at theta, differentiated by the IFT.

Oracles: closed forms of the fold curve of $x' = x + p + q x + c x^2$ ($p^* = q^2 / 4c$), of the
period doubling of $x' = r x (1 - x) + q$ ($r^* = 1 - 2q + \\sqrt{(1 - 2q)^2 + 3}$), of a planar
Neimark--Sacker point ($p^* = a + b^2$) and of the paper's 2 x 2 family's fold
($w_A = \\sqrt{2p - p^2}$); central finite differences of the fold re-located by `continue_branch`.
"""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rankdyn import UsageError
from rankdyn.equilibria import bifurcation_point, continue_branch


def quadratic(x, p, th):
    return x + p + th["q"] * x + th["c"] * x**2


def _located(branch, kind):
    return next(b for b in branch.bifurcations if b.kind == kind and b.located)


def _fold(th):
    q, c = float(th["q"]), float(th["c"])
    fam = lambda x, p: quadratic(x, p, jax.tree.map(jnp.asarray, th))  # noqa: E731
    start = np.array([(-q + 2.0) / (2 * c)])  # a root of c x^2 + q x + p = 0 at p = q^2/4c - 1/c
    p0 = q * q / (4 * c) - 1 / c
    return _located(continue_branch(fam, start, p0, p0 + 1.5, throw=False), "fold")


@pytest.fixture(scope="module")
def quadratic_fold():
    """The fold of the quadratic family at q = 0.6, c = 1, located once by continuation for the
    tests that start from it (each continuation of a new family compiles its programs)."""
    return _fold({"q": jnp.asarray(0.6), "c": jnp.asarray(1.0)})


def test_fold_closed_form_grad_jacfwd_and_finite_differences(quadratic_fold):
    fold = quadratic_fold
    th = {"q": jnp.asarray(0.7), "c": jnp.asarray(1.3)}
    fn = lambda t: bifurcation_point(quadratic, fold, t)  # noqa: E731
    q, c = 0.7, 1.3
    value, got = jax.value_and_grad(fn)(th)
    assert abs(float(value) - q * q / (4 * c)) <= 1e-12
    want = {"q": q / (2 * c), "c": -q * q / (4 * c * c)}  # the slope of the fold curve p = q^2 / 4c
    for k in want:
        assert abs(float(got[k]) - want[k]) <= 1e-10, (k, got[k], want[k])
    # Central differences of the fold re-located by continuation at theta +- h (not by this solver).
    h = 1e-4
    fd = (_fold({"q": q + h, "c": c}).param - _fold({"q": q - h, "c": c}).param) / (2 * h)
    assert abs(fd - want["q"]) <= 1e-7 and abs(fd - float(got["q"])) <= 1e-7


def logistic(x, r, q):
    return r * x * (1 - x) + q


def test_period_doubling_closed_form():
    br = continue_branch(
        lambda x, r: logistic(x, r, jnp.asarray(0.0)), np.array([0.6]), 2.5, 3.5, throw=False
    )
    pd = _located(br, "period-doubling")
    q = np.array([0.05, -0.1])
    fn = lambda t: bifurcation_point(logistic, pd, t)  # noqa: E731
    r, dr = jax.jit(jax.vmap(lambda t: (fn(t), jax.jacfwd(fn)(t))))(jnp.asarray(q))
    s = np.sqrt((1 - 2 * q) ** 2 + 3)
    np.testing.assert_allclose(r, 1 - 2 * q + s, atol=1e-11)
    np.testing.assert_allclose(dr, -2 - 2 * (1 - 2 * q) / s, atol=1e-10)


def planar(x, p, th):
    """A rotation by 1 + th[2] times (1 + p - th[0] - th[1]^2 - |x|^2): Neimark-Sacker at 0 where
    p = th[0] + th[1]^2, at the angle 1 + th[2]."""
    om = 1.0 + th[2]
    rot = jnp.array([[jnp.cos(om), -jnp.sin(om)], [jnp.sin(om), jnp.cos(om)]])
    return (1 + p - th[0] - th[1] ** 2 - x @ x) * (rot @ x) + 0.1 * x[0] * x[1]


@pytest.mark.slow
def test_neimark_sacker_closed_form():
    th0 = jnp.zeros(3)
    br = continue_branch(lambda x, p: planar(x, p, th0), np.zeros(2), -0.5, 0.5, throw=False)
    ns = _located(br, "neimark-sacker")
    th = jnp.array([0.05, 0.2, 0.1])
    value, grad = jax.value_and_grad(lambda t: bifurcation_point(planar, ns, t))(th)
    assert abs(float(value) - (0.05 + 0.04)) <= 1e-12
    np.testing.assert_allclose(grad, [1.0, 0.4, 0.0], atol=1e-10)


def test_refusals(quadratic_fold):
    th = {"q": jnp.asarray(0.6), "c": jnp.asarray(1.0)}
    fold = quadratic_fold
    with pytest.raises(UsageError, match="not located"):
        bifurcation_point(quadratic, dataclasses.replace(fold, located=False), th)
    with pytest.raises(UsageError, match="branch-point"):
        bifurcation_point(quadratic, dataclasses.replace(fold, kind="branch-point"), th)
    with pytest.raises(UsageError, match="float64"):
        bifurcation_point(quadratic, fold, {"q": jnp.asarray(0.6, jnp.float32), "c": jnp.asarray(1.0)})
    with jax.enable_x64(False), pytest.raises(UsageError, match="float64"):
        bifurcation_point(quadratic, fold, {"q": 0.6, "c": 1.0})
    with pytest.raises(UsageError, match="shape"):
        bifurcation_point(lambda x, p, t: jnp.concatenate([x, x]), fold, th)


P = 0.75


def counterexample(w, th):
    """The bifurcation target's family W_V = [[P, w], [0, 1]] plus th["dv"], and W_Q, W_K, d_QK."""
    from rankdyn.layer import SelfAttentionLayer
    from rankdyn.masks import causal_mask

    w_v = jnp.array([[P, 0.0], [0.0, 1.0]]) + w * jnp.array([[0.0, 1.0], [0.0, 0.0]]) + th["dv"]
    return SelfAttentionLayer(causal_mask(2), th["wq"], th["wk"], w_v, dqk=th["dqk"])


def family_a_start(w):
    """The family-A equilibrium at ``w`` (theta = 0): token 1 at (0, 1), token 2 at the angle a with
    (P - 1) sin a - w cos a = 1 (docs/theory.md, "Continuation and bifurcations")."""
    import scipy.optimize as so

    eq = lambda a: (P - 1) * np.sin(a) - w * np.cos(a) - 1  # noqa: E731
    grid = np.linspace(-np.pi, np.pi, 2001)
    i = np.flatnonzero(np.sign(eq(grid[1:])) != np.sign(eq(grid[:-1])))[0]
    a = so.brentq(eq, grid[i], grid[i + 1], xtol=1e-15)
    return np.array([[0.0, 1.0], [np.cos(a), np.sin(a)]])


def _layer_fold(th, x_start):
    from rankdyn.equilibria import find_equilibria

    fam = lambda w: counterexample(w, th)  # noqa: E731
    x = np.asarray(find_equilibria(fam(1.3), jnp.asarray(x_start)[None]).x[0])
    return _located(continue_branch(fam, x, 1.3, 0.5, ds=0.05, throw=False), "fold"), x


@pytest.mark.slow
def test_layer_fold_gradients_weights_and_temperature():
    """W_V against the closed form w_A = sqrt(2p - p^2) - b (dv = [[a, b], [0, 0]]); W_V, W_Q, W_K
    and d_QK (scores switched on) against central differences of continued folds."""
    zero = {
        "dv": jnp.zeros((2, 2)),
        "wq": jnp.zeros((2, 2)),
        "wk": jnp.zeros((2, 2)),
        "dqk": jnp.asarray(2.0),
    }
    x_a = family_a_start(1.3)
    fold, _ = _layer_fold(zero, x_a)
    a, b = 0.02, -0.03
    th = dict(zero, dv=jnp.array([[a, b], [0.0, 0.0]]))
    # One value-and-gradient program: `fn(th)` beside `jax.grad(fn)(th)` would compile the solver a
    # third time (its primal), with no other statement checked.
    fn = lambda t: bifurcation_point(counterexample, fold, t)  # noqa: E731
    w_a, grad = jax.value_and_grad(fn)(th)
    pa = P + a
    assert abs(float(w_a) - (np.sqrt(2 * pa - pa * pa) - b)) <= 1e-12
    assert abs(float(grad["dv"][0, 0]) - (1 - pa) / np.sqrt(2 * pa - pa * pa)) <= 1e-10
    assert abs(float(grad["dv"][0, 1]) + 1) <= 1e-12

    g = np.random.default_rng(0).standard_normal((5, 2, 2))
    th0 = {
        "dv": jnp.asarray(0.05 * g[0]),
        "wq": jnp.asarray(0.3 * g[1]),
        "wk": jnp.asarray(0.3 * g[2]),
        "dqk": 2.0,
    }
    th0 = jax.tree.map(jnp.asarray, th0)
    fold0, x0 = _layer_fold(th0, x_a)
    grad = jax.grad(lambda t: bifurcation_point(counterexample, fold0, t))(th0)
    direction = {"dv": g[3], "wq": g[4], "wk": g[1] - g[2], "dqk": 1.0}
    h = 1e-4
    moved = [
        _layer_fold(jax.tree.map(lambda u, v, s=s: u + s * h * jnp.asarray(v), th0, direction), x0)[0].param
        for s in (1, -1)
    ]
    fd = (moved[0] - moved[1]) / (2 * h)
    ad = sum(float(jnp.sum(grad[k] * jnp.asarray(direction[k]))) for k in direction)
    assert abs(ad - fd) <= 1e-6 * max(1.0, abs(fd)), (ad, fd)
    assert all(float(jnp.max(jnp.abs(grad[k]))) > 1e-4 for k in ("dv", "wq", "wk"))
