"""Stationary densities on the circle, their stability and their branches, against closed forms.

Oracles: the uniform state's threshold sigma_c^2 = 2 I_1(beta) / beta (USA) and
2 I_1(beta) / (beta I_0(beta)) (SA), where the mode-1 rate k^2 (I_k(beta)/(beta Z) - sigma^2/2)
vanishes (scipy.special.iv); the eigenvalues of the linearised operator at the uniform state
(those rates, k = 1..K); a USA stationary density is a Gibbs state of its own potential,
rho = exp(2 (E * rho) / (beta sigma^2)) / Z (the USA velocity is the gradient of (E * rho) / beta),
checked on the grid in NumPy; the transition's type: supercritical iff I_2(beta)/I_1(beta) < 1/2.
"""

import math

import numpy as np
import pytest
from scipy.special import iv

from rankdyn import RESULTS, UsageError
from rankdyn.meanfield import continue_density, density_step_map, stationary_density

K = 16
TH = 2 * np.pi * np.arange(64) / 64


def sigma_c(beta, dynamics):
    return math.sqrt(2 * iv(1, beta) / (beta * (iv(0, beta) if dynamics == "sa" else 1.0)))


@pytest.mark.parametrize("dynamics", ["usa", "sa"])
def test_threshold_located_by_continuation(dynamics):
    beta = 2.0
    sc = sigma_c(beta, dynamics)
    br = continue_density(
        np.zeros(K), 0.9 * sc, 1.1 * sc, beta=beta, sigma=1.0, dynamics=dynamics, num_modes=K, ds=0.05 * sc
    )
    assert br.status == "parameter_end"
    kinds = [b.kind for b in br.bifurcations]
    assert kinds == ["branch-point"], kinds
    assert abs(br.bifurcations[0].param - sc) < 1e-6, (br.bifurcations[0].param, sc)
    # Stable above the threshold (in sigma), unstable below it.
    assert not br.stable[0] and br.stable[-1]


@pytest.mark.slow
def test_stationary_density_is_a_gibbs_state_and_uniform_rates():
    beta, sigma = 2.0, 0.85 * sigma_c(2.0, "usa")
    # The cluster's modes fall like 3^-k: at 16 modes the truncation error is 2e-6, at 40 it is 1e-13
    # (`tail` says so: the top 10% of the modes carry that much of the norm).
    kk, th = 40, 2 * np.pi * np.arange(128) / 128
    coarse = stationary_density(np.exp(2 * np.cos(TH)), beta=beta, sigma=sigma, num_modes=K)
    st = stationary_density(np.exp(2 * np.cos(th)), beta=beta, sigma=sigma, num_modes=kk)
    assert bool(st.result == RESULTS.successful) and bool(st.stable) and float(st.order_parameter) > 0.3
    assert float(coarse.tail) > 1e-7 and float(st.tail) < 1e-12
    rho = np.asarray(st.density(128))
    # (E * rho)(theta) = sum_k 2 pi I_k(beta) hat rho_k e^{ik theta}, from the cosines a_k.
    a = np.asarray(st.coefficients)[: kk + 1]
    conv = (
        2 * np.pi * (a[0] * iv(0, beta) + sum(a[k] * iv(k, beta) * np.cos(k * th) for k in range(1, kk + 1)))
    )
    gibbs = np.exp(2 * conv / (beta * sigma**2))
    gibbs /= gibbs.mean() * 2 * np.pi
    assert np.max(np.abs(rho - gibbs)) < 1e-11 * rho.max()
    # At the uniform density the eigenvalues are the closed-form rates of modes 1..K.
    u = stationary_density(np.ones(64), beta=beta, sigma=sigma, num_modes=K)
    k = np.arange(1, K + 1)
    want = np.sort(k * k * (iv(k, beta) / beta - sigma**2 / 2))[::-1]
    np.testing.assert_allclose(np.real(np.asarray(u.eigenvalues)), want, rtol=1e-10, atol=1e-12)
    assert not bool(u.stable)  # mode 1 grows below the threshold


def test_step_map_fixed_points_and_multiplier():
    """The IMEX map's multiplier at the uniform state is (1 + h g_1)/(1 + h sigma^2/2): +1 at sigma_c."""
    import jax

    beta, h = 1.5, 0.1
    f = density_step_map(param="sigma", beta=beta, sigma=1.0, num_modes=K, h=h)
    sc = sigma_c(beta, "usa")
    # The map and its Jacobian in one compiled program (called eagerly, f compiles every operation).
    f_and_jac = jax.jit(lambda x, p: (f(x, p), jax.jacfwd(f)(x, p)))
    for s in (0.8 * sc, sc, 1.2 * sc):
        value, jac = (np.asarray(a) for a in f_and_jac(np.zeros(K), s))
        g1 = iv(1, beta) / beta
        assert abs(jac[0, 0] - (1 + h * g1) / (1 + h * s * s / 2)) < 1e-13
        if s == sc:
            np.testing.assert_allclose(value, 0.0, atol=1e-17)
    with pytest.raises(UsageError, match="param"):
        density_step_map(param="gamma", beta=beta, sigma=1.0, num_modes=K)
    with pytest.raises(UsageError, match="h"):
        density_step_map(param="sigma", beta=beta, sigma=1.0, num_modes=K, h=0.0)


@pytest.mark.slow
def test_transition_type_on_the_circle():
    """USA: supercritical iff I_2(beta)/I_1(beta) < 1/2 (beta = 2: 0.433; beta = 3: 0.568).

    The clustered branch is continued in sigma from 0.8 sigma_c past the threshold: supercritical,
    it reaches the uniform state from below sigma_c (a fold there, at the uniform state, and no
    other); subcritical, it first passes sigma_c upwards to a fold above it, then comes back."""
    for beta, super_ in ((2.0, True), (3.0, False)):
        assert (iv(2, beta) / iv(1, beta) < 0.5) == super_
        sc = sigma_c(beta, "usa")
        st = stationary_density(np.exp(8 * np.cos(TH)), beta=beta, sigma=0.8 * sc, num_modes=24)
        assert float(st.order_parameter) > 0.5 and bool(st.stable)
        x0 = np.asarray(st.coefficients)[1:25]
        br = continue_density(
            x0, 0.8 * sc, 1.3 * sc, beta=beta, sigma=1.0, num_modes=24, ds=0.02 * sc, max_steps=300
        )
        folds = [b.param for b in br.bifurcations if b.kind == "fold"]
        assert br.status == "parameter_end" and folds, (br.status, folds)
        assert (max(folds) <= sc * (1 + 1e-5)) == super_, (beta, np.array(folds) / sc)


def test_thresholds_in_beta_are_the_modes_closed_forms():
    """Continued in beta at fixed sigma, the uniform density's branch points solve
    sigma^2 = 2 I_k(beta) / beta for k = 1 and 2 (brentq on scipy.special.iv)."""
    from scipy.optimize import brentq

    sigma = 1.2
    want = [brentq(lambda b, k=k: 2 * iv(k, b) / b - sigma**2, 0.5, 10.0) for k in (1, 2)]
    br = continue_density(np.zeros(20), 1.0, 3.0, param="beta", beta=3.0, sigma=sigma, num_modes=20, ds=0.05)
    got = sorted(b.param for b in br.bifurcations if b.kind == "branch-point")
    assert br.status == "parameter_end" and len(got) == 2, br.bifurcations
    assert max(abs(g - w) for g, w in zip(got, want)) < 1e-6, (got, want)
