r"""Codimension 2: a fold, period-doubling or Neimark--Sacker point followed in two parameters.

`continue_curve` continues the solutions $y = (x, p, q[, \kappa])$ of a minimally augmented
system (Govaerts, Kuznetsov and co-authors; the fixed-point curves of MatContM and BifurcationKit)
for $g = f^k(\cdot, p, q)$ with $A = Dg(x)$:

- **fold**: $g(x) - x = 0$, $s(x, p, q) = 0$, where
  $\begin{pmatrix} A - I & b \\ c^\top & 0\end{pmatrix}\begin{pmatrix} v \\ s\end{pmatrix}
  = \begin{pmatrix} 0 \\ 1\end{pmatrix}$ ($s = 0$ exactly where $A - I$ is singular);
- **period doubling**: the same with $A + I$;
- **Neimark--Sacker**: $g(x) - x = 0$, $G_{i_1 j_1} = G_{i_2 j_2} = 0$, where
  $\begin{pmatrix} A^2 - 2\kappa A + I & B \\ C^\top & 0\end{pmatrix}
  \begin{pmatrix} V \\ G\end{pmatrix} = \begin{pmatrix} 0 \\ I_2\end{pmatrix}$ and
  $\kappa = \cos\theta$ is one more unknown ($A^2 - 2\kappa A + I$ has rank $m - 2$ when
  $e^{\pm i\theta}$ are multipliers). The two entries of the $2\times 2$ $G$ are those whose
  Jacobian is best conditioned at the start.

The borders ($b, c$: the left and right singular vectors of the smallest singular value; $B, C$:
the two smallest) are refreshed at every accepted point. The curve $H(y) = 0$,
$H : \mathbb R^{N+1} \to \mathbb R^N$, is followed by pseudo-arclength continuation (tangent: the
null vector of $DH$; corrector: Newton on $H = 0$, $\dot y^\top (y - y_k) = \Delta s$; all
derivatives exact, by ``jax.jacfwd``). On a fold curve the cusp test function
$\psi_{\mathrm{CP}} = w^\top D^2 g(x)[v, v]$ ($v$, $w$: the right and left null vectors, oriented
continuously) changes sign at a cusp, which is located by regula falsi along the curve; the other
codimension-2 points (generalised period doubling, Chenciner, strong resonances) likewise
(`_codim2`).
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

from .._errors import SolveError, UsageError
from .._results import RESULTS
from . import DS_DIVISOR
from ._branch import Bifurcation
from ._codim2 import Curve, SpecialPoint, curve_tests, locate_zero
from ._maps import LayerMap2, PlainMap2, check_period
from ._quotient import commuting_rotations

__all__ = ["CURVE_KINDS", "Curve", "continue_curve"]

#: Old names of `continue_curve`'s arguments, refused with the new one (they are named as
#: `continue_branch`'s).
RENAMED = {"tol": "residual_tol", "param_names": "param_name and param2_name"}

#: The bifurcations `continue_curve` follows.
CURVE_KINDS = ("fold", "period-doubling", "neimark-sacker")


def _system(map2, period: int, kind: str, m: int):
    """``H(y, b, c, pair, aux)`` and its Jacobian, compiled once; ``y = (x, p, q[, kappa])``; ``pair``:
    the two entries of the flattened $G$ a Neimark--Sacker curve uses; ``aux``: ``map2.aux(p, q)``."""

    def g(x, p, q, aux):
        for _ in range(period):
            x = map2(x, p, q, aux)
        return x

    eye = jnp.eye(m)

    def matrix(y, aux):
        x, p, q = y[:m], y[m], y[m + 1]
        a = jax.jacfwd(lambda z: g(z, p, q, aux))(x)
        if kind == "fold":
            return a - eye
        if kind == "period-doubling":
            return a + eye
        return a @ a - 2 * y[m + 2] * a + eye

    def h(y, b, c, pair, aux):
        x, p, q = y[:m], y[m], y[m + 1]
        k = b.shape[1]
        big = jnp.block([[matrix(y, aux), b], [c.T, jnp.zeros((k, k))]])
        rhs = jnp.concatenate([jnp.zeros((m, k)), jnp.eye(k)])
        gg = jnp.linalg.solve(big, rhs)[m:]
        cond = gg.reshape(-1)[pair] if kind == "neimark-sacker" else gg.reshape(-1)
        return jnp.concatenate([g(x, p, q, aux) - x, cond])

    def both(y, b, c, pair, aux):
        with jax.default_matmul_precision("highest"):
            return h(y, b, c, pair, aux), jax.jacfwd(h)(y, b, c, pair, aux)

    def cusp(y, v, w, aux):
        x, p, q = y[:m], y[m], y[m + 1]
        d2 = jax.jvp(lambda z: jax.jvp(lambda u: g(u, p, q, aux), (z,), (v,))[1], (x,), (v,))[1]
        return w @ d2

    return jax.jit(both), jax.jit(matrix), jax.jit(cusp)


_cached_system = functools.lru_cache(maxsize=16)(_system)


def _borders(mat: np.ndarray, k: int, prev=None):
    """Left and right singular vectors of the ``k`` smallest singular values, signed like ``prev``."""
    u, _, vt = np.linalg.svd(mat)
    b, c = u[:, -k:], vt[-k:].T
    if prev is not None:
        for j in range(k):
            b[:, j] *= 1.0 if b[:, j] @ prev[0][:, j] >= 0 else -1.0
            c[:, j] *= 1.0 if c[:, j] @ prev[1][:, j] >= 0 else -1.0
    return b, c


def continue_curve(
    f2: Callable,
    bifurcation: Bifurcation,
    q_start: float,
    q_end: float,
    *,
    period: int = 1,
    ds: float | None = None,
    max_steps: int = 400,
    residual_tol: float = 1e-10,
    param_name: str = "p",
    param2_name: str = "q",
    throw: bool = True,
    **renamed,
) -> Curve:
    r"""Follow a located fold, period doubling or Neimark--Sacker point of ``f2(., ., q_start)`` in
    the plane of its two parameters (module docstring: the minimally augmented systems).

    Arguments:
        f2: ``f2(x, p, q) -> x``, a JAX map of a 1-D state and two scalar parameters.
        bifurcation: a located bifurcation of the branch of ``f2(x, p, q_start)`` in ``p``
            (`continue_branch`).
        q_start, q_end: the range of $q$; the curve stops when $q$ leaves it (its last point is
            then solved at that end) or after ``max_steps``.
        period: ``k`` of the branch (fixed points of $f^k$).
        ds: first arclength step (default $|q_\mathrm{end} - q_\mathrm{start}| / 50$; it adapts
            between $10^{-6}$ and 4 times that).
        residual_tol: Newton's tolerance on $\|H\|$ (``tol`` before 0.5).
        param_name, param2_name: the names of $p$ and $q$, for reports (``param_names`` before 0.5).
        throw: raise `rankdyn.SolveError` unless the curve reaches ``q_end`` (default). With
            ``throw=False`` the curve so far is returned with its ``result``.

    Along the curve the codimension-2 points are detected and located (`_codim2`): the cusp on a
    fold curve, the generalised period doubling on a period-doubling curve, the Chenciner point and
    the strong resonances 1:1 to 1:4 on a Neimark--Sacker curve; they are the curve's
    ``special_points`` (the cusps also its ``cusps``).

    Returns:
        A `Curve`; ``result`` is the `rankdyn.RESULTS` member ``parameter_end`` (success),
        ``max_steps_reached`` or ``newton_failed``.

    Raises:
        SolveError: with ``throw=True``, if the curve ended before ``q_end``.
        UsageError: for an unlocated bifurcation or a kind `CURVE_KINDS` does not hold, an empty or
            non-finite ``q`` range, a state that is not 1-D, a map whose output shape differs, or
            a point that is not a fixed point of ``f2(., p, q_start)``; for ``tol`` and
            ``param_names`` (renamed ``residual_tol``, ``param_name`` and ``param2_name``).
    """
    for old in renamed:
        if old in RENAMED:
            raise UsageError(f"continue_curve: {old!r} is now {RENAMED[old]!r}, as in continue_branch.")
        raise UsageError(f"continue_curve got an unexpected keyword argument {old!r}.")
    tol = float(residual_tol)
    param_names = (str(param_name), str(param2_name))
    period = check_period(period)
    q0, q1 = float(q_start), float(q_end)
    if not (math.isfinite(q0) and math.isfinite(q1)):
        raise UsageError(f"q_start and q_end must be finite, got {q0} and {q1}.")
    if q0 == q1:
        raise UsageError(
            f"the q range is empty (q_start = q_end = {q0:g}): give an interval to continue over."
        )
    if bifurcation.kind not in CURVE_KINDS:
        raise UsageError(f"continue_curve follows {', '.join(CURVE_KINDS)} points, got a {bifurcation.kind}.")
    if not bifurcation.located:
        lo, hi = sorted(bifurcation.bracket)
        raise UsageError(
            f"the {bifurcation.kind} in [{lo:.6g}, {hi:.6g}] is not located: a curve starts from a located "
            "point (continue the branch with a smaller ds)."
        )
    x0 = np.asarray(bifurcation.point, dtype=np.float64)
    p0 = float(bifurcation.param)
    if x0.ndim == 2:
        map2 = LayerMap2(f2, p0, q0)
        if map2.layer0.has_dropout:
            raise UsageError("dropout must be 0: a stochastic map has no bifurcation curves.")
        if commuting_rotations(map2.layer0).shape[0]:
            raise UsageError(
                "the layer commutes with rotations: its equilibria come in continua (a multiplier 1 "
                "everywhere), so a curve in two parameters is degenerate; break the symmetry first."
            )
        x0 = x0.reshape(-1)
    elif x0.ndim == 1:
        map2 = PlainMap2(f2)
        dt = jnp.asarray(0.0).dtype
        out = jax.eval_shape(f2, jax.ShapeDtypeStruct(x0.shape, dt), *(jax.ShapeDtypeStruct((), dt),) * 2)
        if getattr(out, "shape", None) != x0.shape:
            raise UsageError(
                f"the map must return a state of the shape it is given: f2(x, p, q) with x of shape "
                f"{x0.shape} returned {getattr(out, 'shape', type(out).__name__)}."
            )
    else:
        raise UsageError(f"the bifurcation's point must be (m,) or (n, d), got shape {x0.shape}.")
    m = x0.size

    def A(z):  # noqa: N802 (the host data of the map at z's parameters)
        return map2.aux(z[m], z[m + 1])

    ns = bifurcation.kind == "neimark-sacker"
    k = 2 if ns else 1
    y = np.concatenate([x0, [p0, q0]] + ([[math.cos(bifurcation.theta)]] if ns else []))
    pair = np.array([0, 3])
    if isinstance(map2, PlainMap2):  # equal for one map: its curves share the programs
        both, matrix, cusp_fn = _cached_system(map2, period, bifurcation.kind, m)
    else:
        both, matrix, cusp_fn = _system(map2, period, bifurcation.kind, m)
    res = float(np.linalg.norm(np.asarray(both(y, np.eye(m, k), np.eye(m, k), pair, A(y))[0][:m])))
    if not res <= 1e3 * tol:
        raise UsageError(
            f"the bifurcation's point is not a fixed point of f2(., {p0:g}, {q0:g}): ||g(x) - x|| = "
            f"{res:.3e}; pass a bifurcation of the branch at q_start."
        )
    borders = _borders(np.asarray(matrix(y, A(y))), k)
    if ns:  # the two entries of G whose Jacobian is best conditioned here
        best = -1.0
        for cand in itertools.combinations(range(4), 2):
            jac = np.asarray(both(y, *borders, np.array(cand), A(y))[1])
            sv = np.linalg.svd(jac, compute_uv=False)[-1]
            if sv > best:
                best, pair = sv, np.array(cand)

    def newton(y, con):
        """Newton on ``H = 0`` and the scalar constraint ``con(y) -> (value, gradient)``."""
        for it in range(16):
            hv, jac = (np.asarray(a, dtype=np.float64) for a in both(y, *borders, pair, A(y)))
            cv, cg = con(y)
            if not (np.all(np.isfinite(hv)) and np.all(np.isfinite(jac))):
                return None, it
            if np.linalg.norm(hv) <= tol and abs(cv) <= tol:
                return y, it
            step = np.linalg.lstsq(np.vstack([jac, cg[None]]), -np.concatenate([hv, [cv]]), rcond=1e-13)[0]
            if not np.all(np.isfinite(step)) or np.linalg.norm(step) > 1.0:
                return None, it
            y = y + step
        return None, 16

    def fix_q(value):
        e = np.zeros(y.size)
        e[m + 1] = 1.0
        return lambda z: (float(z[m + 1] - value), e)

    y, _ = newton(y, fix_q(q0))
    if y is None:
        raise UsageError(f"the {bifurcation.kind} could not be polished at q = {q0:g}; is it located?")

    def tangent(y, prev):
        jac = np.asarray(both(y, *borders, pair, A(y))[1], dtype=np.float64)
        t = np.linalg.svd(jac)[2][-1]
        if prev is None:
            return t if (t[m + 1] >= 0) == (q1 > q0) else -t
        return t if t @ prev >= 0 else -t

    def cusp_value(y):
        if bifurcation.kind != "fold":
            return np.nan
        mat = np.asarray(matrix(y, A(y)))
        big = _bordered(mat, borders)
        v, w = np.linalg.solve(big, _unit(m)), np.linalg.solve(big.T, _unit(m))
        return float(cusp_fn(y, v[:m] / np.linalg.norm(v[:m]), w[:m] / np.linalg.norm(w[:m]), A(y)))

    nf_tests = curve_tests(bifurcation.kind, map2, period, m, jnp.asarray(0.0).dtype)

    def values(y) -> dict[str, float]:
        """The codimension-2 test functions at ``y`` (and the normal-form coefficient)."""
        if nf_tests is None:
            return {"cusp": cusp_value(y), "coefficient": math.nan}
        return nf_tests(y, A(y))

    span = abs(q1 - q0)
    ds = span / DS_DIVISOR if ds is None else float(ds)
    if not (math.isfinite(ds) and ds > 0):
        raise UsageError(f"ds must be finite and > 0, got {ds}.")
    lo, hi = min(q0, q1), max(q0, q1)
    t = tangent(y, None)
    ys, vals, special = [y], [values(y)], []
    result, step = RESULTS.max_steps_reached, ds
    while len(ys) <= max_steps:
        last = ys[-1]
        pred = last + step * t
        at_end = not lo <= pred[m + 1] <= hi
        if at_end:
            bound = hi if pred[m + 1] > hi else lo
            s = (bound - last[m + 1]) / t[m + 1]
            con = fix_q(bound)
        else:
            s = step
            tt, base = t.copy(), last.copy()
            con = lambda z, tt=tt, base=base, s=s: (float(tt @ (z - base) - s), tt)  # noqa: E731
        new, iters = newton(last + s * t, con)
        if new is None:
            step *= 0.5
            if step < 1e-6 * ds:
                result = RESULTS.newton_failed
                break
            continue
        new_t = tangent(new, t)
        nv = values(new)
        for name, fb in nv.items():
            fa = vals[-1][name]
            if name == "coefficient" or not (np.isfinite(fa) and np.isfinite(fb)) or (fa > 0) == (fb > 0):
                continue
            at, fc = locate_zero(newton, lambda z, name=name: values(z)[name], last, t, s, fa, fb)
            # A sign change through a pole (d at the 1:3 resonance) is not a zero.
            if abs(fc) <= 1e-3 * max(abs(fa), abs(fb)) or name == "cusp":
                shape = np.shape(bifurcation.point)
                special.append(SpecialPoint(name, float(at[m]), float(at[m + 1]), at[:m].reshape(shape)))
        ys.append(new)
        vals.append(nv)
        borders = _borders(np.asarray(matrix(new, A(new))), k, borders)
        t = new_t
        if at_end:
            result = RESULTS.parameter_end
            break
        if iters <= 3:
            step = min(step * 1.5, 4 * ds)
    arr = np.stack(ys)
    if throw and result != RESULTS.parameter_end:
        raise SolveError(
            f"continue_curve: the {bifurcation.kind} curve ended at {param_names[1]} = {arr[-1, m + 1]:.6g}, "
            f"before {q1:g} ({RESULTS[result]}); pass throw=False to get the curve so far with its result."
        )
    return Curve(
        kind=bifurcation.kind,
        p=arr[:, m],
        q=arr[:, m + 1],
        points=arr[:, :m].reshape((len(ys),) + np.shape(bifurcation.point)),
        kappa=arr[:, m + 2] if ns else np.full(len(ys), np.nan),
        residuals=np.array([_residual(both, z, borders, pair, A(z), m) for z in ys]),
        cusps=tuple((sp.p, sp.q) for sp in special if sp.kind == "cusp"),
        result=result,
        param_names=param_names,
        special_points=tuple(special),
        coefficients=np.array([v["coefficient"] for v in vals]),
    )


def _residual(both, y, borders, pair, aux, m) -> float:
    return float(np.linalg.norm(np.asarray(both(y, *borders, pair, aux)[0][:m])))


def _bordered(mat, borders):
    b, c = borders
    k = b.shape[1]
    return np.block([[mat, b], [c.T, np.zeros((k, k))]])


def _unit(m):
    e = np.zeros(m + 1)
    e[m] = 1.0
    return e
