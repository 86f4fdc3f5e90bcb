"""Stationary zonal densities on S^2, their stability and their branches, against closed forms (d = 3).

Oracles: the uniform state's threshold sigma_c^2 = 2 i_1(beta) / beta (USA) and that divided by
i_0(beta) (SA), `rankdyn.theory.critical_noise(beta, d=3)` (i_l the modified spherical Bessel
functions, scipy ``spherical_in``); the branch points in beta at fixed sigma, where
sigma^2 = 2 i_l(beta) / beta (brentq); the eigenvalues at the uniform state, the rates
l (l + 1) (i_l(beta) / beta - sigma^2 / 2); a USA stationary density is a Gibbs state of its own
potential, rho = exp(2 Phi / (beta sigma^2)) / Z with Phi the Funk-Hecke sum 4 pi i_l(beta) f_l Y_l0
(NumPy on the Gauss-Legendre nodes); the transition's type, `rankdyn.theory.transition_type(beta, d=3)`:
continuous below beta* (I_{5/2}/I_{3/2} = 1/3, beta* = 1.816), discontinuous above.
"""

import math

import numpy as np
import pytest
from scipy.optimize import brentq
from scipy.special import eval_legendre, spherical_in

from rankdyn import RESULTS, UsageError
from rankdyn.meanfield import continue_zonal_density, stationary_zonal_density, zonal_step_map
from rankdyn.theory import critical_noise, transition_beta, transition_type

L = 16
T, W = np.polynomial.legendre.leggauss(64)


@pytest.mark.slow
@pytest.mark.parametrize("dynamics", ["usa", "sa"])
def test_threshold_located_by_continuation(dynamics):
    beta = 2.0
    sc = critical_noise(beta, d=3, dynamics=dynamics)
    z = spherical_in(0, beta) if dynamics == "sa" else 1.0
    assert abs(sc - math.sqrt(2 * spherical_in(1, beta) / (beta * z))) < 1e-14
    br = continue_zonal_density(
        np.zeros(L - 1),
        0.9 * sc,
        1.1 * sc,
        beta=beta,
        sigma=1.0,
        dynamics=dynamics,
        band_limit=L,
        ds=0.05 * sc,
    )
    assert br.status == "parameter_end"
    assert [b.kind for b in br.bifurcations] == ["branch-point"], br.bifurcations
    assert abs(br.bifurcations[0].param - sc) < 1e-6, (br.bifurcations[0].param, sc)
    assert not br.stable[0] and br.stable[-1]
    if dynamics == "usa":
        # The branch point's normal form agrees with the statement: beta = 2 > beta* = 1.816.
        assert transition_type(beta, d=3) == "discontinuous"
        assert br.bifurcations[0].criticality == "subcritical", br.bifurcations[0]


def test_step_map_multiplier_and_refusals():
    """At the uniform state the IMEX map's multiplier of degree 1 is (1 + h g_1)/(1 + h sigma^2),
    g_1 = 2 i_1(beta)/beta: +1 exactly at sigma_c."""
    import jax

    beta, h = 1.5, 0.1
    f = zonal_step_map(param="sigma", beta=beta, sigma=1.0, band_limit=L, h=h)
    sc = critical_noise(beta, d=3)
    # The map and its Jacobian in one compiled program (called eagerly, f compiles every operation).
    f_and_jac = jax.jit(lambda x, p: (f(x, p), jax.jacfwd(f)(x, p)))
    g1 = 2 * spherical_in(1, beta) / beta
    for s in (0.8 * sc, sc):
        value, jac = (np.asarray(a) for a in f_and_jac(np.zeros(L - 1), s))
        assert abs(jac[0, 0] - (1 + h * g1) / (1 + h * s * s)) < 1e-13
    # Round-off of the constant rho Psi through the transforms (Psi ~ 4 pi i_0(1.5) / 1.5).
    np.testing.assert_allclose(value, 0.0, atol=1e-14)
    with pytest.raises(UsageError, match="param"):
        zonal_step_map(param="gamma", beta=beta, sigma=1.0, band_limit=L)
    with pytest.raises(UsageError, match="h"):
        zonal_step_map(param="sigma", beta=beta, sigma=1.0, band_limit=L, h=-1.0)
    with pytest.raises(UsageError, match="d = 3"):
        zonal_step_map(param="sigma", beta=beta, sigma=1.0, band_limit=L, d=2)
    with pytest.raises(UsageError, match="x_start"):
        continue_zonal_density(np.zeros(L), 0.5, 1.0, beta=beta, sigma=1.0, band_limit=L)


@pytest.mark.slow
def test_stationary_density_is_a_gibbs_state_and_uniform_rates():
    # The cluster (order parameter 0.92) has coefficients falling like 0.4^l: at band 40 the top
    # degrees carry 1e-10 of the norm, at 48 about 1e-12 (the transforms' round-off floor of the
    # high degrees is 3e-13: l (l + 1) times the products' rounding, divided by the diffusion).
    beta, band = 2.0, 48
    sigma = 0.8 * critical_noise(beta, d=3)
    st = stationary_zonal_density(np.exp(6 * T), beta=beta, sigma=sigma, band_limit=band)
    assert bool(st.result == RESULTS.successful) and bool(st.stable) and float(st.order_parameter) > 0.9
    assert float(st.tail) < 1e-11
    f = np.asarray(st.coefficients)
    l = np.arange(band)
    y = np.sqrt((2 * l[:, None] + 1) / (4 * math.pi)) * eval_legendre(l[:, None], T[None, :])
    rho = f @ y
    phi = (4 * math.pi * spherical_in(l, beta) * f) @ y
    gibbs = np.exp(2 * phi / (beta * sigma**2))
    gibbs /= 2 * math.pi * (W @ gibbs)
    assert np.max(np.abs(rho - gibbs)) < 1e-10 * rho.max(), np.max(np.abs(rho - gibbs)) / rho.max()
    np.testing.assert_allclose(np.asarray(st.density(T)), rho, atol=1e-13)
    # At the uniform density the eigenvalues are the closed-form rates of degrees 1..L-1.
    u = stationary_zonal_density(np.ones(64), beta=beta, sigma=sigma, band_limit=L)
    k = np.arange(1, L)
    want = np.sort(k * (k + 1) * (spherical_in(k, beta) / beta - sigma**2 / 2))[::-1]
    np.testing.assert_allclose(np.real(np.asarray(u.eigenvalues)), want, rtol=1e-10, atol=1e-12)
    assert not bool(u.stable)


@pytest.mark.slow
def test_thresholds_in_beta():
    """Continued in beta at fixed sigma, the uniform state's branch points solve
    sigma^2 = 2 i_l(beta) / beta (l (l + 1) i_l / beta = l (l + 1) sigma^2 / 2): at sigma = 0.9 the
    degrees 1 to 5 cross in beta in [1, 6] (1.41, 3.14, 4.17, 5.07, 5.91), each once."""
    sigma = 0.9
    want = [brentq(lambda b, k=k: 2 * spherical_in(k, b) / b - sigma**2, 0.5, 12.0) for k in range(1, 8)]
    want = [w for w in want if 1.0 < w < 6.0]
    assert len(want) == 5
    band = 24  # enough for beta = 6 (sphere_band_limit)
    br = continue_zonal_density(
        np.zeros(band - 1), 1.0, 6.0, param="beta", beta=6.0, sigma=sigma, band_limit=band, ds=0.1
    )
    got = sorted(b.param for b in br.bifurcations if b.kind == "branch-point")
    assert br.status == "parameter_end" and len(got) == len(want), br.bifurcations
    assert max(abs(g - w) for g, w in zip(got, want)) < 1e-6, (got, want)


@pytest.mark.slow
def test_transition_type_on_the_sphere():
    """USA, d = 3: continuous iff I_{5/2}(beta)/I_{3/2}(beta) < 1/3 (beta* = 1.816).

    The clustered branch is continued in sigma from 0.8 sigma_c past the threshold: continuous, it
    reaches the uniform state from below sigma_c (its folds at or below sigma_c); discontinuous, it
    first passes sigma_c upwards to a fold above it, then comes back."""
    assert abs(transition_beta(3) - 1.8161545254358837) < 1e-9
    for beta, continuous in ((1.2, True), (3.0, False)):
        assert (transition_type(beta, d=3) == "continuous") == continuous
        sc = critical_noise(beta, d=3)
        band = 24
        st = stationary_zonal_density(np.exp(8 * T), beta=beta, sigma=0.8 * sc, band_limit=band)
        assert float(st.order_parameter) > 0.3 and bool(st.stable)
        br = continue_zonal_density(
            np.asarray(st.coefficients)[1:],
            0.8 * sc,
            1.3 * sc,
            beta=beta,
            sigma=1.0,
            band_limit=band,
            ds=0.02 * sc,
            max_steps=300,
        )
        folds = [b.param for b in br.bifurcations if b.kind == "fold"]
        assert br.status == "parameter_end" and folds, (br.status, folds)
        assert (max(folds) <= sc * (1 + 1e-5)) == continuous, (beta, np.array(folds) / sc)
