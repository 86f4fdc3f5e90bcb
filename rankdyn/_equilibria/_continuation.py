r"""Continuation of equilibria in a layer parameter: `continue_branch` (pseudo-arclength).

`continue_branch` follows one branch $\{(X, p) : F_p(X) = X\}$ from one equilibrium by
pseudo-arclength continuation (`rankdyn._equilibria._arclength`: predictor along the branch
tangent, Newton on the bordered system, step adaptation), through folds, and locates the
bifurcations on it (`rankdyn._equilibria._bifurcations`). The multipliers $+1$ of continuous
symmetries are quotiented out first (`rankdyn._equilibria._quotient`).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
from jaxtyping import ArrayLike, Float

from .._errors import UsageError
from .._model._layer import SelfAttentionLayer
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
from ._bifurcations import detect, locate, locate_turn, test_function
from ._branch import BRANCH_RESULTS, Branch
from ._quotient import commuting_rotations

__all__ = ["continue_branch"]


def continue_branch(
    family: Callable[[float], SelfAttentionLayer],
    x_start: Float[ArrayLike, "n d"],
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
    progress: bool = False,
) -> Branch:
    r"""Follow one branch of equilibria $F_p(X) = X$ in $p$ by pseudo-arclength continuation.

    Predictor $(X_k + \Delta s\,\dot X_k,\ p_k + \Delta s\,\dot p_k)$ (retracted onto the
    spheres), corrector: Newton on the bordered system

    $$B^\top\big(F_p(X) - X\big) = 0,\qquad \dot X_k^\top(X - X_k) + \dot p_k (p - p_k) = \Delta s$$

    on the slice orthogonal to the continuous-symmetry orbits (`rankdyn._equilibria._arclength`).
    Bifurcations are detected by test functions on the reduced multipliers and $\dot p$ and
    located by bracketing (`rankdyn._equilibria._bifurcations`). Branch switching at a branch
    point is not done: continue the other branch from its own start.

    Arguments:
        family: ``p -> SelfAttentionLayer`` of one structure (any mask, heads, skip, MLP, a
            trained layer); only its arrays may depend on ``p``.
        x_start: one equilibrium ``(n, d)`` of ``family(p_start)``.
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
        progress: show a progress bar (one per branch).

    Returns:
        A `Branch`; ``result`` is `BRANCH_RESULTS` ``parameter_end``, ``max_steps_reached``,
        ``newton_failed`` or ``nonfinite``.

    Raises:
        UsageError: if ``p_start == p_end``, the start is non-finite, misshapen or not an
            equilibrium (the message gives the residual and the tolerance), the family does not
            depend on the parameter, or a setting is out of range.
    """
    p0, p1 = float(p_start), float(p_end)
    if not (math.isfinite(p0) and math.isfinite(p1)):
        raise UsageError(f"p_start and p_end must be finite, got {p0} and {p1}.")
    if p0 == p1:
        raise UsageError(f"p_start and p_end are equal ({p0:g}): give an interval to continue over.")
    span = abs(p1 - p0)
    ds = span / 50 if ds is None else float(ds)
    if not (math.isfinite(ds) and ds > 0):
        raise UsageError(f"ds must be finite and > 0, got {ds}.")
    ds_min = 1e-6 * ds if ds_min is None else float(ds_min)
    ds_max = 4 * ds if ds_max is None else float(ds_max)
    if not 0 < ds_min <= ds <= ds_max:
        raise UsageError(f"need 0 < ds_min <= ds <= ds_max, got {ds_min}, {ds}, {ds_max}.")
    if max_steps < 1:
        raise UsageError(f"max_steps must be >= 1, got {max_steps}.")
    fam = LayerFamily(family, t=t)
    x, tol = check_start(fam, x_start, p0, residual_tol)
    if not fam.reads_parameter(p0):
        raise UsageError(
            f"the family does not depend on {param_name}: no array of family({p0:g}) changes with it, so "
            "there is no branch to follow; choose a parameter the layer reads."
        )
    layer0 = fam(p0)
    gens = commuting_rotations(layer0, t=fam.t) if symmetries else np.zeros((0, layer0.dim, layer0.dim))
    newton = Newton(tol=tol, max_step=max(0.5, 10 * ds_max))
    lo, hi = min(p0, p1), max(p0, p1)
    n = layer0.num_tokens

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
    result = BRANCH_RESULTS.max_steps_reached
    bar = progress_bar(total=max_steps, desc=f"branch in {param_name}", disable=not progress, leave=False)
    step = ds
    while len(pts) <= max_steps:
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
            if why == "nonfinite" and step <= ds_min:
                result = BRANCH_RESULTS.nonfinite
                break
            step *= 0.5
            if step < ds_min:
                result = BRANCH_RESULTS.newton_failed
                break
            continue
        eig = reduced_multipliers(new, n)
        # On a degenerate branch the turns of p itself (secants) mark the folds: the projected
        # tangent's p component is not reliable there (`locate_turn`).
        tp_a, tp_b = (last.p - pts[-2].p, new.p - last.p) if extra and len(pts) >= 2 else (tp, new_tan[1])
        for kind in detect(eigs[-1], tp_a, eig, tp_b, stability_tol, neutral):
            if extra and kind == "fold" and len(pts) >= 2:
                bifs.append(
                    locate_turn(fam, pts[-2], last, new, step=len(pts) - 2, generators=gens, newton=newton)
                )
                continue
            fa, fb = (test_function(kind, e, t, neutral) for e, t in ((eigs[-1], tp), (eig, new_tan[1])))
            # Without location the same sign on both ends makes `locate` report the better end.
            fb = fb if locate_bifurcations else fa
            bif = locate(
                kind,
                fam,
                last,
                (tx, tp),
                s,
                fa,
                fb,
                new,
                step=len(pts) - 1,
                extra=extra,
                neutral=neutral,
                generators=gens,
                newton=newton,
            )
            bifs.append(bif)
        arcs.append(arcs[-1] + float(np.sqrt(np.sum((new.x - last.x) ** 2) + (new.p - last.p) ** 2)))
        pts.append(new)
        tans.append(new_tan)
        eigs.append(eig)
        bar.update(1)
        bar.set_postfix({param_name: f"{new.p:.6g}"}, refresh=False)
        if at_end:
            result = BRANCH_RESULTS.parameter_end
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
    )
