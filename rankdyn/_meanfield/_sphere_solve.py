r"""`solve_sphere_density`: the Fokker-Planck equation on $S^2$ integrated with Diffrax's IMEX KenCarp4.

As on the circle (`_solve`): the transport is explicit, the diffusion $\frac{\sigma^2}{2}\Delta$
implicit and diagonal in spherical harmonics (its Newton matrix solved by one division,
`DiagonalJacobian`), the starts vmapped. Each trajectory ends with a `rankdyn.RESULTS` member:
Diffrax's outcome, else ``nonfinite``, else ``negative_density`` (below $-10^{-10}\max\rho$ on the
padded grid at a saved time), else ``under_resolved`` (the top 10% of the degrees carry more than
$10^{-10}$ of the $L^2$ norm at a saved time), else ``successful``.
"""

from __future__ import annotations

import math

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float

from .._errors import SolveError
from .._results import RESULTS
from ._checks import check_beta, check_dynamics, check_positive, check_sigma, check_times
from ._solve import density_result, imex_solve
from ._sphere import require_s2fft, sphere_density_coefficients, sphere_density_values, sphere_model
from ._sphere_checks import check_band_limit, check_sphere_density, check_sphere_dimension

__all__ = ["solve_sphere_density", "SphereDensitySolution", "sphere_tail_fraction"]


class SphereDensitySolution(eqx.Module):
    r"""The result of `solve_sphere_density` (a leading batch axis when the start had one).

    Attributes:
        times: ``(S,)`` the saved times.
        coefficients: ``(batch, S, 2, L, L)`` $(\operatorname{Re} f_{lm}, \operatorname{Im} f_{lm})$,
            $0 \le m \le l < L$, of $\rho = \sum f_{lm}Y_{lm}$ (`to_s2fft` gives s2fft's layout).
        mass: ``(batch, S)`` $\int\rho\,dS = \sqrt{4\pi}f_{00}$.
        min_density: ``(batch, S)`` the smallest value on the padded grid.
        tail: ``(batch, S)`` the share of the $L^2$ norm in the top 10% of the degrees.
        num_steps: ``(batch,)`` accepted solver steps.
        result: ``(batch,)`` a `RESULTS` member per trajectory (module docstring).
        band_limit: $L$.
    """

    times: Array
    coefficients: Array
    mass: Array
    min_density: Array
    tail: Array
    num_steps: Array
    result: RESULTS
    band_limit: int = eqx.field(static=True)

    def density(self, band_limit: int | None = None) -> Array:
        r"""$\rho$ on `sphere_grid`(band_limit) (default $L$): ``(batch, S, L', 2L' - 1)``."""
        return sphere_density_values(self.coefficients, band_limit)

    @property
    def order_parameter(self) -> Array:
        r"""$|\int x\,\rho\,dS| = \sqrt{4\pi/3}\,(f_{10}^2 + 2|f_{11}|^2)^{1/2}$: the mean-field
        $|\frac1n\sum_i x_i|$ (``(batch, S)``)."""
        c = self.coefficients
        sq = c[..., 0, 1, 0] ** 2 + 2 * (c[..., 0, 1, 1] ** 2 + c[..., 1, 1, 1] ** 2)
        return jnp.sqrt(4 * math.pi / 3 * sq)

    @property
    def successful(self) -> Array:
        """True where the trajectory's `result` is ``RESULTS.successful``."""
        return self.result == RESULTS.successful


def sphere_tail_fraction(c: Float[Array, "... 2 L L"]) -> Float[Array, "..."]:
    r"""$\|\rho_{\mathrm{top}}\|_2/\|\rho\|_2$ over the top $\lceil L/10\rceil$ degrees (Parseval:
    $\|\rho\|^2 = \sum_l f_{l0}^2 + 2\sum_{m>0}|f_{lm}|^2$)."""
    band = c.shape[-1]
    top = max(1, math.ceil(band / 10))
    weight = jnp.asarray(np.where(np.arange(band) == 0, 1.0, 2.0), c.dtype)
    per_degree = jnp.sum(c**2, -3) @ weight  # (..., L): sum over m, m > 0 counted twice
    return jnp.sqrt(jnp.sum(per_degree[..., -top:], -1) / jnp.sum(per_degree, -1))


@eqx.filter_jit
def _solve_batch(model, c0, ts, rtol, atol, max_steps: int):
    def one(y0):
        sol = imex_solve(model, y0, ts, rtol, atol, max_steps)  # as on the circle
        ys = sol.ys
        grid = jax.vmap(model.grid_values)(ys)
        mins, maxs = jnp.min(grid, (-2, -1)), jnp.max(grid, (-2, -1))
        tail = sphere_tail_fraction(ys)
        res = density_result(sol, mins, maxs, tail)
        mass = math.sqrt(4 * math.pi) * ys[:, 0, 0, 0]
        return ys, mass, mins, tail, sol.stats["num_accepted_steps"], res

    return jax.vmap(one)(c0)


def solve_sphere_density(
    rho0: Float[ArrayLike, "*batch L P"],
    *,
    beta: float,
    sigma: float,
    t1: float,
    times: Float[ArrayLike, " s"] | None = None,
    dynamics: str = "usa",
    band_limit: int = 32,
    d: int = 3,
    rtol: float = 1e-8,
    atol: float | None = None,
    max_steps: int = 100_000,
    throw: bool = False,
) -> SphereDensitySolution:
    r"""Integrate the Fokker-Planck equation on $S^2$,
    $\partial_t\rho = -\nabla\cdot(\rho X[\rho]) + \frac{\sigma^2}{2}\Delta\rho$.

    $X_\mathrm{USA}(x) = P_x\int e^{\beta\langle x, y\rangle}y\,\rho(y)\,dS(y)$, and the same divided
    by $\int e^{\beta\langle x, y\rangle}\rho(y)\,dS(y)$ for SA: the mean-field limit of
    `rankdyn.flow.FlowField` ($Q = K = V = I$, complete mask, $d = 3$; USA divides by $n$) with noise
    $\sigma\,dB$ of generator $\frac{\sigma^2}{2}\Delta$ (docs/theory.md, "Mean-field densities on
    the sphere"). Spherical harmonics to band $L$ with s2fft's Gauss-Legendre transforms, products
    on a padded grid of band $\lceil(3L-1)/2\rceil$, Diffrax's IMEX ``KenCarp4`` with the diffusion
    implicit, batched over the starts.

    Arguments:
        rho0: densities on `sphere_grid`(band_limit), ``(L, 2L - 1)`` or ``(batch, L, 2L - 1)``;
            normalised to $\int\rho\,dS = 1$ and truncated to band $L$.
        beta: the inverse temperature; sigma: the noise level $\sigma \ge 0$.
        t1: the final time; ``times``: the saved times in $[0, t_1]$ (default ``[t1]``).
        dynamics: ``"usa"`` (divided by $n$) or ``"sa"`` (softmax-normalised).
        band_limit: $L$ (degrees $0..L-1$); at least `sphere_band_limit`(beta).
        d: the token dimension; the sphere's 3 only.
        rtol, atol: the step-size controller's tolerances (``atol`` default ``rtol * 1e-5``).
        max_steps: solver steps at most per trajectory.
        throw: raise `rankdyn.SolveError` if a trajectory is not ``successful``.

    Returns:
        A `SphereDensitySolution`; ``result`` per trajectory as the module docstring says.

    Raises:
        UsageError: before any compute, on ``d != 3``, a negative or non-finite ``sigma``, a
            ``band_limit`` below what the kernel needs (the message gives it), an initial density
            that is negative, not normalisable or of the wrong shape, bad times, or s2fft missing
            (``pip install "rankdyn[meanfield]"``).
        SolveError: with ``throw=True``, if a trajectory is not ``successful``.
    """
    check_sphere_dimension(d)
    dyn = check_dynamics(dynamics)
    b, s = check_beta(beta), check_sigma(sigma)
    band = check_band_limit(band_limit, b)
    rho, batched = check_sphere_density(rho0, band)
    ts = check_times(t1, times)
    rtol = check_positive("rtol", rtol)
    atol = rtol * 1e-5 if atol is None else check_positive("atol", atol)
    require_s2fft()
    model = sphere_model(b, s, band, dyn)
    c0 = sphere_density_coefficients(jnp.asarray(rho), band)
    tol = (jnp.asarray(rtol), jnp.asarray(atol))
    ys, mass, mins, tail, steps, res = _solve_batch(model, c0, jnp.asarray(ts), *tol, int(max_steps))
    ok = np.asarray(res == RESULTS.successful)
    if throw and not bool(np.all(ok)):
        raise SolveError(
            f"solve_sphere_density: {int(np.sum(~ok))} of {ok.size} trajectories not successful (see result)."
        )
    parts = (ys, mass, mins, tail, steps, res)
    if not batched:
        parts = jax.tree.map(lambda a: a[0], parts)
    return SphereDensitySolution(jnp.asarray(ts), *parts, band)
