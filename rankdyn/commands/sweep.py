"""``rankdyn sweep``: a TOML-described parameter grid -> DIR/sweep.nc (xarray/netCDF) + summary PNGs.

See docs/sweep.md for the config format, the dataset layout and the resume semantics.
"""

from __future__ import annotations

from pathlib import Path

from .._errors import UsageError
from ._checks import HelpFormatter, check_out_dir
from ._devices import add_devices_flag


def add_parser(sub) -> None:
    p = sub.add_parser(
        "sweep",
        help="run a parameter grid described in a TOML file (resumable)",
        description="Run every cell of the grid in CONFIG.toml ([axes] x [fixed]), writing one chunk file "
        "per "
        "group of cells as it finishes (DIR/chunks), the labelled dataset DIR/sweep.nc and summary plots "
        "(mu_curves.png, rate_heatmap.png, final_rank.png). An interrupted sweep continues with --resume.",
        formatter_class=HelpFormatter,
    )
    p.add_argument("config", type=Path, help="sweep description (TOML: [axes], [fixed], [observe], [run])")
    p.add_argument(
        "--out", type=Path, required=True, help="output folder (new, or this sweep's with --resume)"
    )
    p.add_argument("--resume", action="store_true", help="compute only the chunks missing in --out")
    p.add_argument(
        "--plot-axes",
        nargs=2,
        metavar=("X", "Y"),
        default=None,
        help="two axes for the heat map of the fitted collapse rate (default: mask and dqk if swept, "
        "else the first two axes with several values)",
    )
    p.add_argument("--no-plots", action="store_true", help="write the dataset only")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    p.add_argument(
        "--max-cells",
        type=int,
        default=None,
        help="allow grids with more cells than the default limit (100000)",
    )
    p.add_argument("--x64", action="store_true", help="float64 end to end")
    add_devices_flag(
        p, "Each chunk's trajectories are split over the devices when their number divides the batch."
    )
    p.set_defaults(func=run)


def _default_plot_axes(cfg):
    names = list(cfg.axes)
    if "mask" in names and "dqk" in names:
        return ["mask", "dqk"]
    multi = [k for k, v in cfg.axes.items() if len(v) > 1]
    pick = (multi + [k for k in names if k not in multi])[:2]
    return pick if len(pick) == 2 else None


def _announce(args, num: int) -> None:
    """Print the cell count; refuse a grid whose dataset cannot fit, before the cells are checked."""
    import tomllib

    from .._run._memory import check_memory
    from ..sweep import MAX_CELLS
    from ..sweep._plan import CHECK_S_PER_CELL, grid_estimate

    print(f"sweep {args.config}: {num} cells", flush=True)
    if num > (args.max_cells or MAX_CELLS):
        return  # the loader refuses it with the --max-cells fix
    est = grid_estimate(tomllib.loads(args.config.read_text()), num)
    if est is not None:
        check_memory(
            est,
            what=f"a grid of {num} cells",
            fix="shorten the [axes], or lower layers, batch or the metrics.",
        )
    if num * CHECK_S_PER_CELL > 10:
        print(
            f"sweep {args.config}: checking the {num} cells takes about {num * CHECK_S_PER_CELL / 60:.0f} "
            "min "
            f"(~{CHECK_S_PER_CELL * 1e3:.2f} ms per cell) before the first chunk starts",
            flush=True,
        )


def run(args) -> int:
    import json

    from ..sweep import MAX_CELLS, load_sweep_config, run_sweep, sweep_plan
    from ._phase import begin_compute

    if args.max_cells is not None and args.max_cells < 1:
        raise UsageError(f"--max-cells must be a positive integer, got {args.max_cells}.")
    announce = lambda num: _announce(args, num)  # noqa: E731
    cfg = load_sweep_config(args.config, max_cells=args.max_cells or MAX_CELLS, announce=announce)
    check_out_dir(args.out)
    plot_axes = list(args.plot_axes) if args.plot_axes else _default_plot_axes(cfg)
    if args.plot_axes:  # reject before any compute
        for a in plot_axes:
            if a not in cfg.axes:
                raise UsageError(
                    f"--plot-axes {a!r} is not an axis of the sweep; axes: {', '.join(cfg.axes)}."
                )
        if plot_axes[0] == plot_axes[1]:
            raise UsageError(f"--plot-axes needs two different axes, got {plot_axes[0]!r} twice.")
    plan = sweep_plan(cfg)
    print(
        f"sweep {cfg.name!r}: {cfg.num_cells} cells {dict(zip(cfg.axes, cfg.shape))}, "
        f"{len(plan.groups)} compiled group(s), {len(plan.chunks)} chunk(s) -> {args.out}",
        flush=True,
    )
    begin_compute()  # run_sweep's own checks (folder, memory) raise UsageError
    # Ctrl-C: rankdyn.cli prints how many chunks are saved (atomic writes) and the --resume command.
    ds = run_sweep(cfg, args.out, resume=args.resume, progress=not args.no_progress)
    timing = json.loads((args.out / "timing.json").read_text())
    print(
        f"wrote {args.out / 'sweep.nc'}: {len(ds.data_vars)} variables; computed {timing['chunks_computed']} "
        f"chunk(s) in {timing['total_s']:.1f}s (compile {timing['compile_s']:.1f}s)"
    )
    if not args.no_plots:
        for name in _plots(ds, args.out, plot_axes):
            print(f"wrote {name}")
    return 0


def _plots(ds, out: Path, plot_axes) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from .._run._io import savefig
    from ..plotting import plot_sweep_mu, plot_sweep_rank, plot_sweep_rate

    written = []
    figs = [("mu_curves.png", lambda: plot_sweep_mu(ds))]
    if plot_axes is not None:
        figs.append(("rate_heatmap.png", lambda: plot_sweep_rate(ds, plot_axes[0], plot_axes[1])))
    if "final_num_rank" in ds:
        figs.append(("final_rank.png", lambda: plot_sweep_rank(ds)))
    for name, make in figs:
        fig = make()
        savefig(fig, out / name, dpi=110)
        plt.close(fig)
        written.append(out / name)
    return written
