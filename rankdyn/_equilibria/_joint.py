r"""The joint batched search: random sphere starts for all tokens at once, deflation rounds.

Used for masks with cycles (complete, bidirectional windows, random graphs), where tokens do
not decouple, and reported next to the exact census of the paper's system as its coverage.
`joint_search` runs `find_equilibria` (``throw=False``, per-start status) from random starts in
chunks (each chunk one compiled program), then rounds that deflate every equilibrium found so
far (and its symmetric images) from fresh starts, optional rank-biased rounds, and
`deduplicate` modulo the layer's symmetries after every round, so each round's number of new
classes (the saturation statistic) is reported.
"""

from __future__ import annotations

import time

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np

from .._errors import UsageError
from .._model._layer import SelfAttentionLayer
from .._model._tokens import initial_tokens
from .._observe._tolerances import EQUILIBRIUM_RANK_TOL, scaled_tol
from .._run._interrupt import check_interrupt
from .._run._io import CompileTimer
from ._dedupe import deduplicate
from ._results import JointOptions, JointResult, SymmetryGroup
from ._solve import default_solver, find_equilibria, status_names
from ._symmetry import symmetric_images

__all__ = ["joint_search"]


def _continue_failures(layer, sol, *, short_steps, max_steps, solver, residual_tol, rank_tol, known):
    """Continue the Newton phase (``max_steps - short_steps`` more steps) for the members that
    stopped at the short budget; the others are kept. The subset is padded to a power of two
    so that repeated chunks reuse a few compiled programs."""
    # Members that used the whole short budget were still iterating (Optimistix had not
    # terminated), including "successful" ones whose residual is only just below tolerance.
    running = (np.asarray(sol.steps) >= short_steps) & np.isin(
        sol.status, ["successful", "max_steps_reached"]
    )
    bad = np.nonzero(running)[0]
    if bad.size == 0:
        return sol
    m = 1 << int(np.ceil(np.log2(bad.size)))
    idx = np.concatenate([bad, np.resize(bad, m - bad.size)])
    more = find_equilibria(
        layer,
        sol.x[idx],
        solver=solver,
        max_steps=max_steps - short_steps,
        residual_tol=residual_tol,
        deflation=known,
        rank_tol=rank_tol,
        throw=False,
    )
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


def joint_search(
    layer: SelfAttentionLayer,
    key,
    group: "SymmetryGroup | dict",
    options: JointOptions | None = None,
    **kwargs,
) -> JointResult:
    r"""Search all tokens jointly from random starts; see the module docstring.

    Arguments:
        layer: the layer map.
        key: PRNG key of the starts.
        group: a `SymmetryGroup` (`symmetry_group`).
        options: the settings (`JointOptions`); or give them as keywords (``starts=...``).

    Returns:
        A `JointResult`.

    Raises:
        UsageError: for settings out of range (`JointOptions`).
    """
    o = options if options is not None else JointOptions(**kwargs)
    if options is not None and kwargs:
        raise UsageError("give the settings either as options= or as keywords, not both.")
    starts, chunk, method, solver = o.starts, o.chunk, o.method, o.solver
    max_steps, short_steps, forward_steps = o.max_steps, o.short_steps, o.forward_steps
    minimise_steps, learning_rate, deflation_rounds = o.minimise_steps, o.learning_rate, o.deflation_rounds
    deflation_starts, target_ranks, target_starts = o.deflation_starts, o.target_ranks, o.target_starts
    residual_tol, dedup_tol, progress = o.residual_tol, o.dedup_tol, o.progress
    rank_tol = scaled_tol(EQUILIBRIUM_RANK_TOL, layer.weights.w_v.dtype) if o.rank_tol is None else o.rank_tol
    from .._run._progress import progress_bar as tqdm

    n, d = layer.num_tokens, layer.dim
    solver = default_solver(method) if solver is None else solver
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
            got = {
                "round": name,
                "starts": m,
                "deflated": 0 if known is None else len(known),
                "target_rank": k,
            }
            counts = dict.fromkeys(status_names(), 0)
            tr = time.perf_counter()
            for c0 in range(0, m, chunk):
                check_interrupt()  # Ctrl-C / SIGTERM on the command line: stop between chunks
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
                    layer,
                    x0,
                    solver=solver,
                    max_steps=short,
                    residual_tol=residual_tol,
                    throw=False,
                    forward_steps=forward_steps,
                    minimise_steps=minimise_steps if k is None else max(minimise_steps, 300),
                    learning_rate=learning_rate,
                    deflation=known,
                    target_rank=k,
                    rank_tol=rank_tol,
                )
                sol = jax.tree.map(lambda a: np.asarray(a)[:size], sol)
                if short < max_steps:
                    sol = _continue_failures(
                        layer,
                        sol,
                        short_steps=short,
                        max_steps=max_steps,
                        solver=solver,
                        residual_tol=residual_tol,
                        rank_tol=rank_tol,
                        known=known,
                    )
                for name_, v in sol.status_counts().items():
                    counts[name_] += v
                ok = np.asarray(sol.successful)
                xs.append(sol.x[ok])
                res.append(sol.residual[ok])
                rounds_of.append(np.full(int(ok.sum()), r))
                bar.update(1)
            before = len(classes)
            allx, allr = np.concatenate(xs), np.concatenate(res)
            classes = deduplicate(allx, allr, tol=dedup_tol, symmetries=group)
            got.update(
                status_counts=counts, new_equilibria=len(classes) - before, seconds=time.perf_counter() - tr
            )
            round_stats.append(got)
    bar.close()
    allrounds = np.concatenate(rounds_of)
    first = [plan[int(allrounds[c.members].min())][0] if c.count else None for c in classes]
    status = dict.fromkeys(status_names(), 0)
    for rs in round_stats:
        for name_, v in rs["status_counts"].items():
            status[name_] += v
    return JointResult(
        classes=classes,
        first_round=first,
        rounds=round_stats,
        status_counts=status,
        timing={"search_s": time.perf_counter() - t0, "compile_s": timer.compile_s},
    )
