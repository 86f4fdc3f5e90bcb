"""``rankdyn simulate``: one ensemble of trajectories, metrics per layer, a mu plot.

Flag names are a contract (issue "rankdyn core"): other commands and external checks use them.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from .._init import X0_NAMES
from .._layer import PLACEMENTS
from .._masks import MASK_NAMES
from .._norms import LN_NAMES
from .._weights import QK_NAMES, VALUE_NAMES


def add_model_flags(p: argparse.ArgumentParser) -> None:
    """Flags that define a model and its inputs (shared with other subcommands)."""
    g = p.add_argument_group("model")
    g.add_argument("--mask", choices=MASK_NAMES, default="causal", help="attention mask graph")
    g.add_argument("--window", type=int, default=1, help="window half-width / look-back / dilated hops")
    g.add_argument("--n", type=int, default=32, help="number of tokens")
    g.add_argument("--d", type=int, default=64, help="token dimension")
    g.add_argument("--dqk", type=float, default=None, help="temperature d_QK (default: key width)")
    g.add_argument("--norm", choices=PLACEMENTS, default="post", help="normalisation placement")
    g.add_argument("--ln", choices=LN_NAMES, default="sphere", help="normalisation variant")
    g.add_argument("--value", choices=VALUE_NAMES, default="orthogonal", help="value matrix family")
    g.add_argument("--w", type=float, default=2.0, help="superdiagonal weight of bidiagonal/jordan W_V")
    g.add_argument("--jordan-k", type=int, default=None, help="Jordan block size (default d)")
    g.add_argument("--qk", choices=QK_NAMES, default="bert", help="query/key family (zero: uniform attention)")
    g.add_argument("--x0", choices=X0_NAMES, default="sphere", help="initial tokens")
    g.add_argument("--per-layer-weights", action="store_true", help="draw new weights for every layer")
    g.add_argument("--heads", type=int, default=1, help="attention heads (>1 adds W_O)")
    g.add_argument("--skip", action="store_true", help="residual connection X + SA(X)")
    g.add_argument("--mlp", action="store_true", help="add an MLP block")
    g.add_argument("--dropout", type=float, default=0.0, help="dropout rate (0: off)")
    g.add_argument("--seed", type=int, default=0, help="PRNG seed for weights and inputs")
    g.add_argument("--x64", action="store_true", help="float64 end to end")


def add_parser(sub) -> None:
    p = sub.add_parser(
        "simulate",
        help="simulate an ensemble and save per-layer metrics",
        description="Simulate a batch of trajectories of the masked attention + LN map and save "
        "per-layer metrics (metrics.json) and a log-log mu plot (mu.png).",
    )
    add_model_flags(p)
    p.add_argument("--layers", type=int, default=128, help="depth T")
    p.add_argument("--batch", type=int, default=256, help="number of trajectories")
    p.add_argument("--save-every", type=int, default=1, help="record metrics every k layers")
    p.add_argument("--rank-tol", type=float, default=1e-6, help="relative tolerance of the numerical rank")
    p.add_argument("--metrics", default="all",
                   help="comma-separated metrics to record, e.g. mu,eps_min (default: all; spectral ones cost an SVD)")
    p.add_argument("--per-trajectory", action="store_true",
                   help="also write every trajectory's metrics (per_trajectory.npz); memory grows with the batch")
    p.add_argument("--chunk", type=int, default=None,
                   help="trajectories advanced together (default: cache-sized on CPU)")
    p.add_argument("--out", type=Path, default=Path("out/simulate"), help="output folder")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    p.set_defaults(func=run)


def layer_from_args(args, key):
    """Build the layer described by `add_model_flags` flags."""
    from .._build import make_layer

    return make_layer(
        key, n=args.n, d=args.d, mask=args.mask, window=args.window, dqk=args.dqk, norm=args.norm,
        ln=args.ln, value=args.value, w=args.w, jordan_k=args.jordan_k, qk=args.qk,
        num_layers=args.layers if args.per_layer_weights else None, heads=args.heads,
        output_projection=args.heads > 1, skip=args.skip, mlp=args.mlp, dropout=args.dropout,
    )


def check_model_args(args) -> None:
    """Reject bad flag values before any compute, naming the flag."""
    if args.n < 1 or args.d < 1:
        raise ValueError(f"--n and --d must be positive, got --n {args.n} --d {args.d}.")
    if args.dqk is not None and not args.dqk > 0:
        raise ValueError(f"--dqk must be > 0, got {args.dqk}.")
    if args.window < 0:
        raise ValueError(f"--window must be >= 0, got {args.window}.")
    if args.mask in ("window", "window-uni", "global") and args.window >= args.n:
        raise ValueError(f"--window {args.window} must be smaller than --n {args.n}.")
    if args.value == "jordan" and args.jordan_k is not None and not 1 <= args.jordan_k <= args.d:
        raise ValueError(f"--jordan-k must be in [1, --d={args.d}], got {args.jordan_k}.")
    if args.heads < 1 or args.d % args.heads:
        raise ValueError(f"--heads must divide --d: --d {args.d} --heads {args.heads}.")
    if not 0 <= args.dropout < 1:
        raise ValueError(f"--dropout must be in [0, 1), got {args.dropout}.")


def check_run_args(args):
    """Reject bad run flags before compute; return the metric names and the memory estimate."""
    from .._observe import parse_metrics
    from .._scan import auto_chunk, available_bytes, estimate_bytes

    if args.layers < 0 or args.batch < 1:
        raise ValueError(f"--layers must be >= 0 and --batch >= 1, got {args.layers} and {args.batch}.")
    if args.save_every < 1 or args.layers % args.save_every:
        raise ValueError(f"--save-every must be a positive divisor of --layers {args.layers}, got {args.save_every}.")
    if args.chunk is not None and args.chunk < 1:
        raise ValueError(f"--chunk must be a positive number of trajectories, got {args.chunk}.")
    names = parse_metrics(args.metrics, where=f"--metrics {args.metrics}")
    itemsize = 8 if args.x64 else 4
    chunk = args.chunk or auto_chunk(args.batch, args.n, args.d, itemsize, "cpu")
    est = estimate_bytes(num=args.batch, chunk=min(chunk, args.batch), n=args.n, d=args.d, heads=args.heads,
                         itemsize=itemsize, num_saved=args.layers // args.save_every + 1, num_metrics=len(names),
                         per_trajectory=args.per_trajectory, save_states=False)
    avail = available_bytes()
    if avail is not None and est > avail:
        raise ValueError(
            f"--batch {args.batch} --layers {args.layers}: estimated peak memory {est / 2**30:.2f} GiB exceeds the "
            f"{avail / 2**30:.2f} GiB available; use a smaller --chunk, a larger --save-every, or drop --per-trajectory."
        )
    return names, est


def run(args) -> int:
    import jax
    import jax.random as jr
    import numpy as np

    from .._graph import graph_info
    from .._init import TokenSampler
    from .._io import CompileTimer, provenance, write_json
    from .._simulate import simulate

    check_model_args(args)
    names, est = check_run_args(args)
    k_layer, k_x0, k_drop = jr.split(jr.PRNGKey(args.seed), 3)
    layer = layer_from_args(args, k_layer)
    x0 = TokenSampler(k_x0, args.x0, args.n, args.d, args.batch)
    info = graph_info(np.asarray(layer.mask))

    with CompileTimer() as timer:
        traj = simulate(layer, x0, args.layers, save_every=args.save_every, rank_tol=args.rank_tol,
                        metrics=names, per_trajectory=args.per_trajectory, chunk_size=args.chunk,
                        key=k_drop if args.dropout > 0 else None, progress=not args.no_progress)
        jax.block_until_ready(traj.summary)

    summary = traj.summary.to_dict()
    result = {
        "config": vars(args) | {"out": str(args.out), "func": None},
        "graph": info.to_dict(),
        "layers": np.asarray(traj.layers),
        "metrics": summary,
        "count": np.asarray(traj.summary.count).astype(int),
        "flags": {
            "nonfinite": int(traj.summary.nonfinite),
            "degenerate_ln": int(traj.summary.degenerate),
            "batch": args.batch,
        },
        "memory_estimate_bytes": est,
        "timing": {"compile_s": timer.compile_s, "run_s": timer.run_s},
        "provenance": provenance(),
    }
    result["config"].pop("func")
    args.out.mkdir(parents=True, exist_ok=True)
    if args.per_trajectory:
        arrays = {k: np.asarray(v) for k, v in traj.metrics.items()}
        arrays |= {"nonfinite": np.asarray(traj.nonfinite), "degenerate": np.asarray(traj.degenerate),
                   "layers": np.asarray(traj.layers)}
        np.savez(args.out / "per_trajectory.npz", **arrays)
        result["per_trajectory_file"] = "per_trajectory.npz"
    write_json(args.out / "metrics.json", result)
    if summary:
        _plot(traj, summary, args)
    _print_table(traj, summary, info, result)
    return 0


def _plot(traj, summary, args) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from ..plotting import plot_metric_band

    name = "mu" if "mu" in summary else next(iter(summary))
    fig, ax = plt.subplots(figsize=(5.5, 4))
    plot_metric_band(traj.layers, summary[name]["mean"], summary[name]["std"], ax=ax, label=name)
    ax.set_ylabel(f"{name} (mean +- std)")
    ax.set_title(f"mask={args.mask} norm={args.norm} value={args.value} n={args.n} d={args.d}", fontsize=9)
    fig.tight_layout()
    fig.savefig(args.out / "mu.png", dpi=120)
    plt.close(fig)


def _print_table(traj, summary, info, result) -> None:
    import numpy as np

    layers = np.asarray(traj.layers)
    idx = sorted(set(np.linspace(0, len(layers) - 1, min(len(layers), 6)).round().astype(int)))
    cols = [c for c in ("mu", "mu_normalized", "min_cos", "sigma_min", "num_rank", "eps_min") if c in summary]
    cols = cols or list(summary)[:6]
    print(f"graph: strongly_connected={info.strongly_connected} centers={info.num_centers} radius={info.radius}")
    print("layer " + " ".join(f"{c:>14}" for c in cols))
    for i in idx:
        print(f"{layers[i]:5d} " + " ".join(f"{summary[c]['mean'][i]:14.4e}" for c in cols))
    f, t = result["flags"], result["timing"]
    print(f"flags: nonfinite={f['nonfinite']} degenerate_ln={f['degenerate_ln']} of {f['batch']}; "
          f"compile {t['compile_s']:.2f}s, run {t['run_s']:.2f}s")
