r"""A census of the equilibria of one layer map: enumerate, deduplicate, rank, stability, closed forms.

`equilibrium_census` is the pipeline behind ``rankdyn equilibria`` as one Python call. It picks
the enumeration by the structure of the layer (``search="auto"``):

* ``"exact"``: causal mask, uniform attention ($W_Q W_K^\top = 0$), post sphere-LN, one plain
  head and $W_V = c(I + wS)$: every equilibrium from the token-by-token polynomial equations
  (`rankdyn.equilibria._exact`); complete and accurate to rounding.
* ``"tree-search"``: any other lower-triangular (acyclic) mask with post-LN: token-by-token
  multi-start search with deflation (`rankdyn.equilibria._tree`), with saturation statistics.
* ``"joint-search"``: masks with cycles (complete, bidirectional windows, random): random
  starts for all tokens at once plus deflation rounds (`rankdyn.equilibria._joint`).

Then classes modulo the symmetries (`symmetry_group`), the numerical rank, the multipliers
(`stability`, one compiled program for all classes), an error estimate next to the residual,
and matching with given closed forms (e.g. the paper's App. F.1 family). No closed form is ever
used as a start.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np
from jaxtyping import ArrayLike, PRNGKeyArray

from .._errors import UsageError
from .._layer import SelfAttentionLayer
from .._norms import SphereNorm
from ._dedupe import deduplicate
from ._exact import bidiagonal_parameter, exact_equilibria
from ._joint import joint_search
from ._solve import equilibrium_rank
from ._stability import stability
from ._symmetry import group_distance, symmetry_group
from ._tree import is_acyclic, polish_tokens, tree_search

__all__ = ["equilibrium_census", "census_method", "SEARCHES"]

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
    starts: int = 4096,
    chunk: int = 1024,
    method: str = "gn",
    solver=None,
    max_steps: int = 100,
    short_steps: int = 25,
    forward_steps: int = 0,
    minimise_steps: int = 0,
    learning_rate: float = 1e-2,
    deflation_rounds: int = 2,
    deflation_starts: int | None = None,
    target_ranks: Sequence[int] = (),
    target_starts: int = 512,
    tree_starts: int = 256,
    residual_tol: float | None = None,
    rank_tol: float = 1e-8,
    dedup_tol: float = 2e-2,
    stability_tol: float | None = None,
    closed_forms: Sequence[tuple[int, ArrayLike]] = (),
    joint_coverage: bool = False,
    progress: bool = True,
) -> dict:
    r"""Find the distinct equilibria $F(X) = X$ of ``layer`` and classify them.

    Arguments:
        layer: a `SelfAttentionLayer` with shared weights and no dropout.
        key: PRNG key of the random starts (unused by the exact census).
        search: ``"auto"`` (default: the most complete applicable method), ``"exact"``,
            ``"tree-search"`` or ``"joint-search"`` (module docstring).
        starts: random starts of the joint search's first round (`rankdyn.equilibria._joint`).
        chunk: starts per compiled batch of the joint search.
        method: ``"gn"`` or ``"lm"``, the joint search's default solver (as in `find_equilibria`).
        solver: an Optimistix solver for the joint search instead (as in `find_equilibria`).
        max_steps: Newton steps per start; ``short_steps``: a first budget, after which only
            the starts still iterating continue (0 disables it).
        short_steps: see ``max_steps``.
        forward_steps: forward iterations before the solve.
        minimise_steps: Adam steps on the squared residual before the solve.
        learning_rate: the Adam learning rate.
        deflation_rounds: joint-search rounds that deflate all classes found so far.
        deflation_starts: starts per deflation round (default ``starts // 4``).
        target_ranks: extra rank-biased rounds, one per rank.
        target_starts: starts per rank-biased round.
        tree_starts: starts per partial equilibrium and round of the tree search.
        residual_tol, rank_tol: as in `find_equilibria`.
        dedup_tol: max-abs distance (modulo symmetries) under which two joint-search solutions
            are one (their degenerate tokens are accurate only to ~1e-3 before polishing).
        stability_tol: band on $|\lambda| - 1$ called marginal (default 1e-6 for exact and
            polished tree-search points, 1e-2 for the joint search).
        closed_forms: ``[(rank, X), ...]`` to match against (e.g. `all_closed_form_equilibria`).
        joint_coverage: with the exact census, also run the joint search and report how many
            exact classes it finds (``coverage``).
        progress: show progress bars.

    Returns:
        dict with ``method``, ``completeness``, ``equilibria`` (by rank then residual: ``rank``,
        ``residual``, ``error_estimate``, ``spectral_radius``, ``classification``,
        ``unstable_dims``, ``neutral_dims``, ``count``, ``first_round``, ``closed_form_match``,
        ``steps``, ``singular_values``, ``moduli``, ``tokens``), ``by_rank`` and
        ``by_rank_and_class`` (counts modulo symmetry), ``status_counts``, ``rounds``,
        ``closed_forms``, ``coverage``, ``symmetries``, ``timing``.

    Raises:
        ValueError: for per-layer weights, dropout, non-positive sizes or a ``search`` that
            does not apply.
    """
    if layer.num_layers is not None:
        raise UsageError("per-layer weights are not supported: an equilibrium is a fixed point of one map.")
    if layer.dropout > 0:
        raise UsageError("dropout must be 0: a stochastic map has no fixed points.")
    if starts < 1 or chunk < 1 or tree_starts < 1:
        raise UsageError(f"starts, chunk and tree_starts must be >= 1, got {starts}, {chunk}, {tree_starts}.")
    if min(deflation_rounds, max_steps, short_steps, forward_steps, minimise_steps) < 0:
        raise UsageError(
            "deflation_rounds, max_steps, short_steps, forward_steps and minimise_steps must be >= 0."
        )
    for name, v in (
        ("dedup_tol", dedup_tol),
        ("rank_tol", rank_tol),
        ("residual_tol", residual_tol),
        ("stability_tol", stability_tol),
        ("learning_rate", learning_rate),
    ):
        if v is not None and not (np.isfinite(v) and v >= 0):
            raise UsageError(f"{name} must be finite and >= 0, got {v}.")
    n, d = layer.num_tokens, layer.dim
    how = census_method(layer, search)
    group = symmetry_group(layer)
    joint_args = dict(
        starts=starts,
        chunk=chunk,
        method=method,
        solver=solver,
        max_steps=max_steps,
        short_steps=short_steps,
        forward_steps=forward_steps,
        minimise_steps=minimise_steps,
        learning_rate=learning_rate,
        deflation_rounds=deflation_rounds,
        deflation_starts=deflation_starts,
        target_ranks=target_ranks,
        target_starts=target_starts,
        residual_tol=residual_tol,
        rank_tol=rank_tol,
        dedup_tol=dedup_tol,
        progress=progress,
    )
    t0 = time.perf_counter()
    rounds, status, compile_s, coverage = [], {}, 0.0, None
    match_tol = 1e-8
    if how == "exact":
        xs, counts, errs, steps, info = _exact_classes(layer, n, d)
        first = ["exact"] * len(xs)
        completeness = info["completeness"]
    elif how == "tree-search":
        tree = tree_search(
            layer, key, starts=tree_starts, residual_tol=1e-10 if residual_tol is None else residual_tol
        )
        xs, _, errs = polish_tokens(layer, tree["x"])
        classes = deduplicate(xs, errs, tol=1e-6, symmetries=group)
        errs = np.array([errs[c.members].max() for c in classes])
        xs = np.stack([c.x for c in classes]) if classes else np.zeros((0, n, d))
        counts, steps, first = [c.count for c in classes], [None] * len(xs), ["tree"] * len(xs)
        completeness = {
            "kind": "saturation",
            "first_token": tree["first_token"],
            "per_token": tree["saturation"],
        }
    else:
        joint = joint_search(layer, key, group, **joint_args)
        classes = joint["classes"]
        xs = np.stack([c.x for c in classes]) if classes else np.zeros((0, n, d))
        errs = np.full(len(xs), np.nan)
        if is_acyclic(layer) and layer.placement == "post" and len(xs):
            xs, _, errs = polish_tokens(layer, xs)  # accurate degenerate tokens, with an estimate
            match_tol = 1e-6
        else:
            match_tol = dedup_tol
        counts, steps, first = [c.count for c in classes], [None] * len(xs), joint["first_round"]
        rounds, status = joint["rounds"], joint["status_counts"]
        compile_s = joint["timing"]["compile_s"]
        completeness = {"kind": "saturation", "new_classes_per_round": [r["new_equilibria"] for r in rounds]}
    search_s = time.perf_counter() - t0
    if how == "exact" and joint_coverage:
        joint = joint_search(layer, key, group, **joint_args)
        jx = [c.x for c in joint["classes"]]
        hit = [any(group_distance(x, y, group) <= dedup_tol for y in jx) for x in xs]
        coverage = {
            "joint_search_classes": len(jx),
            "exact_classes": len(xs),
            "found": int(sum(hit)),
            "fraction": float(np.mean(hit)) if len(xs) else float("nan"),
            "found_by_rank": {},
            "starts": joint_args["starts"],
            "rounds": joint["rounds"],
            "seconds": joint["timing"]["search_s"],
        }
        ranks = [int(equilibrium_rank(x, rank_tol)) for x in xs]
        for k in sorted(set(ranks)):
            sel = [h for h, r in zip(hit, ranks) if r == k]
            coverage["found_by_rank"][str(k)] = {"found": int(sum(sel)), "total": len(sel)}

    t1 = time.perf_counter()
    tol = stability_tol if stability_tol is not None else (1e-2 if how == "joint-search" else 1e-6)
    reports = stability(layer, np.asarray(xs), tol=tol) if len(xs) else []
    # Closed forms modulo the same symmetries as the classes, so table and footer agree.
    closed: list[tuple[int, np.ndarray]] = []
    for kk, x in closed_forms:
        x = np.asarray(x)
        if not any(group_distance(y, x, group) <= 1e-9 for _, y in closed):
            closed.append((int(kk), x))
    closed_hit = np.zeros(len(closed), bool)
    records = []
    for j, (x, rep) in enumerate(zip(xs, reports)):
        match = None
        if closed:
            dists = np.array([group_distance(cx, x, group) for _, cx in closed])
            match = bool(dists.min() <= match_tol)
            closed_hit |= dists <= match_tol
        records.append(
            {
                "rank": int(equilibrium_rank(x, rank_tol)),
                "residual": rep.residual,
                "error_estimate": float(errs[j]),
                "spectral_radius": rep.spectral_radius,
                "classification": rep.classification,
                "unstable_dims": rep.unstable_dims,
                "neutral_dims": rep.neutral_dims,
                "count": int(counts[j]),
                "first_round": first[j],
                "closed_form_match": match,
                "steps": steps[j],
                "singular_values": np.linalg.svd(x, compute_uv=False),
                "moduli": rep.moduli,
                "tokens": x,
            }
        )
    stability_s = time.perf_counter() - t1
    records.sort(key=lambda e: (e["rank"], e["residual"]))
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
    k0 = 0 if any(e["rank"] == 0 for e in records) else 1
    by_rank = {str(k): sum(e["rank"] == k for e in records) for k in range(k0, kmax + 1)}
    by_class = {
        str(k): {
            c: sum(e["rank"] == k and e["classification"] == c for e in records)
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
    return {
        "method": how,
        "completeness": completeness,
        "equilibria": records,
        "by_rank": by_rank,
        "by_rank_and_class": by_class,
        "status_counts": status,
        "rounds": rounds,
        "closed_forms": closed_summary,
        "coverage": coverage,
        "symmetries": {
            "sign": group["sign"],
            "all_permutations": group["all_permutations"],
            "permutations": [p.tolist() for p in group["permutations"]],
            "skipped": "continuous rotations commuting with W_V (only +-I for bidiagonal/generic W_V)",
        },
        "timing": timing,
    }
