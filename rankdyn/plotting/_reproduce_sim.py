"""Figures of the simulation targets of ``rankdyn reproduce`` (Theorems 1-2, Fig. 2/3/4/6/7).

Every function takes plain results (layer indices, ``{"mean": ..., "std": ...}`` bands) and
returns a matplotlib ``Figure`` or draws into a given ``ax``; none calls ``plt.show()``. The
shared rules (semi-log y, y labels, shared limits, legends outside, round-off band) live in
`rankdyn.plotting._style`.
"""

from __future__ import annotations

import numpy as np

from ._collapse import plot_metric_band
from ._style import floor_band, legend_outside, panel_grid, round_off_floor, share_ylim, tidy_log_ticks

MU_LABEL = "mu (eq. 4), mean +- std"


def plot_band_panels(
    layers,
    panels: dict,
    *,
    ncols: int = 2,
    loglog: bool = False,
    suptitle: str | None = None,
    ylabel: str = MU_LABEL,
    ylabels: dict | None = None,
    panel_size=(3.6, 2.8),
    xmax=None,
    sharey: bool | str = True,
    dtype=None,
    floor_panels=None,
    linear_y=(),
    legend_title: str | None = None,
):
    r"""A grid of panels; each panel draws several mean +- std curves against depth.

    Semi-log y (a geometric rate is a straight line); every panel carries a y label; compared
    panels share one y range; one legend for the whole figure sits right of the panels. With
    ``dtype`` the round-off floor of that dtype is shaded (scale: the largest layer-0 value in
    the panel), so a float32 plateau near $10^{-7}\,\mu(X^{(0)})$ reads as collapse.

    Arguments:
        layers: saved layer indices (shared by every curve).
        panels: ``{panel title: {curve label: {"mean": (S,), "std": (S,)}}}``; a curve may
            also carry ``"color"`` and ``"linestyle"``. Without a colour, a label keeps one colour
            in every panel.
        ncols: panels per row (a last row is shortened, never left with an empty slot).
        loglog: the paper's log-log axes instead of semi-log y.
        ylabel: y label of every panel, unless ``ylabels`` names the panel.
        ylabels: optional ``{panel title: y label}`` for panels of other quantities.
        xmax: optional last layer to show (e.g. 12 for a 12-layer view of a 128-layer run).
        sharey: one y range for all panels; ``"row"``: one per row of panels (e.g. a row per
            quantity); False when every panel shows a different quantity.
        dtype: the dtype the run computed in; draws the round-off band (None: no band).
        floor_panels: titles of the panels that get the band (default: all; leave out panels of
            quantities that do not collapse to 0, such as row norms).
        linear_y: titles of panels drawn on a linear y axis (bounded quantities: ranks, cosines).

    Returns:
        The ``Figure``.
    """
    fig, axes = panel_grid(len(panels), ncols, panel_size, sharey=False)
    t = np.asarray(layers)
    sel = slice(None) if xmax is None else t <= xmax
    scales = {}
    palette = {}  # one colour per curve label across panels
    for curves in panels.values():
        for label in curves:
            palette.setdefault(label, f"C{len(palette) % 10}")
    for ax, (title, curves) in zip(axes, panels.items()):
        first = []
        for b in curves.values():
            ok = np.asarray(b["mean"], dtype=float)[sel]
            ok = ok[np.isfinite(ok) & (ok > 0)]
            if ok.size:
                first.append(ok[0])
        scales[title] = max(first) if first else 1.0
        banded = (
            dtype is not None and (floor_panels is None or title in floor_panels) and title not in linear_y
        )
        floor = round_off_floor(dtype, scales[title]) if banded else None
        for label, b in curves.items():
            mean = np.asarray(b["mean"], dtype=float)[sel]
            std = None if b.get("std") is None else np.asarray(b["std"], dtype=float)[sel]
            if floor is not None and (below := np.nonzero(mean <= floor)[0]).size:
                # Inside the round-off band the curve is float noise (spikes of one sample's
                # rounding, e.g. near layer 350 of a long float32 run): drawn thin and faint, no
                # band, so it reads as "collapsed to the floor", not as a feature.
                cut = below[0] + 1
                ax.plot(
                    t[sel][cut - 1 :],
                    mean[cut - 1 :],
                    color=b.get("color", palette[label]),
                    ls=b.get("linestyle"),
                    lw=0.6,
                    alpha=0.45,
                )
                mean, std = mean.copy(), None if std is None else std.copy()
                mean[cut:] = np.nan
                if std is not None:
                    std[cut:] = np.nan
            plot_metric_band(
                t[sel],
                mean,
                std,
                ax=ax,
                label=label,
                loglog=loglog,
                log_y=title not in linear_y,
                color=b.get("color", palette[label]),
                linestyle=b.get("linestyle"),
            )
        ax.set_title(title, fontsize=9)
        ax.set_ylabel((ylabels or {}).get(title, ylabel), fontsize=8)
    if sharey == "row":
        for row in range(0, len(axes), max(1, min(ncols, len(axes)))):
            share_ylim(axes[row : row + ncols])
    elif sharey:
        share_ylim(axes)
    if dtype is not None:
        for ax, title in zip(axes, panels):
            if (floor_panels is None or title in floor_panels) and title not in linear_y:
                floor_band(ax, dtype, scales[title])
    legend_outside(fig, title=legend_title)
    if suptitle:
        fig.suptitle(suptitle, fontsize=10)
    return fig


def plot_rate_vs_dqk(dqks, rates: dict, *, ax=None, marks=None):
    r"""Early-layer decay per layer, $1 - \rho$, against the temperature d_QK, one curve per mask.

    Both axes are logarithmic: $1 - \rho$ spans decades (about 1 for the complete mask at low
    temperature, $10^{-2}$ for a window), which a linear axis of $\rho$ near 1 would hide.

    Arguments:
        dqks: the swept temperatures.
        rates: ``{mask label: (len(dqks),) per-layer factors rho}``.
        marks: optional temperatures to mark with vertical lines (e.g. 1/64, 1, 64).
    """
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(6, 3.5), layout="constrained")
    x = np.asarray(dqks, dtype=float)
    for label, r in rates.items():
        decay = 1.0 - np.asarray(r, dtype=float)
        ax.plot(x, np.where(decay > 0, decay, np.nan), marker="o", ms=3, label=label)
    for m in marks or ():
        ax.axvline(m, color="0.8", lw=0.8, zorder=0)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("d_QK (scores divided by sqrt(d_QK))")
    ax.set_ylabel("1 - per-layer factor of mu")
    legend_outside(ax)
    return ax


def plot_rates_vs_bounds(labels, fitted, bounds, *, ax=None, title=None):
    r"""Decay per layer, $1 - \rho$, fitted against the theorem's guarantee $1 - \bar\rho$.

    The theorems say $\rho \le \bar\rho$, i.e. the fitted point lies on or above the bound's
    marker. Both on a log axis: the bounds $\bar\rho = (1-\epsilon^r)^{1/r}$ sit within
    $10^{-3}$ to $10^{-60}$ of 1, which bars on a linear axis draw as identical bars at 1. A bound
    that equals 1 in double precision ($1 - \bar\rho < 10^{-16}$) is drawn as a triangle on the
    bottom edge; a fitted factor $\ge 1$ (no decay) as a cross on the bottom edge.

    Arguments:
        labels: one name per case.
        fitted: fitted per-layer factors $\rho$ (NaN: no fit).
        bounds: the bound $\bar\rho$ with the measured $\epsilon$.
        ax: axes to draw into (a new figure when None).

    Returns:
        The ``Axes``.
    """
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(max(5.0, 0.7 * len(labels) + 3), 3.6), layout="constrained")
    x = np.arange(len(labels))
    fit_gap = 1.0 - np.asarray(fitted, dtype=float)
    bound_gap = 1.0 - np.asarray(bounds, dtype=float)
    resolved = bound_gap > 1e-16
    ok_fit = np.isfinite(fit_gap) & (fit_gap > 0)
    ax.plot(x[ok_fit], fit_gap[ok_fit], "o", color="tab:blue", ms=6, label="1 - fitted factor")
    ax.plot(
        x[resolved],
        bound_gap[resolved],
        "_",
        color="tab:orange",
        ms=18,
        mew=2.5,
        label="1 - bound (measured eps): fitted must lie above",
    )
    for i in x[ok_fit & resolved]:
        ax.plot([i, i], [bound_gap[i], fit_gap[i]], color="0.7", lw=0.8, zorder=0)
    ax.set_yscale("log")
    lo = ax.get_ylim()[0]
    if (~resolved).any():
        ax.plot(
            x[~resolved],
            np.full((~resolved).sum(), lo),
            "v",
            color="tab:orange",
            ms=7,
            clip_on=False,
            label="1 - bound < 1e-16 (bound = 1 in double precision)",
        )
    bad = np.isfinite(fit_gap) & (fit_gap <= 0)
    if bad.any():
        ax.plot(
            x[bad],
            np.full(bad.sum(), lo),
            "x",
            color="tab:red",
            ms=7,
            clip_on=False,
            label="fitted factor >= 1 (no decay)",
        )
    ax.set_ylim(bottom=lo)
    ax.set_xticks(x)
    ax.set_xticklabels(labels, rotation=30, ha="right", fontsize=7)
    ax.set_ylabel("1 - per-layer factor of mu")
    if title:
        ax.set_title(title, fontsize=9)
    legend_outside(ax, below=True)
    return ax


def save_figure(fig, path) -> str:
    """Save ``fig`` as PNG (dpi 110), close it, and return the file name.

    Figures made with ``layout="constrained"`` keep their layout; others get ``tight_layout``.
    An outside legend is included in the saved area (``bbox_inches="tight"``).
    """
    from pathlib import Path

    import matplotlib.pyplot as plt

    from .._run._io import savefig

    tidy_log_ticks(fig)
    savefig(fig, Path(path), dpi=110, bbox_inches="tight")  # atomic: no half-written PNG
    plt.close(fig)
    return str(getattr(path, "name", path))
