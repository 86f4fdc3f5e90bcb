"""The equiangular closed forms (rankdyn/_theory/_equiangular*.py) against rankdyn's own flow and
layer, SciPy ODE solves of the reduced systems, and the finite-n formula against its limits."""

import jax.numpy as jnp
import numpy as np
import pytest
from scipy.integrate import solve_ivp

import rankdyn
from rankdyn.flow import FlowField, solve_flow
from rankdyn.theory import (
    EQUIANGULAR_PLACEMENTS,
    equiangular_cosine,
    equiangular_rate,
    equiangular_rhs,
    equiangular_time,
    equiangular_tokens,
    one_layer_cosine,
    one_layer_limit,
)


def _gap_observer(t, x, beta):
    # 1 - <theta_0, theta_1> = |theta_0 - theta_1|^2 / 2: no cancellation near rho = 1.
    th = x / jnp.linalg.norm(x, axis=-1, keepdims=True)
    diff = th[0] - th[1]
    return {"gap": 0.5 * jnp.sum(diff * diff), "radius": jnp.linalg.norm(x[0])}


def test_tokens_are_equiangular_and_need_d_at_least_n():
    x = equiangular_tokens(5, 7, 0.3)
    g = x @ x.T
    assert np.allclose(np.diag(g), 1, atol=1e-15)
    assert np.allclose(g[~np.eye(5, dtype=bool)], 0.3, atol=1e-15)
    assert np.allclose(
        equiangular_tokens(4, 4, -0.2) @ equiangular_tokens(4, 4, -0.2).T, 1.2 * np.eye(4) - 0.2
    )
    for bad in (lambda: equiangular_tokens(5, 4, 0.3), lambda: equiangular_tokens(5, 5, -0.25)):
        with pytest.raises(rankdyn.UsageError):
            bad()


@pytest.mark.slow  # two compiled flows
def test_equiangular_ode_matches_rankdyns_flow():
    # The oracle of issue 53: solve_flow from an equiangular start (Q = K = V = I, complete mask,
    # float64) against t(rho) by quadrature / rho(t) by root-finding, to 1e-8 relative in 1 - rho
    # while 1 - rho >= 1e-7 (below, the solver's absolute error on the tokens, not the closed form,
    # sets the relative error of the small difference theta_0 - theta_1).
    n, d, rho0 = 5, 6, 0.2
    betas = np.array([0.0, 1.0, 2.5])
    times = np.linspace(0.0, 2.0, 9)
    x0 = jnp.asarray(equiangular_tokens(n, d, rho0))
    for dyn in ("sa", "usa"):
        field = FlowField(np.ones((n, n), bool), d, dyn)
        sol = solve_flow(
            field,
            x0,
            beta=betas,
            times=times,
            rtol=1e-12,
            atol=1e-14,
            observe=_gap_observer,
            per_trajectory=True,
        )
        got = np.asarray(sol.metrics["gap"]).reshape(len(betas), len(times))
        for i, beta in enumerate(betas):
            want = equiangular_cosine(times, float(beta), n, rho0=rho0, dynamics=dyn, gap=True)
            keep = want >= 1e-7
            assert keep.sum() >= 4
            assert np.max(np.abs(got[i] - want)[keep] / want[keep]) < 1e-8, (dyn, beta)


def test_rhs_time_and_cosine_agree_with_each_other():
    n, rho0 = 6, -0.1
    for dyn in ("sa", "usa"):
        for beta in (0.0, 0.7, 9.0):
            rho = np.array([0.0, 0.5, 0.99, 1 - 1e-9])
            t = equiangular_time(rho, beta, n, rho0=rho0, dynamics=dyn)
            assert np.all(np.diff(t) > 0)
            back = equiangular_cosine(t, beta, n, rho0=rho0, dynamics=dyn, gap=True)
            assert np.allclose(back, 1 - rho, rtol=1e-9, atol=0)
            # dt/drho = 1/f by a central difference of the quadrature
            h = 1e-5
            tp = equiangular_time(0.3 + h, beta, n, rho0=rho0, dynamics=dyn)
            tm = equiangular_time(0.3 - h, beta, n, rho0=rho0, dynamics=dyn)
            assert (tp - tm) / (2 * h) == pytest.approx(
                1 / equiangular_rhs(0.3, beta, n, dynamics=dyn), rel=1e-8
            )
    # SA and USA coincide at beta = 0; the survey's USA form 2/n e^(beta rho)(1-rho)((n-1)rho+1)
    assert equiangular_rhs(0.4, 2.0, 6, dynamics="usa") == pytest.approx(2 / 6 * np.exp(0.8) * 0.6 * 3)
    assert equiangular_rhs(0.4, 2.0, 6) == pytest.approx(
        2 * np.exp(0.8) * 0.6 * 3 / (np.exp(2) + 5 * np.exp(0.8))
    )


@pytest.mark.slow  # compiles simulate
def test_one_layer_formula_matches_rankdyns_layer():
    # W_Q = W_K = W_V = I, dqk = 1/beta^2 (scores beta <x_i, x_j>), complete mask, no skip, post sphere-LN.
    n, d = 6, 8
    rhos = np.array([-0.15, 0.1, 0.5, 0.9])
    x0 = jnp.asarray(np.stack([equiangular_tokens(n, d, r) for r in rhos]))
    eye = jnp.eye(d)
    for beta in (0.3, 12.0):
        layer = rankdyn.SelfAttentionLayer(
            np.ones((n, n), bool), eye, eye, eye, dqk=1 / beta**2, placement="post"
        )
        traj = rankdyn.simulate(layer, x0, 1, save_states=True)
        y = np.asarray(traj.states[:, -1])
        got = np.einsum("bd,bd->b", y[:, 0], y[:, 1])
        assert np.allclose(got, one_layer_cosine(rhos, beta, n), rtol=0, atol=2e-15)


def test_one_layer_limits_from_the_finite_n_formula():
    # p = gamma (1 - rho) below, at and above 1. From the exact 1 - rho' = (1-rho)(a-1)^2/D and
    # rho' - rho = (1-rho)(1+(n-1)rho)(2a+n-2)/D (a = n^p), the gap to the limit closes like
    # n^(-2(1-p)) below, n^(-(p-1)) above and n^-1 at p = 1.
    ns = np.array([1e2, 1e4, 1e6])
    for rho in (0.25, 0.5, 0.8):
        for p in (0.5, 1.0, 1.5):
            gamma = p / (1 - rho)
            lim = one_layer_limit(rho, gamma)
            want = {0.5: 1.0, 1.0: 4 * rho / (1 + 3 * rho), 1.5: rho}[p]
            assert lim == pytest.approx(want, rel=1e-14) or p == 1.0
            err = np.abs(one_layer_cosine(rho, gamma * np.log(ns), ns) - want)
            assert np.all(np.diff(np.log(err)) < 0)
            slope = np.polyfit(np.log(ns), np.log(err), 1)[0]
            assert slope == pytest.approx({0.5: -1.0, 1.0: -1.0, 1.5: -0.5}[p], abs=0.1), (rho, p)
    # log space: n = 1e300 and beta = 1e4 stay finite
    assert one_layer_cosine(0.5, 2 * np.log(1e300), 1e300) == pytest.approx(0.8, abs=1e-12)
    assert one_layer_cosine(0.5, 1e4, 10) == pytest.approx(0.5, abs=1e-12)
    assert one_layer_limit(0.5, 2.0) == pytest.approx(0.8)


def _reduced(placement, beta, n, dyn, alpha=None, tau=None):
    """(e, r)' of the equiangular scheme, e = 1 - rho, from the table of rankdyn/_flow/_schemes.py
    (the gap is the variable, so that it keeps its digits near rho = 1)."""

    def rhs(t, y):
        e, r = y
        rho = 1 - e
        z = np.exp(beta) + (n - 1) * np.exp(beta * rho) if dyn == "sa" else n
        f = 2 * np.exp(beta * rho) * e * ((n - 1) * rho + 1) / z
        g = (np.exp(beta) + (n - 1) * rho * np.exp(beta * rho)) / z
        a2 = np.exp(2 * beta) + 2 * (n - 1) * rho * np.exp(beta * (1 + rho))
        a = np.sqrt(a2 + (n - 1) * (1 + (n - 2) * rho) * np.exp(2 * beta * rho)) / z
        pl = placement if placement != "mix" else ("post" if t <= tau else "pre")
        s, dr = {
            "post": (1, 0),
            "pre": (r, g),
            "peri": (r * a, g / a),
            "ngpt": (a / (alpha or 1), 0),
            "lns": (np.sqrt(t + 1), 0),
        }[pl]
        return [-f / s, dr]

    return rhs


@pytest.mark.parametrize("dyn", ["sa", "usa"])
def test_placement_rates_and_prefactors_against_the_reduced_ode(dyn):
    n, beta, rho0, r0 = 5, 1.2, 0.1, 1.5
    for placement in EQUIANGULAR_PLACEMENTS:
        kw = {"ngpt_alpha": 0.7} if placement == "ngpt" else {"mix_time": 0.5} if placement == "mix" else {}
        rate = equiangular_rate(placement, beta, n, rho0=rho0, dynamics=dyn, radius=r0, **kw)
        rhs = _reduced(placement, beta, n, dyn, kw.get("ngpt_alpha"), kw.get("mix_time"))
        if rate.law == "power":
            t_end = 1e5
            sol = solve_ivp(rhs, (0, t_end), [1 - rho0, r0], method="DOP853", rtol=1e-12, atol=1e-300)
            e, r = sol.y[0, -1], sol.y[1, -1]
            assert e * r**2 == pytest.approx(rate.radius_constant, rel=1e-7), placement
            assert e * t_end**2 == pytest.approx(rate.prefactor, rel=1e-3), placement
            assert r / t_end == pytest.approx(rate.radius_speed, rel=1e-3), placement
        else:
            t_end = 25.0 / rate.exponent if rate.law == "exp" else (25.0 / rate.exponent + 1) ** 2
            sol = solve_ivp(rhs, (0, t_end), [1 - rho0, r0], method="DOP853", rtol=1e-12, atol=1e-300)
            e = sol.y[0, -1]
            clock = t_end if rate.law == "exp" else np.sqrt(t_end + 1)
            # the asymptote's relative correction is O(1 - rho), here ~1e-10
            assert e * np.exp(rate.exponent * clock) == pytest.approx(rate.prefactor, rel=1e-5), placement
    # the survey's linearisation: post rate 2 (SA) and 2 e^beta (USA); pre 1/t^2
    assert equiangular_rate("post", 1.2, n, rho0=rho0, dynamics=dyn).exponent == pytest.approx(
        2 if dyn == "sa" else 2 * np.exp(1.2)
    )


def test_refusals():
    for call in (
        lambda: equiangular_rhs(0.5, -1.0, 4),
        lambda: equiangular_rhs(0.5, 1.0, 1),
        lambda: equiangular_rhs(1.5, 1.0, 4),
        lambda: equiangular_rhs(0.5, 1.0, 4, dynamics="softmax"),
        lambda: equiangular_cosine(-1.0, 1.0, 4, rho0=0.1),
        lambda: equiangular_time(0.5, 1.0, 4, rho0=1.0),
        lambda: equiangular_rate("mix", 1.0, 4, rho0=0.1),
        lambda: equiangular_rate("post", 1.0, 4, rho0=0.1, ngpt_alpha=0.5),
        lambda: equiangular_rate("middle", 1.0, 4, rho0=0.1),
        lambda: equiangular_rate("pre", 1.0, 4, rho0=0.1, radius=0.0),
        lambda: one_layer_cosine(0.5, 1.0, 1),
        lambda: one_layer_cosine(1.0, 1.0, 4),
        lambda: one_layer_limit(0.0, 1.0),
        lambda: one_layer_limit(0.5, 0.0),
    ):
        with pytest.raises(rankdyn.UsageError):
            call()
