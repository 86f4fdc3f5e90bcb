r"""The mean-field (Fokker-Planck) equation of SA and USA on the circle, Fourier pseudo-spectral.

A density $\rho(\theta)$ on $S^1$ ($\int_0^{2\pi}\rho\,d\theta = 1$, the limit of the empirical
measure $\frac1n\sum_j\delta_{\theta_j}$) moves by

$$\partial_t\rho = -\partial_\theta(\rho\,u[\rho]) + \frac{\sigma^2}{2}\partial_\theta^2\rho,\qquad
u_\mathrm{USA} = H * \rho,\qquad u_\mathrm{SA} = \frac{H*\rho}{E*\rho},$$

with $E(s) = e^{\beta\cos s}$, $H(s) = -e^{\beta\cos s}\sin s = E'(s)/\beta$ and
$(f*\rho)(\theta) = \int f(\theta - \varphi)\rho(\varphi)\,d\varphi$: the mean-field limit of
`rankdyn.flow.FlowField` with $Q = K = V = I$ on the complete mask ($d = 2$), whose USA field
divides by $n$ (so $\frac1n\sum_j \to \int\cdot\,\rho$) and whose tangent projection on the circle
is $P_x y = \langle y, e_\theta\rangle e_\theta$ with $\langle e_\theta, y(\varphi)\rangle =
\sin(\varphi - \theta)$. The noise $\sigma\,dB$ of each angle gives the Laplacian.

The state is the real Fourier vector $c = (a_0, a_1, \dots, a_K, b_1, \dots, b_K)$ of
$\rho = a_0 + \sum_{k=1}^K a_k\cos k\theta + b_k\sin k\theta$ ($K$ = ``num_modes``). The
Laplacian is diagonal there ($-k^2$) and integrated implicitly; the transport term is evaluated
on a grid of $M \ge 3K + 1$ points (the 3/2 rule: the product $\rho u$ of two fields of $K$ modes
has $2K$ modes, none of which aliases onto a kept one), differentiated spectrally and truncated
to $K$ modes. For USA this is the exact Galerkin truncation; for SA the quotient is evaluated
on the padded grid. The mass $2\pi a_0$ has a zero derivative by construction, so it is kept to
the last bit. The kernel's Fourier coefficients
$\hat E_k = I_k(\beta)$, $\hat H_k = i k I_k(\beta)/\beta$ come from an FFT of $E, H$ on the
padded grid (valid at $\beta = 0$ too; SA uses $e^{\beta(\cos s - 1)}$, the same quotient
without overflow).
"""

from __future__ import annotations

import functools
import math

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float
from scipy import special

__all__ = [
    "CircleDensityModel",
    "KERNEL_EPS",
    "kernel_modes",
    "padded_size",
    "density_values",
    "density_coefficients",
]

#: The kernel's relative Fourier coefficient $I_K(\beta)/I_0(\beta)$ at the top mode $K$ must be
#: below this: the density's features are as narrow as the kernel's (`kernel_modes`).
KERNEL_EPS = 1e-12


def kernel_modes(beta: float, eps: float = KERNEL_EPS) -> int:
    r"""The fewest modes $K \ge 1$ with $I_K(|\beta|)/I_0(|\beta|) \le$ ``eps`` (SciPy's scaled ``ive``)."""
    b = abs(float(beta))
    k = 1
    while special.ive(k, b) > eps * special.ive(0, b):
        k += 1
    return k


def padded_size(num_modes: int) -> int:
    """The even grid size $M \\ge 3K + 1$ of the de-aliased products."""
    m = 3 * num_modes + 1
    return m + m % 2


def _complex(c: Array, num_modes: int) -> Array:
    r"""$\hat\rho_k$, $k = 0..K$, of the real vector $(a, b)$: $\hat\rho_0 = a_0$,
    $\hat\rho_k = (a_k - i b_k)/2$."""
    a, b = c[..., : num_modes + 1], c[..., num_modes + 1 :]
    b0 = jnp.concatenate([jnp.zeros_like(b[..., :1]), b], axis=-1)
    half = jnp.concatenate([jnp.ones_like(a[..., :1]), jnp.full_like(a[..., 1:], 0.5)], axis=-1)
    return jax.lax.complex(a * half, -(b0 * half))


def _real(z: Array, num_modes: int) -> Array:
    """The real vector of $\\hat\\rho_k$, $k = 0..K$ (inverse of `_complex`)."""
    a0 = jnp.real(z[..., :1])
    return jnp.concatenate([a0, 2 * jnp.real(z[..., 1:]), -2 * jnp.imag(z[..., 1:])], axis=-1)


def density_values(c: Float[ArrayLike, "... m"], num_points: int) -> Float[Array, "... n"]:
    r"""$\rho(\theta_j)$ at $\theta_j = 2\pi j / N$, $j < N$ ($N$ = ``num_points`` $> 2K$) from the real
    Fourier vector ``c`` of length $2K + 1$."""
    return _density_values(jnp.asarray(c), num_points)


@functools.partial(jax.jit, static_argnums=1)
def _density_values(c: Array, num_points: int) -> Array:
    """`density_values`, one compiled program per shape (called eagerly: each op was one)."""
    num_modes = (c.shape[-1] - 1) // 2
    z = _complex(c, num_modes)
    pad = jnp.zeros((*z.shape[:-1], num_points // 2 + 1 - (num_modes + 1)), z.dtype)
    return jnp.fft.irfft(jnp.concatenate([z, pad], axis=-1) * num_points, n=num_points, axis=-1)


def density_coefficients(values: Float[ArrayLike, "... n"], num_modes: int) -> Float[Array, "... m"]:
    r"""The real Fourier vector ($2K + 1$ entries) of grid values at $\theta_j = 2\pi j/n$, truncated
    to $K$ modes ($n > 2K$: no mode is aliased)."""
    # Eager on purpose: compiled as one program its last bits differ (checked by hashing).
    values = jnp.asarray(values)
    z = jnp.fft.rfft(values, axis=-1)[..., : num_modes + 1] / values.shape[-1]
    return _real(z, num_modes)


class CircleDensityModel(eqx.Module):
    r"""The right-hand side of the circle's Fokker-Planck equation in the real Fourier basis.

    ``beta`` and ``sigma`` are arrays (traced: one compiled program serves every value, and the
    continuation differentiates through them); ``num_modes`` and ``dynamics`` shape the program.

    Arguments:
        beta: the inverse temperature $\beta$ of the kernel $e^{\beta\cos(\theta - \varphi)}$.
        sigma: the noise $\sigma \ge 0$ (diffusion $\frac{\sigma^2}{2}\partial_\theta^2$).
        num_modes: $K$, the Fourier modes kept.
        dynamics: ``"usa"`` or ``"sa"``.
    """

    beta: Float[Array, ""]
    sigma: Float[Array, ""]
    num_modes: int = eqx.field(static=True)
    dynamics: str = eqx.field(static=True)

    @property
    def size(self) -> int:
        """The length $2K + 1$ of the state."""
        return 2 * self.num_modes + 1

    @property
    def grid(self) -> int:
        """The padded grid size $M$."""
        return padded_size(self.num_modes)

    def wavenumbers(self, dtype) -> Array:
        """$k$ of each entry of the state: $(0, 1..K, 1..K)$."""
        k = np.arange(self.num_modes + 1)
        return jnp.asarray(np.concatenate([k, k[1:]]), dtype)

    def diffusion(self, c: Float[Array, " m"]) -> Float[Array, " m"]:
        r"""$\frac{\sigma^2}{2}\partial_\theta^2\rho$: $-\frac{\sigma^2}{2}k^2$ times each coefficient
        (the implicit term)."""
        k = self.wavenumbers(c.dtype)
        return -0.5 * self.sigma.astype(c.dtype) ** 2 * k * k * c

    def kernels(self, dtype) -> tuple[Array, Array]:
        r"""$2\pi\hat H_k$ and $2\pi\hat E_k$, $k = 0..M/2$, from an FFT on the padded grid
        (SA: scaled by $e^{-\beta}$)."""
        m = self.grid
        s = jnp.asarray(2 * math.pi * np.arange(m) / m, dtype)
        beta = self.beta.astype(dtype)
        # SA's quotient is unchanged by a constant factor: e^{beta (cos s - 1)} never overflows.
        e = jnp.exp(beta * (jnp.cos(s) - (1.0 if self.dynamics == "sa" else 0.0)))
        scale = 2 * math.pi / m
        return jnp.fft.rfft(-e * jnp.sin(s)) * scale, jnp.fft.rfft(e) * scale

    def transport(self, c: Float[Array, " m"]) -> Float[Array, " m"]:
        r"""$-\partial_\theta(\rho\,u[\rho])$, de-aliased, truncated to $K$ modes (the explicit term)."""
        m, kk = self.grid, self.num_modes
        z = _complex(c, kk)
        zpad = jnp.concatenate([z, jnp.zeros(m // 2 - kk, z.dtype)])
        h_hat, e_hat = self.kernels(c.dtype)
        rho = jnp.fft.irfft(zpad * m, n=m)
        u = jnp.fft.irfft(zpad * h_hat * m, n=m)
        if self.dynamics == "sa":
            u = u / jnp.fft.irfft(zpad * e_hat * m, n=m)
        flux = jnp.fft.rfft(rho * u)[: kk + 1] / m
        k = jnp.arange(kk + 1).astype(c.dtype)
        # -i k f: (re, im) -> (k im, -k re).
        out = _real(jax.lax.complex(k * jnp.imag(flux), -k * jnp.real(flux)), kk)
        # The mass mode has no derivative: set it to an exact zero (mass kept to the last bit).
        return out.at[0].set(0.0)

    def velocity(self, c: Float[Array, " m"], theta: Float[ArrayLike, " p"]) -> Float[Array, " p"]:
        r"""$u[\rho](\theta)$ at any angles: $(H*\rho)(\theta)$ (USA) or $(H*\rho)/(E*\rho)$ (SA), as Fourier
        sums of the $K$ modes of $\rho$ (exact for the band-limited density)."""
        kk = self.num_modes
        theta = jnp.asarray(theta, c.dtype)
        h_hat, e_hat = self.kernels(c.dtype)
        z = _complex(c, kk)
        angle = theta[:, None] * jnp.arange(kk + 1).astype(c.dtype)[None, :]
        phase = jax.lax.complex(jnp.cos(angle), jnp.sin(angle))

        def series(w):  # sum over k = -K..K of w_k z_k e^{ik theta}, real (Hermitian)
            t = phase * (w[: kk + 1] * z)[None, :]
            return 2 * jnp.real(jnp.sum(t, -1)) - jnp.real(t[:, 0])

        u = series(h_hat)
        return u / series(e_hat) if self.dynamics == "sa" else u

    def rhs(self, c: Float[Array, " m"]) -> Float[Array, " m"]:
        """The whole right-hand side (transport plus diffusion)."""
        return self.transport(c) + self.diffusion(c)

    def growth_rates(self) -> Float[Array, " K"]:
        r"""The closed-form linear rates at the uniform density, $k = 1..K$:
        $k^2(\hat E_k/(\beta\,\hat E_0^{\mathrm{SA}}) - \sigma^2/2)$ with $\hat E_k = I_k(\beta)$
        ($\hat E_0^{\mathrm{SA}} = I_0(\beta)$, 1 for USA), written as $-ik\cdot 2\pi\hat H_k/(2\pi)$."""
        dt = self.beta.dtype
        h_hat, e_hat = self.kernels(dt)
        k = jnp.arange(1, self.num_modes + 1).astype(dt)
        # -(1/2pi) d/dtheta of u_1 = 2pi H_k rho_k e^{ik theta}: rate -(ik)(H_k) = k^2 I_k / beta.
        rate = k * jnp.imag(h_hat[1 : self.num_modes + 1]) / (2 * math.pi)
        if self.dynamics == "sa":
            rate = rate / (jnp.real(e_hat[0]) / (2 * math.pi))
        return rate - 0.5 * self.sigma.astype(dt) ** 2 * k * k
