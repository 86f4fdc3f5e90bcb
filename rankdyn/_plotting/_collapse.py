"""Collapse curves: a metric against depth with a mean +- std band, semi-log y by default."""

from __future__ import annotations

import numpy as np

from ._style import depth_axis, floor_band


def plot_metric_band(
    layers,
    mean,
    std=None,
    *,
    ax=None,
    label=None,
    loglog=False,
    color=None,
    ylabel=None,
    dtype=None,
    floor_scale=None,
    log_y=True,
    linestyle=None,
    marker=None,
):
    r"""Plot ``mean`` against ``layers`` with a shaded ``mean +- std`` band.

    Semi-log y by default, so a geometric decay $\mu(X^{(t)}) \approx C\rho^t$ is a straight line;
    ``loglog=True`` gives the paper's log-log view (layer 0 drawn at 0.5, since log 0 is undefined).
    The band's lower edge is clipped to a positive value, so a std larger than the mean does not
    break the log axis.

    Arguments:
        layers: saved layer indices.
        mean, std: the curve and its spread (same length as ``layers``).
        ax: axes to draw into (a new figure when None).
        label, color, linestyle, marker: of the curve.
        log_y: log y axis (False for bounded quantities such as a rank or a cosine).
        ylabel: y-axis label (kept if None and the axes already has one).
        dtype: when given, shade the round-off floor of this dtype (`rankdyn._plotting.floor_band`)
            at ``floor_scale`` (default: the curve's first finite value). Draw it with the last
            curve of a panel, after the others.

    Returns:
        The matplotlib ``Axes``.
    """
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(5, 3.5), layout="constrained")
    t = np.asarray(layers, dtype=float)
    m = np.asarray(mean, dtype=float)
    if loglog:
        t = np.where(t == 0, 0.5, t)
    (line,) = ax.plot(t, m, label=label, color=color, ls=linestyle, marker=marker, ms=4)
    if std is not None:
        s = np.asarray(std, dtype=float)
        lo = m - s
        if log_y:
            # No band where the mean itself is 0 (exact collapse): log(0) would pull it to the bottom.
            lo = np.where(lo > 0, lo, np.where(m > 0, m / 10, np.nan))
        ax.fill_between(t, lo, m + s, color=line.get_color(), alpha=0.2, linewidth=0)
    depth_axis(ax, loglog=loglog, log_y=log_y)
    if ylabel is not None:
        ax.set_ylabel(ylabel)
    if dtype is not None and log_y:
        finite = m[np.isfinite(m) & (m > 0)]
        scale = floor_scale if floor_scale is not None else (float(finite[0]) if finite.size else 1.0)
        floor_band(ax, dtype, scale)
    return ax
