r"""The equiangular clustering rate of each normalisation scheme, with its prefactor
(docs/theory.md#equiangular-rates-per-placement).

Under `rankdyn.flow.FlowField` with ``placement=P``, $Q = K = V = I$ and the complete mask, an
equiangular start with common radius $r_0$ stays equiangular with a common radius $r$
(rankdyn/_flow/_schemes.py: $\dot\theta_j = s_j^{-1}P_{\theta_j}A_j$): with $f$ the post-LN speed
of `rankdyn.theory.equiangular_rhs`,

$$\dot\rho = f(\rho)/s,\qquad g(\rho) = \langle\theta_i, A_i\rangle
= \frac{e^\beta + (n-1)\rho e^{\beta\rho}}{Z},$$
$$|A_i|^2 = \frac{e^{2\beta} + 2(n-1)\rho e^{\beta(1+\rho)} + (n-1)(1 + (n-2)\rho)e^{2\beta\rho}}{Z^2},$$

$s = 1$ (post), $r$ with $\dot r = g$ (pre; mix after ``mix_time``), $r|A|$ with $\dot r = g/|A|$
(peri), $|A|/\alpha$ (ngpt), $\sqrt{t+1}$ (lns). Near $\rho = 1$, $f \approx 2c(1-\rho)$ with
$c = 1$ (SA) or $e^\beta$ (USA), and:

| ``placement`` | law of $1 - \rho(t)$ | exponent | prefactor |
|---|---|---|---|
| post | $C e^{-\lambda t}$ | $\lambda = 2c$ | $C = (1-\rho_0)e^{\lambda J}$ |
| ngpt | $C e^{-\lambda t}$ | $\lambda = 2\alpha$ | the same with $f$ replaced by $\alpha f/\lVert A\rVert$ |
| lns | $C e^{-\lambda\sqrt{t+1}}$ | $\lambda = 4c$ | $C_{\rm post}e^{4c}$ |
| pre, peri, mix | $C t^{-p}$ | $p = 2$ | $C = K/c_r^2$, $K = \lim r^2(1-\rho)$, $c_r = \lim\dot r$ |

with $J = \int_{\rho_0}^1 [\frac1{f} - \frac1{\lambda(1-u)}]du$; under lns
$\rho(t) = \rho_{\rm post}(2\sqrt{t+1}-2)$. For the radial schemes $d\rho/dr = f/(r g)$
(pre and peri alike; mix after $\tau$ from $\rho(\tau)$),
so $1 - \rho = (1-\rho_0)\frac{r_0^2}{r^2}\exp\int_{\rho_0}^{\rho}\frac{G(u) - 1}{1-u}du$ with
$G = \frac{e^\beta + (n-1)u e^{\beta u}}{e^{\beta u}(1 + (n-1)u)}$ ($G(1) = 1$; $Z$ cancels, so
SA and USA share it), and $r \approx c_r t$ with $c_r = g(1)$ = 1 (SA) or $e^\beta$ (USA) for
pre and mix, 1 for peri.
"""

from __future__ import annotations

import dataclasses

import numpy as np
from scipy import integrate

from .._errors import UsageError
from ._equiangular import _check_beta, _check_dynamics, _check_n, _check_rho, _k_post, equiangular_cosine

__all__ = ["EquiangularRate", "equiangular_rate", "EQUIANGULAR_PLACEMENTS"]

#: The placements `equiangular_rate` knows: those of `rankdyn.flow.FlowField`.
EQUIANGULAR_PLACEMENTS = ("post", "pre", "mix", "peri", "ngpt", "lns")


@dataclasses.dataclass(frozen=True)
class EquiangularRate:
    """The asymptotic law of $1 - \\rho(t)$: ``law`` is ``"exp"`` ($C e^{-\\lambda t}$), ``"exp_sqrt"``
    ($C e^{-\\lambda\\sqrt{t+1}}$) or ``"power"`` ($C t^{-\\lambda}$); ``exponent`` is $\\lambda$,
    ``prefactor`` $C$. ``radius_constant`` is $K = \\lim r^2(1-\\rho)$ for the radial schemes (pre, peri,
    mix; nan otherwise) and ``radius_speed`` $c_r = \\lim \\dot r$ (nan otherwise)."""

    law: str
    exponent: float
    prefactor: float
    radius_constant: float = float("nan")
    radius_speed: float = float("nan")


def _attention_norm(u, beta: float, n: int, dynamics: str):
    """|A_i| at cosine u, computed relative to e^(beta u) (no overflow at large beta)."""
    a = np.exp(beta * (1 - u))
    sq = a * a + 2 * (n - 1) * u * a + (n - 1) * (1 + (n - 2) * u)
    z = (a + (n - 1)) if dynamics == "sa" else n * np.exp(-beta * u)
    return np.sqrt(sq) / z


def _quad(fun, lo):
    def safe(u):
        return fun(u) if 1 - u > 0 else 0.0

    return integrate.quad(safe, lo, 1, epsabs=0, epsrel=1e-12, limit=200)[0]


def _exp_prefactor(k, lam: float, r0: float) -> float:
    """C of 1 - rho ~ C e^(-lam t) for rho' = (1 - rho) k(rho) with k(1) = lam."""
    return float((1 - r0) * np.exp(lam * _quad(lambda u: (1 / k(u) - 1 / lam) / (1 - u), r0)))


def _radius_constant(beta: float, n: int, r0: float, radius: float) -> float:
    """K = lim r^2 (1 - rho) of the radial schemes, from (rho0, r0)."""

    def big_g(u):
        a = np.exp(beta * (1 - u))
        return (a + (n - 1) * u) / (1 + (n - 1) * u)

    return float((1 - r0) * radius**2 * np.exp(_quad(lambda u: (big_g(u) - 1) / (1 - u), r0)))


def _positive(name: str, value, *, zero: bool) -> float:
    ok = isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool)
    if not (ok and np.isfinite(value) and (value >= 0 if zero else value > 0)):
        raise UsageError(f"{name} must be a finite number {'>= 0' if zero else '> 0'}, got {value!r}.")
    return float(value)


def _scheme_arguments(placement, ngpt_alpha, mix_time) -> tuple[float, float]:
    """(alpha, tau) checked as `rankdyn.flow.FlowField` checks them (rankdyn/_flow/_schemes.py; the
    theory room does not import the flow's)."""
    if placement not in EQUIANGULAR_PLACEMENTS:
        raise UsageError(f"placement must be one of {EQUIANGULAR_PLACEMENTS}, got {placement!r}.")
    for name, value, owner in (("ngpt_alpha", ngpt_alpha, "ngpt"), ("mix_time", mix_time, "mix")):
        if placement != owner and value is not None:
            raise UsageError(f"{name} applies to placement={owner!r} only, not {placement!r}.")
        if placement == owner and value is None:
            raise UsageError(f"placement={owner!r} needs {name}.")
    alpha = _positive("ngpt_alpha", ngpt_alpha, zero=False) if placement == "ngpt" else 1.0
    tau = _positive("mix_time", mix_time, zero=True) if placement == "mix" else 0.0
    return alpha, tau


def equiangular_rate(
    placement: str,
    beta: float,
    n: int,
    *,
    rho0: float,
    dynamics: str = "sa",
    radius: float = 1.0,
    ngpt_alpha: float | None = None,
    mix_time: float | None = None,
) -> EquiangularRate:
    r"""How $1 - \rho(t)$ of the equiangular flow vanishes under each normalisation scheme, with
    its prefactor (module docstring's table).

    Arguments:
        placement: one of `EQUIANGULAR_PLACEMENTS` (`rankdyn.flow.FlowField`'s ``placement``).
        beta: inverse temperature, >= 0.
        n: tokens, >= 2.
        rho0: the initial common cosine, in $(-1/(n-1), 1)$.
        dynamics: ``"sa"`` or ``"usa"``.
        radius: the common initial radius $r_0 > 0$ (read by pre, peri and mix).
        ngpt_alpha: nGPT's $\alpha > 0$ (``ngpt`` only, required there).
        mix_time: Mix-LN's switching time $\tau \ge 0$ (``mix`` only, required there).

    Returns:
        An `EquiangularRate`.

    Raises:
        UsageError: an unknown placement or dynamics, a scheme parameter missing or given to another
            scheme, or a value out of range.
    """
    alpha, tau = _scheme_arguments(placement, ngpt_alpha, mix_time)
    n = _check_n(n)
    beta = _check_beta(beta)
    dynamics = _check_dynamics(dynamics)
    r0 = float(_check_rho("rho0", rho0, n))
    if not (isinstance(radius, (int, float, np.integer, np.floating)) and np.isfinite(radius) and radius > 0):
        raise UsageError(f"radius must be a finite number > 0, got {radius!r}.")
    c = 1.0 if dynamics == "sa" else float(np.exp(beta))
    post = lambda u: _k_post(u, beta, n, dynamics)  # noqa: E731
    if placement in ("post", "lns"):
        lam = 2 * c
        pref = _exp_prefactor(post, lam, r0)
        if placement == "post":
            return EquiangularRate("exp", lam, pref)
        return EquiangularRate("exp_sqrt", 2 * lam, float(pref * np.exp(2 * lam)))
    if placement == "ngpt":
        lam = 2 * alpha
        k = lambda u: alpha * post(u) / _attention_norm(u, beta, n, dynamics)  # noqa: E731
        return EquiangularRate("exp", lam, _exp_prefactor(k, lam, r0))
    start = r0
    if placement == "mix":
        start = 1 - float(equiangular_cosine(tau, beta, n, rho0=r0, dynamics=dynamics, gap=True))
        if not start < 1:
            raise UsageError(
                f"with mix_time = {tau} the post-LN phase reaches rho = 1 to float64 precision before "
                "the switch; no pre-LN rate is left to measure."
            )
    speed = 1.0 if placement == "peri" else c
    big_k = _radius_constant(beta, n, start, float(radius))
    return EquiangularRate("power", 2.0, big_k / speed**2, big_k, speed)
