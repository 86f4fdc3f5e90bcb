r"""Natural-parameter continuation of equilibria in a layer parameter (``w``, the temperature ...).

Equilibria of $F_p(X) = \mathrm{LN}(A_p(X) X W_{V,p})$ move continuously with a parameter $p$
as long as they stay regular on the sphere product; a census at one value therefore seeds the
search at the next. `continue_equilibria` walks a list of values, starts `find_equilibria` at
value $p_{k+1}$ from the equilibria found at $p_k$, and reports per step how many branches
were kept, lost (the solve failed: a fold or a bifurcation between the two values, or a step
too large) and merged (two branches met, up to symmetry). It complements the random-start
searches for masks where no exact census exists: the branches of a known solution set at one
parameter value become starts everywhere else.

Because layers are `equinox` modules whose parameters are arrays, every value reuses one
compiled solve.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
from jaxtyping import ArrayLike, Float

from .._model._layer import SelfAttentionLayer
from ._dedupe import deduplicate
from ._solve import RESULTS, find_equilibria
from ._symmetry import symmetry_group

__all__ = ["continue_equilibria"]


def continue_equilibria(
    make_layer: Callable[[float], SelfAttentionLayer],
    values: Sequence[float] | np.ndarray,
    x_start: Float[ArrayLike, "m n d"],
    *,
    max_steps: int = 100,
    residual_tol: float | None = None,
    dedup_tol: float = 2e-2,
    solver=None,
) -> list[dict]:
    r"""Follow equilibria along ``values`` of a layer parameter.

    Arguments:
        make_layer: ``value -> SelfAttentionLayer``; the layers must share their structure
            (e.g. ``lambda w: uniform_causal_layer(n, d, bidiagonal(d, w))``), so one program
            serves every value.
        values: the parameter values, in the order to walk them (small steps keep branches).
        x_start: equilibria ``(m, n, d)`` at ``values[0]`` (e.g. from `equilibrium_census`);
            they are re-solved there first.
        max_steps, residual_tol, solver: passed to `find_equilibria` (``throw=False``).
        dedup_tol: max-abs distance under which two continued branches count as one
            (`deduplicate`, modulo the layer's symmetries).

    Returns:
        One dict per value: ``value``, ``x`` ``(m_k, n, d)`` (the distinct equilibria kept),
        ``residual`` ``(m_k,)``, ``rank`` ``(m_k,)``, ``kept`` / ``lost`` / ``merged`` counts
        relative to the previous value's branches.

    Raises:
        ValueError: on an empty ``values`` or starts of the wrong shape.
    """
    values = [float(v) for v in values]
    if not values:
        raise ValueError("values must list at least one parameter value.")
    x = np.asarray(x_start, dtype=float)
    if x.ndim == 2:
        x = x[None]
    if x.ndim != 3 or x.shape[0] == 0:
        raise ValueError(f"x_start must hold equilibria as (m, n, d) with m >= 1, got shape {x.shape}.")
    steps = []
    for value in values:
        layer = make_layer(value)
        sol = find_equilibria(
            layer, x, max_steps=max_steps, residual_tol=residual_tol, solver=solver, throw=False
        )
        ok = np.asarray(sol.result == RESULTS.successful)
        xs, res, rank = np.asarray(sol.x)[ok], np.asarray(sol.residual)[ok], np.asarray(sol.rank)[ok]
        # Two branches that meet (a pitchfork, or a symmetric pair) are counted once.
        classes = deduplicate(xs, res, tol=dedup_tol, symmetries=symmetry_group(layer)) if len(xs) else []
        keep = [int(c.members[0]) for c in classes]  # the first member is the representative
        steps.append(
            {
                "value": value,
                "x": xs[keep] if keep else np.zeros((0,) + x.shape[1:]),
                "residual": res[keep],
                "rank": rank[keep],
                "kept": len(keep),
                "lost": int((~ok).sum()),
                "merged": int(ok.sum()) - len(keep),
            }
        )
        if not keep:
            break  # every branch was lost: nothing left to continue
        x = xs[keep]
    return steps
