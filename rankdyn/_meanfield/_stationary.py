r"""Stationary densities on the circle: Newton in the even basis, their stability, their continuation.

A density symmetric about $\theta = 0$, $\rho = \frac1{2\pi} + \sum_{k=1}^K a_k\cos k\theta$, stays
symmetric under the flow (the kernel is even, the velocity odd), so the even coefficients
$x = (a_1, \dots, a_K)$ without the mass mode are a closed system $\dot x = G(x) = N(x) + Lx$:
$N$ the transport, $L = \mathrm{diag}(-\sigma^2 k^2/2)$ the diffusion. There each Fourier mode of
the uniform state is a *simple* eigenvalue (in the full basis the pair $\cos k\theta, \sin k\theta$
is a double one, which a $+1$ test function cannot see), and the rotations, whose orbit would make
every clustered state a continuum, are gone.

- `stationary_density`: Newton (Optimistix) on $G(x) = 0$; stability from the eigenvalues of
  $DG(x)$ (the linearised operator on even perturbations).
- `density_step_map`: the IMEX step $x \mapsto (I - hL)^{-1}(x + hN(x))$, whose fixed points are the
  stationary densities and whose multipliers at the uniform state are
  $(1 + h g_k)/(1 + h\sigma^2k^2/2)$ ($g_k$ the transport's rate): they cross $+1$ exactly where
  the rate $g_k - \sigma^2k^2/2$ crosses 0, for every $h > 0$. (An explicit step
  $x + h(N + L)x$ would cross $-1$ at the high modes, a spurious period doubling.)
- `continue_density`: that map continued in $\sigma$ or $\beta$ with
  `rankdyn.equilibria.continue_branch`.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optimistix as optx
from jaxtyping import Array, ArrayLike, Float

from .._equilibria._branch import Branch
from .._equilibria._continuation import continue_branch
from .._errors import SolveError, UsageError
from .._results import RESULTS
from ._checks import (
    check_beta,
    check_density,
    check_dimension,
    check_dynamics,
    check_modes,
    check_positive,
    check_sigma,
)
from ._circle import CircleDensityModel, density_coefficients, density_values
from ._solve import tail_fraction

__all__ = [
    "StationaryDensity",
    "stationary_density",
    "density_step_map",
    "continue_density",
    "even_rhs",
    "full_coefficients",
]

#: The parameters a branch of stationary densities is continued in.
PARAMS = ("sigma", "beta")


def full_coefficients(x: Float[Array, "... K"]) -> Float[Array, "... m"]:
    r"""The real Fourier vector $(1/2\pi, a_{1..K}, 0_{1..K})$ of the even density with cosines ``x``."""
    mass = jnp.full((*x.shape[:-1], 1), 1 / (2 * math.pi), x.dtype)
    return jnp.concatenate([mass, x, jnp.zeros_like(x)], axis=-1)


def even_rhs(model: CircleDensityModel, x: Float[Array, " K"]) -> tuple[Array, Array]:
    """``(N(x), diag(L))``: the transport's cosine part and the diffusion's diagonal on the even basis."""
    kk = model.num_modes
    n = model.transport(full_coefficients(x))[1 : kk + 1]
    k = jnp.arange(1, kk + 1).astype(x.dtype)
    return n, -0.5 * model.sigma.astype(x.dtype) ** 2 * k * k


class StationaryDensity(eqx.Module):
    r"""A stationary density of the circle's Fokker-Planck equation (symmetric about $\theta = 0$).

    Attributes:
        coefficients: ``(2K + 1,)`` its real Fourier vector $(1/2\pi, a_{1..K}, 0)$.
        residual: $\max_k |G(x)_k|$, the right-hand side at the solution.
        eigenvalues: ``(K,)`` complex, of the linearised operator $DG(x)$ on even perturbations
            without the mass mode, by decreasing real part.
        stable: every eigenvalue has real part below ``-stability_tol``.
        tail: the share of its $L^2$ norm in the top 10% of the modes (above $10^{-10}$: the
            density is narrower than the resolution, raise ``num_modes``).
        result: a `RESULTS` member (``successful`` when Newton met its tolerance).
        beta, sigma: the parameters; ``dynamics``: ``"usa"`` or ``"sa"``.
    """

    coefficients: Array
    residual: Array
    eigenvalues: Array
    stable: Array
    tail: Array
    result: RESULTS
    beta: float = eqx.field(static=True)
    sigma: float = eqx.field(static=True)
    dynamics: str = eqx.field(static=True)

    def density(self, num_points: int | None = None) -> Array:
        r"""$\rho$ at $\theta_j = 2\pi j / N$ (default $N = 4K$)."""
        kk = (self.coefficients.shape[-1] - 1) // 2
        return density_values(self.coefficients, num_points or 4 * kk)

    @property
    def order_parameter(self) -> Array:
        r"""$|\int e^{i\theta}\rho\,d\theta| = \pi |a_1|$: the mean-field $|\frac1n\sum_i x_i|$."""
        return math.pi * jnp.abs(self.coefficients[1])


def _model(beta, sigma, dynamics, num_modes, d):
    check_dimension(d)
    dyn = check_dynamics(dynamics)
    b, s = check_beta(beta), check_sigma(sigma)
    kk = check_modes(num_modes, b)
    return CircleDensityModel(jnp.asarray(b), jnp.asarray(s), kk, dyn), b, s


@eqx.filter_jit
def _newton(model, x0, rtol, atol, max_steps: int):
    def g(x, args):
        n, lam = even_rhs(args, x)
        return n + lam * x

    sol = optx.root_find(g, optx.Newton(rtol=rtol, atol=atol), x0, model, max_steps=max_steps, throw=False)
    x = sol.value
    res = jnp.max(jnp.abs(g(x, model)))
    eig = jnp.linalg.eigvals(jax.jacfwd(lambda y: g(y, model))(x))
    return x, res, eig[jnp.argsort(-jnp.real(eig))], RESULTS.promote(sol.result)


def stationary_density(
    rho_guess: Float[ArrayLike, " n"],
    *,
    beta: float,
    sigma: float,
    dynamics: str = "usa",
    num_modes: int = 32,
    d: int = 2,
    rtol: float = 1e-12,
    atol: float = 1e-14,
    max_steps: int = 100,
    stability_tol: float = 1e-9,
    throw: bool = True,
) -> StationaryDensity:
    r"""A stationary density near ``rho_guess``: Newton on $G(x) = 0$ in the even basis, and its stability.

    Arguments:
        rho_guess: a density sampled at $\theta_j = 2\pi j/N$ ($N \ge 2K + 1$); only its part
            symmetric about $\theta = 0$ is used (rotate a cluster to $\theta = 0$ first).
        beta, sigma, dynamics, num_modes, d: as `solve_density`.
        rtol, atol: Newton's tolerances on the step; ``max_steps``: its iterations.
        stability_tol: ``stable`` means every eigenvalue has real part below ``-stability_tol``.
        throw: raise `rankdyn.SolveError` if Newton failed (else it is the ``result``).

    Returns:
        A `StationaryDensity`. The uniform density $1/2\pi$ is always one; a guess near a
        clustered state finds that state.

    Raises:
        UsageError: before compute, as `solve_density`.
        SolveError: with ``throw=True``, if Newton did not converge.
    """
    model, b, s = _model(beta, sigma, dynamics, num_modes, d)
    rho, batched = check_density(rho_guess, model.num_modes, "rho_guess")
    if batched:
        raise UsageError(f"rho_guess must be one density (N,), got shape {np.shape(rho_guess)}.")
    x0 = density_coefficients(jnp.asarray(rho[0]), model.num_modes)[1 : model.num_modes + 1]
    x, res, eig, result = _newton(
        model,
        x0,
        jnp.asarray(check_positive("rtol", rtol)),
        jnp.asarray(check_positive("atol", atol)),
        int(max_steps),
    )
    if throw and not bool(result == RESULTS.successful):
        raise SolveError(f"stationary_density: Newton failed ({RESULTS[result]}); residual {float(res):.3g}.")
    stable = jnp.max(jnp.real(eig)) < -stability_tol
    c = full_coefficients(x)
    return StationaryDensity(c, res, eig, stable, tail_fraction(c), result, b, s, dynamics)


def imex_step_map(model, param: str, h: float, split):
    r"""The IMEX step map $c \mapsto (I - hL)^{-1}(c + hN(c))$ of ``model`` with its field
    ``param`` set to the continuation parameter $p$: ``split(model, c)`` gives $(N(c), L)$, $L$
    diagonal. Shared by the circle's even densities and the sphere's zonal ones."""

    def f(x, p):
        x = jnp.asarray(x)
        m = eqx.tree_at(lambda mm: getattr(mm, param), model, jnp.asarray(p, x.dtype))
        n, lam = split(m, x)
        return (x + h * n) / (1 - h * lam)

    return f


def density_step_map(
    *,
    param: str,
    beta: float,
    sigma: float,
    dynamics: str = "usa",
    num_modes: int = 32,
    d: int = 2,
    h: float = 0.1,
) -> Callable[[Array, Array], Array]:
    r"""The IMEX step $f(x, p) = (I - hL)^{-1}(x + hN(x))$ on even densities, $p$ = ``param``.

    Arguments:
        param: ``"sigma"`` or ``"beta"``: the parameter ``p`` of ``f(x, p)`` (the other one is fixed
            at the value given).
        beta, sigma, dynamics, num_modes, d: as `solve_density`; ``num_modes`` must suit the
            largest $\beta$ the branch reaches.
        h: the step $h > 0$; the fixed points and the $+1$ crossings do not depend on it.

    Returns:
        ``f(x, p)`` for `rankdyn.equilibria.continue_branch`: ``x`` the cosines $a_{1..K}$
        (the uniform density is ``zeros(K)``).

    Raises:
        UsageError: on an unknown ``param``, a step $h \le 0$, or as `solve_density`.
    """
    if param not in PARAMS:
        raise UsageError(f"param must be one of {PARAMS}, got {param!r}.")
    if not (isinstance(h, (int, float)) and math.isfinite(h) and h > 0):
        raise UsageError(f"h (the step of the IMEX map) must be a finite number > 0, got {h!r}.")
    model, _, _ = _model(beta, sigma, dynamics, num_modes, d)

    return imex_step_map(model, param, h, even_rhs)


def continue_density(
    x_start: Float[ArrayLike, " K"],
    p_start: float,
    p_end: float,
    *,
    param: str = "sigma",
    beta: float,
    sigma: float,
    dynamics: str = "usa",
    num_modes: int = 32,
    d: int = 2,
    h: float = 0.1,
    **kwargs,
) -> Branch:
    r"""Continue a branch of stationary even densities in $\sigma$ or $\beta$ (`continue_branch` of
    `density_step_map`).

    Arguments:
        x_start: the cosines $a_{1..K}$ of a stationary density at ``p_start`` (``zeros(K)``: the
            uniform one; a `StationaryDensity`'s ``coefficients[1:K + 1]``).
        p_start, p_end: the parameter interval.
        param, beta, sigma, dynamics, num_modes, d, h: as `density_step_map` (the value of
            ``param`` given here is replaced along the branch).
        kwargs: passed to `rankdyn.equilibria.continue_branch` (``ds``, ``max_steps``, ``throw``, ...).

    Returns:
        A `rankdyn.equilibria.Branch`: its points ``(k, K)`` are cosine vectors, its
        bifurcations the uniform state's transitions (``branch-point``, where a multiplier
        crosses $+1$) and the folds of the clustered branches.

    Raises:
        UsageError: as `density_step_map` and `continue_branch`.
    """
    f = density_step_map(
        param=param, beta=beta, sigma=sigma, dynamics=dynamics, num_modes=num_modes, d=d, h=h
    )
    x0 = np.asarray(x_start, dtype=np.float64)
    if x0.shape != (num_modes,):
        raise UsageError(f"x_start must be the {num_modes} cosines a_1..a_K, got shape {x0.shape}.")
    return continue_branch(f, x0, p_start, p_end, param_name=param, **kwargs)
