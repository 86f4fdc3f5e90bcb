r"""Stationary zonal densities on $S^2$: Newton, their stability, their continuation (`_zonal`).

As on the circle (`_stationary`), on the zonal coefficients $x = (x_1, \dots, x_{L-1})$ without the
mass mode, $\dot x = G(x) = N(x) + Lx$ with $L = \mathrm{diag}(-\frac{\sigma^2}{2}l(l+1))$:

- `stationary_zonal_density`: Newton (Optimistix) on $G(x) = 0$; stability from the eigenvalues of
  $DG(x)$ (the linearised operator on axisymmetric perturbations).
- `zonal_step_map`: the IMEX step $x \mapsto (I - hL)^{-1}(x + hN(x))$; at the uniform state its
  multipliers $(1 + hg_l)/(1 + h\sigma^2 l(l+1)/2)$ ($g_l = l(l+1)\kappa_l/\beta$ the transport's
  rate) cross $+1$ exactly where the rate of degree $l$ crosses 0, for every $h > 0$.
- `continue_zonal_density`: that map continued in $\sigma$ or $\beta$ with
  `rankdyn.equilibria.continue_branch`; its branch points are the uniform state's thresholds.
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
from ._checks import check_beta, check_dynamics, check_positive, check_sigma
from ._sphere_checks import check_band_limit, check_sphere_dimension, check_zonal_density
from ._stationary import imex_step_map
from ._zonal import ZonalDensityModel, _legendre, zonal_full, zonal_values

__all__ = ["ZonalStationaryDensity", "stationary_zonal_density", "zonal_step_map", "continue_zonal_density"]

PARAMS = ("sigma", "beta")


class ZonalStationaryDensity(eqx.Module):
    r"""A stationary axisymmetric density on $S^2$ (symmetric about the pole $\theta = 0$).

    Attributes:
        coefficients: ``(L,)`` its zonal coefficients $(1/\sqrt{4\pi}, x_1, \dots, x_{L-1})$ on
            $Y_{l0} = \sqrt{(2l+1)/4\pi}\,P_l(\cos\theta)$.
        residual: $\max_l |G(x)_l|$.
        eigenvalues: ``(L - 1,)`` complex, of $DG(x)$ on axisymmetric perturbations without the mass
            mode, by decreasing real part.
        stable: every eigenvalue has real part below ``-stability_tol``.
        tail: the share of its $L^2$ norm in the top 10% of the degrees.
        result: a `RESULTS` member; beta, sigma, dynamics: the parameters.
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

    def density(self, cos_theta: Float[ArrayLike, " n"]) -> Array:
        r"""$\rho$ at the points $\cos\theta$."""
        return zonal_values(self.coefficients, cos_theta)

    @property
    def order_parameter(self) -> Array:
        r"""$|\int x\,\rho\,dS| = \sqrt{4\pi/3}\,|x_1|$: the mean-field $|\frac1n\sum_i x_i|$."""
        return math.sqrt(4 * math.pi / 3) * jnp.abs(self.coefficients[1])


def _model(beta, sigma, dynamics, band_limit, d):
    check_sphere_dimension(d)
    dyn = check_dynamics(dynamics)
    b, s = check_beta(beta), check_sigma(sigma)
    band = check_band_limit(band_limit, b)
    return ZonalDensityModel(jnp.asarray(b), jnp.asarray(s), band, dyn), b, s


def _tail(c: Array) -> Array:
    top = max(1, math.ceil(c.shape[-1] / 10))
    return jnp.sqrt(jnp.sum(c[-top:] ** 2) / jnp.sum(c**2))


@eqx.filter_jit
def _newton(model, x0, rtol, atol, max_steps: int):
    def g(x, args):
        return args.rhs(x)

    sol = optx.root_find(g, optx.Newton(rtol=rtol, atol=atol), x0, model, max_steps=max_steps, throw=False)
    x = sol.value
    res = jnp.max(jnp.abs(g(x, model)))
    eig = jnp.linalg.eigvals(jax.jacfwd(lambda y: g(y, model))(x))
    return x, res, eig[jnp.argsort(-jnp.real(eig))], RESULTS.promote(sol.result)


def stationary_zonal_density(
    rho_guess: Float[ArrayLike, " n"],
    *,
    beta: float,
    sigma: float,
    dynamics: str = "usa",
    band_limit: int = 32,
    d: int = 3,
    rtol: float = 1e-10,
    atol: float = 1e-12,
    max_steps: int = 100,
    stability_tol: float = 1e-9,
    throw: bool = True,
) -> ZonalStationaryDensity:
    r"""A stationary axisymmetric density near ``rho_guess``: Newton on $G(x) = 0$ and its stability.

    Arguments:
        rho_guess: an axisymmetric density at the $N \ge L$ Gauss-Legendre nodes $\cos\theta_j$
            (``numpy.polynomial.legendre.leggauss(N)[0]``, ascending), projected on degrees $< L$.
        beta, sigma, dynamics, band_limit, d: as `solve_sphere_density`.
        rtol, atol: Newton's tolerances on the step (the right-hand side's round-off is about
            $10^{-13}$: the kernel's $e^{\beta}$ scale through two transforms); ``max_steps``: its
            iterations.
        stability_tol: ``stable`` means every eigenvalue has real part below ``-stability_tol``.
        throw: raise `rankdyn.SolveError` if Newton failed (else it is the ``result``).

    Returns:
        A `ZonalStationaryDensity` (the uniform density $1/4\pi$ is always one).

    Raises:
        UsageError: before compute, as `solve_sphere_density` (``d != 3``, sigma, band limit, a
            negative, non-normalisable or wrongly shaped guess).
        SolveError: with ``throw=True``, if Newton did not converge.
    """
    model, b, s = _model(beta, sigma, dynamics, band_limit, d)
    rho = check_zonal_density(rho_guess, model.band_limit)
    _, _, fwd = _legendre(rho.shape[0], model.band_limit)
    x0 = jnp.asarray(fwd @ rho)[1:]
    x, res, eig, result = _newton(
        model,
        x0,
        jnp.asarray(check_positive("rtol", rtol)),
        jnp.asarray(check_positive("atol", atol)),
        int(max_steps),
    )
    if throw and not bool(result == RESULTS.successful):
        raise SolveError(
            f"stationary_zonal_density: Newton failed ({RESULTS[result]}); residual {float(res):.3g}."
        )
    stable = jnp.max(jnp.real(eig)) < -stability_tol
    c = zonal_full(x)
    return ZonalStationaryDensity(c, res, eig, stable, _tail(c), result, b, s, dynamics)


def zonal_step_map(
    *,
    param: str,
    beta: float,
    sigma: float,
    dynamics: str = "usa",
    band_limit: int = 32,
    d: int = 3,
    h: float = 0.1,
) -> Callable[[Array, Array], Array]:
    r"""The IMEX step $f(x, p) = (I - hL)^{-1}(x + hN(x))$ on zonal densities, $p$ = ``param``.

    Arguments:
        param: ``"sigma"`` or ``"beta"`` (the other is fixed at the value given).
        beta, sigma, dynamics, band_limit, d: as `solve_sphere_density`; ``band_limit`` must suit
            the largest $\beta$ the branch reaches.
        h: the step $h > 0$; the fixed points and the $+1$ crossings do not depend on it.

    Returns:
        ``f(x, p)`` for `rankdyn.equilibria.continue_branch`: ``x`` the zonal coefficients
        $x_{1..L-1}$ (the uniform density is ``zeros(L - 1)``).

    Raises:
        UsageError: on an unknown ``param``, $h \le 0$, or as `solve_sphere_density`.
    """
    if param not in PARAMS:
        raise UsageError(f"param must be one of {PARAMS}, got {param!r}.")
    if not (isinstance(h, (int, float)) and math.isfinite(h) and h > 0):
        raise UsageError(f"h (the step of the IMEX map) must be a finite number > 0, got {h!r}.")
    model, _, _ = _model(beta, sigma, dynamics, band_limit, d)

    return imex_step_map(model, param, h, lambda m, x: m.split(x))


def continue_zonal_density(
    x_start: Float[ArrayLike, " Lm1"],
    p_start: float,
    p_end: float,
    *,
    param: str = "sigma",
    beta: float,
    sigma: float,
    dynamics: str = "usa",
    band_limit: int = 32,
    d: int = 3,
    h: float = 0.1,
    **kwargs,
) -> Branch:
    r"""Continue a branch of stationary zonal densities in $\sigma$ or $\beta$ (`continue_branch` of
    `zonal_step_map`).

    Arguments:
        x_start: the coefficients $x_{1..L-1}$ of a stationary density at ``p_start``
            (``zeros(L - 1)``: the uniform one; a `ZonalStationaryDensity`'s ``coefficients[1:]``).
        p_start, p_end: the parameter interval.
        param, beta, sigma, dynamics, band_limit, d, h: as `zonal_step_map`.
        kwargs: passed to `rankdyn.equilibria.continue_branch` (``ds``, ``max_steps``, ...).

    Returns:
        A `rankdyn.equilibria.Branch`; its ``branch-point`` bifurcations are the uniform state's
        thresholds, its folds those of the clustered branches.

    Raises:
        UsageError: as `zonal_step_map` and `continue_branch`.
    """
    f = zonal_step_map(
        param=param, beta=beta, sigma=sigma, dynamics=dynamics, band_limit=band_limit, d=d, h=h
    )
    x0 = np.asarray(x_start, dtype=np.float64)
    if x0.shape != (band_limit - 1,):
        raise UsageError(
            f"x_start must be the {band_limit - 1} coefficients x_1..x_(L-1), got shape {x0.shape}."
        )
    return continue_branch(f, x0, p_start, p_end, param_name=param, **kwargs)
