r"""One attention layer on an equiangular input: the exact finite-n output cosine and its
long-context limits (docs/theory.md#one-layer-on-an-equiangular-input).

With $W_Q = W_K = W_V = I$, $d_{QK} = 1/\beta^2$ (scores $\beta\langle x_i, x_j\rangle$), the complete
mask, no residual and a sphere normalisation after the attention, unit tokens with
$\langle x_i, x_j\rangle = \rho$ ($i \ne j$) map to $y_i / |y_i|$ with
$y_i \propto e^\beta x_i + e^{\beta\rho}\sum_{j\ne i}x_j$ (SA's softmax denominator is common to all
rows). With $a = e^{\beta(1-\rho)}$,

$$\rho' = \frac{\langle y_i, y_k\rangle}{|y_i|^2} =
\frac{a^2\rho + 2a\,(1 + (n-2)\rho) + (n-2) + \big((n-1)^2 - (n-2)\big)\rho}
{a^2 + 2a(n-1)\rho + (n-1)\big(1 + (n-2)\rho\big)}.$$

At $\beta = \gamma\log n$, $a = n^{\gamma(1-\rho)}$, and for $\rho \in (0, 1)$ the numerator is
$\rho(a + n)^2(1 + o(1))$ and the denominator $a^2 + 2an\rho + n^2\rho$ up to lower-order terms, so
$\rho' \to 1$, $4\rho/(1+3\rho)$ or $\rho$ as $\gamma(1-\rho)$ is below, at or above 1 (Chen, Lin,
Polyanskiy, Rigollet, arXiv 2510.05554, as stated in the survey arXiv 2512.01868, section
"Long context Transformers", Theorem `thm:long-context-phase-transition`).
"""

from __future__ import annotations

import numpy as np

from .._errors import UsageError

__all__ = ["one_layer_cosine", "one_layer_limit"]


def _check_rho(rho, n: int | None) -> np.ndarray:
    r = np.asarray(rho, dtype=float)
    lo = -1.0 / (n - 1) if n is not None else 0.0
    if not np.all(np.isfinite(r) & (r > lo) & (r < 1)):
        span = f"(-1/(n-1), 1) = ({lo:.6g}, 1)" if n is not None else "(0, 1)"
        raise UsageError(f"rho must lie in {span}, got {rho!r}.")
    return r


def one_layer_cosine(rho, beta, n):
    r"""The exact output cosine of one layer on $n$ equiangular tokens at cosine $\rho$ (module docstring).

    Computed in log space (every term scaled by $\max(a, n)^2$), so $n$ up to $10^{300}$ and any
    $\beta$ stay finite.

    Arguments:
        rho: the input cosine(s), in $(-1/(n-1), 1)$.
        beta: the inverse temperature(s), >= 0 (the scores are $\beta\langle x_i, x_j\rangle$).
        n: the number(s) of tokens, >= 2 (integers; floats allowed for n beyond int64).
            ``rho``, ``beta`` and ``n`` broadcast.

    Returns:
        $\rho'$ (a float, or an array).

    Raises:
        UsageError: rho, beta or n out of range.
    """
    nn = np.asarray(n, dtype=float)
    if not np.all(np.isfinite(nn) & (nn >= 2)):
        raise UsageError(f"n must be >= 2 tokens, got {n!r}.")
    b = np.asarray(beta, dtype=float)
    if not np.all(np.isfinite(b) & (b >= 0)):
        raise UsageError(f"beta must be finite and >= 0, got {beta!r}.")
    r = np.asarray(rho, dtype=float)
    if not np.all(np.isfinite(r) & (r > -1 / (nn - 1)) & (r < 1)):
        raise UsageError(f"rho must lie in (-1/(n-1), 1) for n equiangular unit tokens, got {rho!r}.")
    log_a = b * (1 - r)
    log_s = np.maximum(log_a, np.log(nn))
    a = np.exp(log_a - log_s)  # a / s
    m1, m2 = (nn - 1) * np.exp(-log_s), (nn - 2) * np.exp(-log_s)  # (n-1)/s, (n-2)/s
    s_inv = np.exp(-log_s)
    # numerator / s^2: a^2 rho + 2a(1 + (n-2) rho) + (n-2) + ((n-1)^2 - (n-2)) rho
    num = a * a * r + 2 * a * (s_inv + m2 * r) + m2 * s_inv + (m1 * m1 - m2 * s_inv) * r
    den = a * a + 2 * a * m1 * r + m1 * (s_inv + m2 * r)
    out = num / den
    return float(out) if np.ndim(out) == 0 else out


def one_layer_limit(rho, gamma):
    r"""$\lim_{n\to\infty}$ of `one_layer_cosine` at $\beta = \gamma\log n$: 1, $4\rho/(1+3\rho)$ or
    $\rho$ as $\gamma(1-\rho)$ is below, equal to or above 1 (arXiv 2510.05554, module docstring).

    Arguments:
        rho: the input cosine(s), in $(0, 1)$ (the theorem's range).
        gamma: the scaling constant(s), > 0 (broadcast with ``rho``).

    Returns:
        The limit (a float, or an array). The critical case is $\gamma(1-\rho) = 1$ exactly in
        floating point (e.g. $\rho = 1/2$, $\gamma = 2$).

    Raises:
        UsageError: rho outside (0, 1) or gamma <= 0.
    """
    r = _check_rho(rho, None)
    g = np.asarray(gamma, dtype=float)
    if not np.all(np.isfinite(g) & (g > 0)):
        raise UsageError(f"gamma must be finite and > 0, got {gamma!r}.")
    p = g * (1 - r)
    out = np.where(p < 1, 1.0, np.where(p == 1, 4 * r / (1 + 3 * r), r))
    return float(out) if np.ndim(out) == 0 else out
