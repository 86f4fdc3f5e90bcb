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
from ._devices import add_devices_flag, sharding_devices


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
    p.add_argument("--out", type=Path, default=Path("out/simulate"), help="output folder")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    add_devices_flag(p, "The trajectories are split over the devices (same results as one device).")
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


def run(args) -> int:
    import jax
    import jax.random as jr
    import numpy as np

    from .._graph import graph_info
    from .._init import initial_tokens
    from .._io import CompileTimer, provenance, write_json
    from .._simulate import simulate

    check_model_args(args)
    if args.layers < 0 or args.batch < 1:
        raise ValueError(f"--layers must be >= 0 and --batch >= 1, got {args.layers} and {args.batch}.")
    k_layer, k_x0, k_drop = jr.split(jr.PRNGKey(args.seed), 3)
    layer = layer_from_args(args, k_layer)
    x0 = initial_tokens(k_x0, args.x0, args.n, args.d, batch=args.batch)
    info = graph_info(np.asarray(layer.mask))

    with CompileTimer() as timer:
        traj = simulate(layer, x0, args.layers, save_every=args.save_every, rank_tol=args.rank_tol,
                        key=k_drop if args.dropout > 0 else None, progress=not args.no_progress,
                        devices=sharding_devices(args))
        jax.block_until_ready(traj.metrics)

    summary = traj.summary()
    result = {
        "config": vars(args) | {"out": str(args.out), "func": None},
        "graph": info.to_dict(),
        "layers": np.asarray(traj.layers),
        "metrics": summary,
        "flags": {
            "nonfinite": int(np.sum(np.asarray(traj.nonfinite))),
            "degenerate_ln": int(np.sum(np.asarray(traj.degenerate))),
            "batch": args.batch,
        },
        "timing": {"compile_s": timer.compile_s, "run_s": timer.run_s},
        "provenance": provenance(),
    }
    result["config"].pop("func")
    args.out.mkdir(parents=True, exist_ok=True)
    write_json(args.out / "metrics.json", result)
    _plot(traj, summary, args)
    _print_table(traj, summary, info, result)
    return 0


def _plot(traj, summary, args) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from ..plotting import plot_metric_band

    fig, ax = plt.subplots(figsize=(5.5, 4), layout="constrained")
    plot_metric_band(traj.layers, summary["mu"]["mean"], summary["mu"]["std"], ax=ax, label="mu",
                     ylabel="mu(X) (mean +- std)", dtype=traj.metrics["mu"].dtype)
    ax.set_title(f"mask={args.mask} norm={args.norm} value={args.value} n={args.n} d={args.d}", fontsize=9)
    fig.savefig(args.out / "mu.png", dpi=120)
    plt.close(fig)


def _print_table(traj, summary, info, result) -> None:
    import numpy as np

    layers = np.asarray(traj.layers)
    idx = sorted(set(np.linspace(0, len(layers) - 1, min(len(layers), 6)).round().astype(int)))
    cols = ["mu", "mu_normalized", "min_cos", "sigma_min", "num_rank", "eps_min"]
    print(f"graph: strongly_connected={info.strongly_connected} centers={info.num_centers} radius={info.radius}")
    # A layer whose mu/||X||_F is below the dtype's round-off floor has collapsed as far as this
    # dtype can show: flag it, so a float32 plateau near 1e-7 is not read as "no collapse".
    from ..plotting import round_off_floor

    dtype = np.asarray(traj.metrics["mu"]).dtype
    floor = round_off_floor(dtype)
    rel = np.asarray(summary["mu_rel"]["mean"]) if "mu_rel" in summary else None
    print("layer " + " ".join(f"{c:>14}" for c in cols))
    flagged = False
    for i in idx:
        at_floor = rel is not None and rel[i] <= floor
        flagged |= at_floor
        print(f"{layers[i]:5d} " + " ".join(f"{summary[c]['mean'][i]:14.4e}" for c in cols)
              + ("  * at floor" if at_floor else ""))
    if flagged:
        print(f"* mu/||X||_F <= {floor:.1e} = 10 eps({dtype.name}): round-off floor, collapsed as far as "
              f"{dtype.name} resolves{'' if dtype == np.float64 else '; --x64 resolves further'}.")
    f, t = result["flags"], result["timing"]
    print(f"flags: nonfinite={f['nonfinite']} degenerate_ln={f['degenerate_ln']} of {f['batch']}; "
          f"compile {t['compile_s']:.2f}s, run {t['run_s']:.2f}s")
