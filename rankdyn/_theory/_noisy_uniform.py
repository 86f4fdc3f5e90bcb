r"""The noisy uniform state: its linear stability and the type of its transition (Bessel closed forms).

Tokens on $S^{d-1}$ moved by the mean-field SA or USA field of `rankdyn.flow` ($Q = K = V = I$,
complete mask) plus a Brownian motion of generator $\frac{\sigma^2}{2}\Delta$ ($d\theta = v\,dt +
\sigma\,dB$ on the circle) have the density equation (docs/theory.md#noisy-uniform-state)

$$\partial_t\rho + \nabla\cdot(\rho\, v[\rho]) = \tfrac{\sigma^2}{2}\Delta\rho,\qquad
v[\rho](x) = P_x\!\int e^{\beta\langle x, y\rangle} y\,\rho(y)\,d\sigma(y)\ \ (\text{USA}),$$

divided by $\int e^{\beta\langle x, y\rangle}\rho\,d\sigma$ for SA ($\sigma$ the normalised surface
measure, so the uniform density is 1). Since $P_x y\, e^{\beta\langle x, y\rangle} = \beta^{-1}\nabla_x
e^{\beta\langle x, y\rangle}$, the linearised USA field is $\beta^{-1}\nabla(K * \delta\rho)$, and
the Funk-Hecke formula diagonalises it: a degree-$k$ spherical harmonic grows at

$$\lambda_k = k(k + d - 2)\Big(\frac{\kappa_k(\beta)}{\beta} - \frac{\sigma^2}{2}\Big),\qquad
\kappa_k(\beta) = \Gamma(\tfrac d2)\Big(\frac2\beta\Big)^{d/2 - 1} I_{k + d/2 - 1}(\beta)$$

for USA, and with $\kappa_k/\kappa_0$ in place of $\kappa_k$ for SA (the softmax's normaliser at
the uniform state is $\kappa_0$). On the circle ($d = 2$) $\kappa_k = I_k$: the rates
$k^2(I_k/\beta - \sigma^2/2)$ and $k^2(I_k/(\beta I_0) - \sigma^2/2)$. $\kappa_k$ decreases in $k$,
so mode 1 destabilises first, at $\sigma_c^2 = 2\kappa_1/\beta = 2^{d/2}\Gamma(\frac d2)
I_{d/2}(\beta)/\beta^{d/2}$ (USA).

The Bessel functions go through ``scipy.special.ive`` in log space, so large $\beta$ does not
overflow before the result does. These are NumPy/SciPy closed forms (not jitted):
``jax.scipy.special`` has only ``i0e`` and ``i1e``, not $I_\nu$ of general order.
"""

from __future__ import annotations

import numpy as np
from scipy import optimize, special

from .._errors import UsageError

__all__ = [
    "uniform_mode_gain",
    "uniform_mode_rate",
    "critical_noise",
    "transition_beta",
    "transition_type",
]

_DYNAMICS = ("sa", "usa")


def _check(beta, d, dynamics) -> np.ndarray:
    if isinstance(d, bool) or not isinstance(d, (int, np.integer)) or d < 2:
        raise UsageError(f"d must be an integer >= 2 (the sphere S^(d-1)), got {d!r}.")
    if dynamics not in _DYNAMICS:
        raise UsageError(f"dynamics must be one of {_DYNAMICS}, got {dynamics!r}.")
    b = np.asarray(beta, dtype=float)
    if not np.all(np.isfinite(b)) or np.any(b <= 0):
        raise UsageError(f"beta must be finite and > 0, got {beta!r}.")
    return b


def _check_mode(k) -> np.ndarray:
    kk = np.asarray(k)
    if kk.dtype.kind not in "iu" or np.any(kk < 1):
        raise UsageError(f"the mode k must be an integer >= 1 (mode 0 is the mass), got {k!r}.")
    return kk


def _log_kappa(k, b, d: int):
    r"""$\log\kappa_k(\beta)$, $\kappa_k = \Gamma(d/2)(2/\beta)^{d/2-1} I_{k+d/2-1}(\beta)$."""
    nu = np.asarray(k, dtype=float) + d / 2 - 1
    return special.gammaln(d / 2) + (d / 2 - 1) * np.log(2 / b) + np.log(special.ive(nu, b)) + b


def _out(x):
    return float(x) if np.ndim(x) == 0 else x


def uniform_mode_gain(k, beta, *, d: int = 2, dynamics: str = "usa"):
    r"""The attraction of mode $k$ at the uniform state: $\kappa_k(\beta)/\beta$ (USA) or
    $\kappa_k(\beta)/(\beta\kappa_0(\beta))$ (SA), module docstring.

    Mode $k$ grows iff this exceeds $\sigma^2/2$. On the circle it is $I_k(\beta)/\beta$ (USA) or
    $I_k(\beta)/(\beta I_0(\beta))$ (SA).

    Arguments:
        k: the degree of the spherical harmonic (the Fourier mode on the circle), an integer >= 1.
        beta: the inverse temperature, > 0 (arrays broadcast with ``k``).
        d: the ambient dimension (tokens on $S^{d-1}$), >= 2.
        dynamics: ``"usa"`` or ``"sa"``.

    Returns:
        A float (or an array for array arguments).

    Raises:
        UsageError: k < 1 or not an integer, beta <= 0 or non-finite, d < 2, unknown dynamics.
    """
    b = _check(beta, d, dynamics)
    kk = _check_mode(k)
    log_g = _log_kappa(kk, b, d) - np.log(b)
    if dynamics == "sa":
        log_g = log_g - _log_kappa(0, b, d)
    return _out(np.exp(log_g))


def uniform_mode_rate(k, beta, sigma, *, d: int = 2, dynamics: str = "usa"):
    r"""The growth rate of mode $k$ at the noisy uniform state,
    $\lambda_k = k(k + d - 2)\,(\text{gain}_k - \sigma^2/2)$ (`uniform_mode_gain`).

    On the circle: $k^2(I_k(\beta)/\beta - \sigma^2/2)$ (USA), $k^2(I_k(\beta)/(\beta I_0(\beta)) -
    \sigma^2/2)$ (SA). The time is the flow's own (`rankdyn.flow.solve_flow`), the noise
    $\sigma\,dB$ with generator $\frac{\sigma^2}{2}\Delta$.

    Arguments:
        k, beta, d, dynamics: as in `uniform_mode_gain`.
        sigma: the noise amplitude, >= 0.

    Returns:
        The rate (positive: the mode grows).

    Raises:
        UsageError: as `uniform_mode_gain`, or a negative or non-finite sigma.
    """
    s = np.asarray(sigma, dtype=float)
    if not np.all(np.isfinite(s)) or np.any(s < 0):
        raise UsageError(f"sigma must be finite and >= 0, got {sigma!r}.")
    gain = np.asarray(uniform_mode_gain(k, beta, d=d, dynamics=dynamics))
    kk = np.asarray(k, dtype=float)
    return _out(kk * (kk + d - 2) * (gain - s**2 / 2))


def critical_noise(beta, *, d: int = 2, dynamics: str = "usa"):
    r"""$\sigma_c(\beta, d)$: the uniform state is linearly unstable iff $\sigma < \sigma_c$.

    Mode 1 destabilises first ($\kappa_k$ decreases in $k$): $\sigma_c^2 = 2\,\text{gain}_1$, i.e.
    $\sigma_c^2 = 2^{d/2}\Gamma(d/2) I_{d/2}(\beta)/\beta^{d/2}$ for USA (on the circle
    $2 I_1(\beta)/\beta$) and that divided by $\kappa_0(\beta) = \Gamma(d/2)(2/\beta)^{d/2-1}
    I_{d/2-1}(\beta)$ for SA (on the circle $2 I_1(\beta)/(\beta I_0(\beta))$).

    Arguments:
        beta, d, dynamics: as in `uniform_mode_gain`.

    Returns:
        $\sigma_c$ (a float, or an array for an array ``beta``).
    """
    return _out(np.sqrt(2 * np.asarray(uniform_mode_gain(1, beta, d=d, dynamics=dynamics))))


def _ratio_gap(b, d: int):
    # I_(d/2+1)(beta) / I_(d/2)(beta) - 1/d; ive's scaling e^-beta cancels in the ratio.
    return special.ive(d / 2 + 1, b) / special.ive(d / 2, b) - 1 / d


def transition_beta(d: int = 2) -> float:
    r"""$\beta^*(d)$, the root of $I_{d/2+1}(\beta)/I_{d/2}(\beta) = 1/d$.

    For noisy USA on $S^{d-1}$, arXiv 2606.05140 (Mun, Rosenzweig) states that the transition of
    the uniform state is continuous (supercritical) for $\beta < \beta^*$ and discontinuous
    (subcritical) above; on the circle, $I_2/I_1 < 1/2$ (docs/theory.md#noisy-uniform-state). The
    ratio increases from 0 to 1 in $\beta$, so the root is unique.

    Arguments:
        d: the ambient dimension, >= 2.

    Returns:
        $\beta^*$ (e.g. about 2.28 on the circle).

    Raises:
        UsageError: d < 2 or not an integer.
    """
    _check(1.0, d, "usa")
    hi = 1.0
    while _ratio_gap(hi, d) < 0:
        hi *= 2
    return float(optimize.brentq(_ratio_gap, 1e-8, hi, args=(d,), xtol=1e-14, rtol=1e-15))


def transition_type(beta, *, d: int = 2) -> str:
    r"""``"continuous"`` if $I_{d/2+1}(\beta)/I_{d/2}(\beta) < 1/d$, else ``"discontinuous"``
    (noisy USA, `transition_beta`).

    Arguments:
        beta: the inverse temperature, > 0 (a scalar).
        d: the ambient dimension, >= 2.

    Raises:
        UsageError: beta not a positive finite scalar, d < 2.
    """
    b = _check(beta, d, "usa")
    if b.ndim:
        raise UsageError(f"transition_type takes one beta (a scalar), got shape {b.shape}.")
    return "continuous" if _ratio_gap(float(b), d) < 0 else "discontinuous"
