"""The circle's mean-field (Fokker-Planck) solver against closed forms and a NumPy RK4 oracle.

Oracles: the linear rate of mode k at the uniform density, k^2 (I_k(beta)/beta - sigma^2/2) (USA)
and k^2 (I_k(beta)/(beta I_0(beta)) - sigma^2/2) (SA), from scipy.special.iv; pure diffusion at
beta = 0 (a start without mode 1 has zero velocity, so mode k decays as exp(-sigma^2 k^2 t/2));
a fixed-step RK4 of the same Galerkin system in NumPy (USA by direct convolution sums of the
Fourier coefficients, no FFT; SA by its grid quotient); the mass to the last bit. Every solve here
has the same shapes (K = 16, four starts, three saved times), so each dynamics compiles once.
"""

import math

import equinox as eqx
import numpy as np
import pytest
from helpers import jit_call
from scipy.special import iv

from rankdyn import RESULTS, SolveError, UsageError
from rankdyn.meanfield import density_coefficients, density_values, solve_density

K, N = 16, 64
TH = 2 * np.pi * np.arange(N) / N
TIMES = np.array([0.0, 0.5, 1.0])

# The tests' library calls, each under one compiled program per shape (eager, every op of every
# new shape compiles its own program); ``num_modes`` / ``num_points`` are static.
_coefficients = eqx.filter_jit(density_coefficients)
_values = eqx.filter_jit(density_values)


def _solve(rho, beta, sigma, dynamics, rtol=1e-11, throw=False):
    return solve_density(
        rho,
        beta=beta,
        sigma=sigma,
        t1=1.0,
        times=TIMES,
        dynamics=dynamics,
        num_modes=K,
        rtol=rtol,
        throw=throw,
    )


def _rate(k, beta, sigma, dynamics):
    z = iv(0, beta) if dynamics == "sa" else 1.0
    return k * k * (iv(k, beta) / (beta * z) - sigma**2 / 2)


def _oracle_rhs(c, beta, sigma, dynamics):
    """The same Galerkin system in NumPy: USA by convolution sums, SA on the padded grid."""
    a, b = c[: K + 1], c[K + 1 :]
    k = np.arange(-K, K + 1)
    # hat rho_k for k = -K..K.
    pos = np.concatenate([[a[0]], (a[1:] - 1j * b) / 2])
    rho = np.concatenate([np.conj(pos[1:])[::-1], pos])
    kk = np.abs(k)
    scale = np.exp(-beta) if dynamics == "sa" else 1.0
    h_hat = 2 * np.pi * 1j * k * iv(kk, beta) / beta * scale
    if dynamics == "usa":
        u = h_hat * rho
        flux = np.convolve(rho, u)[K : 3 * K + 1]  # sum_j rho_j u_(m-j), m = -K..K
    else:
        m = 3 * K + 2
        grid = np.exp(1j * np.outer(2 * np.pi * np.arange(m) / m, k))
        e_hat = 2 * np.pi * iv(kk, beta) * scale
        vel = np.real(grid @ (h_hat * rho)) / np.real(grid @ (e_hat * rho))
        f = np.fft.fft(np.real(grid @ rho) * vel) / m
        flux = np.concatenate([f[-K:], f[: K + 1]])
    d = -1j * k * flux - sigma**2 / 2 * k * k * rho
    dpos = d[K:]
    return np.concatenate([[0.0], 2 * dpos[1:].real, -2 * dpos[1:].imag])


def _rk4(c, beta, sigma, dynamics, t1, dt=1e-3):
    for _ in range(round(t1 / dt)):
        k1 = _oracle_rhs(c, beta, sigma, dynamics)
        k2 = _oracle_rhs(c + dt / 2 * k1, beta, sigma, dynamics)
        k3 = _oracle_rhs(c + dt / 2 * k2, beta, sigma, dynamics)
        k4 = _oracle_rhs(c + dt * k3, beta, sigma, dynamics)
        c = c + dt / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
    return c


@pytest.mark.parametrize("dynamics", ["usa", pytest.param("sa", marks=pytest.mark.slow)])
def test_linear_rates_mass_and_uniform(dynamics):
    beta, sigma, eps = 1.5, 0.8 if dynamics == "usa" else 0.5, 1e-4
    starts = np.stack(
        [np.ones(N)] + [1 + eps * np.cos(k * TH + 0.3 * k) for k in (1, 2, 3)]
    )  # uniform, then modes 1, 2, 3 (cosine and sine parts)
    sol = _solve(starts, beta, sigma, dynamics)
    assert np.all(np.asarray(sol.result == RESULTS.successful))
    c = np.asarray(sol.coefficients)
    # Mass: a_0 never changes, to the last bit.
    assert np.all(c[:, :, 0] == c[:, :1, 0]) and np.allclose(np.asarray(sol.mass), 1.0, rtol=0, atol=1e-15)
    # The uniform density is stationary; a single mode couples to others only at O(eps^2), so its
    # rate is the linear one to O(eps^2) = 1e-8.
    assert np.max(np.abs(c[0, :, 1:])) < 1e-16
    for i, k in enumerate((1, 2, 3), start=1):
        amp = np.hypot(c[i, :, k], c[i, :, K + k])
        got = np.log(amp[-1] / amp[0]) / TIMES[-1]
        assert abs(got - _rate(k, beta, sigma, dynamics)) < 1e-6, (k, got, _rate(k, beta, sigma, dynamics))
    # Same program for the RK4 oracle: finite amplitudes, every mode coupled.
    big = np.stack([1 + 0.5 * np.cos(TH) + 0.3 * np.sin(2 * TH) + 0.1 * np.cos(5 * TH - 1)] * 4)
    sol = _solve(big, 2.0, 0.6, dynamics)
    c0 = np.asarray(_coefficients(big[0] / (big[0].mean() * 2 * np.pi), K))
    want = _rk4(c0, 2.0, 0.6, dynamics, 1.0)
    assert np.max(np.abs(np.asarray(sol.coefficients)[0, -1] - want)) < 1e-10


def test_pure_diffusion_at_zero_beta():
    """Without mode 1 the velocity vanishes at beta = 0: mode k decays as exp(-sigma^2 k^2 t / 2)."""
    sigma = 0.7
    starts = np.stack([1 + 0.4 * np.cos(k * TH) + 0.2 * np.sin((k + 1) * TH) for k in (2, 3, 4, 5)])
    sol = _solve(starts, 0.0, sigma, "usa")
    c = np.asarray(sol.coefficients)
    for i, k in enumerate((2, 3, 4, 5)):
        for kk, col in ((k, k), (k + 1, K + k + 1)):
            want = c[i, 0, col] * np.exp(-(sigma**2) * kk * kk * TIMES / 2)
            np.testing.assert_allclose(c[i, :, col], want, rtol=1e-8, atol=1e-14)
        assert np.max(np.abs(c[i, :, 1])) < 1e-15  # mode 1 is never created


def test_flags_negative_and_under_resolved():
    box = np.where(np.abs(TH - np.pi) < 0.3, 1.0, 0.0)  # truncated to 16 modes: Gibbs undershoot
    fine = 1 + 1e-6 * np.cos(K * TH)  # positive, top mode at 1e-6 of the norm
    smooth = np.exp(np.cos(TH))
    # sigma = 2 is above the threshold: the smooth start relaxes to the uniform density.
    sol = _solve(np.stack([box, fine, np.ones(N), smooth]), 1.5, 2.0, "usa")
    want = [RESULTS.negative_density, RESULTS.under_resolved, RESULTS.successful, RESULTS.successful]
    assert [bool(np.asarray(sol.result == w)[i]) for i, w in enumerate(want)] == [True] * 4
    assert float(sol.min_density[0, 0]) < 0 and float(sol.tail[1, 0]) > 1e-7
    with pytest.raises(SolveError, match="2 of 4 trajectories"):
        _solve(np.stack([box, fine, np.ones(N), smooth]), 1.5, 2.0, "usa", throw=True)
    # The grid values and the coefficients are inverse maps on band-limited densities.
    c = _coefficients(smooth / (2 * math.pi * smooth.mean()), K)
    np.testing.assert_allclose(np.asarray(_values(c, N)), smooth / (2 * math.pi * smooth.mean()), rtol=1e-12)


def test_refusals_before_compute():
    ok = dict(beta=1.0, sigma=0.5, t1=1.0, num_modes=K)
    rho = np.ones(N)
    cases = [
        (dict(sigma=-0.1), "sigma"),
        (dict(sigma=float("nan")), "sigma"),
        (dict(d=3), "d = 2"),
        (dict(beta=30.0), "num_modes >= 44"),
        (dict(num_modes=0), "num_modes"),
    ]
    for change, match in cases:
        with pytest.raises(UsageError, match=match):
            solve_density(rho, **{**ok, **change})
    for bad, match in [
        (rho - 2, "negative"),
        (np.zeros(N), "normalisable"),
        (np.full(N, np.nan), "normalisable"),
        (np.ones(2 * K), "shape"),
        (np.ones((2, 2, N)), "shape"),
    ]:
        with pytest.raises(UsageError, match=match):
            solve_density(bad, **ok)


_density_velocity = eqx.filter_jit(lambda model, c, theta: model.velocity(c, theta))


@pytest.mark.slow
def test_velocity_is_the_particle_flows_limit():
    """The density's velocity is rankdyn's flow field (complete mask, d = 2, USA divided by n) for
    n particles at the quantiles of rho: their empirical measure integrates smooth functions to O(n^-2)."""
    import jax.numpy as jnp

    from rankdyn.flow import FlowField
    from rankdyn.meanfield import CircleDensityModel

    n, beta = 1000, 1.7
    fine = 2 * np.pi * np.arange(20000) / 20000
    rho = np.exp(0.8 * np.cos(fine - 1.0)) + 0.3 * np.exp(np.cos(2 * fine))
    cdf = (np.cumsum(rho) - rho / 2) / rho.sum()  # at the grid points, to O(h^2)
    theta = np.interp((np.arange(n) + 0.5) / n, cdf, fine)
    x = np.stack([np.cos(theta), np.sin(theta)], 1)
    c = _coefficients(rho / (rho.mean() * 2 * np.pi), 40)
    for dynamics in ("usa", "sa"):
        v = np.asarray(jit_call(FlowField(np.ones((n, n), bool), 2, dynamics), jnp.asarray(x), beta))
        angular = -x[:, 1] * v[:, 0] + x[:, 0] * v[:, 1]  # <v, e_theta>
        model = CircleDensityModel(jnp.asarray(beta), jnp.asarray(0.0), 40, dynamics)
        u = np.asarray(_density_velocity(model, c, theta))
        assert np.max(np.abs(angular - u)) < 1e-5 * np.max(np.abs(u)), dynamics
