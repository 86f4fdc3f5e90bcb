"""What ``rankdyn simulate`` shows: the metric names' help, its table and its figures.

The table and the figures follow ``--metrics`` (and ``--plot``): a user who asks for
``mu,sigma_ratio,eff_rank`` sees those three columns and gets ``mu.png``, ``sigma_ratio.png`` and
``eff_rank.png``.
"""

from __future__ import annotations

from .._errors import UsageError
from .._observe._names import ALL_METRICS
from ._checks import HelpFormatter

#: One line per metric name of `rankdyn._observe._metric_observer.ALL_METRICS`, for ``--help``
#: (docs/theory.md#metrics).
METRIC_HELP = {
    "mu": "||X - 1 mean(X)||_F, distance to the nearest all-equal token matrix (eq. 4)",
    "mu_rel": "mu / ||X||_F, scale-free (1 for zero-mean tokens, 0 when collapsed)",
    "mu_normalized": "mu of the tokens scaled to unit norm (direction only)",
    "row_norm_mean": "mean token norm",
    "row_norm_min": "smallest token norm",
    "min_cos": "smallest pairwise cosine of the tokens (Corollary 1 needs it >= 0 at layer 0)",
    "mean_abs_cos": "mean |cosine| over distinct token pairs (anisotropy)",
    "sigma_max": "largest singular value of X (SVD)",
    "sigma_min": "smallest singular value of X (SVD)",
    "sigma_ratio": "sigma_min / sigma_max (SVD)",
    "stable_rank": "||X||_F^2 / ||X||_2^2 (SVD)",
    "num_rank": "singular values above --rank-tol * sigma_max (SVD)",
    "eff_rank": "exp(entropy of the normalised singular values), Roy-Vetterli (SVD)",
    "eps_min": "smallest attention weight on the mask, Theorem 1's epsilon",
}
#: Columns of the table when every metric was recorded: the collapse measures, not all 14.
DEFAULT_COLUMNS = ("mu", "mu_normalized", "min_cos", "sigma_min", "num_rank", "eps_min")


def metrics_help() -> str:
    """The ``--metrics`` help: how to choose, then one line per name (`LineHelpFormatter` keeps them)."""
    width = max(map(len, METRIC_HELP))
    lines = "\n".join(f"  {k:<{width}}  {v}" for k, v in METRIC_HELP.items())
    return (
        "comma-separated metrics to record and show, or all (default: all; at --n >= "
        f"{LONG_CONTEXT_N} or with --checkpoint those without an SVD or (n, n) cosines: "
        f"{', '.join(LONG_CONTEXT_METRICS)}):\n{lines}"
    )


#: From this many tokens (and for every checkpoint run) the default ``--metrics`` leaves out the
#: metrics with an SVD or an (n, n) cosine reduction (benchmarks/metric_cost.py measures them).
LONG_CONTEXT_N = 1024
#: The default ``--metrics`` of long-context and checkpoint runs (issue 55's list).
LONG_CONTEXT_METRICS = ("mu", "mu_rel", "mu_normalized", "row_norm_mean", "row_norm_min", "eps_min")


def default_metrics(args, long: bool) -> str | None:
    """Fill in ``--metrics`` when it was not given: ``all``, or for a long run (``long``: n >=
    `LONG_CONTEXT_N` or a checkpoint) `LONG_CONTEXT_METRICS`. A given ``--metrics`` (``all``
    included) is the user's choice and is kept.

    Returns:
        For a long default, the line that says so and how to ask for all (the command prints it on
        stderr once every refusal has passed, before the compile); else None.
    """
    if args.metrics is not None:
        return None
    args.metrics = ",".join(LONG_CONTEXT_METRICS) if long else "all"
    if not long:
        return None
    return (
        f"--metrics: {args.metrics} (no SVD, no (n, n) cosines: the default at --n >= {LONG_CONTEXT_N} "
        "and with --checkpoint); give --metrics all for every metric"
    )


class LineHelpFormatter(HelpFormatter):
    """`HelpFormatter` that keeps the line breaks of a help text (each wrapped on its own), so a
    list such as the metric names prints one entry per line."""

    def _split_lines(self, text, width):
        import re
        import textwrap

        out = []
        for line in text.splitlines():
            # An indented "name  what" entry continues under "what"; a plain line as argparse does.
            entry = re.match(r"\s+\S+\s+", line) if line[:1] == " " else None
            out += textwrap.wrap(line, width, subsequent_indent=" " * (entry.end() if entry else 0)) or [""]
        return out


def table_columns(names: tuple[str, ...], asked: str) -> tuple[str, ...]:
    """The table's columns: the metrics asked for, in the order typed; the default set for ``all``.

    Arguments:
        names: the metrics recorded (the summary's keys).
        asked: the ``--metrics`` value.
    """
    if asked.strip() == "all":
        return tuple(c for c in DEFAULT_COLUMNS if c in names)
    typed = [k.strip() for k in asked.split(",") if k.strip() in names]
    return tuple(dict.fromkeys(typed))


def plot_names(spec: str | None, names: tuple[str, ...]) -> tuple[str, ...]:
    """The metrics that get a figure: ``--plot M,...`` (each must be recorded), else those asked for.

    With ``--metrics all`` (or the long runs' default) and no ``--plot`` only ``mu.png`` is drawn
    (14 figures nobody asked for would bury it). Raises `UsageError` naming ``--plot`` for a name
    not recorded.
    """
    if spec is None:  # the long runs' default list (`default_metrics`) draws mu only too
        return ("mu",) if set(names) in (set(ALL_METRICS), set(LONG_CONTEXT_METRICS)) else names
    chosen = tuple(k.strip() for k in spec.split(",") if k.strip())
    if not chosen:
        raise UsageError("--plot: empty list; give metric names, e.g. --plot mu,eff_rank, or drop --plot.")
    for k in chosen:
        if k not in ALL_METRICS:
            raise UsageError(f"--plot: unknown metric {k!r}; valid names: {', '.join(ALL_METRICS)}.")
        if k not in names:
            raise UsageError(
                f"--plot {k} is not recorded by --metrics; add {k} to --metrics or drop it from --plot."
            )
    return chosen


def save_figures(traj, summary, names, title: str, out, *, relative: bool = False) -> list[str]:
    """One ``<metric>.png`` per name (`rankdyn._plotting.save_metric_figure`); with ``relative``,
    ``mu.png`` also draws mu/||X||_F beside mu when it was recorded (a trained checkpoint's
    residual stream grows along depth, so mu alone mixes growth with alignment).

    Returns:
        the file names written, in order.
    """
    import matplotlib

    matplotlib.use("Agg")
    # The one module that draws them, not all of `rankdyn.plotting` (0.1-0.3 s more to import).
    from .._plotting._runs import save_metric_figure, save_mu_figure

    written = []
    for name in names:
        if name not in summary:
            continue
        dtype = traj.summary.mean[name].dtype
        if relative and name == "mu" and "mu_rel" in summary:
            pair = [(summary[k]["mean"], summary[k]["std"]) for k in ("mu", "mu_rel")]
            written.append(save_mu_figure(traj.layers, *pair, out / "mu.png", title=title, dtype=dtype))
            continue
        written.append(
            save_metric_figure(
                traj.layers,
                summary[name]["mean"],
                summary[name]["std"],
                name,
                out / f"{name}.png",
                title=title,
                dtype=dtype,
            )
        )
    return written


#: The most layer rows the table prints (about a screenful); beyond it, rows are elided and named.
SCREEN_ROWS = 40


def print_written(out, names) -> None:
    """``wrote OUT/a, b, c``: the files a command wrote, as flow, equilibria, sweep and plot say."""
    print(f"wrote {out}/{', '.join(names)}" if len(names) == 1 else f"wrote in {out}: {', '.join(names)}")


def shown_rows(num: int, must: tuple[int, ...] = (), limit: int = SCREEN_ROWS) -> list[int]:
    """The row indices the table prints: all of them up to ``limit``, else the first ``limit - 1``
    (where the collapse happens), the last, and the ``must`` rows (the first layer at the floor)."""
    if num <= limit:
        return list(range(num))
    return sorted(set(range(limit - 1)) | {num - 1} | set(must))


def elided_ranges(values, shown) -> str:
    """The layers not shown, as ranges (``1-4, 6``), or '' when every row is shown."""
    out, run = [], []
    for i, v in enumerate(values):
        if i in shown:
            out += [run] if run else []
            run = []
        else:
            run.append(int(v))
    out += [run] if run else []
    return ", ".join(f"{r[0]}" if len(r) == 1 else f"{r[0]}-{r[-1]}" for r in out)


def print_table(traj, summary, info, result, asked: str = "all") -> None:
    """The summary table of ``rankdyn simulate`` (and of a checkpoint run) on stdout.

    Every saved layer is a row up to `SCREEN_ROWS`; beyond that, the first rows, the last one and
    the first layer at the round-off floor are printed, and a line names the layers left out.
    """
    import numpy as np

    layers = np.asarray(traj.layers)
    cols = table_columns(tuple(summary), asked)
    print(
        f"graph: strongly_connected={info.strongly_connected} centers={info.num_centers} radius={info.radius}"
    )
    # A layer whose mu/||X||_F is below the dtype's round-off floor has collapsed as far as this
    # dtype can show: flag it, so a float32 plateau near 1e-7 is not read as "no collapse".
    from .._observe._tolerances import ROUND_OFF_EPS, round_off_floor

    dtype = np.asarray(traj.summary.count).dtype  # the run's float dtype
    floor = round_off_floor(dtype)
    rel = np.asarray(summary["mu_rel"]["mean"]) if "mu_rel" in summary else None
    first_floor = tuple(np.flatnonzero(rel <= floor)[:1].tolist()) if rel is not None else ()
    idx = shown_rows(len(layers), first_floor)
    print("layer " + " ".join(f"{c:>14}" for c in cols))
    flagged = False
    for i in idx:
        at_floor = rel is not None and rel[i] <= floor
        flagged |= at_floor
        print(
            f"{layers[i]:5d} "
            + " ".join(f"{summary[c]['mean'][i]:14.4e}" for c in cols)
            + ("  * at floor" if at_floor else "")
        )
    elided = elided_ranges(layers, set(idx))
    if elided:
        print(f"({len(layers) - len(idx)} saved layers not shown: {elided}; every layer is in metrics.json)")
    if flagged:
        print(
            f"* mu/||X||_F <= {floor:.1e} = {ROUND_OFF_EPS:g} eps({dtype.name}): round-off floor, collapsed "
            f"as far as {dtype.name} resolves{'' if dtype == np.float64 else '; --x64 resolves further'}."
        )
    f, t = result["flags"], result["timing"]
    print(
        f"flags: nonfinite={f['nonfinite']} degenerate_ln={f['degenerate_ln']} "
        f"underflow={f.get('underflow', 0)} "
        f"of {f['batch']}; "
        f"compile {t['compile_s']:.2f}s, run {t['run_s']:.2f}s"
    )


def save_sinks(layer, x0, num_layers: int, out, *, title: str = "", control=None) -> dict:
    """``--attention-sinks``: `rankdyn._run._sinks.attention_sinks` of the run's layer from its
    initial tokens, written to ``out/sinks.json`` and ``out/attention_sinks.png``, and summarised
    (`rankdyn._run._sinks.sink_summary`, under ``"summary"``: the command prints it). ``control``
    (a checkpoint's scale-matched random layers) is measured from the same tokens, recorded under
    ``"control"`` and drawn beside the run. Returns the summary recorded in ``metrics.json``."""
    import numpy as np

    from .._run._io import write_json
    from .._run._sinks import SINK_FACTOR, attention_sinks, sink_summary
    from ..plotting import plot_attention_sinks, save_figure

    s = attention_sinks(layer, x0, num_layers)
    c = None if control is None else attention_sinks(control, x0, num_layers)
    write_json(out / "sinks.json", s.to_dict() | ({} if c is None else {"control": c.to_dict()}))
    drawn = {"this run": s} | ({} if c is None else {"scale-matched control": c})
    save_figure(plot_attention_sinks(drawn, title=title), out / "attention_sinks.png")

    def median(x):
        r = x.sink_ratio[np.isfinite(x.sink_ratio)]
        return float(np.median(r)) if r.size else None

    return {
        "file": "sinks.json",
        "figure": "attention_sinks.png",
        "centers": list(s.centers),
        "uniform_first": s.uniform_first,
        "median_sink_ratio": median(s),
        "sink_layers": [int(i) + 1 for i in np.flatnonzero(s.sink_ratio >= SINK_FACTOR)],
        "control_median_sink_ratio": None if c is None else median(c),
        "cos_first_last": float(s.cos_first[-1]),
        "summary": sink_summary(s, c),
    }
