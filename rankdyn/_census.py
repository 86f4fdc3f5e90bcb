r"""A census of the equilibria of one layer map: search rounds, deduplication, rank, stability.

`equilibrium_census` is the whole pipeline behind ``rankdyn equilibria`` as one Python call
(notebooks use it too): `find_equilibria` from random sphere starts (chunked, each chunk one
compiled program), rounds that deflate every equilibrium found so far (and its symmetric
images) from fresh starts, optional rank-biased rounds, then `deduplicate` modulo the
system's symmetries, `equilibrium_rank`, `stability` of the tangent Jacobian, and matching with
given closed forms (e.g. SPEC §5.2's). No closed form is ever used as a start.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
from jaxtyping import ArrayLike, PRNGKeyArray

from ._equilibria import (
    RESULTS, _distance, deduplicate, equilibrium_rank, find_equilibria, symmetric_images, symmetry_group,
)
from ._init import initial_tokens
from ._io import CompileTimer
from ._layer import SelfAttentionLayer
from ._stability import stability

__all__ = ["equilibrium_census"]


def _continue_failures(layer, sol, *, short_steps, max_steps, method, residual_tol, rank_tol, known):
    """Continue the Newton phase (``max_steps - short_steps`` more steps) for the members that
    stopped at the short budget; the others are kept. The subset is padded to a power of two
    so that repeated chunks reuse a few compiled programs."""
    # Members that used the whole short budget were still iterating (Optimistix had not
    # terminated), including "successful" ones whose residual is only just below tolerance.
    running = (np.asarray(sol.steps) >= short_steps) & np.isin(sol.status, ["successful", "max_steps_reached"])
    bad = np.nonzero(running)[0]
    if bad.size == 0:
        return sol
    m = 1 << int(np.ceil(np.log2(bad.size)))
    idx = np.concatenate([bad, np.resize(bad, m - bad.size)])
    more = find_equilibria(layer, sol.x[idx], method=method, max_steps=max_steps - short_steps,
                           residual_tol=residual_tol, deflation=known, rank_tol=rank_tol)
    more = jax.tree.map(lambda a: np.asarray(a)[: bad.size], more)

    # Keep a continuation only where it did not make the residual worse.
    better = np.asarray(more.residual) <= np.asarray(sol.residual)[bad]
    bad = bad[better]
    more = jax.tree.map(lambda a: a[better], more)

    def merge(a, b):
        a = np.array(a, copy=True)
        a[bad] = b
        return a

    merged = jax.tree.map(merge, sol, more)
    steps = np.array(merged.steps, copy=True)
    steps[bad] += np.asarray(sol.steps)[bad]  # continued members: both phases
    return eqx.tree_at(lambda s: s.steps, merged, steps)


def equilibrium_census(
    layer: SelfAttentionLayer,
    key: PRNGKeyArray,
    *,
    starts: int = 4096,
    chunk: int = 1024,
    method: str = "gn",
    max_steps: int = 100,
    short_steps: int = 25,
    forward_steps: int = 0,
    minimise_steps: int = 0,
    learning_rate: float = 1e-2,
    deflation_rounds: int = 2,
    deflation_starts: int | None = None,
    target_ranks: Sequence[int] = (),
    target_starts: int = 512,
    residual_tol: float | None = None,
    rank_tol: float = 1e-8,
    dedup_tol: float = 2e-2,
    stability_tol: float = 1e-2,
    closed_forms: Sequence[tuple[int, ArrayLike]] = (),
    progress: bool = True,
) -> dict:
    r"""Find the distinct equilibria $F(X) = X$ of ``layer`` from random starts and classify them.

    Arguments:
        layer: a `SelfAttentionLayer` with shared weights and no dropout.
        key: PRNG key of the random sphere starts.
        starts, chunk: starts of the first round and starts per compiled batch.
        method, max_steps, forward_steps, minimise_steps, learning_rate, residual_tol, rank_tol:
            as in `find_equilibria`.
        short_steps: Newton budget of a first pass; members still iterating then continue to
            ``max_steps`` (under ``vmap`` every member pays for the slowest, so two passes are
            several times faster; ``benchmarks/README.md``). 0 disables it.
        deflation_rounds, deflation_starts: rounds that deflate all equilibria found so far
            (default ``starts // 4`` starts each).
        target_ranks, target_starts: extra rank-biased rounds (Adam + rank penalty), one per rank.
        dedup_tol: max-abs distance (modulo symmetries) under which two solutions are one; also
            the closed-form matching distance. The first token's equilibrium $\pm e_d$ is a
            root of multiplicity $d-1$, so a residual of 1e-16 still leaves ~1e-3 errors.
        stability_tol: band on $|\lambda| - 1$ called marginal, for the same reason loose.
        closed_forms: ``[(rank, X), ...]`` to match against (e.g. `all_closed_form_equilibria`).
        progress: show progress bars.

    Returns:
        dict with ``equilibria`` (a list, by rank then residual, of dicts with ``rank``,
        ``residual``, ``spectral_radius``, ``classification``, ``unstable_dims``,
        ``neutral_dims``, ``count`` (starts that converged to it), ``first_round``,
        ``closed_form_match``, ``singular_values``, ``moduli``, ``tokens``), ``by_rank``,
        ``status_counts``, ``rounds``, ``closed_forms`` (summary or None), ``symmetries``,
        ``timing``.

    Raises:
        ValueError: for per-layer weights, dropout, or non-positive sizes.
    """
    from tqdm.auto import tqdm

    if layer.num_layers is not None:
        raise ValueError("per-layer weights are not supported: an equilibrium is a fixed point of one map.")
    if layer.dropout > 0:
        raise ValueError("dropout must be 0: a stochastic map has no fixed points.")
    if starts < 1 or chunk < 1:
        raise ValueError(f"starts and chunk must be >= 1, got {starts} and {chunk}.")
    if min(deflation_rounds, max_steps, short_steps, forward_steps, minimise_steps) < 0:
        raise ValueError("deflation_rounds, max_steps, short_steps, forward_steps and minimise_steps must be >= 0.")
    n, d = layer.num_tokens, layer.dim
    group = symmetry_group(layer)
    defl_starts = deflation_starts if deflation_starts is not None else max(1, starts // 4)
    # One plan of rounds: (name, number of starts, deflate?, target rank).
    plan = [("random", starts, False, None)]
    plan += [(f"deflation-{r + 1}", defl_starts, True, None) for r in range(deflation_rounds)]
    plan += [(f"target-rank-{k}", target_starts, False, k) for k in target_ranks]
    total_chunks = sum(-(-m // chunk) for _, m, _, _ in plan)

    xs, res, rounds_of = [], [], []
    round_stats = []
    classes = []
    t0 = time.perf_counter()
    bar = tqdm(total=total_chunks, desc="equilibria", disable=not progress, unit="chunk")
    with CompileTimer() as timer:
        for r, (name, m, deflate, k) in enumerate(plan):
            round_key = jr.fold_in(key, r)
            known = None
            if deflate and classes:
                known = np.concatenate([symmetric_images(c.x, group) for c in classes])
            got = {"round": name, "starts": m, "deflated": 0 if known is None else len(known), "target_rank": k}
            counts = dict.fromkeys(RESULTS._name_to_item, 0)
            tr = time.perf_counter()
            for c0 in range(0, m, chunk):
                size = min(chunk, m - c0)
                bar.set_postfix_str(f"{name} {c0 + size}/{m}")
                x0 = initial_tokens(jr.fold_in(round_key, c0), "sphere", n, d, batch=size)
                # Pad the last chunk to the chunk size so every chunk reuses one compiled program.
                if size < chunk and m > chunk:
                    x0 = jnp.concatenate([x0, x0[: chunk - size]], axis=0)
                # Under vmap every member pays for the slowest one: solve with a short Newton
                # budget first, then continue only the unconverged members.
                short = max_steps if deflate or not short_steps else min(short_steps, max_steps)
                sol = find_equilibria(
                    layer, x0, method=method, max_steps=short, residual_tol=residual_tol,
                    forward_steps=forward_steps,
                    minimise_steps=minimise_steps if k is None else max(minimise_steps, 300),
                    learning_rate=learning_rate, deflation=known, target_rank=k, rank_tol=rank_tol,
                )
                sol = jax.tree.map(lambda a: np.asarray(a)[:size], sol)
                if short < max_steps:
                    sol = _continue_failures(layer, sol, short_steps=short, max_steps=max_steps, method=method,
                                             residual_tol=residual_tol, rank_tol=rank_tol, known=known)
                for name_, v in sol.status_counts().items():
                    counts[name_] += v
                ok = np.asarray(sol.result._value) == RESULTS.successful._value
                xs.append(sol.x[ok])
                res.append(sol.residual[ok])
                rounds_of.append(np.full(int(ok.sum()), r))
                bar.update(1)
            before = len(classes)
            allx, allr = np.concatenate(xs), np.concatenate(res)
            classes = deduplicate(allx, allr, tol=dedup_tol, symmetries=group)
            got.update(status_counts=counts, new_equilibria=len(classes) - before, seconds=time.perf_counter() - tr)
            round_stats.append(got)
    bar.close()
    search_s = time.perf_counter() - t0
    allrounds = np.concatenate(rounds_of)

    closed = [(int(kk), np.asarray(x)) for kk, x in closed_forms]
    closed_hit = np.zeros(len(closed), bool)
    t1 = time.perf_counter()
    records = []
    for c in tqdm(classes, desc="stability", disable=not progress, unit="eq"):
        x = jnp.asarray(c.x)
        rep = stability(layer, x, tol=stability_tol)
        match = None
        if closed:
            dists = np.array([_distance(cx, c.x, group) for _, cx in closed])
            match = bool(dists.min() <= dedup_tol)
            closed_hit |= dists <= dedup_tol
        records.append({
            "rank": int(equilibrium_rank(x, rank_tol)),
            "residual": c.residual,
            "spectral_radius": rep.spectral_radius,
            "classification": rep.classification,
            "unstable_dims": rep.unstable_dims,
            "neutral_dims": rep.neutral_dims,
            "count": c.count,
            "first_round": plan[int(allrounds[c.members].min())][0] if c.count else None,
            "closed_form_match": match,
            "singular_values": np.linalg.svd(c.x, compute_uv=False),
            "moduli": rep.moduli,
            "tokens": c.x,
        })
    stability_s = time.perf_counter() - t1
    records.sort(key=lambda e: (e["rank"], e["residual"]))
    kmax = min(n, d)
    # Rank 0 (the zero equilibrium of the un-normalised map) is listed only when it occurs.
    k0 = 0 if any(e["rank"] == 0 for e in records) else 1
    by_rank = {str(k): sum(e["rank"] == k for e in records) for k in range(k0, kmax + 1)}
    status = dict.fromkeys(RESULTS._name_to_item, 0)
    for rs in round_stats:
        for name_, v in rs["status_counts"].items():
            status[name_] += v
    closed_summary = None
    if closed:
        closed_summary = {
            "total": len(closed),
            "note": "counts are modulo the symmetries used for deduplication (global sign flip)",
            "found": int(closed_hit.sum()),
            "by_rank": {str(k): {"total": sum(1 for kk, _ in closed if kk == k),
                                 "found": int(sum(closed_hit[i] for i, (kk, _) in enumerate(closed) if kk == k))}
                        for k in range(1, kmax + 1)},
            "matched_equilibria_by_rank": {str(k): sum(e["rank"] == k and bool(e["closed_form_match"]) for e in records)
                                           for k in range(1, kmax + 1)},
        }
    return {
        "equilibria": records,
        "by_rank": by_rank,
        "status_counts": status,
        "rounds": round_stats,
        "closed_forms": closed_summary,
        "symmetries": {"sign": group["sign"], "all_permutations": group["all_permutations"],
                       "permutations": [p.tolist() for p in group["permutations"]],
                       "skipped": "continuous rotations commuting with W_V (only +-I for bidiagonal/generic W_V)"},
        "timing": {"search_s": search_s, "compile_s": timer.compile_s, "stability_s": stability_s},
    }
