"""``rankdyn equilibria``: batched search for equilibria of one layer map, with stability.

A thin wrapper of `rankdyn.equilibrium_census` (search rounds, deduplication, rank, stability,
closed-form matching when the model is the paper's construction, `docs/theory.md#constructions`). Writes
``equilibria.json`` and ``eigen_moduli.png``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from ._checks import HelpFormatter, check_nonnegative, check_out_dir, check_positive
from .simulate import add_model_flags, check_model_args


def add_parser(sub) -> None:
    p = sub.add_parser(
        "equilibria",
        help="find equilibria of every rank and classify their stability",
        description="Batched search for fixed points F(X) = X of one layer (forward iteration, "
        "Adam on ||F(X)-X||^2, Gauss-Newton polishing, deflation), deduplicated up to symmetry, "
        "with rank, stability and closed-form matching. Writes equilibria.json and eigen_moduli.png.",
        formatter_class=HelpFormatter,
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


def _check(args):
    """Every flag, the memory estimate and the output folder, before any compute; the model's
    `ModelConfig` is returned."""
    if args.per_layer_weights:
        raise ValueError("--per-layer-weights is not supported: an equilibrium is a fixed point of one map.")
    config = check_model_args(args)
    if config.has_dropout:
        raise ValueError("--dropout, --attn-dropout and --hidden-dropout must be 0: a stochastic map has no "
                         "fixed points.")
    if args.starts < 1 or args.chunk < 1:
        raise ValueError(f"--starts and --chunk must be >= 1, got {args.starts} and {args.chunk}.")
    if min(args.deflation_rounds, args.max_steps, args.short_steps, args.forward_steps, args.minimise_steps) < 0:
        raise ValueError("--deflation-rounds, --max-steps, --short-steps, --forward-steps and --minimise-steps "
                         "must be >= 0.")
    check_nonnegative(args, "deflation_starts", "target_starts", minimum=1)
    check_positive(args, "residual_tol", "rank_tol", "dedup_tol", "stability_tol", "learning_rate")
    _check_memory(args)
    check_out_dir(args.out)
    return config


def _check_memory(args) -> None:
    from .._memory import available_memory, check_memory, equilibria_memory, format_bytes

    item = 8 if args.x64 else 4
    est = equilibria_memory(n=args.n, d=args.d, chunk=min(args.chunk, args.starts), itemsize=item)
    avail = available_memory()
    per_start = equilibria_memory(n=args.n, d=args.d, chunk=1, itemsize=item).total
    fits = 0 if avail[0] is None else avail[0] // per_start
    fix = (f"lower --chunk to {fits} or fewer (each start of a chunk needs {format_bytes(per_start)})." if fits
           else "lower --n or --d: one start alone does not fit.")
    check_memory(est, fix=fix, what=f"--n {args.n} --d {args.d} --chunk {args.chunk}", available=avail)


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


def _is_paper_construction(args, layer) -> bool:
    import numpy as np

    return (args.mask == "causal" and args.value == "bidiagonal" and args.qk == "zero" and args.norm == "post"
            and args.ln == "sphere" and args.heads == 1 and not args.skip and not args.mlp
            and np.allclose(np.asarray(layer.weights.w_q), 0) and args.n <= args.d)


def run(args) -> int:
    import jax.random as jr
    import numpy as np

    from .._census import equilibrium_census
    from .._constructions import all_closed_form_equilibria
    from .._io import provenance, write_json
    from .simulate import layer_from_args

    config = _check(args)
    k_layer, k_x0 = jr.split(jr.PRNGKey(args.seed))
    layer = layer_from_args(args, k_layer, config)
    # Closed forms of the rank-k family (docs/theory.md#constructions; only for the paper's construction).
    closed = []
    if _is_paper_construction(args, layer):
        closed = [(k, np.asarray(x)) for k, x in all_closed_form_equilibria(args.n, args.d, args.w)]
    census = equilibrium_census(
        layer, k_x0, starts=args.starts, chunk=args.chunk, method=args.method, max_steps=args.max_steps,
        short_steps=args.short_steps, forward_steps=args.forward_steps, minimise_steps=args.minimise_steps,
        learning_rate=args.learning_rate, deflation_rounds=args.deflation_rounds,
        deflation_starts=args.deflation_starts, target_ranks=_target_ranks(args.target_ranks, args.n, args.d),
        target_starts=args.target_starts, residual_tol=args.residual_tol, rank_tol=args.rank_tol,
        dedup_tol=args.dedup_tol, stability_tol=args.stability_tol, closed_forms=closed,
        progress=not args.no_progress,
    )
    config = {k: v for k, v in vars(args).items() if k not in ("func",)}
    config["out"] = str(args.out)
    result = {"config": config, **census, "provenance": provenance()}
    args.out.mkdir(parents=True, exist_ok=True)
    write_json(args.out / "equilibria.json", result)
    _plot(census["equilibria"], args)
    _print_summary(census["equilibria"], census["by_rank"], census["status_counts"], census["closed_forms"],
                   census["timing"], args)
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
