"""The $S^2$ solvers' argument checks: each refusal a `UsageError` before any compute.

The dimension ($d = 3$ only), the band limit (at least `sphere_band_limit`, named in the message),
the initial density on the Gauss-Legendre grid (shape, finite, non-negative, positive mass), and the
optional dependency s2fft (the message names ``pip install "rankdyn[meanfield]"``).
"""

from __future__ import annotations

import math

import numpy as np

from .._errors import UsageError
from ._sphere_kernel import SPHERE_KERNEL_EPS, gauss_legendre, sphere_band_limit

__all__ = ["check_sphere_dimension", "check_band_limit", "check_sphere_density", "check_zonal_density"]


def check_sphere_dimension(d) -> int:
    """The sphere solver's dimension: $d = 3$ ($S^2$) only."""
    if isinstance(d, bool) or not isinstance(d, (int, np.integer)) or d != 3:
        raise UsageError(
            f"the S^2 solver needs d = 3 (tokens on S^2), got d = {d!r}; for d = 2 use the circle's "
            "solve_density / stationary_density; S^(d-1) for d >= 4 is not available."
        )
    return 3


def check_band_limit(band_limit, beta: float) -> int:
    """``band_limit`` an integer at least what the kernel needs (`sphere_band_limit`)."""
    if isinstance(band_limit, bool) or not isinstance(band_limit, (int, np.integer)) or band_limit < 2:
        raise UsageError(f"band_limit must be an integer >= 2 (degrees 0..L-1), got {band_limit!r}.")
    need = sphere_band_limit(beta)
    if band_limit < need:
        raise UsageError(
            f"band_limit = {band_limit} is too low for the kernel e^(beta <x, y>) at beta = {beta:g}: its "
            f"relative Legendre coefficient i_l(beta)/i_0(beta) at the top degree l = L - 1 is above "
            f"{SPHERE_KERNEL_EPS:g}; pass band_limit >= {need}."
        )
    return int(band_limit)


def _finite_nonnegative(arr: np.ndarray, name: str) -> None:
    if not np.all(np.isfinite(arr)):
        raise UsageError(f"{name} has non-finite values (NaN or inf): it is not normalisable.")
    if np.any(arr < 0):
        raise UsageError(f"{name} is negative somewhere (min {arr.min():.3g}): a density is >= 0.")


def check_sphere_density(rho, band_limit: int, name: str = "rho0") -> tuple[np.ndarray, bool]:
    r"""Grid values ``(L, 2L - 1)`` or ``(batch, L, 2L - 1)`` on `sphere_grid`(L): finite, non-negative,
    with positive mass. Returns them normalised to $\int\rho\,dS = 1$ (as ``(batch, L, 2L - 1)``,
    the mass by the grid's Gauss-Legendre rule) and whether a batch axis was given."""
    arr = np.asarray(rho)
    shape = (band_limit, 2 * band_limit - 1)
    if arr.dtype.kind not in "fiu" or arr.ndim not in (2, 3) or arr.shape[-2:] != shape:
        raise UsageError(
            f"{name} must be real values of shape {shape} or (batch, {shape[0]}, {shape[1]}) on "
            f"sphere_grid({band_limit}) (Gauss-Legendre colatitudes, 2L - 1 longitudes), got shape "
            f"{arr.shape} ({arr.dtype})."
        )
    arr = arr.astype(np.float64)
    batched = arr.ndim == 3
    arr = arr.reshape(-1, *shape)
    _finite_nonnegative(arr, name)
    _, w = gauss_legendre(band_limit)
    mass = np.einsum("btp,t->b", arr, w) * 2 * math.pi / shape[1]
    if np.any(mass <= 0):
        raise UsageError(f"{name} has zero mass (it vanishes everywhere): it is not normalisable.")
    return arr / mass[:, None, None], batched


def check_zonal_density(rho, band_limit: int, name: str = "rho_guess") -> np.ndarray:
    r"""Values ``(N,)`` of an axisymmetric density at the $N \ge L$ Gauss-Legendre nodes
    $\cos\theta_j$ (ascending, NumPy's ``leggauss(N)``): finite, non-negative, positive mass;
    returned normalised to $\int\rho\,dS = 2\pi\sum_j w_j\rho_j = 1$."""
    arr = np.asarray(rho)
    if arr.dtype.kind not in "fiu" or arr.ndim != 1 or arr.shape[0] < band_limit:
        raise UsageError(
            f"{name} must be real values (N,) at the N >= band_limit = {band_limit} Gauss-Legendre nodes "
            f"cos(theta_j) (numpy.polynomial.legendre.leggauss(N)), got shape {arr.shape} ({arr.dtype})."
        )
    arr = arr.astype(np.float64)
    _finite_nonnegative(arr, name)
    _, w = gauss_legendre(arr.shape[0])
    mass = 2 * math.pi * float(w @ arr)
    if mass <= 0:
        raise UsageError(f"{name} has zero mass (it vanishes everywhere): it is not normalisable.")
    return arr / mass
