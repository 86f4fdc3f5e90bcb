r"""Branch switching at a period doubling: a start on the cycle of twice the period.

At a period doubling of the fixed points of $g = f^k$, $(x^*, p^*)$, the multiplier $-1$ has an
eigenvector $v$; the cycle of period $2k$ leaves $x^*$ along $v$ with an amplitude
$\varepsilon \propto \sqrt{|p - p^*|}$. Its point at amplitude $\varepsilon$ solves

$$g^2_p(x) - x = 0,\qquad v^\top (x - x^*) = \varepsilon$$

in the unknowns $(x, p)$, by Newton (least squares) from $(x^* + \varepsilon v, p^*)$. On the
period-$k$ branch, where $g^2 = x$ too, the constraint needs $p - p^* = O(\varepsilon)$ instead
of $O(\varepsilon^2)$, so the Newton iterates from that guess stay on the doubled cycle; a
result that is still a fixed point of $g$ is refused and a smaller amplitude tried.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from .._errors import UsageError
from ._branch import Bifurcation, Branch
from ._maps import MapFamily

__all__ = ["BranchStart", "switch_branch"]


class BranchStart(NamedTuple):
    """A start for `continue_branch`: ``continue_branch(f, s.x, s.p, p_end, period=s.period)``."""

    x: np.ndarray
    p: float
    period: int


def switch_branch(
    branch: Branch, bifurcation: Bifurcation, *, amplitude: float | None = None, tol: float = 1e-12
) -> BranchStart:
    r"""A start on the cycle of period $2k$ born at a located period doubling of ``branch``.

    Arguments:
        branch: a branch of a map ``f(x, p)`` from `continue_branch` (period ``k``).
        bifurcation: one of its bifurcations, a located ``"period-doubling"``.
        amplitude: $\varepsilon$, the distance from $x^*$ along the eigenvector of $-1$ (default
            $10^{-3}\max(1, \|x^*\|)$; halved up to 8 times while Newton lands back on period $k$
            or on a point farther than $\varepsilon / 2$ from $x^* + \varepsilon v$, or farther in $p$
            than the bifurcation's bracket).
        tol: Newton's tolerance on $\|g^2_p(x) - x\|$.

    Returns:
        A `BranchStart` ``(x, p, period=2k)``.

    Raises:
        UsageError: for another kind, an unlocated point, a branch of a layer family (not a map),
            or when no point of the doubled cycle is found.
    """
    if bifurcation.kind != "period-doubling":
        hint = " (at a branch point, branch_point_starts gives the other branch)"
        raise UsageError(
            f"switch_branch needs a period doubling, got a {bifurcation.kind}"
            + (hint if bifurcation.kind == "branch-point" else "")
            + "."
        )
    if not bifurcation.located:
        lo, hi = sorted(bifurcation.bracket)
        raise UsageError(
            f"the period doubling in [{lo:.6g}, {hi:.6g}] is not located: continue with a smaller ds first."
        )
    if branch.family is None or np.ndim(branch.points) != 2:
        raise UsageError(
            "switch_branch works on branches of a map f(x, p) (1-D states); this branch is of a layer family."
        )
    k = int(branch.period)
    g, g2 = MapFamily(branch.family, k), MapFamily(branch.family, 2 * k)
    xs, ps = np.asarray(bifurcation.point, dtype=np.float64), float(bifurcation.param)
    _, jac, _, _, _ = g.linearise(xs, ps)
    lam, vecs = np.linalg.eig(jac)
    i = int(np.argmin(np.abs(lam + 1)))
    v = np.real(vecs[:, i])
    v = v / np.linalg.norm(v)
    eps = 1e-3 * max(1.0, float(np.linalg.norm(xs))) if amplitude is None else float(amplitude)
    if not (math.isfinite(eps) and eps > 0):
        raise UsageError(f"amplitude must be finite and > 0, got {amplitude}.")
    width = abs(bifurcation.bracket[1] - bifurcation.bracket[0])
    for _ in range(9):
        found = _newton(g2, xs, ps, v, eps, tol)
        # Near the doubling the cycle is x* + eps v + O(eps^2) at p* + O(eps^2): a point farther
        # off, or beyond the bracket's step, is another cycle (the amplitude was too large for
        # this doubling's scale).
        near = (
            found is not None
            and np.linalg.norm(found[0] - xs - eps * v) <= 0.5 * eps
            and abs(found[1] - ps) <= width
        )
        if near and g.residual(found[0], found[1]) > 1e-3 * eps:
            return BranchStart(found[0], found[1], 2 * k)
        eps *= 0.5
    raise UsageError(
        f"no point of the period-{2 * k} cycle was found near the period doubling at {ps:.10g}; "
        "try another amplitude."
    )


def _newton(g2: MapFamily, xs, ps, v, eps, tol, max_iter: int = 40):
    x, p = xs + eps * v, ps
    for _ in range(max_iter):
        r, jac, fp, ok, _ = g2.linearise(x, p)
        if not ok:
            return None
        c = float(v @ (x - xs) - eps)
        if np.linalg.norm(r) <= tol and abs(c) <= tol:
            return x, p
        a = np.block([[jac - np.eye(x.size), fp[:, None]], [v[None, :], np.zeros((1, 1))]])
        step = np.linalg.lstsq(a, -np.concatenate([r, [c]]), rcond=1e-14)[0]
        x, p = x + step[:-1], p + float(step[-1])
    return None
