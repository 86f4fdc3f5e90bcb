"""Collapse curves: a metric against depth with a mean +- std band, log-log by default."""

from __future__ import annotations

import numpy as np


def plot_metric_band(layers, mean, std=None, *, ax=None, label=None, loglog=True, color=None):
    """Plot ``mean`` against ``layers`` with a shaded ``mean +- std`` band.

    On log axes layer 0 is drawn at 0.5 (log of 0 is undefined) and the band's lower edge is
    clipped to a positive value, so a std larger than the mean does not break the plot.

    Returns:
        The matplotlib ``Axes``.
    """
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(5, 3.5))
    t = np.asarray(layers, dtype=float)
    m = np.asarray(mean, dtype=float)
    if loglog:
        t = np.where(t == 0, 0.5, t)
    (line,) = ax.plot(t, m, label=label, color=color)
    if std is not None:
        s = np.asarray(std, dtype=float)
        lo = m - s
        if loglog:
            lo = np.where(lo > 0, lo, m / 10)
        ax.fill_between(t, lo, m + s, color=line.get_color(), alpha=0.2, linewidth=0)
    if loglog:
        ax.set_xscale("log")
        ax.set_yscale("log")
    ax.set_xlabel("layer t" + (" (layer 0 drawn at 0.5)" if loglog else ""))
    return ax
