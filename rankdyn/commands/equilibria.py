"""``rankdyn equilibria``: batched search for equilibria of one layer map, with stability.

Runs `rankdyn.find_equilibria` from random sphere starts (chunked, with a progress bar), then
deflation rounds that deflate every equilibrium found so far (and its symmetric images) and
restart from fresh random starts, then optional rank-biased rounds. Distinct equilibria (up to
symmetry) are classified by rank and by the stability of their tangent Jacobian, and matched
with the paper's closed forms (SPEC §5.2) when the model is the paper's construction.
No closed form is ever used as a start. Writes ``equilibria.json`` and ``eigen_moduli.png``.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from .simulate import add_model_flags, check_model_args


def add_parser(sub) -> None:
    p = sub.add_parser(
        "equilibria",
        help="find equilibria of every rank and classify their stability",
        description="Batched search for fixed points F(X) = X of one layer (forward iteration, "
        "Adam on ||F(X)-X||^2, Gauss-Newton polishing, deflation), deduplicated up to symmetry, "
        "with rank, stability and closed-form matching. Writes equilibria.json and eigen_moduli.png.",
    )
    add_model_flags(p)
    p.set_defaults(n=6, d=6, value="bidiagonal", w=7.0, qk="zero", mask="causal")
    g = p.add_argument_group("search")
    g.add_argument("--starts", type=int, default=4096, help="random sphere starts in the first round")
    g.add_argument("--chunk", type=int, default=1024, help="starts per compiled batch")
    g.add_argument("--method", choices=("gn", "lm"), default="gn", help="Gauss-Newton (SVD) or Levenberg-Marquardt")
    g.add_argument("--max-steps", type=int, default=100, help="Newton/LM steps per start")
    g.add_argument("--short-steps", type=int, default=25,
                   help="first Newton budget; only unconverged starts continue to --max-steps (0: off)")
    g.add_argument("--forward-steps", type=int, default=0, help="forward iterations before the solve")
    g.add_argument("--minimise-steps", type=int, default=0, help="Adam steps on ||F(X)-X||^2 before the solve")
    g.add_argument("--learning-rate", type=float, default=1e-2, help="Adam learning rate")
    g.add_argument("--deflation-rounds", type=int, default=2, help="rounds that deflate all equilibria found so far")
    g.add_argument("--deflation-starts", type=int, default=None, help="starts per deflation round (default --starts / 4)")
    g.add_argument("--target-ranks", type=str, default="",
                   help="comma-separated ranks (or 'all') for extra rank-biased rounds (Adam + rank penalty)")
    g.add_argument("--target-starts", type=int, default=512, help="starts per rank-biased round")
    g.add_argument("--residual-tol", type=float, default=None, help="success threshold (default 1e-10 f64 / 1e-5 f32)")
    g.add_argument("--rank-tol", type=float, default=1e-8, help="relative singular value tolerance of the rank")
    g.add_argument("--dedup-tol", type=float, default=2e-2, help="max-abs distance under which two equilibria are one")
    # 1e-2, not 1e-6: the first token's equilibrium is a root of multiplicity d - 1, so a
    # rounding-level residual leaves it ~1e-3 away and its multiplier 1 reads as 1 - O(w * 1e-3).
    g.add_argument("--stability-tol", type=float, default=1e-2, help="tolerance on |lambda| - 1 (marginal band)")
    g.add_argument("--out", type=Path, default=Path("out/equilibria"), help="output folder")
    g.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    p.set_defaults(func=run)


def _check(args) -> None:
    check_model_args(args)
    if args.per_layer_weights:
        raise ValueError("--per-layer-weights is not supported: an equilibrium is a fixed point of one map.")
    if args.dropout > 0:
        raise ValueError("--dropout must be 0: a stochastic map has no fixed points.")
    if args.starts < 1 or args.chunk < 1:
        raise ValueError(f"--starts and --chunk must be >= 1, got {args.starts} and {args.chunk}.")
    if min(args.deflation_rounds, args.max_steps, args.short_steps, args.forward_steps, args.minimise_steps) < 0:
        raise ValueError("--deflation-rounds, --max-steps, --short-steps, --forward-steps and --minimise-steps "
                         "must be >= 0.")


def _target_ranks(spec: str, n: int, d: int) -> list[int]:
    if not spec:
        return []
    if spec == "all":
        return list(range(1, min(n, d) + 1))
    try:
        ks = [int(s) for s in spec.split(",") if s.strip()]
    except ValueError:
        raise ValueError(f"--target-ranks must be 'all' or comma-separated integers, got {spec!r}.") from None
    bad = [k for k in ks if not 1 <= k <= min(n, d)]
    if bad:
        raise ValueError(f"--target-ranks {bad} outside [1, min(n, d) = {min(n, d)}].")
    return ks


def _continue_failures(layer, sol, args, known):
    """Continue the Newton phase (``max_steps - short_steps`` more steps) for the members that
    stopped at the short budget; the others are kept. The subset is padded to a power of two
    so that repeated chunks reuse a few compiled programs."""
    import equinox as eqx
    import jax
    import numpy as np

    from .._equilibria import find_equilibria

    # Members that used the whole short budget were still iterating (Optimistix had not
    # terminated), including "successful" ones whose residual is only just below tolerance.
    running = (np.asarray(sol.steps) >= args.short_steps) & np.isin(sol.status, ["successful", "max_steps_reached"])
    bad = np.nonzero(running)[0]
    if bad.size == 0:
        return sol
    m = 1 << int(np.ceil(np.log2(bad.size)))
    idx = np.concatenate([bad, np.resize(bad, m - bad.size)])
    more = find_equilibria(layer, sol.x[idx], method=args.method, max_steps=args.max_steps - args.short_steps,
                           residual_tol=args.residual_tol, deflation=known, rank_tol=args.rank_tol)
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


def _is_paper_construction(args, layer) -> bool:
    import numpy as np

    return (args.mask == "causal" and args.value == "bidiagonal" and args.qk == "zero" and args.norm == "post"
            and args.ln == "sphere" and args.heads == 1 and not args.skip and not args.mlp
            and np.allclose(np.asarray(layer.weights.w_q), 0) and args.n <= args.d)


def run(args) -> int:
    import jax
    import jax.numpy as jnp
    import jax.random as jr
    import numpy as np
    from tqdm.auto import tqdm

    from .._constructions import all_closed_form_equilibria
    from .._equilibria import (
        RESULTS, _distance, deduplicate, equilibrium_rank, find_equilibria, symmetric_images, symmetry_group,
    )
    from .._init import initial_tokens
    from .._io import CompileTimer, provenance, write_json
    from .._stability import stability
    from .simulate import layer_from_args

    _check(args)
    args.layers = None  # layer_from_args reads it for per-layer weights (rejected above)
    targets = _target_ranks(args.target_ranks, args.n, args.d)
    k_layer, k_x0 = jr.split(jr.PRNGKey(args.seed))
    layer = layer_from_args(args, k_layer)
    group = symmetry_group(layer)
    defl_starts = args.deflation_starts if args.deflation_starts is not None else max(1, args.starts // 4)
    # One plan of rounds: (name, number of starts, deflate?, target rank).
    plan = [("random", args.starts, False, None)]
    plan += [(f"deflation-{r + 1}", defl_starts, True, None) for r in range(args.deflation_rounds)]
    plan += [(f"target-rank-{k}", args.target_starts, False, k) for k in targets]
    total_chunks = sum(-(-m // args.chunk) for _, m, _, _ in plan)

    xs, res, rounds_of, codes = [], [], [], []
    round_stats = []
    classes = []
    t0 = time.perf_counter()
    bar = tqdm(total=total_chunks, desc="equilibria", disable=args.no_progress, unit="chunk")
    with CompileTimer() as timer:
        for r, (name, m, deflate, k) in enumerate(plan):
            key = jr.fold_in(k_x0, r)
            known = None
            if deflate and classes:
                known = np.concatenate([symmetric_images(c.x, group) for c in classes])
            got = {"round": name, "starts": m, "deflated": 0 if known is None else len(known), "target_rank": k}
            counts = dict.fromkeys(RESULTS._name_to_item, 0)
            tr = time.perf_counter()
            for c0 in range(0, m, args.chunk):
                size = min(args.chunk, m - c0)
                bar.set_postfix_str(f"{name} {c0 + size}/{m}")
                x0 = initial_tokens(jr.fold_in(key, c0), "sphere", args.n, args.d, batch=size)
                # Pad the last chunk to the chunk size so every chunk reuses one compiled program.
                if size < args.chunk and m > args.chunk:
                    x0 = jnp.concatenate([x0, x0[: args.chunk - size]], axis=0)
                # Under vmap every member pays for the slowest one: solve with a short Newton
                # budget first, then continue only the unconverged members (benchmarks/README.md).
                short = args.max_steps if deflate or not args.short_steps else min(args.short_steps, args.max_steps)
                sol = find_equilibria(
                    layer, x0, method=args.method, max_steps=short, residual_tol=args.residual_tol,
                    forward_steps=args.forward_steps,
                    minimise_steps=args.minimise_steps if k is None else max(args.minimise_steps, 300),
                    learning_rate=args.learning_rate, deflation=known, target_rank=k, rank_tol=args.rank_tol,
                )
                sol = jax.tree.map(lambda a: np.asarray(a)[:size], sol)
                if short < args.max_steps:
                    sol = _continue_failures(layer, sol, args, known)
                for key_, v in sol.status_counts().items():
                    counts[key_] += v
                ok = np.asarray(sol.result._value) == RESULTS.successful._value
                xs.append(sol.x[ok])
                res.append(sol.residual[ok])
                rounds_of.append(np.full(int(ok.sum()), r))
                codes.append(np.asarray(sol.result._value))
                bar.update(1)
            before = len(classes)
            allx, allr = np.concatenate(xs), np.concatenate(res)
            classes = deduplicate(allx, allr, tol=args.dedup_tol, symmetries=group)
            got.update(status_counts=counts, new_equilibria=len(classes) - before, seconds=time.perf_counter() - tr)
            round_stats.append(got)
    bar.close()
    search_s = time.perf_counter() - t0
    allrounds = np.concatenate(rounds_of)

    # Closed forms of SPEC §5.2 (only for the paper's construction), to match against.
    closed = []
    if _is_paper_construction(args, layer):
        closed = [(k, np.asarray(x)) for k, x in all_closed_form_equilibria(args.n, args.d, args.w)]
    closed_hit = np.zeros(len(closed), bool)

    t1 = time.perf_counter()
    records = []
    for c in tqdm(classes, desc="stability", disable=args.no_progress, unit="eq"):
        x = jnp.asarray(c.x)
        rank = int(equilibrium_rank(x, args.rank_tol))
        rep = stability(layer, x, tol=args.stability_tol)
        match = None
        if closed:
            dists = np.array([_distance(cx, c.x, group) for _, cx in closed])
            j = int(np.argmin(dists))
            match = bool(dists[j] <= args.dedup_tol)
            if match:
                closed_hit[dists <= args.dedup_tol] = True
        records.append({
            "rank": rank,
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
    kmax = min(args.n, args.d)
    # Rank 0 (the zero equilibrium of the un-normalised map) is listed only when it occurs.
    k0 = 0 if any(e["rank"] == 0 for e in records) else 1
    by_rank = {str(k): sum(e["rank"] == k for e in records) for k in range(k0, kmax + 1)}
    status = dict.fromkeys(RESULTS._name_to_item, 0)
    for rs in round_stats:
        for key_, v in rs["status_counts"].items():
            status[key_] += v
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
    config = {k: v for k, v in vars(args).items() if k not in ("func",)}
    config["out"] = str(args.out)
    result = {
        "config": config,
        "symmetries": {"sign": group["sign"], "all_permutations": group["all_permutations"],
                       "permutations": [p.tolist() for p in group["permutations"]],
                       "skipped": "continuous rotations commuting with W_V (only +-I for bidiagonal/generic W_V)"},
        "equilibria": records,
        "by_rank": by_rank,
        "status_counts": status,
        "rounds": round_stats,
        "closed_forms": closed_summary,
        "timing": {"search_s": search_s, "compile_s": timer.compile_s, "stability_s": stability_s},
        "provenance": provenance(),
    }
    args.out.mkdir(parents=True, exist_ok=True)
    write_json(args.out / "equilibria.json", result)
    _plot(records, args)
    _print_summary(records, by_rank, status, closed_summary, result["timing"], args)
    return 0


def _plot(records, args) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from ..plotting import plot_equilibria_moduli

    fig, ax = plt.subplots(figsize=(max(6.0, 0.08 * len(records) + 3), 4))
    if records:
        plot_equilibria_moduli(
            [e["moduli"] for e in records], [e["rank"] for e in records],
            closed_form=[e["closed_form_match"] is not False for e in records], ax=ax,
            title=f"{len(records)} equilibria: mask={args.mask} value={args.value} w={args.w} n={args.n} d={args.d}",
        )
    fig.tight_layout()
    fig.savefig(args.out / "eigen_moduli.png", dpi=120)
    plt.close(fig)


def _print_summary(records, by_rank, status, closed, timing, args) -> None:
    print(f"status over all starts: {status}")
    print("rank  distinct  closed-form  stable  marginal  unstable  max residual")
    for k, cnt in by_rank.items():
        rs = [e for e in records if e["rank"] == int(k)]
        cf = sum(bool(e["closed_form_match"]) for e in rs)
        cls = [sum(e["classification"] == c for e in rs) for c in ("stable", "marginal", "unstable")]
        mr = max((e["residual"] for e in rs), default=float("nan"))
        print(f"{k:>4}  {cnt:>8}  {cf:>11}  {cls[0]:>6}  {cls[1]:>8}  {cls[2]:>8}  {mr:12.2e}")
    if closed:
        print(f"closed forms found: {closed['found']} / {closed['total']} "
              + " ".join(f"k={k}:{v['found']}/{v['total']}" for k, v in closed["by_rank"].items()))
    print(f"search {timing['search_s']:.1f}s (compile {timing['compile_s']:.1f}s), stability {timing['stability_s']:.1f}s; "
          f"wrote {args.out / 'equilibria.json'}")
