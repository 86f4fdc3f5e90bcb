r"""Bifurcations along a branch of equilibria: test functions, detection and location.

For a map the multipliers $\lambda_1, \dots, \lambda_m$ of the reduced Jacobian $A = Q^\top J_T Q$
(`_arclength`) decide. Each kind of crossing has its own test function, as for fixed points of
maps in MatContM (Govaerts, Kuznetsov et al.):

- **+1** (fold or branch point): $\psi_{+} = \det(A - I) = \prod_i (\lambda_i - 1)$;
- **-1** (period doubling): $\psi_{-} = \det(A + I) = \prod_i (\lambda_i + 1)$;
- **complex pair at modulus 1** (Neimark--Sacker): the bialternate product
  $\psi_{\mathrm{NS}} = \det(A \odot A - I) = \prod_{i<j} (\lambda_i \lambda_j - 1)$, zero where
  $\lambda \bar\lambda = 1$ (a located zero with no non-real pair on the circle is a neutral saddle,
  $\lambda_i \lambda_j = 1$ with both real, and is dropped).

Each product is evaluated as $\operatorname{Re}\prod_i z_i / \max(1, |z_i|)$ (the same sign, no
overflow) less the ``neutral`` multipliers that are 1 along the whole branch. A fold is a $+1$
crossing where the parameter component of the unit tangent $\psi_{\mathrm{LP}} = \dot p$ also
changes sign; a $+1$ crossing with $\dot p$ of one sign is a branch point. The kind is thus the
multiplier that crossed, not the one nearest the circle.

Location: between branch points $k$ and $k+1$ the corrector is re-run from point $k$ at
arclength $s \in (0, \Delta s_k)$. A step in which several test functions change sign is halved
until each bracket holds one; then each root is bracketed by the Illinois variant of regula falsi
until the bracket is below ``s_tol`` (at a fold $p(s) - p^* = O((s - s^*)^2)$). A Neimark--Sacker
point reports the angle $\theta = |\arg \lambda|$ of its pair and the strong resonance
$\theta = 2\pi / q$, $q \le 4$, when it is one. Each located point of a non-degenerate branch gets
its normal-form coefficient and criticality (`_normal_forms`).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ._arclength import (
    Family,
    Newton,
    Point,
    arclength_constraint,
    correct,
    reduced_multipliers,
    tangent_at,
)
from ._branch import Bifurcation
from ._normal_forms import normal_form
from ._stability import cluster_means

__all__ = [
    "CROSSINGS",
    "Step",
    "crossing_tests",
    "drop_neutral",
    "kinds_between",
    "locate_turn",
    "unstable_count",
]

#: Imaginary parts below this (relative to 1) count as real multipliers.
REAL_TOL = 1e-8

#: The crossings, each with its test function (module docstring).
CROSSINGS = ("+1", "-1", "complex")

#: A Neimark-Sacker angle within this of 2 pi / q (q <= 4) is a strong resonance.
RESONANCE_TOL = 1e-3


def drop_neutral(eig: np.ndarray, k: int) -> np.ndarray:
    """``eig`` without the ``k`` multipliers nearest $+1$ (those that are 1 along the whole branch:
    the degenerate directions found at the start, `continue_branch`'s ``neutral_dims``), and
    without the conjugate of a complex one dropped."""
    if k <= 0:
        return eig
    order = np.argsort(np.abs(eig - 1), kind="stable")
    drop = set(order[:k].tolist())
    # Never split a conjugate pair: a product over the rest would not be real, and the sign of
    # its real part (the test functions) would flip with rounding.
    for i in list(drop):
        if abs(eig[i].imag) > REAL_TOL * max(1.0, abs(eig[i])):
            partner = [
                j
                for j in order[k:]
                if j not in drop and abs(eig[j] - np.conj(eig[i])) <= 1e-9 * max(1.0, abs(eig[i]))
            ]
            if partner:
                drop.add(int(partner[0]))
    keep = [i for i in range(eig.size) if i not in drop]
    return eig[np.array(keep, dtype=int)]


def unstable_count(eig: np.ndarray, tol: float) -> int:
    """#{|lambda| > 1 + tol} over cluster-averaged multipliers (`cluster_means`: a defective
    multiplier 1, split by rounding into ``1 + O(eps ** (1/m))``, stays 1)."""
    return int(np.sum(np.abs(cluster_means(eig)) > 1 + tol))


def _scaled_product(z: np.ndarray) -> float:
    r"""$\operatorname{Re}\prod_i z_i / \max(1, |z_i|)$: the sign of $\prod_i z_i$ (real for the
    conjugate-closed sets used here), continuous, and neither overflowing nor underflowing."""
    if z.size == 0:
        return 1.0
    return float(np.real(np.prod(z / np.maximum(1.0, np.abs(z)))))


def crossing_tests(eig: np.ndarray, neutral: int = 0) -> dict[str, float]:
    r"""$\psi_+$, $\psi_-$ and $\psi_{\mathrm{NS}}$ (module docstring) of the multipliers ``eig``."""
    eig = np.asarray(drop_neutral(np.asarray(eig, complex), neutral))
    i, j = np.triu_indices(eig.size, 1)
    return {
        "+1": _scaled_product(eig - 1),
        "-1": _scaled_product(eig + 1),
        "complex": _scaled_product(eig[i] * eig[j] - 1),
    }


def _flips(a: float, b: float) -> bool:
    return bool(np.isfinite(a) and np.isfinite(b) and (a > 0) != (b > 0))


def kinds_between(tests_a: dict, tp_a: float, tests_b: dict, tp_b: float) -> list[str]:
    """The kinds whose test function changes sign between two branch points (usually none)."""
    fold = tp_a != 0 and tp_b != 0 and np.sign(tp_a) != np.sign(tp_b)
    kinds = ["fold"] if fold else []
    if _flips(tests_a["+1"], tests_b["+1"]) and not fold:
        kinds.append("branch-point")
    if _flips(tests_a["-1"], tests_b["-1"]):
        kinds.append("period-doubling")
    if _flips(tests_a["complex"], tests_b["complex"]):
        kinds.append("neimark-sacker")
    return kinds


def below_resolution(kind: str, a, b, dtype) -> bool:
    r"""Whether ``kind``'s test function is below the resolution of ``dtype`` at both bracket ends
    ``a`` and ``b``: $|\psi| \le 10^3 \varepsilon_{\mathrm{dtype}}$ (the test functions are
    scaled to $|\psi| \le 1$; their inputs carry the dtype's rounding, amplified by the solve).
    Always False in float64, where the bracket is resolved far below the corrector's tolerance."""
    eps = float(np.finfo(dtype).eps)
    if eps <= float(np.finfo(np.float64).eps):
        return False
    return max(abs(_value(kind, a)), abs(_value(kind, b))) <= 1e3 * eps


def _value(kind: str, end) -> float:
    if kind == "fold":
        return float(end.tp)
    return float(
        end.tests[{"branch-point": "+1", "period-doubling": "-1", "neimark-sacker": "complex"}[kind]]
    )


@dataclasses.dataclass(frozen=True, eq=False)
class End:
    """A branch point at arclength ``s`` of one step, with its multipliers and test values."""

    s: float
    pt: Point
    tp: float
    eig: np.ndarray
    tests: dict


class Step:
    r"""One continuation step from ``start`` along ``tangent``: the points at arclength $s$ on it
    (corrected with the step's arclength constraint, so on the branch) and the location of the
    bifurcations in it.

    Arguments:
        fam, generators, newton: as in `_arclength.correct`.
        start: the step's first point; ``tangent``: its unit tangent ``(tx, tp)``.
        extra, neutral: the degenerate directions of the branch (`continue_branch`).
        num_tokens: the token blocks of `reduced_multipliers` (1 for a map).
    """

    def __init__(self, fam, start, tangent, *, extra, neutral, generators, newton, num_tokens):
        self.fam, self.start, self.tangent = fam, start, tangent
        self.extra, self.neutral, self.generators, self.newton = extra, neutral, generators, newton
        self.num_tokens = num_tokens

    def end(self, s: float, pt: Point, tp: float, eig: np.ndarray | None = None) -> End:
        eig = reduced_multipliers(pt, self.num_tokens) if eig is None else eig
        return End(float(s), pt, float(tp), eig, crossing_tests(eig, self.neutral))

    def at(self, s: float) -> End | None:
        """The branch point at arclength ``s`` from ``start`` (None where the corrector fails)."""
        start, (tx, tp) = self.start, self.tangent
        guess = start.x + s * tx.reshape(start.x.shape)
        if start.basis.shape[0] != start.basis.shape[1]:  # sphere product: retract the predictor
            guess = guess / np.linalg.norm(guess, axis=-1, keepdims=True)
        con = arclength_constraint(start.x, start.p, tx, tp, s)
        pt, _, _ = correct(self.fam, guess, start.p + s * tp, con, self.generators, self.newton)
        if pt is None:
            return None
        _, tpc = tangent_at(pt, self.tangent, self.extra)
        return self.end(s, pt, tpc)

    def split(self, a: End, b: End, depth: int = 12, allowed=None) -> list[tuple[str, End, End]]:
        r"""``(kind, a', b')`` brackets: the step halved until each holds one sign change.

        Only the kinds seen over the whole step are kept in its halves: at a fold $\psi_+$ and
        $\dot p$ vanish together, and a half that holds the one root without the other (their
        computed roots differ by rounding) would otherwise report a branch point beside the fold.
        """
        kinds = kinds_between(a.tests, a.tp, b.tests, b.tp)
        if allowed is not None:
            kinds = [k for k in kinds if k in allowed]
        if len(kinds) <= 1 or depth == 0:
            return [(k, a, b) for k in kinds]
        mid = self.at(0.5 * (a.s + b.s))
        if mid is None:
            return [(k, a, b) for k in kinds]
        return self.split(a, mid, depth - 1, kinds) + self.split(mid, b, depth - 1, kinds)

    def locate(
        self, kind: str, a: End, b: End, *, step: int, s_tol: float = 1e-13, max_iter: int = 80
    ) -> Bifurcation | None:
        r"""Locate the root of ``kind``'s test function between ``a`` and ``b`` (Illinois rule: the
        weight of an endpoint kept twice is halved, so the bracket shrinks superlinearly).

        Returns:
            A `Bifurcation`, ``located`` False when the bracket did not shrink below
            ``s_tol * max(1, |s_b - s_a|)`` (then the better end is given); None for a neutral
            saddle (a located $\psi_{\mathrm{NS}} = 0$ without a non-real pair on the circle).
        """
        sa, sb, fa, fb = a.s, b.s, _value(kind, a), _value(kind, b)
        best = (b, fb) if abs(fb) < abs(fa) else (a, fa)
        bracket = (a.pt.p, b.pt.p)
        side, it = 0, 0
        width = s_tol * max(1.0, abs(b.s - a.s))
        done = False
        for it in range(1, max_iter + 1):
            sc = sb - fb * (sb - sa) / (fb - fa)
            if not (min(sa, sb) < sc < max(sa, sb)):
                sc = 0.5 * (sa + sb)
            c = self.at(sc)
            if c is None:
                break
            fc = _value(kind, c)
            if not np.isfinite(fc):
                break
            if abs(fc) < abs(best[1]):
                best = (c, fc)
            if fc == 0.0:
                done = True
                break
            if (fc > 0) == (fb > 0):
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
                done = True
                break
        e, val = best
        return self.bifurcation(kind, e, val, done, it, step, bracket)

    def bifurcation(self, kind, e: End, val, located, iterations, step, bracket) -> Bifurcation | None:
        theta, q = float("nan"), 0
        if kind == "neimark-sacker":
            eig = drop_neutral(e.eig, self.neutral)
            cplx = eig[np.abs(eig.imag) > REAL_TOL * np.maximum(1.0, np.abs(eig))]
            if cplx.size == 0 or (located and np.min(np.abs(np.abs(cplx) - 1)) > 1e-4):
                return (
                    None
                    if located
                    else Bifurcation(kind, e.pt.p, e.pt.x, step, val, False, iterations, bracket)
                )
            z = cplx[np.argmin(np.abs(np.abs(cplx) - 1))]
            theta = float(abs(np.angle(z)))
            q = next((k for k in (1, 2, 3, 4) if abs(theta - 2 * np.pi / k) <= RESONANCE_TOL), 0)
            q = 1 if theta <= RESONANCE_TOL else q
        if kind != "fold":  # p is monotone over a step without a fold: the point lies in its bracket
            slack = 1e-12 * max(1.0, abs(bracket[0]), abs(bracket[1]))
            located = located and min(bracket) - slack <= e.pt.p <= max(bracket) + slack
        coef, crit = float("nan"), ""
        if located and not q and not self.neutral and not self.extra:
            coef, crit = self.normal_form(kind, e.pt, theta)
        return Bifurcation(
            kind, e.pt.p, e.pt.x, step, val, bool(located), iterations, bracket, theta, q, coef, crit
        )

    def normal_form(self, kind: str, pt: Point, theta: float) -> tuple[float, str]:
        """``(coefficient, criticality)`` at a located point (`_normal_forms`); NaN and ``""`` where a
        linear solve of the formulas is singular (a further multiplier on the circle)."""
        bq = pt.basis @ pt.q
        tangent = np.concatenate([bq.T @ self.tangent[0], [self.tangent[1]]])
        try:
            return normal_form(self.fam, pt, kind, theta=theta, tangent=tangent)
        except np.linalg.LinAlgError:
            return float("nan"), ""


def locate_turn(
    fam: Family,
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
