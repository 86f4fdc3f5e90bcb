"""Figures of the simulation targets of ``rankdyn reproduce`` (Theorems 1-2, Fig. 2/3/4/6/7).

Every function takes plain results (layer indices, ``{"mean": ..., "std": ...}`` bands) and
returns a matplotlib ``Figure`` or draws into a given ``ax``; none calls ``plt.show()``.
"""

from __future__ import annotations

import math

import numpy as np

from ._collapse import plot_metric_band


def plot_band_panels(layers, panels: dict, *, ncols: int = 2, loglog: bool = True, suptitle: str | None = None,
                     ylabels: dict | None = None, panel_size=(4.2, 3.2), xmax=None):
    """A grid of panels; each panel draws several mean +- std curves against depth.

    Arguments:
        layers: saved layer indices (shared by every curve).
        panels: ``{panel title: {curve label: {"mean": (S,), "std": (S,)}}}``.
        ncols: panels per row.
        loglog: log-log axes (layer 0 drawn at 0.5); else linear x, log y.
        ylabels: optional ``{panel title: y label}``.
        xmax: optional last layer to show (e.g. 12 for a 12-layer view of a 128-layer run).

    Returns:
        The ``Figure``.
    """
    import matplotlib.pyplot as plt

    k = len(panels)
    ncols = max(1, min(ncols, k))
    nrows = math.ceil(k / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(panel_size[0] * ncols, panel_size[1] * nrows), squeeze=False)
    t = np.asarray(layers)
    sel = slice(None) if xmax is None else t <= xmax
    for ax, (title, curves) in zip(axes.ravel(), panels.items()):
        for label, b in curves.items():
            mean = np.asarray(b["mean"], dtype=float)[sel]
            std = None if b.get("std") is None else np.asarray(b["std"], dtype=float)[sel]
            plot_metric_band(t[sel], mean, std, ax=ax, label=label, loglog=loglog)
            if not loglog:
                ax.set_yscale("log")
        ax.set_title(title, fontsize=9)
        if ylabels and title in ylabels:
            ax.set_ylabel(ylabels[title])
        ax.legend(fontsize=7)
    for ax in axes.ravel()[k:]:
        ax.set_visible(False)
    if suptitle:
        fig.suptitle(suptitle, fontsize=10)
    fig.tight_layout()
    return fig


def plot_rate_vs_dqk(dqks, rates: dict, *, ax=None, marks=None):
    """Early-layer per-layer collapse factor against the temperature d_QK (log x), one curve per mask.

    Arguments:
        dqks: the swept temperatures.
        rates: ``{mask label: (len(dqks),) per-layer factors}``.
        marks: optional temperatures to mark with vertical lines (e.g. 1/64, 1, 64).
    """
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(5, 3.5))
    x = np.asarray(dqks, dtype=float)
    for label, r in rates.items():
        ax.plot(x, np.asarray(r, dtype=float), marker="o", ms=3, label=label)
    for m in marks or ():
        ax.axvline(m, color="0.8", lw=0.8, zorder=0)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("d_QK (temperature sqrt(d_QK))")
    ax.set_ylabel("early per-layer factor of mu")
    ax.legend(fontsize=7)
    return ax


def plot_rates_vs_bounds(labels, fitted, bounds, *, ax=None, title=None):
    """Fitted per-layer collapse factors next to the theorem's bound, one pair of bars per case."""
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(max(4, 0.8 * len(labels) + 1), 3.5))
    x = np.arange(len(labels))
    ax.bar(x - 0.2, np.asarray(fitted, dtype=float), width=0.4, label="fitted rate")
    ax.bar(x + 0.2, np.asarray(bounds, dtype=float), width=0.4, label="bound with measured eps")
    ax.set_xticks(x)
    ax.set_xticklabels(labels, rotation=30, ha="right", fontsize=7)
    ax.set_ylabel("per-layer factor of mu")
    ax.set_ylim(0, 1.05)
    if title:
        ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7)
    return ax


def save_figure(fig, path) -> str:
    """Save ``fig`` as PNG (dpi 110), close it, and return the file name."""
    from pathlib import Path

    import matplotlib.pyplot as plt

    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return str(getattr(path, "name", path))
