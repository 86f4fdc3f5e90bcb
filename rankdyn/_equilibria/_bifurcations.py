r"""Bifurcations along a branch of equilibria: test functions, detection and location.

For a map the multipliers $\lambda$ of the reduced Jacobian $Q^\top J_T Q$ (`_arclength`) decide:

- **fold**: the parameter component of the unit branch tangent changes sign,
  $\psi_{\mathrm{LP}} = \dot p$; a real multiplier crosses $+1$ there;
- **branch point**: a real multiplier crosses $+1$ while $\dot p$ keeps its sign (two branches
  cross; a pitchfork from a discrete symmetry is one), $\psi_{\mathrm{BP}} = \lambda_+ - 1$ with
  $\lambda_+$ the real multiplier nearest $+1$;
- **period doubling**: a real multiplier crosses $-1$, $\psi_{\mathrm{PD}} = \lambda_- + 1$;
- **Neimark--Sacker**: a complex pair crosses the unit circle, $\psi_{\mathrm{NS}} = |\lambda_c| - 1$.

Detection between branch points $k$ and $k+1$: a sign change of $\dot p$ (fold), or a change of
the number of multipliers with $|\lambda| > 1 + \mathrm{tol}$, classified by the multiplier
nearest the unit circle (outside the neutral band $||\lambda| - 1| \le \mathrm{tol}$, which holds
the multipliers that are 1 along the whole branch). Location: the corrector is re-run from point
$k$ at arclength $s \in (0, \Delta s_k)$, and the test function's root is bracketed by the
Illinois variant of regula falsi until the bracket is below ``s_tol`` (the parameter is then
known to the corrector's tolerance: at a fold $p(s) - p^* = O((s - s^*)^2)$).
"""

from __future__ import annotations

import numpy as np

from ._arclength import (
    LayerFamily,
    Newton,
    Point,
    arclength_constraint,
    correct,
    reduced_multipliers,
    tangent_at,
)
from ._branch import Bifurcation
from ._stability import cluster_means

__all__ = [
    "drop_neutral",
    "locate_turn",
    "unstable_count",
    "crossing_kind",
    "test_function",
    "detect",
    "locate",
]

#: Imaginary parts below this (relative to 1) count as real multipliers.
REAL_TOL = 1e-8


def drop_neutral(eig: np.ndarray, k: int) -> np.ndarray:
    """``eig`` without the ``k`` multipliers nearest $+1$ (those that are 1 along the whole branch:
    the degenerate directions found at the start, `continue_branch`'s ``neutral_dims``)."""
    if k <= 0:
        return eig
    keep = np.argsort(np.abs(eig - 1), kind="stable")[k:]
    return eig[np.sort(keep)]


def unstable_count(eig: np.ndarray, tol: float) -> int:
    """#{|lambda| > 1 + tol} over cluster-averaged multipliers (`cluster_means`: a defective
    multiplier 1, split by rounding into ``1 + O(eps ** (1/m))``, stays 1)."""
    return int(np.sum(np.abs(cluster_means(eig)) > 1 + tol))


def _nearest_outside_band(eig: np.ndarray, tol: float):
    eig = cluster_means(eig)
    gap = np.abs(np.abs(eig) - 1)
    keep = gap > tol
    if not np.any(keep):
        return None, np.inf
    i = int(np.argmin(np.where(keep, gap, np.inf)))
    return eig[i], float(gap[i])


def crossing_kind(eig_a: np.ndarray, eig_b: np.ndarray, tol: float) -> str:
    """``"+1"``, ``"-1"`` or ``"complex"``: how the multiplier nearest the unit circle crossed."""
    za, ga = _nearest_outside_band(eig_a, tol)
    zb, gb = _nearest_outside_band(eig_b, tol)
    z = za if ga <= gb else zb
    if z is None:
        return "+1"
    if abs(z.imag) > REAL_TOL * max(1.0, abs(z)):
        return "complex"
    return "+1" if z.real > 0 else "-1"


def test_function(kind: str, eig: np.ndarray, tangent_p: float, neutral: int = 0) -> float:
    r"""$\psi$ of one kind (module docstring) at a point with multipliers ``eig`` (less the
    ``neutral`` ones nearest 1, `drop_neutral`)."""
    if kind == "fold":
        return float(tangent_p)
    eig = drop_neutral(eig, neutral)
    real = np.abs(eig.imag) <= REAL_TOL * np.maximum(1.0, np.abs(eig))
    if kind == "branch-point":
        cand = eig.real[real]
        return float(cand[np.argmin(np.abs(cand - 1))] - 1) if cand.size else np.nan
    if kind == "period-doubling":
        cand = eig.real[real]
        return float(cand[np.argmin(np.abs(cand + 1))] + 1) if cand.size else np.nan
    cand = np.abs(eig[~real])
    return float(cand[np.argmin(np.abs(cand - 1))] - 1) if cand.size else np.nan


def detect(eig_a, tp_a: float, eig_b, tp_b: float, tol: float, neutral: int = 0) -> list[str]:
    """The kinds of bifurcation between two consecutive branch points (usually none)."""
    kinds = []
    eig_a, eig_b = drop_neutral(eig_a, neutral), drop_neutral(eig_b, neutral)
    fold = np.sign(tp_a) != np.sign(tp_b) and tp_a != 0 and tp_b != 0
    if unstable_count(eig_a, tol) != unstable_count(eig_b, tol):
        how = crossing_kind(eig_a, eig_b, tol)
        kinds.append(
            {"+1": "fold" if fold else "branch-point", "-1": "period-doubling", "complex": "neimark-sacker"}[
                how
            ]
        )
    if fold and "fold" not in kinds:
        kinds.append("fold")
    return kinds


def locate(
    kind: str,
    fam: LayerFamily,
    start: Point,
    tangent: tuple[np.ndarray, float],
    ds: float,
    psi_a: float,
    psi_b: float,
    end: Point,
    *,
    step: int,
    extra: int,
    neutral: int = 0,
    generators: np.ndarray,
    newton: Newton,
    s_tol: float = 1e-13,
    max_iter: int = 80,
) -> Bifurcation:
    r"""Locate one bifurcation between ``start`` (arclength 0) and ``end`` (arclength ``ds``).

    Every trial point is corrected with the arclength constraint of the step from ``start``
    (so it lies on the branch), then $\psi$ is evaluated there; the Illinois rule halves the
    weight of an endpoint kept twice, so the bracket shrinks superlinearly.

    Returns:
        A `Bifurcation`; ``located`` is False when the signs did not bracket a root or the
        bracket did not shrink below ``s_tol * max(1, |ds|)`` (then the better endpoint is given).
    """
    n = start.x.shape[0]
    tx, tp = tangent
    bracket = (start.p, end.p)
    if not (np.isfinite(psi_a) and np.isfinite(psi_b)) or np.sign(psi_a) == np.sign(psi_b):
        best = start if abs(psi_a) <= abs(psi_b) else end
        val = psi_a if best is start else psi_b
        return Bifurcation(kind, best.p, best.x, step, val, False, 0, bracket)
    sa, sb, fa, fb = 0.0, float(ds), float(psi_a), float(psi_b)
    best = (end, fb) if abs(fb) < abs(fa) else (start, fa)
    side = 0
    width = s_tol * max(1.0, abs(ds))
    it = 0
    for it in range(1, max_iter + 1):
        sc = sb - fb * (sb - sa) / (fb - fa)
        if not (min(sa, sb) < sc < max(sa, sb)):
            sc = 0.5 * (sa + sb)
        guess = start.x + sc * tx.reshape(start.x.shape)
        if start.basis.shape[0] != start.basis.shape[1]:  # sphere product: retract the predictor
            guess = guess / np.linalg.norm(guess, axis=-1, keepdims=True)
        con = arclength_constraint(start.x, start.p, tx, tp, sc)
        pt, _, _ = correct(fam, guess, start.p + sc * tp, con, generators, newton)
        if pt is None:
            break
        eig = reduced_multipliers(pt, n)
        _, tpc = tangent_at(pt, (tx, tp), extra)
        fc = test_function(kind, eig, tpc, neutral)
        if not np.isfinite(fc):
            break
        if abs(fc) < abs(best[1]):
            best = (pt, fc)
        if fc == 0.0:
            sa = sb = sc
            break
        if np.sign(fc) == np.sign(fb):
            sb, fb = sc, fc
            if side == -1:
                fa *= 0.5
            side = -1
        else:
            sa, fa = sc, fc
            if side == 1:
                fb *= 0.5
            side = 1
        if abs(sb - sa) <= width:
            break
    pt, val = best
    return Bifurcation(kind, pt.p, pt.x, step, val, bool(abs(sb - sa) <= width), it, bracket)


def locate_turn(
    fam: LayerFamily,
    before: Point,
    mid: Point,
    after: Point,
    *,
    step: int,
    generators: np.ndarray,
    newton: Newton,
    s_tol: float = 1e-8,
    max_iter: int = 80,
) -> Bifurcation:
    r"""Locate a fold as the extremum of $p$ along the branch (for degenerate branches).

    Where the kernel of $[G_X Q, G_p]$ is larger than the tangent, $\dot p$ is not a reliable
    test function; the fold is then the turning point of $p(s)$ on the chord parameterisation
    $\tau^\top (Y - Y_\mathrm{mid}) = s$, $\tau \propto Y_\mathrm{after} - Y_\mathrm{before}$,
    $Y = (X, p)$, found by golden-section search over the two steps around the turn. Near a
    fold $p(s) - p^* = O((s - s^*)^2)$, so the located parameter is as accurate as the corrector
    once the bracket is below ``s_tol`` (relative; $10^{-8}$ puts $p$ at rounding).

    Returns:
        A `Bifurcation` of kind ``"fold"`` (``test_value``: the bracket width in $s$).
    """
    ya, ym, yb = (np.concatenate([q.x.reshape(-1), [q.p]]) for q in (before, mid, after))
    tau = (yb - ya) / np.linalg.norm(yb - ya)
    tx, tp = tau[:-1], float(tau[-1])
    lo, hi = float(tau @ (ya - ym)), float(tau @ (yb - ym))
    sign = 1.0 if mid.p <= min(before.p, after.p) else -1.0  # minimise p at a left turn, else -p
    sphere = mid.basis.shape[0] != mid.basis.shape[1]
    cache: dict[float, Point | None] = {}

    def p_at(sv: float) -> float:
        guess = mid.x + sv * tx.reshape(mid.x.shape)
        if sphere:
            guess = guess / np.linalg.norm(guess, axis=-1, keepdims=True)
        con = arclength_constraint(mid.x, mid.p, tx, tp, sv)
        pt, _, _ = correct(fam, guess, mid.p + sv * tp, con, generators, newton)
        cache[sv] = pt
        return np.inf if pt is None else sign * pt.p

    g = (np.sqrt(5) - 1) / 2
    a, b = lo, hi
    c, d = b - g * (b - a), a + g * (b - a)
    fc, fd = p_at(c), p_at(d)
    it = 0
    for it in range(1, max_iter + 1):
        if abs(b - a) <= s_tol * max(1.0, abs(hi - lo)):
            break
        if fc <= fd:
            b, d, fd = d, c, fc
            c = b - g * (b - a)
            fc = p_at(c)
        else:
            a, c, fc = c, d, fd
            d = a + g * (b - a)
            fd = p_at(d)
    best = c if fc <= fd else d
    pt = cache[best] or mid
    done = cache[best] is not None and abs(b - a) <= s_tol * max(1.0, abs(hi - lo))
    return Bifurcation("fold", pt.p, pt.x, step, float(b - a), bool(done), it, (before.p, after.p))
