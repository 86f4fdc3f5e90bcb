r"""Collapse rates: fits of $\log\mu$ against depth and the theorems' bounds (the only copy).

Theorem 1 (no LN):      $\mu(X^{(t)}) \le C (1-\epsilon^r)^{t/r}$, per-layer factor $(1-\epsilon^r)^{1/r}$.
Theorem 2 (LN, orth.):  $\mu \le C (1 - n\epsilon^{2r})^{t/(2r)}$ (strongly connected masks).
Corollary 1:            $\mu \le C (1 - c\,\epsilon^{2r})^{t/(2r)}$ (quasi-strongly connected, $c$ centers,
                        nonnegative initial cosines $\phi^{(0)} \ge 0$).

See docs/theory.md#theorems for the exact conditions.
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "fit_rate",
    "fit_rate_window",
    "bound_rate",
    "log10_bound_gap",
    "theorem1_rate",
    "theorem2_rate",
    "corollary1_rate",
]


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


def fit_rate_window(
    layers, curve, rel, floor: float, *, start: int = 1, stop: int | None = None, tail: bool = True
) -> tuple[float, tuple[int, int] | None]:
    r"""`fit_rate` on the usable part of a curve, and the window it used.

    Points with ``rel <= floor`` (round-off; ``rel`` is e.g. $\mu_t/\mu_0$) are dropped, and so is
    everything after the first such point (later points are noise around the floor). With
    ``tail=True`` and more than 8 usable points only the second half is fitted (the asymptotic
    regime; early layers can be algebraic, e.g. the uni-directional window before information
    crossed the sequence).

    Returns:
        ``(rho, (t_first, t_last))``. If mu hits the floor before two points are usable (e.g.
        uniform complete attention makes every token equal in one layer), ``rho`` is the upper
        estimate ``floor ** (1 / t_hit)`` and the window is ``(0, t_hit)``; ``(nan, None)`` otherwise.
    """
    t = np.asarray(layers, dtype=float)
    c = np.asarray(curve, dtype=float)
    r = np.asarray(rel, dtype=float)
    sel = (t >= start) & np.isfinite(c) & (c > 0) & (r > floor)
    if stop is not None:
        sel &= t <= stop
    idx = np.flatnonzero(sel)
    below = np.flatnonzero((t >= start) & ~(r > floor))
    if below.size:
        idx = idx[idx < below[0]]
    if idx.size < 2:
        if below.size and t[below[0]] > 0:
            # The mean per-layer factor up to the layer where mu reached the floor is at most
            # floor ** (1 / t_hit): an upper estimate of the rate.
            t_hit = float(t[below[0]])
            return float(floor ** (1.0 / t_hit)), (0, int(t_hit))
        return float("nan"), None
    if tail and idx.size > 8:
        idx = idx[idx.size // 2 :]
    rho = fit_rate(t[idx], c[idx], floor=-np.inf)
    return rho, (int(t[idx[0]]), int(t[idx[-1]]))


def log10_bound_gap(eps: float, radius: int, power: int = 1, centers: int = 1) -> float:
    r"""$\log_{10}(c\,\epsilon^{p r})$: how far below 1 the bound's contraction term is.

    The per-layer factors $(1 - c\epsilon^{pr})^{1/(pr)}$ round to exactly 1 in float64 when this
    is below about -16 (e.g. $\epsilon^{127}$ for the uni-directional window): the bound then
    cannot be tested against a measured rate.
    """
    if not eps > 0:
        return float("-inf")
    return float(np.log10(centers) + power * radius * np.log10(eps))


def bound_rate(eps: float, radius: int, power: int = 1, centers: int = 1) -> float:
    r"""Per-layer factor $(1 - c\,\epsilon^{pr})^{1/(pr)}$, evaluated without underflow.

    $p = 1$, $c = 1$: Theorem 1; $p = 2$, $c = n$: Theorem 2; $p = 2$, $c$ = centers: Corollary 1.
    A term $\ge 1$ gives 0 (the bound forces collapse in one step); a term below 1e-3 goes through
    ``log1p`` so that tiny contractions are not lost to rounding (it is exactly 1.0 only when the
    term underflows).
    """
    g = log10_bound_gap(eps, radius, power, centers)
    term = 10.0**g if g > -300 else 0.0
    if term >= 1.0:
        return 0.0
    pr = power * radius
    if term > 1e-3:
        return float((1.0 - term) ** (1.0 / pr))
    return float(np.exp(np.log1p(-term) / pr))


def theorem1_rate(eps: float, radius: int) -> float:
    r"""Per-layer factor of Theorem 1's bound, $(1-\epsilon^r)^{1/r}$."""
    return bound_rate(float(eps), radius, 1, 1)


def theorem2_rate(eps: float, radius: int, n: int) -> float:
    r"""Per-layer factor of Theorem 2's bound, $(1 - n\epsilon^{2r})^{1/(2r)}$."""
    return bound_rate(float(eps), radius, 2, n)


def corollary1_rate(eps: float, radius: int, num_centers: int = 1) -> float:
    r"""Per-layer factor of Corollary 1's bound, $(1 - c\,\epsilon^{2r})^{1/(2r)}$ ($c$ centers)."""
    return bound_rate(float(eps), radius, 2, num_centers)
