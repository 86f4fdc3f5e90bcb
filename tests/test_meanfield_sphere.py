"""The S^2 mean-field (Fokker-Planck) solver against closed forms, s2fft and an independent basis.

Oracles: s2fft's own forward and inverse transforms (numpy method); the Funk-Hecke multipliers of
e^(beta <x, y>), 4 pi i_l(beta) (scipy's modified spherical Bessel ``spherical_in``); the linear
rate of each spherical harmonic at the uniform density, l (l + 1) (i_l(beta)/(beta Z) - sigma^2/2)
with Z = i_0(beta) for SA and 1 for USA (scipy, and `rankdyn.theory.uniform_mode_rate` at d = 3);
pure diffusion at beta = 0 (a start without degree 1 has zero field: degree l decays as
exp(-l (l + 1) sigma^2 t / 2)); the zonal model (Legendre polynomials from scipy, no s2fft) against
the full model on axisymmetric densities, at one right-hand side and along a trajectory
(diffrax Tsit5 on the zonal system); the mass to round-off; the nonlinear transport of SA and USA
in weak form, d/dt int p rho = int rho <grad p, X[rho]>, against a direct double sum of the field
over a Gauss-Legendre grid in NumPy.
"""

import math
import subprocess
import sys

import numpy as np
import pytest
from scipy.special import spherical_in

pytest.importorskip("s2fft")  # the test extra installs it (rankdyn[meanfield])

import equinox as eqx  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

from rankdyn import RESULTS, UsageError  # noqa: E402
from rankdyn._meanfield._sphere import sphere_model  # noqa: E402
from rankdyn._meanfield._sphere_kernel import kernel_multipliers  # noqa: E402
from rankdyn._meanfield._zonal import zonal_full, zonal_model  # noqa: E402
from rankdyn.meanfield import (  # noqa: E402
    solve_density,
    solve_sphere_density,
    sphere_band_limit,
    sphere_density_coefficients,
    sphere_density_values,
    sphere_grid,
    stationary_zonal_density,
    to_s2fft,
)
from rankdyn.theory import uniform_mode_rate  # noqa: E402

L = 16

# The tests' library calls, each under one compiled program per shape and band (eager, every op of
# every new shape compiles its own program); module-level, so tests that share a shape share it.
# ``band_limit`` and the models' band and dynamics are static, their beta and sigma traced.
_coefficients = eqx.filter_jit(sphere_density_coefficients)
_values = eqx.filter_jit(sphere_density_values)
_to_s2fft = jax.jit(to_s2fft)
_transport_and_rhs = eqx.filter_jit(lambda model, c: (model.transport(c), model.rhs(c)))
_zonal_rhs = eqx.filter_jit(lambda model, x: model.rhs(x))
_multipliers = jax.jit(kernel_multipliers, static_argnums=(1, 2, 3))


def _xyz(band):
    th, ph = sphere_grid(band)
    t, p = np.meshgrid(th, ph, indexing="ij")
    return np.sin(t) * np.cos(p), np.sin(t) * np.sin(p), np.cos(t)


def _uniform(band):
    c = np.zeros((2, band, band))
    c[0, 0, 0] = 1 / math.sqrt(4 * math.pi)
    return jnp.asarray(c)


def test_transforms_match_s2fft():
    import s2fft

    x, y, z = _xyz(12)
    f = np.exp(1.3 * x - 0.4 * y + 0.7 * z)
    c = _coefficients(f, 12)
    lm = np.asarray(_to_s2fft(c))
    # s2fft's NumPy recursions divide by zero at the poles' unused entries (harmless warnings).
    with np.errstate(all="ignore"):
        want = s2fft.forward(f, 12, sampling="gl", reality=True, method="numpy")
        back = s2fft.inverse(lm, 12, sampling="gl", reality=True, method="numpy")
    assert np.max(np.abs(lm - want)) < 1e-13
    assert np.max(np.abs(np.asarray(_values(c)) - back)) < 1e-13
    # A density of band 3 is reproduced on a finer grid.
    g = 1 + x * y - 0.5 * z
    c3 = _coefficients(g, 3)
    x2, y2, z2 = _xyz(7)
    np.testing.assert_allclose(_values(c3, 7), 1 + x2 * y2 - 0.5 * z2, atol=1e-13)


def test_funk_hecke_multipliers_and_band_limit():
    l = np.arange(24)
    for beta in (0.5, 3.0, 10.0):
        for dyn, scale in (("usa", 1.0), ("sa", math.exp(-beta))):
            lam, mu = _multipliers(jnp.asarray(beta), 24, dyn, jnp.float64)
            want = 4 * math.pi * spherical_in(l, beta) * scale
            # The quadrature sums terms of size e^|beta| that cancel: round-off of 1e-14 of the mass mode.
            np.testing.assert_allclose(lam, want, rtol=1e-12, atol=1e-13 * want[0])
            np.testing.assert_allclose(np.asarray(mu)[1:], want[1:] / beta, rtol=1e-12, atol=1e-13 * want[0])
        need = sphere_band_limit(beta)
        assert spherical_in(need - 1, beta) <= 1e-12 * spherical_in(0, beta) < spherical_in(need - 2, beta)


@pytest.mark.parametrize("dynamics", ["usa", "sa"])
def test_linear_rates_at_the_uniform_density(dynamics):
    """The Jacobian at 1/(4 pi) is diagonal in the harmonics, degree l at the closed-form rate."""
    beta, sigma, band = 3.0, 0.4, 10  # the rates hold at any band limit (no kernel truncation here)
    model = sphere_model(beta, sigma, band, dynamics)
    jac = jax.jit(jax.jacfwd(model.rhs))(_uniform(band)).reshape(2 * band * band, -1)
    l = np.broadcast_to(np.arange(band)[None, :, None], (2, band, band)).reshape(-1)
    m = np.broadcast_to(np.arange(band)[None, None, :], (2, band, band)).reshape(-1)
    part = np.repeat([0, 1], band * band)
    keep = (m <= l) & ~((part == 1) & (m == 0)) & (l > 0)
    z = spherical_in(0, beta) if dynamics == "sa" else 1.0
    rate = l * (l + 1) * (spherical_in(l, beta) / (beta * z) - sigma**2 / 2)
    jac = np.asarray(jac)[np.ix_(keep, keep)]
    np.testing.assert_allclose(np.diag(jac), rate[keep], rtol=1e-10, atol=1e-11)
    assert np.max(np.abs(jac - np.diag(np.diag(jac)))) < 1e-10
    deg = np.arange(1, band)
    theory = uniform_mode_rate(deg, beta, sigma, d=3, dynamics=dynamics)
    np.testing.assert_allclose(
        deg * (deg + 1) * (spherical_in(deg, beta) / (beta * z) - sigma**2 / 2), theory
    )


def test_zero_field_and_the_mass_mode():
    """beta = 0 and no degree 1: the field is zero, the transport vanishes; the mass never moves."""
    x, y, z = _xyz(L)
    c = np.array(_coefficients(1 + 0.3 * x * y + 0.2 * (3 * z * z - 1) + 0.1 * x * y * z, L))
    c[:, 1] = 0.0  # the quadrature leaves 1e-17 there
    for dyn in ("usa", "sa"):
        # Round-off only: the kernel's multipliers of degrees >= 2 at beta = 0 are quadrature sums of 0.
        assert np.max(np.abs(np.asarray(_transport_and_rhs(sphere_model(0.0, 0.5, L, dyn), c)[0]))) < 1e-14
        assert float(_transport_and_rhs(sphere_model(2.0, 0.5, L, dyn), c)[0][0, 0, 0]) == 0.0


def test_zonal_model_is_the_full_model_on_axisymmetric_densities():
    rng = np.random.default_rng(0)
    xs = jnp.asarray(rng.normal(size=L - 1) * 0.05 / np.arange(1, L) ** 2)
    c = np.zeros((2, L, L))
    c[0, :, 0] = np.asarray(jax.jit(zonal_full)(xs))
    for dyn in ("usa", "sa"):
        full = np.array(_transport_and_rhs(sphere_model(2.5, 0.3, L, dyn), c)[1])
        zonal = np.asarray(_zonal_rhs(zonal_model(2.5, 0.3, L, dyn), xs))
        # Round-off of products of size |rho Psi| ~ 2 (Psi ~ 4 pi i_0(2.5) / 2.5) through two transforms.
        assert np.max(np.abs(full[0, 1:, 0] - zonal)) < 1e-12, np.max(np.abs(full[0, 1:, 0] - zonal))
        full[0, :, 0] = 0.0
        assert np.max(np.abs(full)) < 1e-13


def test_bad_input_is_refused_before_compute():
    x, y, z = _xyz(L)
    good = 1 + 0.1 * z
    kw = dict(beta=2.0, sigma=0.5, t1=1.0, band_limit=L)
    for bad, match in (
        (dict(d=2), "d = 3"),
        (dict(d=4), "d = 3"),
        (dict(sigma=-0.1), "sigma"),
        (dict(sigma=float("nan")), "sigma"),
        (dict(band_limit=8), f"band_limit >= {sphere_band_limit(2.0)}"),
        (dict(band_limit=1), "band_limit must be an integer >= 2"),
    ):
        with pytest.raises(UsageError, match=match):
            solve_sphere_density(good, **{**kw, **bad})
    for rho, match in (
        (good - 1.5, "negative"),
        (np.zeros_like(good), "zero mass"),
        (np.where(z > 0, np.nan, good), "non-finite"),
        (good[:, :-1], "shape"),
        (np.ones((L, L)), "shape"),
    ):
        with pytest.raises(UsageError, match=match):
            solve_sphere_density(rho, **kw)
    with pytest.raises(UsageError, match="d = 3"):
        stationary_zonal_density(np.ones(L), beta=2.0, sigma=0.5, band_limit=L, d=2)
    with pytest.raises(UsageError, match="band_limit >="):
        stationary_zonal_density(np.ones(L), beta=20.0, sigma=0.5, band_limit=L)
    with pytest.raises(UsageError, match="shape"):
        stationary_zonal_density(np.ones(L - 1), beta=2.0, sigma=0.5, band_limit=L)
    # The circle's solver refuses d = 3 (its own check).
    with pytest.raises(UsageError, match="d = 2"):
        solve_density(np.ones(64), beta=1.0, sigma=0.5, t1=1.0, num_modes=16, d=3)


@pytest.mark.slow
def test_missing_s2fft_is_a_usage_error():
    """rankdyn imports without s2fft; the S^2 solver names the extra to install."""
    code = (
        "import sys; sys.modules['s2fft'] = None\n"
        "import numpy as np, rankdyn, rankdyn.meanfield as mf\n"
        "try:\n"
        "    mf.solve_sphere_density(np.ones((16, 31)), beta=1.0, sigma=0.5, t1=1.0, band_limit=16)\n"
        "except rankdyn.UsageError as e:\n"
        "    print('refused:', e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert 'pip install "rankdyn[meanfield]"' in out.stdout, out.stdout


@pytest.mark.slow
def test_heat_equation_zonal_trajectory_and_flags():
    """One compiled program (USA, L = 16, three saved times; beta and sigma are traced) serves:
    pure diffusion at beta = 0 against exp(-l (l + 1) sigma^2 t / 2); an axisymmetric start at
    beta = 2 against the zonal system integrated by Tsit5; the same start at sigma = 0.5, which
    clusters past band 16, flagged ``under_resolved``; a start that is negative after its
    band-limited projection (an indicator: Gibbs oscillations) flagged ``negative_density``."""
    import diffrax

    times = np.array([0.0, 0.5, 1.0])
    x, y, z = _xyz(L)
    kw = dict(t1=1.0, times=times, band_limit=L, rtol=1e-11)
    rho = 1 + 0.3 * x * y + 0.2 * (3 * z * z - 1) + 0.1 * x * y * z + 0.05 * z**4
    sigma = 0.7
    sol = solve_sphere_density(rho, beta=0.0, sigma=sigma, **kw)
    assert sol.result == RESULTS.successful
    c = np.asarray(sol.coefficients)
    lap = np.arange(L) * (np.arange(L) + 1.0)
    decay = np.exp(-0.5 * sigma**2 * lap[None, :, None] * times[:, None, None, None])
    np.testing.assert_allclose(c, c[:1] * np.moveaxis(decay, 0, 0), atol=1e-11)
    assert np.max(np.abs(np.asarray(sol.mass) - float(sol.mass[0]))) < 1e-15

    # sigma = 1 > sigma_c = 0.987: at sigma = 0.5 this start sharpens past band 16 by t = 1 (its
    # degree-15 share reaches 1e-7, the same at band 32: under_resolved, rightly).
    zon = 1 + 0.4 * z + 0.3 * z**2 - 0.1 * z**3
    sol = solve_sphere_density(zon, beta=2.0, sigma=1.0, **kw)
    assert sol.result == RESULTS.successful
    model = zonal_model(2.0, 1.0, L, "usa")
    x0 = jnp.asarray(np.asarray(sol.coefficients)[0, 0, 1:, 0])
    ref = diffrax.diffeqsolve(
        diffrax.ODETerm(lambda t, u, a: model.rhs(u)),
        diffrax.Tsit5(),
        0.0,
        1.0,
        None,
        x0,
        saveat=diffrax.SaveAt(ts=jnp.asarray(times)),
        stepsize_controller=diffrax.PIDController(rtol=1e-12, atol=1e-14),
    ).ys
    got = np.asarray(sol.coefficients)
    np.testing.assert_allclose(got[:, 0, 1:, 0], ref, atol=1e-9)
    assert np.max(np.abs(got[:, :, :, 1:])) < 1e-12  # it stays axisymmetric
    assert np.max(np.abs(np.asarray(sol.mass) - float(sol.mass[0]))) < 1e-15

    sol = solve_sphere_density(zon, beta=2.0, sigma=0.5, **kw)
    assert sol.result == RESULTS.under_resolved and float(sol.tail[-1]) > 1e-10

    cap = np.where(z > 0.5, 1.0, 0.0)
    sol = solve_sphere_density(cap, beta=2.0, sigma=0.5, **kw)
    assert sol.result == RESULTS.negative_density and float(sol.min_density[0]) < 0


@pytest.mark.slow  # the transforms at two bands and both transports
def test_weak_form_against_a_direct_double_sum():
    """d/dt int p rho dS = int rho <grad p, X[rho]> dS for polynomials p (integration by parts; X is
    tangent, so the ambient gradient serves), with X by a direct double sum over a Gauss-Legendre
    grid in NumPy: P_x sum_j W_j e^(beta <x, x_j>) x_j rho_j (USA), divided by
    sum_j W_j e^(beta <x, x_j>) rho_j (SA). The mean-field limit of FlowField (USA divides by n)."""
    beta, band, fine = 1.5, 16, 28
    th, ph = sphere_grid(fine)
    w_theta = np.polynomial.legendre.leggauss(fine)[1][::-1]  # s2fft's colatitudes ascend: cos descends
    assert np.allclose(np.cos(th), np.polynomial.legendre.leggauss(fine)[0][::-1])
    x, y, z = (a.reshape(-1) for a in _xyz(fine))
    pts = np.stack([x, y, z], -1)
    wts = np.repeat(w_theta, ph.size) * 2 * math.pi / ph.size
    rho = 1 + 0.3 * x + 0.2 * z * z - 0.25 * x * y + 0.1 * y
    kern = np.exp(beta * pts @ pts.T) * (wts * rho)[None, :]
    polys = {  # p and its ambient gradient
        "z": (z, np.stack([0 * x, 0 * x, 1 + 0 * x], -1)),
        "x": (x, np.stack([1 + 0 * x, 0 * x, 0 * x], -1)),
        "xy": (x * y, np.stack([y, x, 0 * x], -1)),
        "z^2": (z * z, np.stack([0 * x, 0 * x, 2 * z], -1)),
    }
    xs, ys, zs = _xyz(band)
    c = _coefficients(1 + 0.3 * xs + 0.2 * zs * zs - 0.25 * xs * ys + 0.1 * ys, band)
    parseval = np.where(np.arange(band) == 0, 1.0, 2.0)[None, None, :]
    for dyn in ("usa", "sa"):
        v = kern @ pts
        if dyn == "sa":
            v = v / kern.sum(1)[:, None]
        field = v - np.sum(v * pts, -1, keepdims=True) * pts
        rate = np.asarray(_transport_and_rhs(sphere_model(beta, 0.0, band, dyn), c)[0])
        for name, (p, grad) in polys.items():
            want = np.sum(wts * rho * np.sum(grad * field, -1))
            pb = {"z": zs, "x": xs, "xy": xs * ys, "z^2": zs * zs}[name]
            cp = np.asarray(_coefficients(pb, band))
            got = np.sum(cp * rate * parseval)
            assert abs(got - want) < 1e-11 * (1 + abs(want)), (dyn, name, got, want)
