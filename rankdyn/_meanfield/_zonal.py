r"""Zonal (axisymmetric) densities on $S^2$: the Fokker-Planck equation in Legendre coefficients.

A density symmetric about the pole, $\rho(\theta) = \frac1{4\pi} + \sum_{l=1}^{L-1} x_l Y_{l0}(\theta)$
($Y_{l0} = \sqrt{(2l+1)/4\pi}\,P_l(\cos\theta)$, the $m = 0$ orthonormal harmonics), stays
axisymmetric under the flow: the kernel depends on $\langle x, y\rangle$ only, so the field of an
axisymmetric density is axisymmetric and meridional. The vector $x = (x_1, \dots, x_{L-1})$ without
the mass mode is then a closed system, as the circle's even cosines are (`_stationary`): each degree
of the uniform state is a *simple* eigenvalue there (on the full sphere degree $l$ is
$(2l+1)$-fold, and the rotations make every clustered state a continuum).

The equation is `_sphere_kernel`'s formula with one-dimensional transforms: values at the
$L_p$ Gauss-Legendre nodes $t_j = \cos\theta_j$ (SciPy's Legendre polynomials), back by the rule
$x_l = 2\pi\sum_j w_j\,g(t_j)\,Y_{l0}(t_j)$, exact for polynomials of degree $\le 2L_p - 1$. This is
independent of s2fft: the full solver restricted to $m = 0$ must agree with it (a test oracle).
"""

from __future__ import annotations

import functools
import math

import equinox as eqx
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float
from scipy import special

from ._sphere_kernel import gauss_legendre, kernel_multipliers, laplacian, padded_band, transport_formula

__all__ = ["ZonalDensityModel", "zonal_model", "zonal_full", "zonal_values"]


@functools.lru_cache(maxsize=8)
def _legendre(num_nodes: int, degrees: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(nodes, Y (degrees, nodes), 2 pi w Y (degrees, nodes))`` of the ``num_nodes``-point rule."""
    t, w = gauss_legendre(num_nodes)
    y = np.stack(
        [math.sqrt((2 * l + 1) / (4 * math.pi)) * special.eval_legendre(l, t) for l in range(degrees)]
    )
    return t, y, 2 * math.pi * w * y


def zonal_full(x: Float[Array, "... Lm1"]) -> Float[Array, "... L"]:
    r"""$(1/\sqrt{4\pi}, x_1, \dots, x_{L-1})$: the zonal coefficients with the mass mode of mass 1."""
    mass = jnp.full((*x.shape[:-1], 1), 1 / math.sqrt(4 * math.pi), x.dtype)
    return jnp.concatenate([mass, x], -1)


def zonal_values(c: Float[ArrayLike, "... L"], cos_theta: Float[ArrayLike, " n"]) -> Float[Array, "... n"]:
    r"""$\rho$ at the points $\cos\theta$ from the zonal coefficients $(f_{00}, \dots, f_{L-1,0})$."""
    c = jnp.asarray(c)
    t = np.asarray(cos_theta, dtype=np.float64)
    y = np.stack(
        [math.sqrt((2 * l + 1) / (4 * math.pi)) * special.eval_legendre(l, t) for l in range(c.shape[-1])]
    )
    return c @ jnp.asarray(y, c.dtype)


class ZonalDensityModel(eqx.Module):
    r"""The right-hand side of the Fokker-Planck equation on zonal densities of $S^2$.

    Arguments:
        beta, sigma: arrays (traced: the continuation differentiates through them).
        band_limit: $L$ (degrees $0..L-1$); dynamics: ``"usa"`` or ``"sa"``.
    """

    beta: Float[Array, ""]
    sigma: Float[Array, ""]
    band_limit: int = eqx.field(static=True)
    dynamics: str = eqx.field(static=True)

    @property
    def padded(self) -> int:
        return padded_band(self.band_limit)

    def transport_full(self, c: Float[Array, " L"]) -> Float[Array, " L"]:
        r"""$-\nabla\cdot(\rho X[\rho])$ on all $L$ zonal coefficients (mass mode included: zero)."""
        band, lp, dt = self.band_limit, self.padded, c.dtype
        _, yb, fb = (jnp.asarray(a, dt) for a in _legendre(lp, band))
        _, yf, ff = (jnp.asarray(a, dt) for a in _legendre(lp, lp))
        lam, mu = kernel_multipliers(self.beta, band, self.dynamics, dt)
        lap_b, lap_f = laplacian(band, dt), laplacian(lp, dt)
        out = transport_formula(
            c,
            lambda r: (lam * r, mu * r),
            lambda r: lap_b * r,
            lambda r: lap_f * r,
            lambda s: s @ yb,
            lambda v: v @ fb.T,
            lambda s: s @ yf,
            lambda v: v @ ff.T,
            self.dynamics == "sa",
        )
        return out.at[0].set(0.0)

    def split(self, x: Float[Array, " Lm1"]) -> tuple[Array, Array]:
        r"""``(N(x), diag(L))`` on $x$ without the mass mode: the transport and the diffusion's
        diagonal $-\frac{\sigma^2}{2}l(l+1)$, $l = 1..L-1$."""
        n = self.transport_full(zonal_full(x))[1:]
        return n, 0.5 * self.sigma.astype(x.dtype) ** 2 * laplacian(self.band_limit, x.dtype)[1:]

    def rhs(self, x: Float[Array, " Lm1"]) -> Float[Array, " Lm1"]:
        """$G(x) = N(x) + \\mathrm{diag}(L)x$."""
        n, lam = self.split(x)
        return n + lam * x

    def values(self, x: Float[Array, " Lm1"]) -> Float[Array, " n"]:
        """The density at the $L_p$ Gauss-Legendre nodes $t_j$ (ascending)."""
        t, y, _ = _legendre(self.padded, self.band_limit)
        return zonal_full(x) @ jnp.asarray(y, x.dtype)


def zonal_model(beta: float, sigma: float, band_limit: int, dynamics: str) -> ZonalDensityModel:
    return ZonalDensityModel(jnp.asarray(beta), jnp.asarray(sigma), band_limit, dynamics)
