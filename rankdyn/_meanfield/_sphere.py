r"""The Fokker-Planck equation on $S^2$ in spherical harmonics, with s2fft's Gauss-Legendre transforms.

The state is the real array ``(2, L, L)`` of $(\operatorname{Re} f_{lm}, \operatorname{Im} f_{lm})$,
$0 \le m \le l < L$, of $\rho = \sum_{l<L}\sum_{|m|\le l} f_{lm}Y_{lm}$ (s2fft's orthonormal
harmonics with the Condon-Shortley phase; a real $\rho$ has $f_{l,-m} = (-1)^m\overline{f_{lm}}$,
so $m \ge 0$ holds it all; entries with $m > l$ and $\operatorname{Im} f_{l0}$ are zero). The mass
is $\int\rho\,dS = \sqrt{4\pi}f_{00}$. The transforms between coefficients and a Gauss-Legendre
grid ($L$ colatitudes $\theta_j$, $2L - 1$ longitudes) contract s2fft's precomputed Wigner-d kernels
(`s2fft.precompute_transforms.construct.spin_spherical_kernel`, ``sampling="gl"``, whose forward
kernel holds the quadrature weights) in real arithmetic, batched over fields as one matrix product
per order $m$; the FFT in longitude is NumPy's. The equation itself is `_sphere_kernel`'s.

s2fft is an optional dependency (``pip install "rankdyn[meanfield]"``): ``import rankdyn`` does not
need it; the $S^2$ functions say how to install it when it is missing.
"""

from __future__ import annotations

import functools

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float

from .._errors import UsageError
from ._sphere_kernel import kernel_multipliers, laplacian, padded_band, transport_formula

__all__ = [
    "require_s2fft",
    "sphere_grid",
    "sphere_density_values",
    "sphere_density_coefficients",
    "to_s2fft",
    "SphereDensityModel",
    "sphere_model",
    "valid_mask",
]


def require_s2fft():
    """The ``s2fft`` module, or a `UsageError` saying how to install it."""
    try:
        import s2fft
    except ImportError:
        raise UsageError(
            'the S^2 mean-field solver needs s2fft, an optional dependency: pip install "rankdyn[meanfield]"'
        ) from None
    return s2fft


@functools.lru_cache(maxsize=8)
def _kernels(grid_band: int, band: int) -> tuple[np.ndarray, np.ndarray]:
    r"""``(inverse (m, t, l), forward (m, l, t))``: s2fft's real Wigner-d kernels for the GL grid of
    band ``grid_band``, restricted to degrees and orders below ``band``."""
    require_s2fft()
    from s2fft.precompute_transforms import construct

    kw = dict(spin=0, reality=True, sampling="gl")
    inv = construct.spin_spherical_kernel(grid_band, forward=False, **kw)  # (t, l, m)
    fwd = construct.spin_spherical_kernel(grid_band, forward=True, **kw)
    inv = np.ascontiguousarray(np.transpose(np.real(inv)[:, :band, :band], (2, 0, 1)))
    fwd = np.ascontiguousarray(np.transpose(np.real(fwd)[:, :band, :band], (2, 1, 0)))
    return inv, fwd


def sphere_grid(band_limit: int) -> tuple[np.ndarray, np.ndarray]:
    r"""The sampling grid of band ``band_limit`` $= L$: colatitudes $\theta_j$ (``(L,)``, the
    Gauss-Legendre nodes) and longitudes $\varphi_k = 2\pi k/(2L - 1)$ (``(2L - 1,)``), as s2fft's
    ``sampling="gl"``. Densities are given as ``(L, 2L - 1)`` values $\rho(\theta_j, \varphi_k)$."""
    require_s2fft()
    from s2fft.sampling import s2_samples

    return np.asarray(s2_samples.thetas(band_limit, "gl")), np.asarray(
        s2_samples.phis_equiang(band_limit, "gl")
    )


def _to_grid(kin: Array, c: Array, nphi: int) -> Array:
    """Coefficients ``(B, 2, L, L)`` to grid values ``(B, T, nphi)`` (``kin`` ``(m, t, l)``)."""
    nb, _, band, _ = c.shape
    f = jnp.transpose(c, (3, 2, 0, 1)).reshape(band, band, nb * 2)  # (m, l, B * 2)
    ftm = jnp.matmul(kin.astype(c.dtype), f).reshape(band, kin.shape[1], nb, 2)  # (m, t, B, 2)
    ftm = jax.lax.complex(ftm[..., 0], ftm[..., 1])
    ftm = jnp.transpose(ftm, (2, 1, 0))  # (B, t, m)
    pad = jnp.zeros((nb, ftm.shape[1], nphi // 2 + 1 - band), ftm.dtype)
    return jnp.fft.irfft(jnp.concatenate([ftm, pad], -1), n=nphi, axis=-1, norm="forward")


def _from_grid(kfw: Array, values: Array) -> Array:
    """Grid values ``(B, T, nphi)`` to coefficients ``(B, 2, L, L)`` (``kfw`` ``(m, l, t)``)."""
    band = kfw.shape[0]
    nb = values.shape[0]
    ftm = jnp.fft.rfft(values, axis=-1)[..., :band]  # (B, t, m)
    f = jnp.stack([jnp.real(ftm), jnp.imag(ftm)], -1)  # (B, t, m, 2)
    f = jnp.transpose(f, (2, 1, 0, 3)).reshape(band, values.shape[1], nb * 2)  # (m, t, B * 2)
    flm = jnp.matmul(kfw.astype(values.dtype), f).reshape(band, band, nb, 2)  # (m, l, B, 2)
    return jnp.transpose(flm, (2, 3, 1, 0))


# The transforms called eagerly (`sphere_density_values`, `sphere_density_coefficients`), one
# compiled program per shape: eager, each of their ops compiled its own.
_to_grid_compiled = jax.jit(_to_grid, static_argnums=2)
_from_grid_compiled = jax.jit(_from_grid)


def valid_mask(band: int, dtype=np.float64) -> np.ndarray:
    r"""``(2, L, L)``: 1 where a coefficient can be non-zero ($m \le l$; no imaginary part at $m = 0$)."""
    l, m = np.arange(band)[:, None], np.arange(band)[None, :]
    re = (m <= l).astype(dtype)
    im = ((m <= l) & (m > 0)).astype(dtype)
    return np.stack([re, im])


def sphere_density_values(
    c: Float[ArrayLike, "... 2 L L"], band_limit: int | None = None
) -> Float[Array, "... t p"]:
    r"""$\rho(\theta_j, \varphi_k)$ on the grid of band ``band_limit`` ($\ge L$; default $L$, see
    `sphere_grid`) from the coefficients ``(..., 2, L, L)``."""
    c = jnp.asarray(c)
    band = c.shape[-1]
    grid = band if band_limit is None else int(band_limit)
    if grid < band:
        raise UsageError(f"band_limit must be >= the coefficients' band {band}, got {grid}.")
    kin, _ = _kernels(grid, band)
    lead = c.shape[:-3]
    flat = c.reshape(-1, 2, band, band)
    out = _to_grid_compiled(jnp.asarray(kin), flat, 2 * grid - 1)
    return out.reshape(*lead, grid, 2 * grid - 1)


def sphere_density_coefficients(
    values: Float[ArrayLike, "... t p"], band_limit: int
) -> Float[Array, "... 2 L L"]:
    r"""The coefficients ``(..., 2, L, L)`` ($L$ = ``band_limit``) of grid values ``(..., T, 2T - 1)``
    on the grid of band $T \ge L$ (`sphere_grid`): the Gauss-Legendre quadrature, exact for a density
    of band $T$, truncated to band $L$."""
    values = jnp.asarray(values)
    grid = values.shape[-2]
    if values.shape[-1] != 2 * grid - 1 or grid < band_limit:
        raise UsageError(
            f"values must be (..., T, 2T - 1) on the grid of a band T >= {band_limit}, "
            f"got shape {values.shape}."
        )
    _, kfw = _kernels(grid, band_limit)
    lead = values.shape[:-2]
    out = _from_grid_compiled(jnp.asarray(kfw), values.reshape(-1, grid, 2 * grid - 1))
    mask = jnp.asarray(valid_mask(band_limit), values.dtype).reshape(
        (1,) * len(lead) + (2, band_limit, band_limit)
    )
    return out.reshape(*lead, 2, band_limit, band_limit) * mask


def to_s2fft(c: Float[ArrayLike, "... 2 L L"]) -> Array:
    r"""s2fft's complex ``(..., L, 2L - 1)`` array $f_{lm}$ (order $m$ at column $L - 1 + m$) of the
    coefficients, with $f_{l,-m} = (-1)^m\overline{f_{lm}}$."""
    c = jnp.asarray(c)
    band = c.shape[-1]
    pos = jax.lax.complex(c[..., 0, :, :], c[..., 1, :, :])  # (..., l, m >= 0)
    sign = jnp.asarray((-1.0) ** np.arange(1, band), pos.dtype)
    neg = jnp.flip(jnp.conj(pos[..., 1:]) * sign.reshape((1,) * (pos.ndim - 1) + (-1,)), -1)  # m = -(L-1)..-1
    return jnp.concatenate([neg, pos], -1)


class SphereDensityModel(eqx.Module):
    r"""The right-hand side of the Fokker-Planck equation on $S^2$ in spherical harmonics.

    Arguments:
        beta: the inverse temperature (an array: traced); sigma: the noise $\sigma \ge 0$.
        kin, kfw: s2fft's Wigner-d kernels from band $L$ to the padded grid and back (`_kernels`).
        kin_full, kfw_full: the same at the padded band $L_p$ (SA's quotient).
        band_limit: $L$; dynamics: ``"usa"`` or ``"sa"``.
    """

    beta: Float[Array, ""]
    sigma: Float[Array, ""]
    kin: Array
    kfw: Array
    kin_full: Array
    kfw_full: Array
    band_limit: int = eqx.field(static=True)
    dynamics: str = eqx.field(static=True)

    @property
    def padded(self) -> int:
        """$L_p$, the band of the padded grid."""
        return padded_band(self.band_limit)

    def mask(self, dtype) -> Array:
        return jnp.asarray(valid_mask(self.band_limit), dtype)

    def diffusion(self, c: Float[Array, "2 L L"]) -> Float[Array, "2 L L"]:
        r"""$\frac{\sigma^2}{2}\Delta\rho$: $-\frac{\sigma^2}{2}l(l+1)$ times each coefficient."""
        lap = laplacian(self.band_limit, c.dtype)[None, :, None]
        return 0.5 * self.sigma.astype(c.dtype) ** 2 * lap * c

    def grid_values(self, c: Array) -> Array:
        """The density on the padded grid ``(L_p, 2L_p - 1)`` (the negative-density flag reads it)."""
        return _to_grid(self.kin, c[None], 2 * self.padded - 1)[0]

    def transport(self, c: Float[Array, "2 L L"]) -> Float[Array, "2 L L"]:
        r"""$-\nabla\cdot(\rho X[\rho])$ (`_sphere_kernel.transport_formula`), zero in the mass mode."""
        band, dt = self.band_limit, c.dtype
        nphi = 2 * self.padded - 1
        lam, mu = kernel_multipliers(self.beta, band, self.dynamics, dt)
        lap_b = laplacian(band, dt)[None, :, None]
        lap_f = laplacian(self.padded, dt)[None, :, None]
        out = transport_formula(
            c,
            lambda r: (lam[None, :, None] * r, mu[None, :, None] * r),
            lambda r: lap_b * r,
            lambda r: lap_f * r,
            lambda s: _to_grid(self.kin.astype(dt), s, nphi),
            lambda v: _from_grid(self.kfw.astype(dt), v),
            lambda s: _to_grid(self.kin_full.astype(dt), s, nphi),
            lambda v: _from_grid(self.kfw_full.astype(dt), v),
            self.dynamics == "sa",
        )
        # Orders above the degree and m = 0's imaginary part are zero; the mass has no derivative.
        return (out * self.mask(dt)).at[0, 0, 0].set(0.0)

    def rhs(self, c: Float[Array, "2 L L"]) -> Float[Array, "2 L L"]:
        """Transport plus diffusion."""
        return self.transport(c) + self.diffusion(c)


def sphere_model(beta: float, sigma: float, band_limit: int, dynamics: str) -> SphereDensityModel:
    """A `SphereDensityModel` with its kernels (built once per band limit and cached)."""
    lp = padded_band(band_limit)
    kin, kfw = _kernels(lp, band_limit)
    kin_f, kfw_f = _kernels(lp, lp) if dynamics == "sa" else (np.zeros((0, 0, 0)), np.zeros((0, 0, 0)))
    return SphereDensityModel(
        jnp.asarray(beta),
        jnp.asarray(sigma),
        jnp.asarray(kin),
        jnp.asarray(kfw),
        jnp.asarray(kin_f),
        jnp.asarray(kfw_f),
        band_limit,
        dynamics,
    )
