r"""Codimension-2 points along bifurcation curves, and the typed `Curve` of `continue_curve`.

Each is the zero of a test function evaluated at every accepted point of a curve and located by
regula falsi (Illinois) along the step where it changes sign (Kuznetsov, *Elements of Applied
Bifurcation Theory*, sec. 9.2 and 10.2; MatContM's codimension-2 points of maps):

- on a fold curve, the **cusp**: $\psi_{\mathrm{CP}} = w^\top B(v, v)$ (`_curves`);
- on a period-doubling curve, the **generalised period doubling**: the normal-form coefficient
  $b$ (`_normal_forms`) changes sign;
- on a Neimark--Sacker curve, the **Chenciner** point: the first Lyapunov coefficient $d$ changes
  sign (a sign change through a pole of $d$, at the 1:3 resonance where $e^{2i\theta}I - A$ is
  singular, is not one: a located point must have $|d|$ below $10^{-3}$ of its bracket's ends); and
  the **strong resonances** 1:1, 1:2, 1:3, 1:4, where $\kappa = \cos\theta$ crosses
  $\cos(2\pi/q) = 1, -1, -\tfrac12, 0$.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any, NamedTuple

import jax
import numpy as np

from .._errors import UsageError
from .._results import RESULTS
from ._normal_forms import (
    COMPILER_OPTIONS,
    Local,
    _derivatives,
    neimark_sacker_coefficient,
    period_doubling_coefficient,
)

__all__ = ["CURVE_STATUS", "Curve", "SpecialPoint", "curve_tests", "locate_zero"]

#: The strong resonances 1:q and the value of $\kappa = \cos\theta$ at each.
RESONANCES = {1: 1.0, 2: -1.0, 3: -0.5, 4: 0.0}

#: The status names a curve ends with.
CURVE_STATUS = ("parameter_end", "max_steps_reached", "newton_failed")


class SpecialPoint(NamedTuple):
    """A located codimension-2 point of a `Curve`: its ``kind`` (``"cusp"``,
    ``"generalised-period-doubling"``, ``"chenciner"``, ``"resonance-1:1"`` ... ``"resonance-1:4"``),
    the parameters ``p`` and ``q`` and the fixed ``point``."""

    kind: str
    p: float
    q: float
    point: np.ndarray


@dataclasses.dataclass(frozen=True, eq=False)
class Curve:
    r"""A curve of codimension-1 bifurcations in the $(p, q)$ plane from `continue_curve`.

    Attributes:
        kind: one of `CURVE_KINDS` (``"fold"``, ``"period-doubling"``, ``"neimark-sacker"``).
        p, q: ``(k,)`` the two parameters at each point.
        points: ``(k, m)`` the fixed points (``(k, n, d)`` for a layer family).
        kappa: ``(k,)`` $\kappa = \cos\theta$ of a Neimark--Sacker curve (NaN otherwise).
        residuals: ``(k,)`` $\|g(x) - x\|$.
        cusps: ``(p, q)`` of the located cusps (fold curves only).
        result: a `rankdyn.RESULTS` member: ``parameter_end`` (q reached an end; success),
            ``max_steps_reached`` or ``newton_failed``; ``status`` is its name.
        param_names: the names of $p$ and $q$.
        special_points: the located codimension-2 points (`SpecialPoint`), in curve order: cusps,
            generalised period doublings, Chenciner points and strong resonances.
        coefficients: ``(k,)`` the normal-form coefficient along the curve ($b$ on a period-doubling
            curve, $d$ on a Neimark--Sacker curve; NaN on a fold curve).
    """

    kind: str
    p: np.ndarray
    q: np.ndarray
    points: np.ndarray
    kappa: np.ndarray
    residuals: np.ndarray
    cusps: tuple
    result: Any
    param_names: tuple[str, str] = ("p", "q")
    special_points: tuple = ()
    coefficients: np.ndarray | None = None

    @property
    def status(self) -> str:
        """The name of ``result`` (e.g. ``"parameter_end"``)."""
        for name in CURVE_STATUS:
            if bool(self.result == getattr(RESULTS, name)):
                return name
        raise UsageError(f"not a status a curve ends with ({', '.join(CURVE_STATUS)}): {self.result!r}")

    @property
    def message(self) -> str:
        """The explanation of ``result``."""
        return RESULTS[self.result]

    def __len__(self) -> int:
        return int(self.p.shape[0])

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict."""

        def num(v):
            return None if not np.isfinite(v) else float(v)

        return {
            "kind": self.kind,
            "param_names": list(self.param_names),
            "p": self.p.tolist(),
            "q": self.q.tolist(),
            "points": self.points.tolist(),
            "kappa": [num(k) for k in self.kappa],
            "residuals": self.residuals.tolist(),
            "cusps": [[float(a), float(b)] for a, b in self.cusps],
            "special_points": [
                {"kind": s.kind, "p": float(s.p), "q": float(s.q), "point": np.asarray(s.point).tolist()}
                for s in self.special_points
            ],
            "coefficients": [] if self.coefficients is None else [num(c) for c in self.coefficients],
            "status": self.status,
        }


@functools.partial(jax.jit, static_argnames=("map2", "period", "order"), compiler_options=COMPILER_OPTIONS)
def _curve_program(map2, period, x0, p, q, aux, u2, v2, u3, v3, w3, order=3):
    m = x0.shape[0]

    def r(y):
        x = x0 + y[:m]
        z = x
        for _ in range(period):
            z = map2(z, p + y[m], q, aux)
        return z - x

    return _derivatives(r, m + 1, x0.dtype, u2, v2, u3, v3, w3, order=order)


def curve_tests(kind: str, map2, period: int, m: int, dtype):
    r"""``y, aux -> {name: value}``: the codimension-2 test functions of a ``kind`` curve at
    $y = (x, p, q[, \kappa])$ (module docstring), with the normal-form coefficient under
    ``"coefficient"`` (not a test of its own)."""
    import jax.numpy as jnp

    if kind == "fold":
        return None

    def tests(y, aux) -> dict[str, float]:
        prog = functools.partial(
            _curve_program,
            map2,
            period,
            jnp.asarray(y[:m], dtype),
            jnp.asarray(y[m], dtype),
            jnp.asarray(y[m + 1], dtype),
            aux,
        )
        local = Local(prog, m, dtype)
        if kind == "period-doubling":
            b = _safe(lambda: period_doubling_coefficient(local)[0])
            return {"coefficient": b, "generalised-period-doubling": b}
        kappa = float(y[m + 2])
        # Beyond |kappa| = 1 the curve is one of neutral saddles: no pair on the circle, no d.
        d = (
            _safe(lambda: neimark_sacker_coefficient(local, math.acos(kappa))[0])
            if abs(kappa) < 1
            else math.nan
        )
        out = {"coefficient": d, "chenciner": d}
        out.update({f"resonance-1:{k}": kappa - v for k, v in RESONANCES.items()})
        return out

    return tests


def _safe(fn) -> float:
    """``fn()``, or NaN where a linear solve of the formulas is singular."""
    try:
        return float(fn())
    except np.linalg.LinAlgError:
        return math.nan


def locate_zero(newton, value, start, t, ds, fa, fb, max_iter: int = 60):
    """Regula falsi (Illinois) on ``value(y)`` along the step of length ``ds`` from ``start`` in the
    direction ``t`` (each iterate corrected by ``newton`` on the arclength plane).

    Returns:
        ``(y, value(y))`` of the best iterate.
    """
    sa, sb, side, best, fbest = 0.0, float(ds), 0, start, fa
    for _ in range(max_iter):
        sc = sb - fb * (sb - sa) / (fb - fa)
        if not min(sa, sb) < sc < max(sa, sb):
            sc = 0.5 * (sa + sb)
        con = lambda z, sc=sc: (float(t @ (z - start) - sc), t)  # noqa: E731
        pt, _ = newton(start + sc * t, con)
        if pt is None:
            break
        fc = value(pt)
        if not np.isfinite(fc):
            break
        best, fbest = pt, fc
        if fc == 0 or abs(sb - sa) <= 1e-13 * max(1.0, abs(ds)):
            break
        if (fc > 0) == (fb > 0):
            sb, fb = sc, fc
            fa = fa * 0.5 if side == -1 else fa
            side = -1
        else:
            sa, fa = sc, fc
            fb = fb * 0.5 if side == 1 else fb
            side = 1
    return best, fbest
