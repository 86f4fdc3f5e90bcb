r"""The equiangular flow: all pairwise cosines equal, one scalar ODE (docs/theory.md#equiangular-flow).

For tokens with $\langle x_i, x_j\rangle = \rho$ ($i \ne j$), $|x_i| = 1$, under `rankdyn.flow.FlowField`
with $Q = K = V = I$, the complete mask and ``placement="post"``, the attention vector is
$A_i = (e^\beta x_i + e^{\beta\rho}\sum_{j\ne i} x_j)/Z$ and the projected velocity
$\dot x_i = \frac{e^{\beta\rho}}{Z}\big(\sum_{j\ne i} x_j - (n-1)\rho\, x_i\big)$, so the configuration
stays equiangular and

$$\dot\rho = f(\rho) = \frac{2 e^{\beta\rho}(1-\rho)\big((n-1)\rho+1\big)}{Z},\qquad
Z = e^\beta + (n-1)e^{\beta\rho}\ (\text{SA}),\quad Z = n\ (\text{USA}).$$

At $\beta = 0$: $\frac{1 + (n-1)\rho}{1-\rho} = \frac{1+(n-1)\rho_0}{1-\rho_0}e^{2t}$. Otherwise
$t(\rho) = \int_{\rho_0}^\rho du / f(u)$ by quadrature and $\rho(t)$ by root-finding on it.
"""

from __future__ import annotations

import numpy as np
from scipy import integrate, optimize

from .._errors import UsageError

__all__ = [
    "equiangular_tokens",
    "equiangular_rhs",
    "equiangular_time",
    "equiangular_cosine",
]

_DYNAMICS = ("sa", "usa")


def _check_n(n) -> int:
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 2:
        raise UsageError(f"n must be an integer >= 2 (the number of tokens), got {n!r}.")
    return int(n)


def _check_beta(beta) -> float:
    if isinstance(beta, bool) or not isinstance(beta, (int, float, np.integer, np.floating)):
        raise UsageError(f"beta must be a finite number >= 0, got {beta!r}.")
    if not (np.isfinite(beta) and beta >= 0):
        raise UsageError(f"beta must be a finite number >= 0, got {beta!r}.")
    return float(beta)


def _check_dynamics(dynamics) -> str:
    if dynamics not in _DYNAMICS:
        raise UsageError(f"dynamics must be one of {_DYNAMICS}, got {dynamics!r}.")
    return dynamics


def _check_rho(name, rho, n: int, *, closed_top: bool = False) -> np.ndarray:
    r = np.asarray(rho, dtype=float)
    lo = -1.0 / (n - 1)
    ok = np.isfinite(r) & (r > lo) & ((r <= 1) if closed_top else (r < 1))
    if not np.all(ok):
        top = "1]" if closed_top else "1)"
        raise UsageError(
            f"{name} must lie in (-1/(n-1), {top} = ({lo:.6g}, {top} for n = {n} equiangular unit "
            f"tokens, got {rho!r}."
        )
    return r


def _out(x):
    return float(x) if np.ndim(x) == 0 else x


def equiangular_tokens(n: int, d: int, rho: float, *, dtype=None) -> np.ndarray:
    r"""$n$ unit vectors in $\mathbb R^d$ with all pairwise cosines $\rho$.

    $x_i = a e_i + c\,\mathbf 1$ with $a = \sqrt{1-\rho}$ and $c = (\sqrt{1 + (n-1)\rho} - a)/n$, in the
    first $n$ coordinates. The Gram matrix $(1-\rho)I + \rho\mathbf 1\mathbf 1^\top$ has rank $n$ for
    $-1/(n-1) < \rho < 1$, so $d \ge n$ is needed (the simplex $\rho = -1/(n-1)$ fits in $n - 1$).

    Arguments:
        n: tokens, >= 2.
        d: dimension, >= n.
        rho: the common cosine, in $(-1/(n-1), 1)$.
        dtype: NumPy dtype of the result (default float64).

    Returns:
        ``(n, d)`` array.

    Raises:
        UsageError: n < 2, d < n, rho out of range.
    """
    n = _check_n(n)
    if isinstance(d, bool) or not isinstance(d, (int, np.integer)) or d < n:
        raise UsageError(
            f"an equiangular start of n = {n} tokens needs d >= n (its Gram matrix has rank n), got d={d!r}."
        )
    r = float(_check_rho("rho", rho, n))
    a = np.sqrt(1 - r)
    c = (np.sqrt(1 + (n - 1) * r) - a) / n
    x = np.zeros((n, d))
    x[:, :n] = a * np.eye(n) + c
    return x.astype(dtype or np.float64)


def _z(u, beta: float, n: int, dynamics: str):
    return np.exp(beta) + (n - 1) * np.exp(beta * u) if dynamics == "sa" else np.full_like(u, n, dtype=float)


def _k_post(u, beta: float, n: int, dynamics: str):
    """f(u) / (1 - u): the post-LN speed without its zero at u = 1."""
    u = np.asarray(u, dtype=float)
    if dynamics == "sa":
        # e^(beta u) / (e^beta + (n-1) e^(beta u)) written without overflow at large beta
        w = 1.0 / (np.exp(beta * (1 - u)) + (n - 1))
    else:
        w = np.exp(beta * u) / n
    return 2 * w * ((n - 1) * u + 1)


def equiangular_rhs(rho, beta: float, n: int, *, dynamics: str = "sa"):
    r"""$\dot\rho = 2e^{\beta\rho}(1-\rho)((n-1)\rho+1)/Z$ (module docstring), the equiangular
    post-LN flow of `rankdyn.flow.FlowField` with $Q = K = V = I$ and the complete mask.

    Arguments:
        rho: the cosine(s), in $(-1/(n-1), 1]$.
        beta: the inverse temperature, >= 0.
        n: tokens, >= 2.
        dynamics: ``"sa"`` ($Z = e^\beta + (n-1)e^{\beta\rho}$) or ``"usa"`` ($Z = n$).

    Returns:
        $\dot\rho$ (a float, or an array like ``rho``).
    """
    n = _check_n(n)
    beta = _check_beta(beta)
    r = _check_rho("rho", rho, n, closed_top=True)
    return _out((1 - r) * _k_post(r, beta, n, _check_dynamics(dynamics)))


def _time_beta0(r, r0, n):
    return 0.5 * (np.log((1 + (n - 1) * r) / (1 + (n - 1) * r0)) - np.log((1 - r) / (1 - r0)))


def _time_of_gap(eps: float, r0: float, beta: float, n: int, dynamics: str) -> float:
    """t at which 1 - rho = eps (beta > 0), resolving gaps below float64's resolution of 1."""
    k1 = float(_k_post(1.0, beta, n, dynamics))

    def g(u):
        # 1/f = 1/((1-u) k(u)) = 1/((1-u) k(1)) + (1/k(u) - 1/k(1))/(1-u): the pole at u = 1 is
        # integrated exactly and quad sees a smooth integrand (0 where u rounds to 1: no mass there).
        gap = 1 - u
        return (1 / _k_post(u, beta, n, dynamics) - 1 / k1) / gap if gap > 0 else 0.0

    part = integrate.quad(g, r0, 1 - eps, epsabs=0, epsrel=1e-13, limit=200)[0]
    return -np.log(eps / (1 - r0)) / k1 + part


def equiangular_time(rho, beta: float, n: int, *, rho0: float, dynamics: str = "sa"):
    r"""$t(\rho) = \int_{\rho_0}^{\rho} du/f(u)$: the time the equiangular flow takes from $\rho_0$ to $\rho$.

    At $\beta = 0$ the closed form $t = \frac12\log\frac{1+(n-1)\rho}{1+(n-1)\rho_0} - \frac12\log
    \frac{1-\rho}{1-\rho_0}$; otherwise ``scipy.integrate.quad`` (relative tolerance 1e-13). $f > 0$
    on $(-1/(n-1), 1)$, so $\rho(t)$ increases to 1 and $t(\rho) < 0$ for $\rho < \rho_0$.

    Arguments:
        rho: target cosine(s) in $(-1/(n-1), 1)$.
        beta, n, dynamics: as in `equiangular_rhs`.
        rho0: the start, in $(-1/(n-1), 1)$.

    Returns:
        The time(s).
    """
    n = _check_n(n)
    beta = _check_beta(beta)
    dynamics = _check_dynamics(dynamics)
    r = _check_rho("rho", rho, n)
    r0 = float(_check_rho("rho0", rho0, n))
    if beta == 0:
        return _out(_time_beta0(r, r0, n))
    one = lambda x: _time_of_gap(1 - x, r0, beta, n, dynamics)  # noqa: E731
    return _out(np.vectorize(one, otypes=[float])(r))


def equiangular_cosine(t, beta: float, n: int, *, rho0: float, dynamics: str = "sa", gap: bool = False):
    r"""$\rho(t)$ of the equiangular flow from $\rho(0) = \rho_0$ (module docstring).

    At $\beta = 0$: $\rho = (K e^{2t} - 1)/(K e^{2t} + n - 1)$ with $K = \frac{1+(n-1)\rho_0}{1-\rho_0}$.
    Otherwise the root of $t(\rho) = t$ (`equiangular_time`, ``scipy.optimize.brentq`` in the variable
    $\log(1-\rho)$, so that cosines within round-off of 1 are resolved).

    Arguments:
        t: time(s) >= 0.
        beta, n, dynamics, rho0: as in `equiangular_time`.
        gap: return $1 - \rho(t)$ instead of $\rho(t)$, accurate also where it is below float64's
            resolution of 1 (down to about 1e-300; 0 below).

    Returns:
        The cosine(s) (or gaps); $1 - \rho$ is accurate to about 1e-12 relative.
    """
    n = _check_n(n)
    beta = _check_beta(beta)
    dynamics = _check_dynamics(dynamics)
    r0 = float(_check_rho("rho0", rho0, n))
    tt = np.asarray(t, dtype=float)
    if not np.all(np.isfinite(tt)) or np.any(tt < 0):
        raise UsageError(f"t must be finite and >= 0, got {t!r}.")
    if beta == 0:
        big = (1 + (n - 1) * r0) / (1 - r0) * np.exp(2 * tt)
        return _out(n / (big + n - 1) if gap else (big - 1) / (big + n - 1))

    def one(x):
        if x == 0:
            return 1 - r0
        # (1 - rho)' = -k(rho) (1 - rho): log(1 - rho) falls no faster than max k over [rho0, 1].
        k_max = float(np.max(_k_post(np.linspace(r0, 1, 257), beta, n, dynamics)))
        s_hi = np.log(1 - r0)
        s_lo = s_hi - 1.25 * k_max * x - 1
        if s_lo < np.log(1e-300):
            s_lo = np.log(1e-300)
        fun = lambda s: _time_of_gap(np.exp(s), r0, beta, n, dynamics) - x  # noqa: E731
        if fun(s_lo) < 0:
            return 0.0  # beyond float64's range
        return np.exp(optimize.brentq(fun, s_lo, s_hi, xtol=1e-14, rtol=1e-15))

    g = np.vectorize(one, otypes=[float])(tt)
    return _out(g if gap else 1 - g)
