r"""Continuation of equilibria in a layer parameter: `continue_branch` (pseudo-arclength).

`continue_branch` follows one branch $\{(X, p) : F_p(X) = X\}$ from one equilibrium by
pseudo-arclength continuation (`rankdyn._equilibria._arclength`: predictor along the branch
tangent, Newton on the bordered system, step adaptation), through folds, and locates the
bifurcations on it (`rankdyn._equilibria._bifurcations`). The multipliers $+1$ of continuous
symmetries are quotiented out first (`rankdyn._equilibria._quotient`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

import numpy as np
from jaxtyping import ArrayLike, Float

from .._arguments import STABILITY_BAND, check_count, check_real
from .._errors import SolveError, UsageError
from .._model._layer import SelfAttentionLayer
from .._results import RESULTS
from .._run._interrupt import check_interrupt
from .._run._progress import progress_bar
from ._arclength import (
    LayerFamily,
    Newton,
    arclength_constraint,
    check_start,
    correct,
    fixed_parameter,
    is_stable,
    null_space,
    reduced_multipliers,
    tangent_at,
)
from ._bifurcations import Step, below_resolution, locate_turn
from ._branch import Branch, branch_status
from ._maps import MapFamily, check_map_start, check_period
from ._quotient import commuting_rotations
from ._steps import ContinuationPlan

__all__ = ["continue_branch"]


def continue_branch(
    family: Callable[[float], SelfAttentionLayer] | Callable,
    x_start: Float[ArrayLike, "..."],
    p_start: float,
    p_end: float,
    *,
    ds: float | None = None,
    max_steps: int = 400,
    ds_min: float | None = None,
    ds_max: float | None = None,
    residual_tol: float | None = None,
    stability_tol: float = 1e-6,
    num_multipliers: int = 16,
    max_turn: float = 0.5,
    symmetries: bool = True,
    locate_bifurcations: bool = True,
    param_name: str = "p",
    t: int = 0,
    period: int = 1,
    progress: bool = False,
    throw: bool = True,
) -> Branch:
    r"""Follow one branch of equilibria $F_p(X) = X$ in $p$ by pseudo-arclength continuation.

    Predictor $(X_k + \Delta s\,\dot X_k,\ p_k + \Delta s\,\dot p_k)$ (retracted onto the
    spheres), corrector: Newton on the bordered system

    $$B^\top\big(F_p(X) - X\big) = 0,\qquad \dot X_k^\top(X - X_k) + \dot p_k (p - p_k) = \Delta s$$

    on the slice orthogonal to the continuous-symmetry orbits (`rankdyn._equilibria._arclength`).
    Bifurcations are detected by test functions on the reduced multipliers and $\dot p$ and
    located by bracketing (`rankdyn._equilibria._bifurcations`), one bracket per crossing.
    Branch switching at a branch point is not done: continue the other branch from its own
    start; at a period doubling, `switch_branch` gives a start on the doubled cycle.

    The start decides what ``family`` is: a 2-D ``x_start`` ``(n, d)`` means a layer family
    ``p -> SelfAttentionLayer``; a 1-D ``x_start`` ``(m,)`` means a plain JAX map
    ``f(x, p) -> x`` of $\mathbb R^m$, continued in the full space (``symmetries`` and ``t`` do
    not apply, and the branch's points have shape ``(k, m)``).

    Arguments:
        family: ``p -> SelfAttentionLayer`` of one structure (any mask, heads, skip, MLP, a
            trained layer; only its arrays may depend on ``p``), or a map ``f(x, p) -> x``.
        x_start: one equilibrium ``(n, d)`` of ``family(p_start)``, or one fixed point ``(m,)``
            of ``f^period(., p_start)``.
        p_start, p_end: the parameter interval; the branch starts towards ``p_end`` and stops
            when $p$ leaves $[\min, \max]$ (its last point is then solved at that end).
        ds: first arclength step (default $|p_\mathrm{end} - p_\mathrm{start}| / 50$);
            ``ds_min`` (default ``1e-6 ds``) and ``ds_max`` (default ``4 ds``) bound it.
        max_steps: continuation steps (accepted points) at most.
        residual_tol: corrector tolerance on $\|F_p(X) - X\|_F$ and the start's check
            (default `default_residual_tol`: 1e-10 in float64).
        stability_tol: ``stable`` means every reduced multiplier has modulus $< 1 -$ this.
        num_multipliers: how many leading multipliers each point keeps.
        max_turn: a step whose tangent turns by more than this angle (radians) is retried smaller.
        symmetries: quotient out the rotations commuting with the layer (`commuting_rotations`).
        locate_bifurcations: locate the detected bifurcations (else report the bracket's end).
        param_name: the parameter's name, for reports.
        t: the layer whose map is continued, for a per-layer stack (a trained checkpoint:
            `Checkpoint.layers`); 0 otherwise.
        period: ``k``: follow fixed points of the ``k``-th iterate (cycles of period ``k``), with
            their multipliers; for maps and shared-weight layers.
        progress: show a progress bar (one per branch).
        throw: raise `rankdyn.SolveError` unless the branch reaches ``p_end`` (default). With
            ``throw=False`` the branch so far is returned with its ``result``: a branch that
            ends early (at a turning point it cannot pass, a singular point) is a result too.

    In float32 a bifurcation whose test function is below float32's resolution at both ends of
    its bracket (`below_resolution`) is reported with ``located=False``: its sign change may be
    rounding, and its point is known only to the bracket.

    Returns:
        A `Branch`; ``result`` is the `rankdyn.RESULTS` member ``parameter_end`` (success),
        ``max_steps_reached``, ``newton_failed`` or ``nonfinite``.

    Raises:
        SolveError: with ``throw=True``, if the branch ended before ``p_end``.
        UsageError: if ``p_start == p_end``, the start is non-finite, misshapen or not an
            equilibrium (the message gives the residual and the tolerance), the family does not
            depend on the parameter, a map changes the state's shape, ``x_start`` is neither 1-D
            nor 2-D, the period is below 1 or asked of a per-layer stack, or a setting is out of
            range.
    """
    period = check_period(period)
    steps = ContinuationPlan(p_start, p_end, ds, ds_min, ds_max, max_steps, param=param_name)
    p0, p1, ds, ds_min, ds_max, max_steps = (
        steps.p_start, steps.p_end, steps.ds, steps.ds_min, steps.ds_max, steps.max_steps,
    )  # fmt: skip
    num_multipliers = check_count(num_multipliers, "num_multipliers")
    t = check_count(t, "t", minimum=0)
    stability_tol = check_real(stability_tol, "stability_tol", minimum=0, below=1, what=STABILITY_BAND)
    max_turn = check_real(max_turn, "max_turn", above=0, below=math.pi + 1e-12, what=" (radians)")
    if residual_tol is not None:
        residual_tol = check_real(residual_tol, "residual_tol", above=0)
    ndim = np.ndim(x_start)
    if ndim == 1:
        if t != 0:
            raise UsageError(f"t = {t} selects a layer of a per-layer stack; a map f(x, p) has none: t = 0.")
        fam = MapFamily(family, period)
        x, tol = check_map_start(fam, x_start, p0, residual_tol)
        if not fam.reads_parameter(x, p0):
            raise UsageError(
                f"the map does not depend on {param_name}: f(x, {param_name}) is the same on both sides of "
                f"{p0:g}, so there is no branch to follow."
            )
        n, gens = 1, np.zeros((0, x.size, x.size))
    elif ndim == 2:
        fam = LayerFamily(family, t=t, period=period)
        if period > 1 and fam(p0).num_layers is not None:
            raise UsageError(
                f"period = {period} needs one map iterated: a per-layer stack has a different map at every "
                "layer, so it has no cycles to continue; use shared weights or period = 1."
            )
        x, tol = check_start(fam, x_start, p0, residual_tol)
        if not fam.reads_parameter(p0):
            raise UsageError(
                f"the family does not depend on {param_name}: no array of family({p0:g}) changes with it, so "
                "there is no branch to follow; choose a parameter the layer reads."
            )
        layer0 = fam(p0)
        gens = commuting_rotations(layer0, t=fam.t) if symmetries else np.zeros((0, layer0.dim, layer0.dim))
        n = layer0.num_tokens
    else:
        raise UsageError(
            "x_start must be a fixed point (m,) of a map f(x, p) or an equilibrium (n, d) of a layer "
            f"family, got an array of shape {np.shape(x_start)}."
        )
    newton = Newton(tol=tol, max_step=max(0.5, 10 * ds_max))
    lo, hi = min(p0, p1), max(p0, p1)
    dtype = fam._dtype() if ndim == 1 else fam(p0).weights.w_v.dtype

    pt, _, why = correct(fam, x, p0, fixed_parameter(p0, x.size), gens, newton)
    if pt is None:
        raise UsageError(f"x_start could not be polished at p = {p0:g} ({why}); is it an equilibrium?")
    _, nullity = null_space(pt, 1)
    extra = max(0, nullity - 1)
    tangent = tangent_at(pt, None, extra, direction=math.copysign(1.0, p1 - p0))
    eig0 = reduced_multipliers(pt, n)
    # A degenerate start (kernel beyond the tangent) has multipliers 1 along the whole branch,
    # defective ones included (algebraic multiplicity above the kernel's dimension): the
    # detection leaves out as many as lie within the clustering radius of 1 at the start.
    neutral = 0 if extra == 0 else max(extra, int(np.sum(np.abs(eig0 - 1) <= 1e-3)))
    pts, tans, eigs, arcs = [pt], [tangent], [eig0], [0.0]
    bifs = []
    result = RESULTS.max_steps_reached
    bar = progress_bar(total=max_steps, desc=f"branch in {param_name}", disable=not progress, leave=False)
    step = ds
    while len(pts) <= max_steps:
        check_interrupt()  # Ctrl-C / SIGTERM on the command line: stop between steps
        last, (tx, tp) = pts[-1], tans[-1]
        if extra and len(pts) >= 2:
            # Degenerate branch (kernel beyond the tangent): the linear tangent mixes in the kernel
            # (e.g. it moves the paper's first token off e_d, where Newton then converges only
            # linearly); the secant through the last two points follows the branch instead.
            sec = np.concatenate([(last.x - pts[-2].x).reshape(-1), [last.p - pts[-2].p]])
            sec = sec / np.linalg.norm(sec)
            tx, tp = sec[:-1], float(sec[-1])
        p_pred = last.p + step * tp
        # A predictor beyond an end: the last point is solved at that end (natural parameter).
        at_end = p_pred > hi or p_pred < lo
        if at_end:
            bound = hi if p_pred > hi else lo
            s = (bound - last.p) / tp
            con = fixed_parameter(bound, x.size)
        else:
            s = step
            con = arclength_constraint(last.x, last.p, tx, tp, s)
        guess = last.x + s * tx.reshape(last.x.shape)
        if last.basis.shape[0] != last.basis.shape[1]:
            guess = guess / np.linalg.norm(guess, axis=-1, keepdims=True)
        new, iters, why = correct(fam, guess, last.p + s * tp, con, gens, newton)
        turned = False
        if new is not None:
            new_tan = tangent_at(new, (tx, tp), extra)
            turned = float(new_tan[0] @ tx + new_tan[1] * tp) < math.cos(max_turn)
        if new is None or turned:
            step *= 0.5
            if step < ds_min:  # the smallest step failed too: say why it failed there
                result = RESULTS.nonfinite if why == "nonfinite" else RESULTS.newton_failed
                break
            continue
        eig = reduced_multipliers(new, n)
        # On a degenerate branch the turns of p itself (secants) mark the folds: the projected
        # tangent's p component is not reliable there (`locate_turn`).
        tp_a, tp_b = (last.p - pts[-2].p, new.p - last.p) if extra and len(pts) >= 2 else (tp, new_tan[1])
        if extra and len(pts) >= 2 and tp_a != 0 and tp_b != 0 and np.sign(tp_a) != np.sign(tp_b):
            bifs.append(
                locate_turn(fam, pts[-2], last, new, step=len(pts) - 2, generators=gens, newton=newton)
            )
        stepper = Step(
            fam, last, (tx, tp), extra=extra, neutral=neutral, generators=gens, newton=newton, num_tokens=n
        )
        # On a degenerate branch the secants decide the fold (above), not the projected tangents.
        a, b = stepper.end(0.0, last, tp_a, eigs[-1]), stepper.end(s, new, tp_b, eig)
        for kind, ea, eb in stepper.split(a, b) if locate_bifurcations else stepper.split(a, b, depth=0):
            if kind == "fold" and extra and len(pts) >= 2:
                continue  # located above by the turn of p
            if locate_bifurcations:
                bif = stepper.locate(kind, ea, eb, step=len(pts) - 1)
            else:
                e = ea if abs(ea.tp) <= abs(eb.tp) else eb
                bif = stepper.bifurcation(kind, e, float("nan"), False, 0, len(pts) - 1, (last.p, new.p))
            if bif is not None and bif.located and below_resolution(kind, ea, eb, dtype):
                bif = dataclasses.replace(bif, located=False)
            if bif is not None:
                bifs.append(bif)
        # hypot: a step of 1e200 in p is representable, its square is not (an OverflowError in Python).
        arcs.append(arcs[-1] + math.hypot(float(np.linalg.norm(new.x - last.x)), float(new.p - last.p)))
        pts.append(new)
        tans.append(new_tan)
        eigs.append(eig)
        bar.update(1)
        bar.set_postfix({param_name: f"{new.p:.6g}"}, refresh=False)
        if at_end:
            result = RESULTS.parameter_end
            break
        if iters <= 3:
            step = min(step * 1.5, ds_max)
        elif iters >= newton.max_iter:
            # Only a corrector that needed every iteration shrinks the step: at a degenerate root
            # (the paper's first token) Newton converges linearly at any step size.
            step = max(step * 0.7, ds_min)
    bar.close()
    k = num_multipliers
    mult = np.full((len(pts), k), np.nan + 0j)
    for i, e in enumerate(eigs):
        mult[i, : min(k, e.size)] = e[:k]
    if throw and result != RESULTS.parameter_end:
        # A branch escaping to infinity (a map's fold towards a blow-up) runs out of steps too:
        # the largest state norm tells that apart from a slow branch.
        largest = max(float(np.linalg.norm(q.x)) for q in pts)
        raise SolveError(
            f"continue_branch: the branch ended at {param_name} = {pts[-1].p:.6g}, before {p1:g}, with "
            f"status {branch_status(result)!r} ({RESULTS[result]}); the largest state norm reached was "
            f"{largest:.3g}. Pass throw=False to get the branch so far with its status."
        )
    return Branch(
        params=np.array([q.p for q in pts]),
        points=np.stack([q.x for q in pts]),
        multipliers=mult,
        stable=np.array([is_stable(e, stability_tol) for e in eigs]),
        tangents_p=np.array([t[1] for t in tans]),
        residuals=np.array([q.residual for q in pts]),
        arclength=np.array(arcs),
        bifurcations=tuple(bifs),
        result=result,
        symmetry_dims=int(pt.sym),
        neutral_dims=int(extra),
        space="tangent" if pt.basis.shape[0] != pt.basis.shape[1] else "full",
        tol=float(stability_tol),
        param_name=param_name,
        period=period,
        family=family,
    )
