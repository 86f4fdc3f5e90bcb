"""``rankdyn sweep``: a TOML-described parameter grid -> DIR/sweep.nc (xarray/netCDF) + summary PNGs.

See docs/sweep.md for the config format, the dataset layout and the resume semantics.
"""

from __future__ import annotations

import re
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
    # argparse takes "-1/2" for a flag ("--task: expected one argument"); a value shaped like a
    # negative number or a negative I/N is an argument here, so that --task -1/2 gets parse_task's
    # message (the task index must be in 0..N-1). No flag of sweep looks like a negative number.
    p._negative_number_matcher = re.compile(r"^-\d+(/-?\d+)?$|^-\d*\.\d+$")
    p.add_argument(
        "config",
        type=Path,
        nargs="?",
        help="sweep description (TOML: [axes], [fixed], [observe], [run]); not with --assemble",
    )
    p.add_argument(
        "--out", type=Path, default=None, help="output folder (new, or this sweep's with --resume or --task)"
    )
    p.add_argument("--resume", action="store_true", help="compute only the chunks missing in --out")
    p.add_argument(
        "--task",
        default=None,
        metavar="I/N",
        help="compute task I's share of the chunks (chunk i where i %% N == I, I in 0..N-1) into the "
        "shared --out; joins a folder holding this sweep, resumes the task's own chunks, and the last "
        "task to finish writes sweep.nc. Default: in a SLURM job array, I = SLURM_ARRAY_TASK_ID - "
        "SLURM_ARRAY_TASK_MIN and N = SLURM_ARRAY_TASK_COUNT; elsewhere the whole sweep",
    )
    p.add_argument(
        "--assemble",
        type=Path,
        default=None,
        metavar="DIR",
        help="write DIR/sweep.nc (and the plots) from the chunk files of a sweep folder, reading the "
        "spec from DIR; refused, naming the missing chunks and their tasks, if any is missing",
    )
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
        p, "Whole chunks run side by side, one per device (never split: the same numbers on any count)."
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
    from .._sweep._plan import CHECK_S_PER_CELL, grid_estimate
    from .._sweep._schema import MAX_CELLS

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


def _task(args):
    """The task from --task, else from a SLURM job array's variables (said on stdout), else None."""
    from .._sweep._tasks import parse_task, task_from_env

    if args.task is not None:
        return parse_task(args.task)
    share, said = task_from_env()
    if share is not None:
        print(f"sweep: {said}; pass --task I/N to override", flush=True)
    return share


def _check_assemble_flags(args) -> None:
    """--assemble reads everything from DIR: a flag that would be ignored is refused."""
    given = [
        (args.config is not None, f"CONFIG ({args.config})"),
        (args.out is not None, "--out"),
        (args.resume, "--resume"),
        (args.task is not None, "--task"),
        (args.max_cells is not None, "--max-cells"),
        (args.x64, "--x64"),
        (args.devices is not None, "--devices"),
    ]
    for present, what in given:
        if present:
            raise UsageError(
                f"--assemble DIR reads the spec, dtype and chunks from DIR and computes nothing: drop {what}."
            )


def _assemble(args) -> int:
    _check_assemble_flags(args)
    if args.assemble.exists() and not args.assemble.is_dir():
        raise UsageError(
            f"--assemble {args.assemble} is a file, not a sweep folder; give the --out folder of a sweep "
            "(it holds manifest.json, config.toml and chunks/)."
        )
    check_out_dir(args.assemble, "--assemble")
    from .._sweep._store import assemble_folder, read_sweep_folder

    # --plot-axes against the folder's own axes before any chunk is read (and before JAX loads).
    plot_axes = _plot_axes(args, read_sweep_folder(args.assemble)[0])
    cfg, ds = assemble_folder(
        args.assemble, command=f"rankdyn sweep {args.assemble / 'config.toml'} --out {args.assemble}"
    )
    print(f"wrote {args.assemble / 'sweep.nc'}: {len(ds.data_vars)} variables from {cfg.num_cells} cells")
    if not args.no_plots:
        for name in _plots(ds, args.assemble, plot_axes):
            print(f"wrote {name}")
    return 0


def _plot_axes(args, cfg):
    """The --plot-axes (checked against the sweep's axes, before any compute) or the default pair."""
    if not args.plot_axes:
        return _default_plot_axes(cfg)
    _check_plot_axes(args, list(cfg.axes))
    return list(args.plot_axes)


def _check_plot_axes(args, axes: list[str]) -> None:
    """--plot-axes names two different axes of ``axes``; UsageError otherwise."""
    for a in args.plot_axes:
        if a not in axes:
            raise UsageError(f"--plot-axes {a!r} is not an axis of the sweep; axes: {', '.join(axes)}.")
    if args.plot_axes[0] == args.plot_axes[1]:
        raise UsageError(f"--plot-axes needs two different axes, got {args.plot_axes[0]!r} twice.")


def _check_plot_axes_early(args) -> None:
    """--plot-axes against the config's [axes] names, read before the config is validated (its
    memory check loads JAX); a config that cannot be read is left to `load_sweep_config` to name."""
    import tomllib

    from .._sweep._params import KEY_ALIASES

    if not args.plot_axes:
        return
    try:
        axes = tomllib.loads(Path(args.config).read_text()).get("axes")
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return
    if isinstance(axes, dict):
        _check_plot_axes(args, [KEY_ALIASES.get(k, k) for k in axes])


def run(args) -> int:
    import json

    # The config is read and checked without JAX (`rankdyn._sweep._schema` imports none; the
    # public `rankdyn.sweep` does); sweep_plan and run_sweep load it, after every refusal.
    from .._sweep._schema import MAX_CELLS, load_sweep_config

    if args.max_cells is not None and args.max_cells < 1:
        raise UsageError(f"--max-cells must be a positive integer, got {args.max_cells}.")
    if args.assemble is not None:
        return _assemble(args)
    if args.task is not None:  # a bad --task is named first, with or without the other flags
        from .._sweep._tasks import parse_task

        parse_task(args.task)
    if args.config is None or args.out is None:
        raise UsageError(
            "give the sweep's CONFIG.toml and --out DIR (or --assemble DIR to write a finished folder's "
            "dataset)."
        )
    task = args.task_share = _task(args)  # the interrupt message names the task (rankdyn.cli)
    if task is not None and args.resume:
        raise UsageError(
            f"--resume with {task.label}: a task always joins its folder and resumes its own chunks; "
            "drop --resume."
        )
    _check_plot_axes_early(args)
    announce = lambda num: _announce(args, num)  # noqa: E731
    cfg = load_sweep_config(args.config, max_cells=args.max_cells or MAX_CELLS, announce=announce)
    check_out_dir(args.out)
    plot_axes = _plot_axes(args, cfg)  # rejected before any compute
    from ..sweep import run_sweep, sweep_plan

    plan = sweep_plan(cfg)
    share = "" if task is None else f", {task.label}: {sum(map(task.owns, range(len(plan.chunks))))} of them"
    print(
        f"sweep {cfg.name!r}: {cfg.num_cells} cells {dict(zip(cfg.axes, cfg.shape))}, "
        f"{len(plan.groups)} compiled group(s), {len(plan.chunks)} chunk(s){share} -> {args.out}",
        flush=True,
    )
    # Ctrl-C: rankdyn.cli prints how many chunks are saved (atomic writes) and the --resume command.
    ds = run_sweep(cfg, args.out, resume=args.resume, progress=not args.no_progress, task=task)
    if task is None:
        timing = json.loads((args.out / "timing.json").read_text())
    else:
        timing = json.loads(
            (args.out / "tasks" / f"task_{task.index}_of_{task.count}.timing.json").read_text()
        )
    computed = (
        f"computed {timing['chunks_computed']} chunk(s) in {timing['total_s']:.1f}s (compile "
        f"{timing['compile_s']:.1f}s)"
    )
    if ds is None:
        print(
            f"sweep {task.label}: {computed}; its {timing['chunks_owned']} chunk(s) are in "
            f"{args.out / 'chunks'}; "
            "other tasks' chunks are still missing: the last task to finish writes sweep.nc (or run "
            f"rankdyn sweep --assemble {args.out} once they are done)"
        )
        return 0
    print(f"wrote {args.out / 'sweep.nc'}: {len(ds.data_vars)} variables; {computed}")
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
