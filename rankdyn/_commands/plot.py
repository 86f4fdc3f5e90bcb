"""``rankdyn plot``: overlay one metric of saved ``rankdyn simulate`` runs in one figure.

Each run is labelled by the settings that differ between the runs (``mask=causal dqk=4``), read
from the config saved in its ``metrics.json``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from .._errors import UsageError
from .._run._result_files import verified_result_file
from ._checks import HelpFormatter

#: Saved config keys that say how a run was made or stored, not which model it ran: never labels.
_NOT_LABELS = frozenset(
    {"command", "out", "no_progress", "devices", "num_devices", "metrics", "plot", "per_trajectory", "chunk"}
)


def add_parser(sub) -> None:
    p = sub.add_parser(
        "plot",
        help="overlay one metric of saved simulate runs",
        description="Overlay one metric of saved `rankdyn simulate` runs (DIR/metrics.json), mean +- std "
        "against depth, semi-log y (log-log with --logx), each run labelled by the settings that differ "
        "between the runs.",
        formatter_class=HelpFormatter,
    )
    p.add_argument("dirs", nargs="+", type=Path, metavar="DIR", help="output folders of rankdyn simulate")
    p.add_argument(
        "--metric", default="mu", help="the metric to overlay (one name of the runs' metrics.json)"
    )
    p.add_argument("--logx", action="store_true", help="log depth axis too (log-log; layer 0 drawn at 0.5)")
    p.add_argument("--out", type=Path, default=None, help="PNG to write (default: <metric>_overlay.png here)")
    p.set_defaults(func=run)


def load_runs(dirs, metric: str) -> list[dict]:
    """The ``metrics.json`` of each folder; raises `UsageError` naming the folder or the metric."""
    runs = []
    for d in dirs:
        if Path(d).is_symlink() and not Path(d).exists():  # a loop or a dangling link, not a missing name
            raise UsageError(f"DIR {d}: a symbolic link that leads nowhere (a loop or a missing target).")
        if not Path(d).is_dir():
            raise UsageError(f"DIR {d}: no such folder; give output folders of `rankdyn simulate --out DIR`.")
        path = verified_result_file(d, "metrics.json")  # only what the result manifest lists
        if not path.is_file():
            raise UsageError(
                f"DIR {d}: no metrics.json; give a folder written by `rankdyn simulate --out DIR`."
            )
        try:
            run = json.loads(path.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            raise UsageError(
                f"DIR {d}: metrics.json is not valid JSON ({err}); re-run rankdyn simulate."
            ) from None
        if not isinstance(run, dict) or not isinstance(run.get("metrics"), dict) or "layers" not in run:
            raise UsageError(f"DIR {d}: metrics.json has no per-layer metrics; is it from rankdyn simulate?")
        if metric not in run["metrics"]:
            have = ", ".join(run["metrics"]) or "none"
            raise UsageError(
                f"--metric {metric}: not recorded in {path} (it has: {have}); choose one of those, or re-run "
                f"rankdyn simulate with --metrics {metric}."
            )
        entry = run["metrics"][metric]
        if not isinstance(entry, dict) or not isinstance(entry.get("mean"), list):
            raise UsageError(
                f"--metric {metric}: {path} holds no per-layer mean for it (expected an object with a "
                "'mean' list, one value a saved layer); choose a per-layer metric."
            )
        runs.append(run)
    return runs


def check_has_values(runs, dirs, metric: str) -> None:
    """Refuse a run with no value to draw: zero saved rows (layers), or every value null (NaN in the
    JSON). The figure would be empty and the command would still say "wrote"."""
    import math

    for run, d in zip(runs, dirs, strict=True):
        mean = run["metrics"][metric]["mean"]
        finite = [v for v in mean if isinstance(v, (int, float)) and math.isfinite(v)]
        if not finite:
            fix = (
                "re-run rankdyn simulate with --num-layers of at least 1"
                if not mean
                else "choose another --metric"
            )
            what = "zero rows (no saved layer)" if not mean else f"no finite value in its {len(mean)} rows"
            raise UsageError(
                f"DIR {d}: --metric {metric} has {what}, so there is nothing to plot; drop this folder, "
                f"or {fix}."
            )


def check_figure_path(out: Path) -> None:
    """``--out`` is a PNG path that can be written: not a folder, not under a file."""
    if out.suffix.lower() != ".png":
        raise UsageError(f"--out {out}: the figure is written as PNG; give a file name ending in .png.")
    if out.is_dir():
        raise UsageError(f"--out {out} is a folder; give a file name ending in .png.")
    parent = out.absolute().parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir():
        raise UsageError(f"--out {out}: {parent} is a file, so the figure cannot be written there.")


def dropped_from_log_axis(runs, metric: str) -> int:
    """How many per-layer means are <= 0: a log axis cannot show them (they are left out)."""
    return sum(1 for run in runs for v in run["metrics"][metric]["mean"] if v is not None and v <= 0)


def run_labels(runs, dirs) -> list[str]:
    """``key=value`` for every saved config key whose value differs between runs (folder names when
    none does, or when two runs would get the same label)."""
    configs = [run.get("config", {}) for run in runs]
    keys = [k for k in dict.fromkeys(k for c in configs for k in c) if k not in _NOT_LABELS]  # flag order
    differ = [k for k in keys if len({json.dumps(c.get(k), sort_keys=True) for c in configs}) > 1]
    labels = [" ".join(f"{k}={c.get(k)}" for k in differ) for c in configs]
    if not differ or len(set(labels)) < len(labels):
        names = [Path(d).name or str(d) for d in dirs]
        labels = [f"{n} {lab}".strip() for n, lab in zip(names, labels, strict=True)]
    return labels


def run(args: argparse.Namespace) -> int:
    out = args.out or Path(f"{args.metric}_overlay.png")
    check_figure_path(out)
    runs = load_runs(args.dirs, args.metric)
    check_has_values(runs, args.dirs, args.metric)
    labels = run_labels(runs, args.dirs)

    import matplotlib

    matplotlib.use("Agg")
    from ..plotting import plot_runs, save_figure

    ax = plot_runs(
        runs, args.metric, labels, logx=args.logx, title=f"{args.metric}: {len(runs)} runs overlaid"
    )
    save_figure(ax.figure, out)
    print(f"wrote {out} ({len(runs)} runs: {'; '.join(labels)})")
    from .._plotting._runs import LINEAR_METRICS

    if args.metric not in LINEAR_METRICS and (dropped := dropped_from_log_axis(runs, args.metric)):
        print(
            f"note: {dropped} non-positive value(s) of {args.metric} are not drawn on the log axis.",
            file=sys.stderr,
        )
    return 0
