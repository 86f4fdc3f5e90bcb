r"""`solve_density`: the circle's Fokker-Planck equation integrated with Diffrax's IMEX KenCarp4.

The transport $-\partial_\theta(\rho u[\rho])$ is the explicit term and the diffusion
$\frac{\sigma^2}{2}\partial_\theta^2\rho$ the implicit one (`rankdyn._meanfield._circle`): the
diffusion's stiffness ($\sigma^2 K^2/2$ at the top mode) never limits the step. The implicit
term is diagonal in the Fourier basis, so its Newton matrix $I - \gamma h\,\mathrm{diag}(L)$ is
solved by one division (`DiagonalJacobian`), not by an LU of a $(2K+1)^2$ matrix each step.
Trajectories are vmapped: one compiled program per (modes, dynamics, saved-time count), for every
$\beta$, $\sigma$ and initial density.

Each trajectory ends with a `rankdyn.RESULTS` member: Diffrax's outcome, else ``nonfinite``, else
``negative_density`` (the density on the padded grid below $-10^{-10}\max\rho$ at a saved time),
else ``under_resolved`` (the top 10% of the modes carry more than $10^{-10}$ of the $L^2$ norm at a
saved time), else ``successful``.
"""

from __future__ import annotations

import math

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
import lineax as lx
import numpy as np
import optimistix as optx
from jaxtyping import Array, ArrayLike, Float

from .._errors import SolveError
from .._results import RESULTS
from ._checks import (
    check_beta,
    check_density,
    check_dimension,
    check_dynamics,
    check_modes,
    check_positive,
    check_sigma,
    check_times,
)
from ._circle import CircleDensityModel, density_coefficients, density_values

__all__ = [
    "solve_density",
    "DensitySolution",
    "DiagonalJacobian",
    "NEGATIVE_TOL",
    "TAIL_TOL",
    "tail_fraction",
]

#: A saved density below ``-NEGATIVE_TOL * max(rho)`` somewhere is flagged ``negative_density``.
NEGATIVE_TOL = 1e-10
#: A saved density whose top 10% of modes carry more than this of its L2 norm is ``under_resolved``.
TAIL_TOL = 1e-10


class DiagonalJacobian(lx.AbstractLinearSolver):
    """A linear solve for an operator known to be diagonal: its diagonal is read as ``A @ ones``.

    Valid only for a diagonal operator (the implicit relation of a diagonal implicit term, as the
    diffusion is in the Fourier basis); Diffrax's root finders pass an untagged Jacobian, so
    `lineax.Diagonal` (which checks the tag) cannot be used.
    """

    def init(self, operator, options):
        del options
        ones = jax.tree.map(jnp.ones_like, operator.in_structure())
        return operator.mv(ones)

    def compute(self, state, vector, options):
        del options
        return jax.tree.map(jnp.divide, vector, state), lx.RESULTS.successful, {}

    def transpose(self, state, options):
        return state, options

    def conj(self, state, options):
        return jax.tree.map(jnp.conj, state), options

    def assume_full_rank(self):
        return True


class DensitySolution(eqx.Module):
    r"""The result of `solve_density` (a leading batch axis when the start had one).

    Attributes:
        times: ``(S,)`` the saved times.
        coefficients: ``(batch, S, 2K + 1)`` the real Fourier vectors $(a_0, a_{1..K}, b_{1..K})$
            of $\rho = a_0 + \sum_k a_k\cos k\theta + b_k\sin k\theta$.
        mass: ``(batch, S)`` $\int\rho = 2\pi a_0$.
        min_density: ``(batch, S)`` the smallest value on the padded grid.
        tail: ``(batch, S)`` the share of the $L^2$ norm in the top 10% of the modes.
        num_steps: ``(batch,)`` accepted solver steps.
        result: ``(batch,)`` a `RESULTS` member per trajectory (module docstring).
        num_modes: $K$.
    """

    times: Array
    coefficients: Array
    mass: Array
    min_density: Array
    tail: Array
    num_steps: Array
    result: RESULTS
    num_modes: int = eqx.field(static=True)

    def density(self, num_points: int | None = None) -> Array:
        r"""$\rho$ at $\theta_j = 2\pi j/N$ (default $N = 4K$): ``(batch, S, N)``."""
        return density_values(self.coefficients, num_points or 4 * self.num_modes)

    @property
    def successful(self) -> Array:
        """True where the trajectory's `result` is ``RESULTS.successful``."""
        return self.result == RESULTS.successful


def tail_fraction(c: Float[Array, "... m"]) -> Float[Array, "..."]:
    r"""$\|\rho_{\mathrm{top}}\|_2 / \|\rho\|_2$, the top 10% of the $K$ modes
    ($\lceil K/10\rceil$ of them)."""
    kk = (c.shape[-1] - 1) // 2
    top = max(1, math.ceil(kk / 10))
    a, b = c[..., : kk + 1], c[..., kk + 1 :]
    # Parseval: |rho|^2 / 2 pi = a_0^2 + sum (a_k^2 + b_k^2) / 2.
    total = a[..., 0] ** 2 + 0.5 * (jnp.sum(a[..., 1:] ** 2, -1) + jnp.sum(b**2, -1))
    upper = 0.5 * (jnp.sum(a[..., -top:] ** 2, -1) + jnp.sum(b[..., -top:] ** 2, -1))
    return jnp.sqrt(upper / total)


def imex_solve(model, y0, ts, rtol, atol, max_steps: int) -> diffrax.Solution:
    """One density's solve saved at ``ts``: KenCarp4 with ``model.transport`` explicit and
    ``model.diffusion`` (diagonal) implicit, adaptive at ``rtol``/``atol``; the circle's and the
    sphere's models both provide the two terms."""
    terms = diffrax.MultiTerm(
        diffrax.ODETerm(lambda t, y, args: args.transport(y)),
        diffrax.ODETerm(lambda t, y, args: args.diffusion(y)),
    )
    # Chord, not Diffrax's default VeryChord: with VeryChord most steps were rejected here (a
    # linear implicit term; 2668 accepted, 3809 rejected to t = 5 at K = 16, against 41 steps
    # of explicit Tsit5), with Chord they are not.
    root = diffrax.with_stepsize_controller_tols(optx.Chord)(linear_solver=DiagonalJacobian())
    return diffrax.diffeqsolve(
        terms,
        diffrax.KenCarp4(root_finder=root),
        0.0,
        ts[-1],
        None,
        y0,
        args=model,
        saveat=diffrax.SaveAt(ts=ts),
        stepsize_controller=diffrax.PIDController(rtol=rtol, atol=atol),
        max_steps=max_steps,
        throw=False,
    )


def density_result(sol: diffrax.Solution, mins, maxs, tail):
    """The solve's `RESULTS` member, then, while successful, the density's flags in order:
    ``nonfinite`` (a NaN or inf coefficient), ``negative_density`` (a grid value below
    -`NEGATIVE_TOL` times the maximum), ``under_resolved`` (a tail fraction above `TAIL_TOL`)."""
    res = RESULTS.promote(sol.result)
    finite = jnp.all(jnp.isfinite(sol.ys))
    res = RESULTS.where(res == RESULTS.successful, RESULTS.where(finite, res, RESULTS.nonfinite), res)
    negative = jnp.any(mins < -NEGATIVE_TOL * maxs)
    res = RESULTS.where(
        res == RESULTS.successful, RESULTS.where(negative, RESULTS.negative_density, res), res
    )
    coarse = jnp.any(tail > TAIL_TOL)
    return RESULTS.where(res == RESULTS.successful, RESULTS.where(coarse, RESULTS.under_resolved, res), res)


@eqx.filter_jit
def _solve_batch(model, c0, ts, rtol, atol, max_steps: int):
    def one(y0):
        sol = imex_solve(model, y0, ts, rtol, atol, max_steps)
        ys = sol.ys
        grid = density_values(ys, model.grid)
        mins, maxs = jnp.min(grid, -1), jnp.max(grid, -1)
        tail = tail_fraction(ys)
        res = density_result(sol, mins, maxs, tail)
        return ys, 2 * math.pi * ys[:, 0], mins, tail, sol.stats["num_accepted_steps"], res

    return jax.vmap(one)(c0)


def solve_density(
    rho0: Float[ArrayLike, "*batch n"],
    *,
    beta: float,
    sigma: float,
    t1: float,
    times: Float[ArrayLike, " s"] | None = None,
    dynamics: str = "usa",
    num_modes: int = 64,
    d: int = 2,
    rtol: float = 1e-8,
    atol: float | None = None,
    max_steps: int = 100_000,
    throw: bool = False,
) -> DensitySolution:
    r"""Integrate the circle's Fokker-Planck equation
    $\partial_t\rho = -\partial_\theta(\rho u[\rho]) + \frac{\sigma^2}{2}\partial_\theta^2\rho$.

    The mean-field limit of `rankdyn.flow.FlowField` (complete mask, $Q = K = V = I$, $d = 2$;
    USA divides by $n$) with noise $\sigma\,dB$ on each angle: $u = H*\rho$ (USA) or
    $(H*\rho)/(E*\rho)$ (SA), $E(s) = e^{\beta\cos s}$, $H = E'/\beta$
    (`rankdyn._meanfield._circle`; docs/theory.md, "Mean-field densities"). Fourier
    pseudo-spectral with $K$ modes and 3/2 de-aliasing, Diffrax's IMEX ``KenCarp4`` with the
    diffusion implicit, batched over the starts.

    Arguments:
        rho0: densities sampled at $\theta_j = 2\pi j/N$, ``(N,)`` or ``(batch, N)``, $N \ge 2K+1$;
            normalised to mass 1 and truncated to $K$ modes.
        beta: the inverse temperature.
        sigma: the noise level $\sigma \ge 0$.
        t1: the final time; ``times``: the saved times in $[0, t_1]$ (default ``[t1]``).
        dynamics: ``"usa"`` (divided by $n$) or ``"sa"`` (softmax-normalised).
        num_modes: $K$; at least `kernel_modes`(beta).
        d: the token dimension; the circle's 2 only.
        rtol, atol: the step-size controller's tolerances (``atol`` default ``rtol * 1e-5``: the
            top modes, which the under-resolution flag reads at 1e-10, are held to it).
        max_steps: solver steps at most per trajectory.
        throw: raise `rankdyn.SolveError` if a trajectory is not ``successful`` (default: report it in
            ``result``, as the other ensembles do).

    Returns:
        A `DensitySolution`; each trajectory's ``result`` is ``successful``, a Diffrax failure
        (``max_steps_reached``, ...), ``nonfinite``, ``negative_density`` or ``under_resolved``.

    Raises:
        SolveError: with ``throw=True``, if a trajectory is not ``successful``.
        UsageError: before any compute, on a negative or non-finite ``sigma``, ``d != 2``,
            ``num_modes`` below what the kernel needs (the message gives the needed value), an
            initial density that is negative, not normalisable or of the wrong shape, or bad times.
    """
    check_dimension(d)
    dyn = check_dynamics(dynamics)
    b, s = check_beta(beta), check_sigma(sigma)
    kk = check_modes(num_modes, b)
    rho, batched = check_density(rho0, kk)
    ts = check_times(t1, times)
    rtol = check_positive("rtol", rtol)
    atol = rtol * 1e-5 if atol is None else check_positive("atol", atol)
    model = CircleDensityModel(jnp.asarray(b), jnp.asarray(s), kk, dyn)
    c0 = density_coefficients(jnp.asarray(rho), kk)
    # Tolerances as arrays: one compiled program for every value.
    tol = (jnp.asarray(rtol), jnp.asarray(atol))
    ys, mass, mins, tail, steps, res = _solve_batch(model, c0, jnp.asarray(ts), *tol, int(max_steps))
    ok = np.asarray(res == RESULTS.successful)
    if throw and not bool(np.all(ok)):
        raise SolveError(
            f"solve_density: {int(np.sum(~ok))} of {ok.size} trajectories not successful (see result)."
        )
    parts = (ys, mass, mins, tail, steps, res)
    if not batched:
        parts = jax.tree.map(lambda a: a[0], parts)
    return DensitySolution(jnp.asarray(ts), *parts, kk)
