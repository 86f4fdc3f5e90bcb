r"""Collapse rates: fits of $\log\mu$ against depth and the theorems' bounds (SPEC §4).

Theorem 1 (no LN):      $\mu(X^{(t)}) \le C (1-\epsilon^r)^{t/r}$, per-layer factor $(1-\epsilon^r)^{1/r}$.
Theorem 2 (LN, orth.):  $\mu \le C (1 - n\epsilon^{2r})^{t/(2r)}$ (strongly connected masks).
Corollary 1:            $\mu \le C (1 - \epsilon^{2r})^{t/(2r)}$ (quasi-strongly connected, $\phi^{(0)}\ge 0$).
"""

from __future__ import annotations

import numpy as np

__all__ = ["fit_rate", "theorem1_rate", "theorem2_rate", "corollary1_rate"]


def fit_rate(layers, mu, *, start: int = 0, stop: int | None = None, floor: float = 0.0) -> float:
    r"""Per-layer geometric rate $\rho$ from a least-squares fit $\log\mu_t \approx a + t\log\rho$.

    Arguments:
        layers, mu: depths and values of mu (one trajectory or a mean curve).
        start, stop: the depth window to fit (to skip transients).
        floor: points with ``mu <= floor`` (e.g. at the round-off floor) are left out.

    Returns:
        $\rho = \exp(\text{slope})$; ``nan`` with fewer than two usable points.
    """
    t = np.asarray(layers, dtype=float)
    m = np.asarray(mu, dtype=float)
    sel = (t >= start) & (np.isfinite(m)) & (m > floor)
    if stop is not None:
        sel &= t <= stop
    if sel.sum() < 2:
        return float("nan")
    slope = np.polyfit(t[sel], np.log(m[sel]), 1)[0]
    return float(np.exp(slope))


def theorem1_rate(eps: float, radius: int) -> float:
    r"""Per-layer factor of Theorem 1's bound, $(1-\epsilon^r)^{1/r}$."""
    return float((1.0 - float(eps) ** radius) ** (1.0 / radius))


def theorem2_rate(eps: float, radius: int, n: int) -> float:
    r"""Per-layer factor of Theorem 2's bound, $(1 - n\epsilon^{2r})^{1/(2r)}$."""
    return float(max(1.0 - n * float(eps) ** (2 * radius), 0.0) ** (1.0 / (2 * radius)))


def corollary1_rate(eps: float, radius: int, num_centers: int = 1) -> float:
    r"""Per-layer factor of Corollary 1's bound, $(1 - c\,\epsilon^{2r})^{1/(2r)}$ ($c$ centers, §4.3)."""
    return float(max(1.0 - num_centers * float(eps) ** (2 * radius), 0.0) ** (1.0 / (2 * radius)))
