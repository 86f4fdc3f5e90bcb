"""Saved ``rankdyn simulate`` runs as figures: one metric per figure, or several runs overlaid."""

from __future__ import annotations

from ._collapse import plot_metric_band
from ._style import legend_outside

#: Metrics drawn on a linear y axis: bounded (cosines, ranks) or signed (``min_cos``).
LINEAR_METRICS = ("min_cos", "mean_abs_cos", "stable_rank", "num_rank", "eff_rank")
#: Legend labels longer than this (characters) go under the overlay, not right of it.
LONG_LABEL = 24


def save_metric_figure(layers, mean, std, name: str, path, *, title: str = "", dtype=None) -> str:
    r"""One metric of one run against depth, mean $\pm$ std, saved as PNG.

    Semi-log y (a geometric decay $C\rho^t$ is a straight line), linear for `LINEAR_METRICS`.

    Arguments:
        layers, mean, std: the run's saved layers and the metric's ensemble mean and std.
        name: the metric's name (y label and scale).
        path: the PNG to write.
        title: the run's setting, one line.
        dtype: the run's float dtype, to shade its round-off floor.

    Returns:
        The file name written.
    """
    import matplotlib.pyplot as plt

    from ._reproduce_sim import save_figure

    fig, ax = plt.subplots(figsize=(5.5, 4), layout="constrained")
    log_y = name not in LINEAR_METRICS
    plot_metric_band(
        layers, mean, std, ax=ax, label=name, ylabel=f"{name} (mean +- std)", dtype=dtype, log_y=log_y
    )
    ax.set_title(title, fontsize=9)
    return save_figure(fig, path)


def save_mu_figure(layers, mu: tuple, rel: tuple, path, *, title: str = "", dtype=None) -> str:
    r"""mu and the scale-free $\mu/\|X\|_F$ of one run side by side, saved as PNG.

    mu (eq. 4) grows with the tokens' norm: a trained model's pre-norm residual stream grows from
    about 20 to 23,000 along depth, so mu rises while the tokens align; the right panel tells the
    two apart (1 for zero-mean tokens, 0 at collapse).

    Arguments:
        layers: the run's saved layers.
        mu, rel: ``(mean, std)`` of ``mu`` and of ``mu_rel``.
        path: the PNG to write.
        title: the run's setting (model, text), one or two lines.
        dtype: the run's float dtype, to shade its round-off floor.

    Returns:
        The file name written.
    """
    import matplotlib.pyplot as plt

    from ._reproduce_sim import save_figure

    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 4), layout="constrained")
    plot_metric_band(layers, *mu, ax=a, label="mu", ylabel="mu (eq. 4), mean +- std", dtype=dtype)
    a.set_title("mu: not scale-free (it carries the tokens' norm)", fontsize=9)
    plot_metric_band(layers, *rel, ax=b, label="mu_rel", ylabel="mu / ||X||_F, mean +- std", dtype=dtype)
    b.set_title("mu / ||X||_F: scale-free (0 at collapse)", fontsize=9)
    fig.suptitle(title, fontsize=9)
    return save_figure(fig, path)


def plot_runs(runs, metric: str, labels, *, logx: bool = False, ax=None, title: str | None = None):
    r"""Overlay one metric of several saved runs: mean $\pm$ std against depth, one curve per run.

    On a log axis the round-off floor of the coarsest dtype among the runs (float32 unless every
    run was ``--x64``) is shaded, at the largest first value of the curves, as the single-run
    figure does: a curve flat there is round-off, not a plateau.

    Arguments:
        runs: ``metrics.json`` contents (dicts with ``layers`` and ``metrics[metric]``).
        metric: the metric to draw.
        labels: one legend label per run.
        logx: log-log axes (layer 0 drawn at 0.5) instead of semi-log y.
        ax: axes to draw into (a new figure when None).
        title: the axes' title (what is compared).

    Returns:
        The matplotlib ``Axes``.
    """
    import matplotlib.pyplot as plt
    import numpy as np

    from ._style import floor_band

    if ax is None:
        _, ax = plt.subplots(figsize=(6.5, 4), layout="constrained")
    log_y = metric not in LINEAR_METRICS
    styles = ("-", "--", "-.", ":")
    for i, (run, label) in enumerate(zip(runs, labels, strict=True)):
        stats = run["metrics"][metric]
        plot_metric_band(
            run["layers"],
            stats["mean"],
            stats.get("std"),
            ax=ax,
            label=label,
            loglog=logx,
            log_y=log_y,
            ylabel=f"{metric} (mean +- std)",
            linestyle=styles[i // 10 % len(styles)],  # colours repeat after 10 runs; styles tell them apart
        )
    if log_y:
        x64 = all(bool(run.get("config", {}).get("x64")) for run in runs)
        firsts = [np.asarray(run["metrics"][metric]["mean"], float) for run in runs]
        firsts = [m[np.isfinite(m) & (m > 0)][:1] for m in firsts]
        scale = max((float(f[0]) for f in firsts if f.size), default=1.0)
        floor_band(ax, np.float64 if x64 else np.float32, scale)
    if title:
        ax.set_title(title, fontsize=9)
    if max(map(len, labels), default=0) > LONG_LABEL and ax.figure.get_layout_engine() is not None:
        # Right of the axes, labels such as "mask=window-uni dqk=64.0 norm=pre placement=..." take
        # two thirds of the width: under the figure, one per line, the axes keep the width.
        ax.figure.legend(loc="outside lower center", ncols=1, fontsize=7, frameon=False)
    else:
        legend_outside(ax)
    return ax
