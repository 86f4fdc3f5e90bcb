"""The noisy uniform state's Bessel closed forms (rankdyn/_theory/_noisy_uniform.py) against a direct
linearisation: a finite-difference Jacobian of a NumPy Fourier-Galerkin right-hand side of the
Fokker-Planck equation on S^1, the field of `rankdyn.flow.FlowField` itself, and quadrature on S^(d-1)."""

import equinox as eqx
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import integrate, special

import rankdyn
from rankdyn.flow import FlowField
from rankdyn.theory import (
    critical_noise,
    transition_beta,
    transition_type,
    uniform_mode_gain,
    uniform_mode_rate,
)

M = 128  # collocation points on the circle (the kernel e^(beta cos) is resolved to round-off)
THETA = 2 * np.pi * np.arange(M) / M


def _fokker_planck_rhs(rho, beta, sigma, dynamics):
    """d rho / dt = -d/dtheta(rho v[rho]) + sigma^2/2 rho'' on the grid (rho a density in dtheta)."""
    diff = THETA[None, :] - THETA[:, None]  # [i, j] = theta_j - theta_i
    kern = np.exp(beta * np.cos(diff)) * rho[None, :] * (2 * np.pi / M)
    v = np.sum(kern * np.sin(diff), axis=1)
    if dynamics == "sa":
        v = v / np.sum(kern, axis=1)
    k = np.fft.fftfreq(M, 1 / M)
    flux = np.fft.fft(rho * v)
    return np.real(np.fft.ifft(-1j * k * flux - sigma**2 / 2 * k**2 * np.fft.fft(rho)))


@pytest.mark.parametrize("dynamics", ["usa", "sa"])
def test_growth_rate_is_the_jacobian_of_the_fokker_planck_equation(dynamics):
    # A wrong Bessel order, a missing I_0 for SA or a sigma^2 instead of sigma^2/2 all fail here.
    rho0 = np.full(M, 1 / (2 * np.pi))
    eps = 1e-6
    for beta, sigma in ((0.7, 0.3), (3.0, 1.1)):
        for k in (1, 2, 3):
            mode = np.cos(k * THETA)
            jac = (
                _fokker_planck_rhs(rho0 + eps * mode, beta, sigma, dynamics)
                - _fokker_planck_rhs(rho0 - eps * mode, beta, sigma, dynamics)
            ) / (2 * eps)
            rate = jac @ mode / (mode @ mode)
            # the mode is an eigenvector: nothing leaks into the others
            assert np.max(np.abs(jac - rate * mode)) < 1e-7
            want = uniform_mode_rate(k, beta, sigma, d=2, dynamics=dynamics)
            assert abs(rate - want) < 1e-8 * max(1, abs(want))


def test_growth_rate_matches_the_flow_fields_own_normalisation():
    # Equally spaced tokens displaced by xi(theta) = eps sin(k theta): the density mode -k eps cos(k
    # theta)/(2 pi) grows at lambda_k (sigma = 0), so FlowField's velocity is lambda_k xi. This ties the
    # rate's 1/n (USA) and softmax (SA) conventions to rankdyn's own field.
    n, eps = 96, 1e-5
    base = 2 * np.pi * np.arange(n) / n
    for dynamics in ("usa", "sa"):
        field = eqx.filter_jit(FlowField(np.ones((n, n), bool), 2, dynamics))  # one compile per dynamics
        for beta, k in ((1.3, 1), (1.3, 2), (4.0, 3)):
            vel = []
            for sgn in (1, -1):
                th = base + sgn * eps * np.sin(k * base)
                x = jnp.asarray(np.stack([np.cos(th), np.sin(th)], 1))
                v = np.asarray(field(x, jnp.asarray(beta)))
                vel.append(-v[:, 0] * np.sin(th) + v[:, 1] * np.cos(th))  # angular velocity
            dvel = (vel[0] - vel[1]) / (2 * eps)
            want = uniform_mode_rate(k, beta, 0.0, d=2, dynamics=dynamics)
            assert np.max(np.abs(dvel - want * np.sin(k * base))) < 1e-7 * max(1, abs(want))


def test_funk_hecke_gain_on_higher_spheres_by_quadrature():
    # kappa_k = E[e^(beta t) C_k(t) / C_k(1)] with t = <x, y> of density ~ (1 - t^2)^((d - 3)/2).
    for d in (3, 4, 7):
        lam = d / 2 - 1
        w = lambda t: (1 - t * t) ** ((d - 3) / 2)  # noqa: E731
        norm = integrate.quad(w, -1, 1)[0]
        for beta in (0.5, 2.0, 9.0):
            kap = [
                integrate.quad(
                    lambda t, k=k: (
                        np.exp(beta * t)
                        * special.eval_gegenbauer(k, lam, t)
                        / special.eval_gegenbauer(k, lam, 1.0)
                        * w(t)
                    ),
                    -1,
                    1,
                    epsabs=0,
                    epsrel=1e-12,
                )[0]
                / norm
                for k in (0, 1, 2)
            ]
            for k in (1, 2):
                assert uniform_mode_gain(k, beta, d=d) == pytest.approx(kap[k] / beta, rel=1e-10)
                assert uniform_mode_gain(k, beta, d=d, dynamics="sa") == pytest.approx(
                    kap[k] / (beta * kap[0]), rel=1e-10
                )
            # the mode-1 threshold, sigma^2 = 2^(d/2) Gamma(d/2) I_(d/2) / beta^(d/2)
            want = 2 ** (d / 2) * special.gamma(d / 2) * special.iv(d / 2, beta) / beta ** (d / 2)
            assert critical_noise(beta, d=d) ** 2 == pytest.approx(want, rel=1e-12)
            assert uniform_mode_rate(1, beta, critical_noise(beta, d=d), d=d) == pytest.approx(0, abs=1e-12)


def test_noisy_kuramoto_limit():
    # The survey (arXiv 2512.01868, section "Noisy Transformers") writes the noise as sqrt(2/kappa) dW
    # and states the noisy Kuramoto model (beta = 0) bifurcates at kappa = 2: sigma_c^2 = 2/kappa -> 1.
    assert 2 / critical_noise(1e-8) ** 2 == pytest.approx(2.0, rel=1e-12)
    assert 2 / critical_noise(1e-8, dynamics="sa") ** 2 == pytest.approx(2.0, rel=1e-12)


def test_large_beta_does_not_overflow_and_arrays_broadcast():
    g = uniform_mode_gain(np.array([1, 2, 3]), 700.0)
    assert np.all(np.isfinite(g)) and np.all(np.diff(g) < 0)
    assert g[0] == pytest.approx(special.iv(1, 700.0) / 700, rel=1e-12)
    # SA at beta = 2000, where I_k itself overflows: I_k / I_0 ~ 1 - k^2 / (2 beta), gain ~ that / beta
    sa = uniform_mode_gain(np.array([1, 2]), 2000.0, dynamics="sa")
    assert sa == pytest.approx((1 - np.array([1, 4]) / 4000) / 2000, rel=1e-6)
    s = critical_noise(np.array([0.5, 1.0, 2.0]), d=3)
    assert s.shape == (3,) and np.all(np.diff(s) > 0)


def test_transition_beta_and_type():
    for d in (2, 3, 5):
        b = transition_beta(d)
        assert special.iv(d / 2 + 1, b) / special.iv(d / 2, b) == pytest.approx(1 / d, rel=1e-12)
        assert transition_type(0.99 * b, d=d) == "continuous"
        assert transition_type(1.01 * b, d=d) == "discontinuous"
    # the circle's statement: supercritical iff I_2/I_1 < 1/2
    assert transition_beta(2) == pytest.approx(2.4469183112890, rel=1e-10)


def test_refusals():
    for call in (
        lambda: uniform_mode_gain(0, 1.0),
        lambda: uniform_mode_gain(1.5, 1.0),
        lambda: uniform_mode_gain(1, -1.0),
        lambda: uniform_mode_gain(1, 1.0, d=1),
        lambda: uniform_mode_gain(1, 1.0, dynamics="softmax"),
        lambda: uniform_mode_rate(1, 1.0, -0.1),
        lambda: uniform_mode_rate(1, 1.0, np.nan),
        lambda: transition_beta(1),
        lambda: transition_type(np.array([1.0, 2.0])),
    ):
        with pytest.raises(rankdyn.UsageError):
            call()
