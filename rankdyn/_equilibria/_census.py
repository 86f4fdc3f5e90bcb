r"""A census of the equilibria of one layer map: enumerate, deduplicate, rank, stability, closed forms.

`equilibrium_census` is the pipeline behind ``rankdyn equilibria`` as one Python call. It picks
the enumeration by the structure of the layer (``search="auto"``):

* ``"exact"``: causal mask, uniform attention ($W_Q W_K^\top = 0$), post sphere-LN, one plain
  head and $W_V = c(I + wS)$: every equilibrium from the token-by-token polynomial equations
  (`rankdyn._equilibria._exact`); complete and accurate to rounding.
* ``"tree-search"``: any other lower-triangular (acyclic) mask with post-LN: token-by-token
  multi-start search with deflation (`rankdyn._equilibria._tree`), with saturation statistics.
* ``"joint-search"``: masks with cycles (complete, bidirectional windows, random): random
  starts for all tokens at once plus deflation rounds (`rankdyn._equilibria._joint`).

Then classes modulo the symmetries (`symmetry_group`), the numerical rank, the multipliers
(`stability`, one compiled program for all classes), an error estimate next to the residual,
and matching with given closed forms (e.g. the paper's App. F.1 family). No closed form is ever
used as a start.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence

import jax
import numpy as np
from jaxtyping import ArrayLike, PRNGKeyArray

from .._arguments import STABILITY_BAND, check_real
from .._errors import UsageError
from .._model._layer import SelfAttentionLayer
from .._model._norms import SphereNorm
from .._model._placements import fixed_point_layer
from .._observe._tolerances import (
    EQUILIBRIUM_RANK_TOL,
    MERGE_ERRORS,
    default_residual_tol,
    merge_tol,
    scaled_tol,
)
from ._census_cost import tree_budget
from ._dedupe import deduplicate
from ._exact import bidiagonal_parameter, exact_equilibria
from ._joint import joint_search
from ._results import CensusResult, EquilibriumRecord, JointOptions
from ._solve import equilibrium_rank
from ._stability import stability
from ._symmetry import group_distance, symmetry_group
from ._tree import is_acyclic, polish_tokens, tree_search

__all__ = ["equilibrium_census", "census_method", "SEARCHES"]

#: `equilibrium_rank` as one compiled program per shape (called eagerly it built five: SVD,
#: slice, compare, sum, cast), for the per-class ranks of a census.
_rank = jax.jit(equilibrium_rank, static_argnames=("rtol", "atol"))

SEARCHES = ("auto", "exact", "tree-search", "joint-search")


def _exact_parameter(layer: SelfAttentionLayer) -> float | None:
    """$w$ when ``layer`` is the paper's system (module docstring), else ``None``."""
    w = layer.weights
    mask = np.asarray(layer.mask)
    n = mask.shape[0]
    plain = (
        layer.placement == "post"
        and isinstance(layer.norm, SphereNorm)
        and float(getattr(layer.norm, "radius", 1.0)) == 1.0
        and layer.num_heads == 1
        and not layer.skip
        and w.mlp is None
        and w.w_o is None
        and layer.fixed_attention is None
        and layer.num_layers is None
        and np.array_equal(mask, np.tril(np.ones((n, n), bool)))
    )
    if not plain:
        return None
    qk = np.asarray(w.w_q)[0] @ np.asarray(w.w_k)[0].T
    if np.any(qk != 0):
        return None
    return bidiagonal_parameter(np.asarray(w.w_v)[0])


def census_method(layer: SelfAttentionLayer, search: str = "auto") -> str:
    """The enumeration `equilibrium_census` uses for ``layer`` (see the module docstring).

    Raises:
        ValueError: for an unknown ``search`` or one that does not apply to ``layer``.
    """
    if search not in SEARCHES:
        raise UsageError(f"search must be one of {SEARCHES}, got {search!r}.")
    exact = _exact_parameter(layer) is not None
    tree = is_acyclic(layer) and layer.placement == "post"
    if search == "auto":
        return "exact" if exact else ("tree-search" if tree else "joint-search")
    if search == "exact" and not exact:
        raise UsageError(
            "search='exact' needs the paper's system: causal mask, W_Q W_K^T = 0, post sphere-LN, "
            "one plain head and W_V = c (I + w S); use search='auto'."
        )
    if search == "tree-search" and not tree:
        raise UsageError(
            "search='tree-search' needs a lower-triangular (acyclic) mask and post-LN; "
            "use search='joint-search'."
        )
    return search


def _exact_classes(layer, n, d):
    ex = exact_equilibria(n, d, _exact_parameter(layer))
    # The sign flip maps the +e_d subtree onto the -e_d one exactly: the +e_d members are the
    # classes, two members each.
    rep = ex.x[:, 0, -1] > 0
    info = {
        "completeness": {
            "kind": "exact",
            "members": int(len(ex.x)),
            "rejected_near_real_roots": ex.rejected_near_real,
            "note": "every real root of each token's polynomial and both chain signs followed",
        }
    }
    return (
        ex.x[rep],
        np.full(int(rep.sum()), 2),
        ex.error_estimate[rep],
        [list(s) for s in ex.steps[rep]],
        info,
    )


def equilibrium_census(
    layer: SelfAttentionLayer,
    key: PRNGKeyArray,
    *,
    search: str = "auto",
    tree_starts: int = 256,
    residual_tol: float | None = None,
    rank_tol: float | None = None,
    stability_tol: float | None = None,
    closed_forms: Sequence[tuple[int, ArrayLike]] = (),
    joint_coverage: bool = False,
    progress: bool = False,
    joint: JointOptions | None = None,
    max_seconds: float | None = None,
    log=None,
) -> CensusResult:
    r"""Find the distinct equilibria $F(X) = X$ of ``layer`` and classify them.

    Arguments:
        layer: a `SelfAttentionLayer` with shared weights and no dropout.
        key: PRNG key of the random starts (unused by the exact census).
        search: ``"auto"`` (default: the most complete applicable method), ``"exact"``,
            ``"tree-search"`` or ``"joint-search"`` (module docstring).
        tree_starts: starts per partial equilibrium and round of the tree search.
        residual_tol: success threshold of the searches (default
            `rankdyn._observe._tolerances.default_residual_tol` of the layer's dtype: 1e-10 / 1e-5).
        rank_tol: relative tolerance of the rank (default 1e-8 in float64, scaled to the
            layer's dtype by `rankdyn._observe._tolerances.scaled_tol`: 2.3e-4 in float32).
        stability_tol: band on $|\lambda| - 1$ called marginal (default 1e-6 for exact and
            polished tree-search points, scaled to the dtype; 1e-2 for the joint search).
        closed_forms: ``[(rank, X), ...]`` to match against (e.g. `all_closed_form_equilibria`).
        joint_coverage: with the exact census, also run the joint search and report how many
            exact classes it finds (``coverage``).
        progress: show progress bars.
        joint: the joint search's settings, a `JointOptions` (``starts``, ``chunk``, ``method``,
            ``max_steps``, ``deflation_rounds``, ``dedup_tol``, ...; default `JointOptions()`);
            ``dedup_tol`` is also the distance of the coverage matching.
        max_seconds: refuse a tree search whose estimated time passes this, before each token
            (`rankdyn._equilibria._census_cost`: the partials grow with each token); None: no limit.
        log: called with one line of the search's estimate (e.g. ``print`` to stderr).

    Returns:
        A `CensusResult` (``to_dict()`` gives the JSON of ``equilibria.json``).

    Raises:
        UsageError: for per-layer weights, dropout, settings out of range, a ``search``
            that does not apply, or a tree search estimated beyond ``max_seconds``.
    """
    if layer.num_layers is not None:
        raise UsageError("per-layer weights are not supported: an equilibrium is a fixed point of one map.")
    if layer.dropout > 0:
        raise UsageError("dropout must be 0: a stochastic map has no fixed points.")
    if layer.placement == "mix":
        raise UsageError(
            "placement='mix' is post-LN or pre-LN by depth: the census has no layer t; use "
            "find_equilibria(layer, t=...) for the map of one depth."
        )
    fixed_point_layer(layer)  # peri and lns: refused, naming the reason
    if tree_starts < 1:
        raise UsageError(f"tree_starts must be >= 1, got {tree_starts}.")
    for name, v in (("rank_tol", rank_tol), ("residual_tol", residual_tol)):
        if v is not None and not (np.isfinite(v) and v >= 0):
            raise UsageError(f"{name} must be finite and >= 0, got {v}.")
    if stability_tol is not None:
        stability_tol = check_real(stability_tol, "stability_tol", minimum=0, below=1, what=STABILITY_BAND)
    n, d = layer.num_tokens, layer.dim
    # Every tolerance below is given in float64 terms and scaled to the layer's dtype: float32
    # points and closed forms agree to ~1e-7, so a float64 threshold would match none of them.
    dtype = np.asarray(layer.weights.w_v).dtype
    residual_tol = default_residual_tol(dtype) if residual_tol is None else residual_tol
    rank_tol = scaled_tol(EQUILIBRIUM_RANK_TOL, dtype) if rank_tol is None else rank_tol
    how = census_method(layer, search)
    group = symmetry_group(layer)
    # One set of joint-search settings, with the census's tolerances (the dtype's defaults).
    opts = joint if joint is not None else JointOptions()
    opts = dataclasses.replace(opts, residual_tol=residual_tol, rank_tol=rank_tol, progress=progress)
    dedup_tol = opts.dedup_tol
    t0 = time.perf_counter()
    rounds, status, compile_s, coverage = [], {}, 0.0, None
    match_tol = scaled_tol(1e-8, dtype)
    if log is not None and how != "tree-search":  # the tree search says it per token
        log(
            "start search: exact (no search)"
            if how == "exact"
            else f"start search: joint search, {opts.starts} starts x up to {opts.max_steps} Newton "
            f"steps on ({n * d})^2 Jacobians, then {opts.deflation_rounds} deflation rounds"
        )
    if how == "exact":
        xs, counts, errs, steps, info = _exact_classes(layer, n, d)
        first = ["exact"] * len(xs)
        completeness = info["completeness"]
    elif how == "tree-search":
        budget = tree_budget(n, d, tree_starts, max_seconds, log)
        tree = tree_search(layer, key, starts=tree_starts, residual_tol=residual_tol, before_token=budget)
        xs, _, errs = polish_tokens(layer, tree.x)
        # Each pair at its own accuracy: eps and the polished error estimates (was the scaled 1e-6,
        # 2.3e-2 in float32, which merged distinct equilibria closer than that).
        classes = deduplicate(xs, errs, tol=merge_tol(dtype), symmetries=group, errors=MERGE_ERRORS * errs)
        errs = np.array([errs[c.members].max() for c in classes])
        xs = np.stack([c.x for c in classes]) if classes else np.zeros((0, n, d))
        counts, steps, first = [c.count for c in classes], [None] * len(xs), ["tree"] * len(xs)
        completeness = {
            "kind": "saturation",
            "first_token": tree.first_token,
            "per_token": tree.saturation,
        }
    else:
        joint = joint_search(layer, key, group, opts)
        classes = joint.classes
        xs = np.stack([c.x for c in classes]) if classes else np.zeros((0, n, d))
        errs = np.full(len(xs), np.nan)
        if is_acyclic(layer) and layer.placement == "post" and len(xs):
            xs, _, errs = polish_tokens(layer, xs)  # accurate degenerate tokens, with an estimate
            match_tol = scaled_tol(1e-6, dtype)
        else:
            match_tol = dedup_tol
        counts, steps, first = [c.count for c in classes], [None] * len(xs), joint.first_round
        rounds, status = joint.rounds, joint.status_counts
        compile_s = joint.timing["compile_s"]
        completeness = {"kind": "saturation", "new_classes_per_round": [r["new_equilibria"] for r in rounds]}
    search_s = time.perf_counter() - t0
    if how == "exact" and joint_coverage:
        joint = joint_search(layer, key, group, opts)
        jx = [c.x for c in joint.classes]
        hit = [any(group_distance(x, y, group) <= dedup_tol for y in jx) for x in xs]
        coverage = {
            "joint_search_classes": len(jx),
            "exact_classes": len(xs),
            "found": int(sum(hit)),
            "fraction": float(np.mean(hit)) if len(xs) else float("nan"),
            "found_by_rank": {},
            "starts": opts.starts,
            "rounds": joint.rounds,
            "seconds": joint.timing["search_s"],
        }
        ranks = [int(_rank(x, rtol=rank_tol)) for x in xs]
        for k in sorted(set(ranks)):
            sel = [h for h, r in zip(hit, ranks) if r == k]
            coverage["found_by_rank"][str(k)] = {"found": int(sum(sel)), "total": len(sel)}

    t1 = time.perf_counter()
    tol = (
        stability_tol
        if stability_tol is not None
        else (1e-2 if how == "joint-search" else scaled_tol(1e-6, dtype))
    )
    reports = stability(layer, np.asarray(xs), tol=tol) if len(xs) else []
    # Closed forms modulo the same symmetries as the classes, so table and footer agree.
    closed: list[tuple[int, np.ndarray]] = []
    for kk, x in closed_forms:
        x = np.asarray(x)
        if not any(group_distance(y, x, group) <= scaled_tol(1e-9, dtype) for _, y in closed):
            closed.append((int(kk), x))
    closed_hit = np.zeros(len(closed), bool)
    records = []
    for j, x in enumerate(xs):
        rep = reports[j]
        match = None
        if closed:
            dists = np.array([group_distance(cx, x, group) for _, cx in closed])
            match = bool(dists.min() <= match_tol)
            closed_hit |= dists <= match_tol
        records.append(
            EquilibriumRecord(
                rank=int(_rank(x, rtol=rank_tol)),
                residual=rep.residual,
                error_estimate=float(errs[j]),
                spectral_radius=rep.spectral_radius,
                classification=rep.classification,
                unstable_dims=rep.unstable_dims,
                neutral_dims=rep.neutral_dims,
                count=int(counts[j]),
                first_round=first[j],
                closed_form_match=match,
                steps=steps[j],
                singular_values=np.linalg.svd(x, compute_uv=False),
                moduli=rep.moduli,
                tokens=x,
            )
        )
    stability_s = time.perf_counter() - t1
    records.sort(key=lambda e: (e.rank, e.residual))
    return _summary(
        records,
        how,
        completeness,
        status,
        rounds,
        closed,
        closed_hit,
        coverage,
        group,
        n,
        d,
        {"search_s": search_s, "compile_s": compile_s, "stability_s": stability_s},
    )


def _summary(records, how, completeness, status, rounds, closed, closed_hit, coverage, group, n, d, timing):
    kmax = min(n, d)
    # Rank 0 (the zero equilibrium of the un-normalised map) is listed only when it occurs.
    k0 = 0 if any(e.rank == 0 for e in records) else 1
    by_rank = {str(k): sum(e.rank == k for e in records) for k in range(k0, kmax + 1)}
    by_class = {
        str(k): {
            c: sum(e.rank == k and e.classification == c for e in records)
            for c in ("stable", "marginal", "unstable")
        }
        for k in range(k0, kmax + 1)
    }
    closed_summary = None
    if closed:
        closed_summary = {
            "total": len(closed),
            "note": "closed forms and equilibria are counted modulo the symmetries (global sign flip)",
            "found": int(closed_hit.sum()),
            "by_rank": {
                str(k): {
                    "total": sum(1 for kk, _ in closed if kk == k),
                    "found": int(sum(closed_hit[i] for i, (kk, _) in enumerate(closed) if kk == k)),
                }
                for k in range(1, kmax + 1)
            },
        }
    return CensusResult(
        method=how,
        completeness=completeness,
        equilibria=tuple(records),
        by_rank=by_rank,
        by_rank_and_class=by_class,
        status_counts=status,
        rounds=rounds,
        closed_forms=closed_summary,
        coverage=coverage,
        symmetries=group.to_dict()
        | {"skipped": "continuous rotations commuting with W_V (only +-I for bidiagonal/generic W_V)"},
        timing=timing,
    )
