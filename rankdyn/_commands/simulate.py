"""``rankdyn simulate``: one ensemble of trajectories, metrics per layer, a mu plot.

Flag names are a contract (issue "rankdyn core"): other commands and external checks use them.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from .._errors import UsageError
from .._observe._tolerances import RANK_METRICS, RANK_TOL
from ._checkpoint import add_checkpoint_flags, checkpoint_requested
from ._checks import check_out_dir, check_plan_memory, check_rank_tol_read, model_config, model_flags
from ._devices import add_devices_flag, sharding_devices
from ._table import LineHelpFormatter, metrics_help, print_table, print_written

#: Flags of a layer stack or a random map: a command about one fixed map (equilibria, continue, basins)
#: hides them from its help and refuses them, saying why.
STACK_FLAGS = ("per_layer_weights", "dropout", "attn_dropout", "hidden_dropout")


def add_model_flags(p: argparse.ArgumentParser, *, one_map: bool = False) -> None:
    """Flags that define a model and its inputs (shared with other subcommands).

    Generated from the rows of `rankdyn._model._params.PARAMS` that have a flag (`model_flags`); their
    values become a `rankdyn._model._config.ModelConfig` (`check_model_args`), which holds every rule;
    an error names the flag. ``one_map``: the command studies one deterministic map (its fixed points
    or attractors), so `STACK_FLAGS` are left out of ``--help`` (still parsed, and refused with the reason).
    """
    g = p.add_argument_group("model")
    model_flags(g)
    g.add_argument("--per-layer-weights", action="store_true", help="draw new weights for every layer")
    g.add_argument(
        "--dropout",
        type=float,
        default=None,
        metavar="P",
        help="attention and hidden dropout rate in [0, 1) (default: 0, off)",
    )
    g.add_argument("--x64", action="store_true", help="float64 end to end")
    if one_map:
        for action in g._group_actions:
            if action.dest in STACK_FLAGS:
                action.help = argparse.SUPPRESS


def add_parser(sub) -> None:
    p = sub.add_parser(
        "simulate",
        help="simulate an ensemble and save per-layer metrics",
        description="Simulate a batch of trajectories of the masked attention + LN map and save "
        "per-layer metrics (metrics.json), a table of the metrics asked for and one semi-log figure per "
        "metric (<metric>.png; mu.png by default).",
        formatter_class=LineHelpFormatter,
    )
    add_model_flags(p)
    p.add_argument("--num-layers", type=int, default=128, help="depth T")
    p.add_argument("--batch", type=int, default=256, help="number of trajectories")
    p.add_argument(
        "--save-every", type=int, default=1, help="record metrics every k layers (k divides --num-layers)"
    )
    p.add_argument(
        "--rank-tol",
        type=float,
        default=None,
        help=f"relative tolerance of the numerical rank, read by {', '.join(RANK_METRICS)} "
        f"(default: {RANK_TOL})",
    )
    p.add_argument("--metrics", default=None, help=metrics_help())
    p.add_argument(
        "--plot",
        default=None,
        metavar="M,...",
        help="metrics to draw, one <metric>.png each (default: those of --metrics; mu only for all or "
        "the long-context default)",
    )
    p.add_argument(
        "--per-trajectory",
        action="store_true",
        help="also write every trajectory's metrics (per_trajectory.npz); memory grows with the batch",
    )
    p.add_argument(
        "--attention-sinks",
        action="store_true",
        help="also measure the attention on token 0 and on the mask's centres per layer and head, and the "
        "cosines to token 0 (sinks.json, attention_sinks.png; eval mode, no dropout)",
    )
    p.add_argument(
        "--chunk", type=int, default=None, help="trajectories advanced together (default: cache-sized on CPU)"
    )
    p.add_argument("--out", type=Path, default=Path("out/simulate"), help="output folder")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    add_devices_flag(p, "The trajectories are split over the devices (same results as one device).")
    add_checkpoint_flags(p)  # --checkpoint: commands/_checkpoint.py (refuses the model flags above)
    p.set_defaults(func=run)


def layer_from_args(args, key, config=None):
    """Build the layer described by `add_model_flags` flags (``config``: their `ModelConfig`)."""
    from .._model._build import build_layer

    return build_layer(key, check_model_args(args) if config is None else config)


def check_model_args(args):
    """The validated `ModelConfig` of the model flags; a bad value raises ValueError naming the flag."""
    return model_config(args)


def check_run_args(args, config):
    """Every simulate flag, the memory estimate and the output folder, before any compute.

    The run's checks live in its `SimulatePlan` (`rankdyn._run._plan`), built here before JAX
    loads; only the command line's own (metric names to plot, ``--rank-tol`` with metrics that
    ignore it, the output folder) are made here.

    Returns:
        ``(metric names, estimated peak bytes, plan)``.
    """
    from .._observe._names import parse_metrics
    from ..plans import SimulatePlan
    from ._table import plot_names

    names = parse_metrics(args.metrics, where=f"--metrics {args.metrics}")
    plot_names(args.plot, names)  # a --plot name that is not recorded is refused before compute
    plan = SimulatePlan.from_config(
        config,
        itemsize=run_itemsize(args),
        batch=args.batch,
        num_layers=args.num_layers,
        save_every=args.save_every,
        rank_tol=RANK_TOL if args.rank_tol is None else args.rank_tol,
        chunk=args.chunk,
        metrics=names,
        per_trajectory=args.per_trajectory,
    )
    check_rank_tol_read(args, names)
    args.rank_tol = plan.rank_tol  # recorded as used
    check_out_dir(args.out)
    # The estimate asks JAX for its backend: every refusal above answers before JAX loads.
    est = check_plan_memory(
        plan,
        what=f"--n {args.n} --d {args.d} --batch {args.batch} --num-layers {args.num_layers}",
        fixes=_MEMORY_FIXES,
    )
    plan.check_indices()
    return names, est, plan


def run_itemsize(args) -> int:
    """Bytes per number of the run, without loading JAX: 8 when it will compute in float64
    (``--x64``, ``JAX_ENABLE_X64`` set, or JAX already loaded with x64 by an in-process caller),
    else 4."""
    jax = sys.modules.get("jax")
    if jax is not None:
        return 8 if args.x64 or jax.config.jax_enable_x64 else 4
    env = os.environ.get("JAX_ENABLE_X64", "").strip().lower()
    return 8 if args.x64 or env in ("1", "true", "t", "yes", "y", "on") else 4


#: The flags that shrink each part of the depth scan's estimate (`SimulatePlan.memory`).
_MEMORY_FIXES = {
    "working set of one chunk": "lower --n, --d or --heads, or use a smaller --chunk.",
    "per-layer metrics": (
        "raise --save-every, or drop --per-trajectory (without it only statistics are kept)."
    ),
    "weights": "drop --per-layer-weights, or lower --num-layers or --d.",
}


def run(args) -> int:
    if checkpoint_requested(args):
        from ._checkpoint import run_checkpoint

        return run_checkpoint(args)
    from ._table import LONG_CONTEXT_N, default_metrics

    config = check_model_args(args)
    metrics_note = default_metrics(args, args.n >= LONG_CONTEXT_N)  # said after the refusals
    names, est, plan = check_run_args(args, config)
    if args.attention_sinks and config.has_dropout:
        raise UsageError(
            "--attention-sinks measures the eval-mode map: drop --attn-dropout / --hidden-dropout."
        )
    # JAX is imported once the flags are checked: a refused command answers at once.
    import jax
    import jax.random as jr
    import numpy as np

    from .._model._graph import graph_info
    from .._model._tokens import TokenSampler
    from .._run._io import CompileTimer, provenance, savez, write_json
    from .._run._simulate import simulate
    from ._checks import say_compiling

    k_layer, k_x0, k_drop = jr.split(jr.key(args.seed), 3)
    layer = layer_from_args(args, k_layer, config)
    # Drawn chunk by chunk inside the compiled scan (the same tokens as initial_tokens).
    x0 = TokenSampler(k_x0, args.x0, args.n, args.d, args.batch)
    info = graph_info(layer.mask)  # a MaskStructure on the blocked path: no n x n array

    say_compiling("simulate", note=metrics_note)
    with CompileTimer() as timer:
        traj = simulate(
            layer,
            x0,
            args.num_layers,
            save_every=args.save_every,
            rank_tol=args.rank_tol,
            metrics=names,
            per_trajectory=args.per_trajectory,
            chunk=args.chunk,
            key=k_drop if config.has_dropout else None,
            progress=not args.no_progress,
            devices=sharding_devices(args),
            plan=plan,
        )
        jax.block_until_ready(traj.summary)

    summary = traj.summary.to_dict()
    result = {
        "config": vars(args)
        | {
            "out": str(args.out),
            "func": None,
            "attn_dropout": config.attn_dropout,
            "hidden_dropout": config.hidden_dropout,
        },
        "graph": info.to_dict(),
        "layers": np.asarray(traj.layers),
        "metrics": summary,
        "count": np.asarray(traj.summary.count).astype(int),
        # Without a normalisation every zero token is an underflow (or exact cancellation): its
        # direction metrics are NaN and left out of the statistics, and it is counted here.
        "flags": {
            "nonfinite": int(traj.summary.nonfinite),
            "degenerate_ln": 0 if args.placement == "none" else int(traj.summary.degenerate),
            "underflow": int(traj.summary.degenerate) if args.placement == "none" else 0,
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
        arrays |= {
            "nonfinite": np.asarray(traj.nonfinite),
            "degenerate": np.asarray(traj.degenerate),
            "layers": np.asarray(traj.layers),
        }
        savez(args.out / "per_trajectory.npz", arrays)  # atomic: a full disk leaves no corrupt zip
        result["per_trajectory_file"] = "per_trajectory.npz"
    if args.attention_sinks:
        from .._model._tokens import initial_tokens
        from ._table import save_sinks

        x0_array = initial_tokens(k_x0, args.x0, args.n, args.d, batch=args.batch)
        title = f"random model, mask={args.mask} placement={args.placement} n={args.n} d={args.d}"
        result["attention_sinks"] = save_sinks(layer, x0_array, args.num_layers, args.out, title=title)
    write_json(args.out / "metrics.json", result)
    figures = _plot(traj, summary, args) if summary else []
    print_table(traj, summary, info, result, args.metrics)
    if args.attention_sinks:
        print(result["attention_sinks"]["summary"])
    sinks = ["sinks.json", "attention_sinks.png"] if args.attention_sinks else []
    written = ["metrics.json", *result.get("per_trajectory_file", "").split(), *figures, *sinks]
    print_written(args.out, written)
    return 0


def _plot(traj, summary, args) -> list[str]:
    from ._table import plot_names, save_figures

    title = f"mask={args.mask} placement={args.placement} value={args.value} n={args.n} d={args.d}"
    return save_figures(traj, summary, plot_names(args.plot, tuple(summary)), title, args.out)
