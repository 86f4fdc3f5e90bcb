"""The figure of the normalisation schemes: the spread of the token directions against time or
depth, one curve per scheme, one panel per setting (the flow, random layers, a trained stack)."""

from __future__ import annotations

import numpy as np

from ._reproduce_sim import save_figure
from ._style import LINE_STYLES, legend_outside, note_coinciding, panel_grid, shade_below


def plot_scheme_spread(panels: dict, *, title: str = "", floors=None, path=None):
    r"""$\mathrm{Var} = \frac1n\sum_k |\theta_k - \bar\theta|^2$ against t or depth, one curve per scheme.

    Arguments:
        panels: ``{panel title: (xlabel, log_x, x, {scheme: (S,) values})}``; non-positive or
            non-finite values are left out of the log axis.
        title: figure title.
        floors: ``{panel title: (value, words)}``: the smallest Var that panel resolves, shaded
            below (docs/figures.md), with the words that say why.
        path: save there (PNG) and close the figure; otherwise return it.
    """
    fig, axes = panel_grid(len(panels), 3)
    for ax, (name, (xlabel, log_x, x, curves)) in zip(axes, panels.items()):
        x = np.asarray(x, dtype=float)
        for i, (scheme, y) in enumerate(curves.items()):
            y = np.asarray(y, dtype=float)
            ok = np.isfinite(y) & (y > 0) & (x > 0 if log_x else np.ones_like(x, bool))
            # A line style per scheme too: schemes that coincide (pre and peri near a cluster) stay visible.
            style = LINE_STYLES[i % len(LINE_STYLES)]
            ax.plot(x[ok], y[ok], color=f"C{i}", ls=style, lw=1.2, label=scheme)
        ax.set_yscale("log")
        if log_x:
            ax.set_xscale("log")
        if floors and name in floors:
            shade_below(ax, *floors[name])
        # Schemes that coincide (pre and peri near a cluster) are named in the panel.
        note_coinciding(ax, {s: (x, np.asarray(y, float)) for s, y in curves.items()})
        ax.set_xlabel(xlabel)
        ax.set_ylabel("Var of the token directions")
        ax.set_title(name, fontsize=8)
    handles, labels = axes[0].get_legend_handles_labels()
    legend_outside(fig, handles, labels, title="placement")
    if title:
        fig.suptitle(title, fontsize=9)
    return save_figure(fig, path) if path is not None else fig
