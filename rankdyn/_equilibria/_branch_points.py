r"""Branch switching at a branch point: starts on the other branch through it.

At a branch point $y^* = (x^*, p^*)$ of $R(x, p) = g_p(x) - x = 0$ the kernel of
$DR = [A - I,\ \partial_p g]$ has dimension 2: the tangent $t$ of the branch that was followed and
one more direction $\phi$. With $\psi$ the left null vector, the algebraic branching equation
(Kuznetsov, *Elements of Applied Bifurcation Theory*, sec. 10.2.2; Govaerts, *Numerical Methods
for Bifurcations of Dynamical Equilibria*)

$$c_{11}\alpha^2 + 2c_{12}\alpha\beta + c_{22}\beta^2 = 0,\qquad
c_{ij} = \psi^\top D^2R[\phi_i, \phi_j],\ \phi_1 = t,\ \phi_2 = \phi,$$

has the root $(\alpha, \beta) = (1, 0)$ (the followed branch, $c_{11} = 0$) and the other root
$(\alpha, \beta) \propto (-c_{22}, 2c_{12})$: the direction $d = \alpha t + \beta\phi$ of the other
branch. Where a symmetry makes the equation degenerate ($c_{12}$ and $c_{22}$ both within
$\sqrt\varepsilon$ of 0 relative to the second derivatives) the null vector $\phi$ is the direction.
The starts are the solutions of

$$R(x, p) = 0,\qquad d^\top\big((x, p) - y^*\big) = \pm\varepsilon$$

from $y^* \pm \varepsilon d$, by the continuation's corrector (`_arclength.correct`): the plane
cuts the followed branch at a distance $O(\varepsilon / |d^\top t|)$ and the other branch at
$O(\varepsilon)$, so Newton from the guess lands on the other one. A layer family works in the
chart of the reduced map (`_normal_forms`), so its starts lie on the sphere product.
"""

from __future__ import annotations

import math

import numpy as np

from .._errors import UsageError
from ._arclength import LayerFamily, Newton, arclength_constraint, correct, evaluate
from ._branch import Bifurcation, Branch
from ._cycles import BranchStart
from ._maps import MapFamily
from ._normal_forms import branch_geometry, local_of
from ._quotient import commuting_rotations

__all__ = ["branch_point_starts"]


def _family(branch: Branch):
    if np.ndim(branch.points) == 2:
        return MapFamily(branch.family, int(branch.period)), np.zeros((0,) + (branch.points.shape[1],) * 2)
    fam = LayerFamily(branch.family, period=int(branch.period))
    p = float(branch.params[0])
    if branch.symmetry_dims:
        return fam, commuting_rotations(fam(p), t=fam.t)
    d = fam(p).dim
    return fam, np.zeros((0, d, d))


def branch_point_starts(
    branch: Branch,
    bifurcation: Bifurcation,
    *,
    amplitude: float | None = None,
    residual_tol: float | None = None,
) -> tuple[BranchStart, ...]:
    r"""A start on each side of the other branch through a located branch point of ``branch``.

    The direction of the other branch comes from the algebraic branching equation, or from the
    null vector where a symmetry makes that equation degenerate (module docstring). For a
    pitchfork the two starts lie on its two halves; for a transcritical point, on the other
    branch before and after the crossing. Continue each with
    ``continue_branch(branch.family, s.x, s.p, p_end, period=s.period)``.

    Arguments:
        branch: a branch from `continue_branch` (a map ``f(x, p)`` or a layer family).
        bifurcation: one of its bifurcations, a located ``"branch-point"``.
        amplitude: $\varepsilon$, the distance of each start from the branch point along the other
            branch (default $10^{-3}\max(1, \|x^*\|)$; halved up to 8 times while the corrector fails
            or lands back on the followed branch).
        residual_tol: the corrector's tolerance on $\|g_p(x) - x\|$ (default 1e-11, and the
            dtype's default residual tolerance in float32).

    Returns:
        Two `BranchStart` ``(x, p, period)``, one on each side of the branch point.

    Raises:
        UsageError: for another kind (a period doubling: `switch_branch`), an unlocated point, a
            branch without its family (read from JSON), a branch with degenerate directions, or
            when no start off the followed branch is found.
    """
    if bifurcation.kind != "branch-point":
        hint = " (at a period doubling, switch_branch gives the doubled cycle)"
        raise UsageError(
            f"branch_point_starts needs a branch point, got a {bifurcation.kind}"
            + (hint if bifurcation.kind == "period-doubling" else "")
            + "."
        )
    if not bifurcation.located:
        lo, hi = sorted(bifurcation.bracket)
        raise UsageError(
            f"the branch point in [{lo:.6g}, {hi:.6g}] is not located: continue with a smaller ds first."
        )
    if branch.family is None:
        raise UsageError(
            "the branch has no family (read from JSON?): continue it with continue_branch first."
        )
    if branch.neutral_dims:
        raise UsageError(
            f"the branch has {branch.neutral_dims} degenerate direction(s) beyond its tangent: the kernel at "
            "its branch points is larger than 2, so the other branch has no single direction."
        )
    fam, gens = _family(branch)
    xs, ps = np.asarray(bifurcation.point, dtype=np.float64), float(bifurcation.param)
    eps = 1e-3 * max(1.0, float(np.linalg.norm(xs))) if amplitude is None else float(amplitude)
    if not (math.isfinite(eps) and eps > 0):
        raise UsageError(f"amplitude must be finite and > 0, got {amplitude}.")
    tol = 1e-11 if residual_tol is None else float(residual_tol)
    pt = evaluate(fam, xs, ps, gens)
    if not pt.ok:
        raise UsageError(f"the map is not finite at the branch point ({ps:.10g}).")
    bq = pt.basis @ pt.q
    # The followed branch's direction: the secant over the step that holds the point.
    i = min(max(int(bifurcation.step), 0), len(branch) - 2)
    sec = np.concatenate([(branch.points[i + 1] - branch.points[i]).reshape(-1), [0.0]])
    sec[-1] = branch.params[i + 1] - branch.params[i]
    tangent = np.concatenate([bq.T @ sec[:-1], [sec[-1]]])
    local = local_of(fam, pt)
    geo = branch_geometry(local, tangent / np.linalg.norm(tangent))
    c11, c12, c22 = geo["c"]
    if max(abs(c12), abs(c22)) <= math.sqrt(local.eps) * max(geo["scale"], 1e-300):
        alpha, beta = 0.0, 1.0  # degenerate branching equation: the null vector
    else:
        alpha, beta = -c22, 2 * c12
    d = alpha * geo["t"] + beta * geo["phi"]
    d = d / np.linalg.norm(d)
    dx, dp = bq @ d[:-1], float(d[-1])
    newton = Newton(tol=tol, max_step=max(0.5, 10 * eps))
    sphere = pt.basis.shape[0] != pt.basis.shape[1]
    t_amb = np.concatenate([bq @ geo["t"][:-1], [geo["t"][-1]]])
    starts = []
    for sign in (1.0, -1.0):
        e = eps
        for _ in range(9):
            guess = xs + sign * e * dx.reshape(xs.shape)
            if sphere:
                guess = guess / np.linalg.norm(guess, axis=-1, keepdims=True)
            con = arclength_constraint(xs, ps, dx, dp, sign * e)
            new, _, _ = correct(fam, guess, ps + sign * e * dp, con, gens, newton)
            if new is not None:
                off = np.concatenate([(new.x - xs).reshape(-1), [new.p - ps]])
                # Off the followed branch: the part of the step across its tangent is O(eps).
                across = 0.25 * e * math.sqrt(max(0.0, 1 - float(d @ geo["t"]) ** 2))
                if np.linalg.norm(off - t_amb * (t_amb @ off)) > across:
                    starts.append(BranchStart(new.x, float(new.p), int(branch.period)))
                    break
            e *= 0.5
        else:
            raise UsageError(
                f"no point of the other branch was found near the branch point at {ps:.10g}; try another "
                "amplitude."
            )
    return tuple(starts)
