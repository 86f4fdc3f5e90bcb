r"""Typed results of `continue_branch`: one `Branch` of equilibria and its `Bifurcation` points.

A branch is the curve $\{(X, p) : F_p(X) = X\}$ followed by pseudo-arclength continuation
(`rankdyn._equilibria._arclength`); its points, parameters, multipliers and stability are arrays
with the point index in front, and its located bifurcations a tuple of `Bifurcation`. The status
of the whole branch is a member of the one `rankdyn.RESULTS` (``parameter_end`` when it reached the
end of the parameter interval).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from .._errors import UsageError
from .._results import RESULTS

__all__ = ["BIFURCATION_KINDS", "Bifurcation", "Branch", "branch_status"]

#: The kinds of `Bifurcation`, in the order of the test functions (`_bifurcations`).
BIFURCATION_KINDS = ("fold", "branch-point", "period-doubling", "neimark-sacker")


#: The statuses of a branch, members of the one `rankdyn.RESULTS` (rankdyn/_results.py): a branch
#: succeeds with ``parameter_end``; ``max_steps_reached``, ``newton_failed`` and ``nonfinite`` (a
#: non-finite value or a zero row, LN undefined, along the branch) end it early.
_STATUS = ("parameter_end", "max_steps_reached", "newton_failed", "nonfinite")


def branch_status(result) -> str:
    """The name of the `RESULTS` member a branch ended with (host side)."""
    for name in _STATUS:
        if bool(result == getattr(RESULTS, name)):
            return name
    raise UsageError(f"not a status a branch ends with ({', '.join(_STATUS)}): {result!r}")


@dataclasses.dataclass(frozen=True, eq=False)
class Bifurcation:
    r"""One located bifurcation point of a branch.

    Attributes:
        kind: one of `BIFURCATION_KINDS`: ``"fold"`` (the parameter component $\dot p$ of the branch
            tangent changes sign; a real multiplier crosses $+1$), ``"branch-point"`` (a real multiplier
            crosses $+1$ with $\dot p \ne 0$: another branch crosses this one), ``"period-doubling"``
            (a real multiplier crosses $-1$), ``"neimark-sacker"`` (a complex pair crosses $|\lambda| = 1$).
        param: the located parameter value.
        point: the located equilibrium ``(n, d)`` (``(m,)`` for a map).
        step: index of the branch point before it (it lies between ``step`` and ``step + 1``; a
            fold on a degenerate branch, located by `locate_turn`, within ``step`` and ``step + 2``).
        test_value: the test function at the located point (near 0 when ``located``).
        located: whether the bracketing solve converged to the corrector's tolerance.
        iterations: bracketing iterations used.
        bracket: the parameter values of the two branch points around it (of the halved step
            when several crossings fell in one step).
        theta: for ``"neimark-sacker"``, the angle $\theta = |\arg\lambda| \in [0, \pi]$ of the
            pair on the unit circle (NaN otherwise).
        resonance: ``q`` when $\theta = 2\pi / q$ with $q \le 4$ (a strong resonance: 1:1, 1:2,
            1:3, 1:4, where the Neimark-Sacker normal form does not apply), else 0.
        coefficient: the normal-form coefficient (`rankdyn._equilibria._normal_forms`, Kuznetsov ch. 8):
            $a$ of a fold, $b$ of a period doubling, the first Lyapunov coefficient $d$ of a
            Neimark-Sacker point, the cubic coefficient $e$ of a pitchfork or $\frac12 c_{22}$ of a
            transcritical branch point; NaN where none is defined (not located, a strong resonance,
            a branch with degenerate directions).
        criticality: ``"supercritical"`` (the cycle, invariant circle or branches born are stable
            where the point was: $b > 0$, $d < 0$, $e < 0$), ``"subcritical"``, ``"degenerate"``
            (the coefficient is within round-off of 0), or ``""`` (a fold, a branch point without
            the $Z_2$ symmetry, a strong resonance, or no coefficient).
    """

    kind: str
    param: float
    point: np.ndarray
    step: int
    test_value: float = float("nan")
    located: bool = True
    iterations: int = 0
    bracket: tuple[float, float] = (float("nan"), float("nan"))
    theta: float = float("nan")
    resonance: int = 0
    coefficient: float = float("nan")
    criticality: str = ""

    def describe(self, name: str = "p") -> str:
        """One line: ``"fold at p = 1.25"`` or ``"period-doubling at w = 0.9290592028 (supercritical)"``
        when located, else the bracket, e.g. ``"period-doubling in [3.0125, 3.4125], not located"``."""
        if not self.located:
            lo, hi = sorted(float(b) for b in self.bracket)
            return f"{self.kind} in [{lo:.6g}, {hi:.6g}], not located"
        text = f"{self.kind} at {name} = {self.param:.10g}"
        crit = f", {self.criticality}" if self.criticality else ""
        if self.kind == "neimark-sacker":
            text += f" (theta = {self.theta:.6g}" + (
                f", strong resonance 1:{self.resonance})" if self.resonance else f"{crit})"
            )
        elif self.criticality:
            text += f" ({self.criticality})"
        return text

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict."""
        return {
            "kind": self.kind,
            "param": float(self.param),
            "point": np.asarray(self.point).tolist(),
            "step": int(self.step),
            "test_value": float(self.test_value),
            "located": bool(self.located),
            "iterations": int(self.iterations),
            "bracket": [float(b) for b in self.bracket],
            "theta": None if not np.isfinite(self.theta) else float(self.theta),
            "resonance": int(self.resonance),
            "coefficient": None if not np.isfinite(self.coefficient) else float(self.coefficient),
            "criticality": self.criticality,
        }


@dataclasses.dataclass(frozen=True, eq=False)
class Branch:
    r"""One branch of equilibria $F_p(X) = X$ from `continue_branch`.

    Attributes:
        params: ``(k,)`` the parameter at each point.
        points: ``(k, n, d)`` the equilibria, or ``(k, m)`` the fixed points of a map ``f(x, p)``.
        multipliers: ``(k, m)`` complex, the leading multipliers after the symmetry reduction
            (eigenvalues of $Q^\top J_T Q$, `_arclength`), sorted by decreasing modulus (NaN pads).
        stable: ``(k,)`` every reduced multiplier has (cluster-averaged) modulus $< 1 -$ ``tol``.
        tangents_p: ``(k,)`` the parameter component $\dot p$ of the unit branch tangent.
        residuals: ``(k,)`` $\|F_p(X) - X\|_F$.
        arclength: ``(k,)`` cumulative pseudo-arclength $s$.
        bifurcations: the located `Bifurcation` points, in branch order.
        result: a `RESULTS` member (``parameter_end`` on success); ``status`` is its name.
        symmetry_dims: the number of multipliers $+1$ quotiented out (orbit dimension of the
            continuous symmetries commuting with the layer).
        neutral_dims: the number of directions in the kernel of the bordered system beyond the
            tangent at the start (degenerate roots such as the paper's first token; 0 normally).
        space: ``"tangent"`` (sphere product) or ``"full"``.
        tol: the stability tolerance.
        param_name: what the parameter is (for reports and plots).
        period: ``k``: the points are fixed points of the ``k``-th iterate (cycles of period ``k``).
        family: the map or layer family that was continued (for `switch_branch`; not serialised).
    """

    params: np.ndarray
    points: np.ndarray
    multipliers: np.ndarray
    stable: np.ndarray
    tangents_p: np.ndarray
    residuals: np.ndarray
    arclength: np.ndarray
    bifurcations: tuple
    result: Any
    symmetry_dims: int = 0
    neutral_dims: int = 0
    space: str = "tangent"
    tol: float = 1e-6
    param_name: str = "p"
    period: int = 1
    family: Any = dataclasses.field(default=None, repr=False)

    @property
    def status(self) -> str:
        """The name of ``result`` (e.g. ``"parameter_end"``)."""
        return branch_status(self.result)

    @property
    def message(self) -> str:
        """The explanation of ``result``."""
        return RESULTS[self.result]

    def __len__(self) -> int:
        return int(self.params.shape[0])

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict: each point's multipliers as a list of ``[re, im]`` pairs, by decreasing
        modulus, without the NaN pads of ``multipliers`` (a point with fewer multipliers has a
        shorter list)."""

        def pair(z):
            return [float(z.real), float(z.imag)]

        return {
            "param_name": self.param_name,
            "status": self.status,
            "message": self.message,
            "num_points": len(self),
            "params": np.asarray(self.params).tolist(),
            "points": np.asarray(self.points).tolist(),
            "multipliers": [[pair(z) for z in row if np.isfinite(z)] for row in np.asarray(self.multipliers)],
            "stable": np.asarray(self.stable).tolist(),
            "tangents_p": np.asarray(self.tangents_p).tolist(),
            "residuals": np.asarray(self.residuals).tolist(),
            "arclength": np.asarray(self.arclength).tolist(),
            "bifurcations": [b.to_dict() for b in self.bifurcations],
            "symmetry_dims": int(self.symmetry_dims),
            "neutral_dims": int(self.neutral_dims),
            "space": self.space,
            "period": int(self.period),
            "tol": float(self.tol),
        }
