r"""The Fokker-Planck equation of SA and USA on $S^2$ in any basis of spherical harmonics: one formula.

A probability density $\rho$ on $S^2$ ($\int\rho\,dS = 1$, $dS$ the area element, the uniform
density $1/4\pi$) moves by $\partial_t\rho = -\nabla\cdot(\rho X[\rho]) + \frac{\sigma^2}{2}\Delta\rho$,

$$X_\mathrm{USA} = \nabla\Psi,\qquad X_\mathrm{SA} = \frac{\nabla\Psi}{\Phi},\qquad
\Phi(x) = \int e^{\beta\langle x, y\rangle}\rho(y)\,dS(y),\quad \Psi = \Phi/\beta,$$

since $\nabla_x e^{\beta\langle x, y\rangle} = \beta P_x y\,e^{\beta\langle x, y\rangle}$: the
mean-field limit of `rankdyn.flow.FlowField` ($Q = K = V = I$, complete mask, $d = 3$; USA divides
by $n$, SA by the softmax's sum). By the Funk-Hecke formula, convolution with $e^{\beta\langle x,
y\rangle}$ multiplies the degree-$l$ harmonics by $\lambda_l = 2\pi\int_{-1}^1 e^{\beta t}P_l(t)\,dt
= 4\pi i_l(\beta)$ ($i_l$ the modified spherical Bessel function), computed here by Gauss-Legendre
quadrature of that integral (differentiable in $\beta$; SA scales the kernel by $e^{-|\beta|}$,
which the quotient does not see). $\Psi$'s multipliers are those of $(e^{\beta t} - 1)/\beta$: the
same for $l \ge 1$, finite at $\beta = 0$ (a constant in $\Psi$ has no gradient).

The divergence needs scalar transforms only: $\nabla\cdot(g\nabla\Psi) = \frac12\big(\Delta(g\Psi)
+ g\Delta\Psi - \Psi\Delta g\big)$ (from $\Delta(g\Psi) = g\Delta\Psi + \Psi\Delta g + 2\nabla g
\cdot\nabla\Psi$), with $g = \rho$ (USA) or $\rho/\Phi$ (SA) and $\Delta Y_{lm} = -l(l+1)Y_{lm}$.
Products are formed on a Gauss-Legendre grid of band $L_p = \lceil(3L - 1)/2\rceil$: for USA every
product has degree at most $2L - 2$, so its coefficients below $L$ (integrands of degree $\le 3L - 3
\le 2L_p - 1$) are exact (the 3/2 rule; the exact Galerkin truncation). SA's $g = \rho/\Phi$ is not
band-limited: it and $g\Psi$ are transformed at the full $L_p$ (pseudo-spectral, as the circle's
SA quotient).
"""

from __future__ import annotations

import math

import jax.numpy as jnp
import numpy as np
from jaxtyping import Array
from scipy import special

__all__ = [
    "SPHERE_KERNEL_EPS",
    "sphere_band_limit",
    "padded_band",
    "kernel_multipliers",
    "laplacian",
    "transport_formula",
]

#: The kernel's relative Legendre coefficient $i_{L-1}(\beta)/i_0(\beta)$ at the top degree must be
#: below this (as the circle's `KERNEL_EPS`).
SPHERE_KERNEL_EPS = 1e-12


def _spherical_in_scaled(l, b: float):
    r"""$i_l(b)e^{-b}$, $b > 0$: $\sqrt{\pi/2b}\,I_{l+1/2}(b)e^{-b}$ by SciPy's scaled ``ive``."""
    return np.sqrt(math.pi / (2 * b)) * special.ive(np.asarray(l) + 0.5, b)


def sphere_band_limit(beta: float, eps: float = SPHERE_KERNEL_EPS) -> int:
    r"""The smallest band limit $L \ge 2$ (degrees $0..L-1$) with $i_{L-1}(|\beta|)/i_0(|\beta|) \le$
    ``eps``: the kernel $e^{\beta\langle x, y\rangle}$'s Legendre coefficients $4\pi i_l(\beta)$ (the
    Funk-Hecke multipliers) are below ``eps`` of the mass mode's from the top degree on.
    """
    b = abs(float(beta))
    if b == 0.0:
        return 2  # the kernel is constant: degree 1 carries the field (the mean), degree 0 the mass
    top = 1
    while _spherical_in_scaled(top, b) > eps * _spherical_in_scaled(0, b):
        top += 1
    return top + 1


def padded_band(band_limit: int) -> int:
    r"""$L_p = \lceil(3L - 1)/2\rceil$: the Gauss-Legendre band of the de-aliased products."""
    return (3 * band_limit) // 2


def gauss_legendre(num: int) -> tuple[np.ndarray, np.ndarray]:
    """Nodes $t_j = \\cos\\theta_j$ and weights of the ``num``-point Gauss-Legendre rule on $[-1, 1]$."""
    return np.polynomial.legendre.leggauss(num)


def kernel_multipliers(beta: Array, degrees: int, dynamics: str, dtype) -> tuple[Array, Array]:
    r"""$(\lambda_l, \mu_l)$, $l < $ ``degrees``: the multipliers of $\Phi$ and $\Psi$ on degree-$l$
    harmonics, $\lambda_l = 2\pi\int e^{\beta t}P_l$ and $\mu_l = 2\pi\int \frac{e^{\beta t} - 1}{\beta}
    P_l$ ($\mu_l = \lambda_l/\beta$ for $l \ge 1$; $t$ at $\beta = 0$), both times $e^{-|\beta|}$ for SA.

    Gauss-Legendre with $\max(64, 2\cdot$``degrees``$)$ nodes: the rule is exact for polynomials of
    degree below twice its size, and the Taylor tail of $e^{\beta t}$ past that is below $10^{-16}$
    of $e^{|\beta|}$ for the $\beta$ the band limits admit. The sum's terms cancel for large $l$: the
    multipliers are exact to about $10^{-14}\lambda_0$ (absolute), as the circle's FFT of the kernel.
    """
    t, w = gauss_legendre(max(64, 2 * degrees))
    pl = np.stack([special.eval_legendre(l, t) for l in range(degrees)])  # (degrees, nodes)
    b = beta.astype(dtype)
    tt = jnp.asarray(t, dtype)
    shift = jnp.abs(b) if dynamics == "sa" else jnp.zeros((), dtype)
    # The double where keeps the derivative in beta finite at beta = 0 (expm1(b t)/b -> t).
    safe = jnp.where(b == 0, jnp.ones((), dtype), b)
    psi = jnp.where(b == 0, tt, jnp.expm1(safe * tt) / safe) * jnp.exp(-shift)
    phi = jnp.exp(b * tt - shift)
    weights = 2 * math.pi * jnp.asarray(w * pl, dtype)  # 2 pi w_j P_l(t_j)
    return weights @ phi, weights @ psi


def laplacian(degrees: int, dtype) -> Array:
    r"""$-l(l+1)$, $l < $ ``degrees``: the Laplace-Beltrami eigenvalues of degree-$l$ harmonics."""
    l = np.arange(degrees)
    return jnp.asarray(-(l * (l + 1.0)), dtype)


def transport_formula(rho, phi_psi, lap_band, lap_full, to_grid, from_grid, to_grid_full, from_grid_full, sa):
    r"""$-\nabla\cdot(\rho X[\rho])$ from the basis' operators (module docstring).

    Arguments:
        rho: the band-$L$ coefficients; ``phi_psi(c)`` their $(\Phi, \Psi)$ coefficients.
        lap_band, lap_full: ``Delta(c)`` on band-$L$ and band-$L_p$ coefficients.
        to_grid, from_grid: band-$L$ coefficients of several fields (stacked on axis 0) to the
            padded grid and back (truncated to band $L$); ``*_full`` at band $L_p$.
        sa: SA's quotient $g = \rho/\Phi$ (else USA, $g = \rho$).
    """
    phi, psi = phi_psi(rho)
    if not sa:
        r, p, lr, lp = to_grid(jnp.stack([rho, psi, lap_band(rho), lap_band(psi)]))
        prod, rest = from_grid(jnp.stack([r * p, r * lp - p * lr]))
        div = 0.5 * (lap_band(prod) + rest)
    else:
        r, f, p, lp = to_grid(jnp.stack([rho, phi, psi, lap_band(psi)]))
        g = r / f
        gc, gpc = from_grid_full(jnp.stack([g, g * p]))
        lg, lgp = to_grid_full(jnp.stack([lap_full(gc), lap_full(gpc)]))
        (div,) = from_grid(jnp.stack([0.5 * (lgp + g * lp - p * lg)]))
    return -div
