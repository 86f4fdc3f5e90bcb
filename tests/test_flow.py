"""The flow on the sphere against an independent fixed-step RK4 written here (float64), its
invariants (tangent field, energy monotonicity), and its equilibria."""

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import jit_call

from rankdyn.flow import (
    RK4,
    FlowField,
    ProjectedSolver,
    classify_equilibrium,
    cluster_count,
    find_zeros,
    interaction_energy,
    solve_flow,
)
from rankdyn.masks import causal_mask, complete_mask

# The tests' eager library calls, each under one compiled program per shape (eager, every op of
# every new shape compiles its own program).
_energy = jax.jit(interaction_energy)
_count = jax.jit(cluster_count)


def _np_field(x, beta, mask, q, k, v, dynamics):
    """The issue's formula, written again in NumPy: P_x y = y - <x, y> x."""
    s = beta * (x @ q.T) @ (x @ k.T).T
    w = np.where(mask, np.exp(s - np.where(mask, s, -np.inf).max(axis=1, keepdims=True)), 0.0)
    if dynamics == "sa":
        w = w / w.sum(axis=1, keepdims=True)
    else:
        w = np.where(mask, np.exp(s), 0.0) / x.shape[0]
    y = w @ (x @ v.T)
    return y - np.sum(x * y, axis=1, keepdims=True) * x


def _rk4(x, beta, t1, steps, *args):
    h = t1 / steps
    for _ in range(steps):
        k1 = _np_field(x, beta, *args)
        k2 = _np_field(x + h / 2 * k1, beta, *args)
        k3 = _np_field(x + h / 2 * k2, beta, *args)
        k4 = _np_field(x + h * k3, beta, *args)
        x = x + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
    return x


def _starts(key, shape):
    x = np.asarray(jax.random.normal(key, shape))
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


@pytest.mark.slow
def test_sa_matches_independent_rk4(getkey):
    n, d, t1, dynamics = 6, 3, 1.0, "sa"
    rng = np.random.default_rng(1)
    q, k, v = (np.eye(d) + 0.5 * rng.normal(size=(d, d)) for _ in range(3))
    mask = causal_mask(n)
    field = FlowField(mask, d, dynamics, q=q, k=k, v=v)
    x0 = _starts(getkey(), (3, n, d))
    betas = np.array([0.5, 2.0])
    sol = solve_flow(field, x0, t1, beta=betas, saves=3, rtol=1e-11, atol=1e-13, save_states=True)
    assert int(np.sum(sol.steps_limit_hit)) == 0 and bool(np.all(sol.successful))
    for bi, beta in enumerate(betas):
        for b in range(3):
            ref = _rk4(x0[b], beta, t1, 400, mask, q, k, v, dynamics)
            ref = ref / np.linalg.norm(ref, axis=-1, keepdims=True)
            err = np.max(np.abs(np.asarray(sol.states[bi, b, -1]) - ref))
            assert err < 1e-6, (beta, b, err)
    # The oracle can fail: a flow with V = I instead of V differs by far more than the tolerance.
    other = _rk4(x0[0], betas[0], t1, 400, mask, q, k, np.eye(d), dynamics)
    other = other / np.linalg.norm(other, axis=-1, keepdims=True)
    assert np.max(np.abs(np.asarray(sol.states[0, 0, -1]) - other)) > 1e-3
    assert float(np.max(sol.drift)) < 1e-8


def test_field_is_tangent_and_causal_first_token_fixed(getkey):
    n, d = 7, 4
    rng = np.random.default_rng(2)
    x = _starts(getkey(), (n, d))
    for dyn in ("sa", "usa"):
        f = FlowField(causal_mask(n), d, dyn, q=rng.normal(size=(d, d)), k=rng.normal(size=(d, d)))
        vel = np.asarray(jit_call(f, jnp.asarray(x), 1.5))
        np.testing.assert_allclose(np.sum(vel * x, axis=1), 0.0, atol=1e-13)
        assert np.max(np.abs(vel[0])) < 1e-14  # token 1 attends only to itself (V = I): it does not move
        assert np.max(np.abs(vel[1:])) > 1e-3


@pytest.mark.slow  # two flows integrated to convergence
def test_energy_does_not_decrease_along_sa_and_usa(getkey):
    """Geshkovski, Letrouit, Polyanskiy, Rigollet ("A mathematical perspective on Transformers"):
    for Q = K = V = I and the complete mask, USA is (n times) the gradient ascent of E_beta on the
    sphere and SA is a gradient ascent of E_beta for a modified metric, so dE/dt >= 0 along both."""
    n, d = 10, 3
    x0 = _starts(getkey(), (4, n, d))
    for dyn in ("usa", "sa"):
        f = FlowField(complete_mask(n), d, dyn)
        sol = solve_flow(
            f, x0, 4.0, beta=jnp.array([1.0, 4.0]), saves=21, rtol=1e-9, atol=1e-11, per_trajectory=True
        )
        e = np.asarray(sol.metrics["energy"])  # (beta, batch, saves)
        inc = np.diff(e, axis=-1)
        assert np.min(inc) > -1e-9 * np.max(np.abs(e)), (dyn, np.min(inc))
        assert np.max(e[..., -1] - e[..., 0]) > 1e-2  # it really moves


@pytest.mark.slow
def test_energy_formula_and_clusters():
    x = np.zeros((4, 3))
    x[:2, 0], x[2:, 1] = 1.0, 1.0
    beta = 2.0
    want = (8 * np.exp(beta) + 8 * 1.0) / (2 * beta * 16)  # 8 pairs inside the two groups, 8 across
    np.testing.assert_allclose(float(_energy(jnp.asarray(x), beta)), want, rtol=1e-13)
    assert float(_count(jnp.asarray(x), 0.99)) == 2.0
    # A chain of near neighbours is one component even when its ends are far apart.
    ang = np.linspace(0, 1.0, 12)
    chain = np.stack([np.cos(ang), np.sin(ang), 0 * ang], axis=1)
    assert float(_count(jnp.asarray(chain), 0.99)) == 1.0
    assert float(_count(jnp.asarray(chain), 0.999999)) == 12.0


@pytest.mark.slow
def test_single_cluster_is_stable_and_two_clusters_are_a_saddle():
    n, beta = 6, 2.0
    # d = 3 only (d = 2 cost a second set of compiles): an orbit of dimension 2 and a saddle of
    # index 2 also fail a classification that counted one direction too few or too many.
    for d in (3,):
        f = FlowField(complete_mask(n), d, "sa")
        one = np.zeros((n, d))
        one[:, 0] = 1.0
        c = classify_equilibrium(f, one, beta)
        assert c.kind == "stable" and c.orbit_dim == d - 1
        np.testing.assert_allclose(np.asarray(c.eigenvalues).real, -1.0, atol=1e-12)  # DF v = mean(v) - v
        two = one.copy()
        two[n // 2 :, 0] = -1.0
        x0 = two + 0.03 * np.random.default_rng(d).normal(size=two.shape)
        x, res, ok = find_zeros(f, x0[None], beta)
        assert bool(ok[0]) and float(res[0]) < 1e-12
        c2 = classify_equilibrium(f, x[0], beta)
        assert c2.kind == "saddle" and c2.index == d - 1 and c2.orbit_dim == d - 1, c2.to_dict()


def test_api_rejects_bad_matrices_and_options():
    m = complete_mask(3)
    with pytest.raises(ValueError, match="q must be a square"):
        FlowField(m, 3, q=np.ones((3, 2)))
    with pytest.raises(ValueError, match="v has non-finite"):
        FlowField(m, 3, v=np.full((3, 3), np.nan))
    with pytest.raises(ValueError, match="k must be a square"):
        FlowField(m, 3, k=np.ones(3))
    f = FlowField(m, 3)
    x0 = np.eye(3)
    with pytest.raises(ValueError, match="dt applies"):
        solve_flow(f, x0, 1.0, beta=1.0, dt=0.1)
    with pytest.raises(ValueError, match="needs a step dt"):
        solve_flow(f, x0, 1.0, beta=1.0, solver="euler")
    with pytest.raises(ValueError, match="beta"):
        solve_flow(f, x0, 1.0, beta=-1.0)
    with pytest.raises(ValueError, match="rtol"):
        solve_flow(f, x0, 1.0, beta=1.0, rtol=0.0)
    with pytest.raises(ValueError, match="stepsize_controller goes with a diffrax solver"):
        solve_flow(f, x0, 1.0, beta=1.0, stepsize_controller=diffrax.ConstantStepSize(), dt=0.1)
    with pytest.raises(ValueError, match="rtol/atol would be ignored"):
        solve_flow(
            f,
            x0,
            1.0,
            beta=1.0,
            solver=diffrax.Tsit5(),
            stepsize_controller=diffrax.PIDController(rtol=1e-6, atol=1e-8),
            rtol=1e-3,
        )
    with pytest.raises(ValueError, match="constant step size needs a step dt"):
        solve_flow(
            f, x0, 1.0, beta=1.0, solver=diffrax.Euler(), stepsize_controller=diffrax.ConstantStepSize()
        )
    with pytest.raises(ValueError, match="or a diffrax solver, got 'rk45'"):
        solve_flow(f, x0, 1.0, beta=1.0, solver="rk45")


@pytest.mark.slow
def test_solver_objects_are_the_names_they_stand_for():
    """A Diffrax solver and controller object integrates exactly as the name that builds them."""
    from rankdyn._flow._solvers import _solver_and_controller

    f = FlowField(complete_mask(4), 3)
    x0 = np.random.default_rng(2).normal(size=(2, 4, 3))
    kw = dict(beta=1.0, saves=3, save_states=True)
    a = solve_flow(f, x0, 1.0, **kw, solver="rk4", dt=0.05)
    b = solve_flow(f, x0, 1.0, **kw, solver=ProjectedSolver(RK4()), dt=0.05)
    np.testing.assert_array_equal(np.asarray(a.states), np.asarray(b.states))
    assert np.asarray(b.successful).tolist() == [True, True]
    # solve_flow reads a name only through _solver_and_controller, so an adaptive name is its
    # objects when it builds equal ones (an integration each would cost two more compiles).
    built = _solver_and_controller("tsit5", None, 1e-7, 1e-9, None)
    want = (diffrax.Tsit5(), diffrax.PIDController(rtol=1e-7, atol=1e-9, pcoeff=0.3, icoeff=0.3))
    assert eqx.tree_equal(built, want)
    assert not eqx.tree_equal(built, (want[0], diffrax.PIDController(rtol=1e-7, atol=1e-9)))
    # The check can fail: an unprojected RK4 (no renormalisation after each step) differs.
    c = solve_flow(f, x0, 1.0, **kw, solver=RK4(), dt=0.05)
    assert np.max(np.abs(np.asarray(c.states) - np.asarray(a.states))) > 0


@pytest.mark.slow
def test_metrics_names_what_the_flow_records_as_in_simulate():
    # metrics= selects the default observer's names, as rankdyn.simulate's does; the recorded
    # values equal the full observer's, and `clustered` stays (time_to_cluster reads it).
    import rankdyn as rd
    from rankdyn.flow import FlowField, FlowObserver, solve_flow
    from rankdyn.masks import complete_mask

    f = FlowField(complete_mask(4), 3)
    x0 = np.random.default_rng(0).normal(size=(2, 4, 3))
    # The settings of test_solver_objects_are_the_names_they_stand_for's first run (dt 0.05,
    # states kept): in one process the full observer's run reuses its compiled piece.
    kw = dict(beta=1.0, saves=3, solver="rk4", dt=0.05)
    full = solve_flow(f, x0, 1.0, save_states=True, **kw)
    some = solve_flow(f, x0, 1.0, metrics="mu,energy", **kw)
    assert sorted(some.summary.mean) == ["clustered", "energy", "mu"]
    for k in some.summary.mean:
        np.testing.assert_array_equal(some.summary.mean[k], full.summary.mean[k])
    with pytest.raises(rd.UsageError, match="foo"):
        solve_flow(f, x0, 1.0, metrics=["foo"], **kw)
    with pytest.raises(rd.UsageError, match="drop observe"):
        solve_flow(f, x0, 1.0, metrics="mu", observe=FlowObserver(), **kw)
