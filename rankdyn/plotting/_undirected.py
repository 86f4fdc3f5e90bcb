"""The ``undirected`` target's figure: best sigma_2 reached per mask and attention."""

from __future__ import annotations

import numpy as np

from .._io import savefig
from ._style import floor_band, legend_outside

#: Values below this are drawn at it (sigma_2 at the rounding floor is ~1e-17, exactly 0 when
#: uniform complete attention makes all tokens equal).
FLOOR = 1e-18


def plot_undirected(best, paper=None, *, num_layers=None, ax=None, path=None):
    r"""Grouped bars (log scale): mean $\sigma_2$ of the final tokens reached by the $W_V$ search,
    per mask (groups) and attention (bars), with the paper's $W_V = I + wS$ as markers.

    Arguments:
        best: ``{mask: {attention: mean sigma_2 at depth T}}`` from the search.
        paper: the same for the paper's bidiagonal $W_V$ (optional).
        num_layers: depth T (for the title).
        ax: matplotlib Axes (created when None).
        path: save the figure here (and close it).

    Returns:
        The Figure.
    """
    import matplotlib.pyplot as plt

    if ax is None:
        fig, ax = plt.subplots(figsize=(8.5, 4), layout="constrained")
    else:
        fig = ax.figure
    masks = list(best)
    atts = list(dict.fromkeys(a for m in masks for a in best[m]))
    width = 0.8 / max(len(atts), 1)
    x = np.arange(len(masks))
    for j, a in enumerate(atts):
        off = (j - (len(atts) - 1) / 2) * width
        vals = np.array([max(float(best[m].get(a, np.nan)), FLOOR) for m in masks])
        bars = ax.bar(x + off, vals, width * 0.9, label=f"search, {a} attention")
        if paper is not None:
            pv = np.array([max(float(paper[m].get(a, np.nan)), FLOOR) for m in masks])
            ax.plot(x + off, pv, "k_", ms=18, mew=2, label="paper's W_V = I + wS" if j == 0 else None)
        for b, v in zip(bars, vals):
            ax.annotate(f"{v:.1e}", (b.get_x() + b.get_width() / 2, v), ha="center", va="bottom", fontsize=7)
    ax.set_yscale("log")
    ax.set_ylim(FLOOR / 2, 1.0)
    ax.set_xticks(x, [m + (" (control)" if m == "causal" else "") for m in masks])
    ax.set_ylabel(r"mean $\sigma_2$ of final tokens (held-out inputs)")
    ax.set_title("best sigma_2 reached by the W_V search" + (f" at depth {num_layers}" if num_layers else ""))
    legend_outside(ax)
    # sigma_2 of unit-norm tokens: below the float64 round-off floor the final tokens are rank one.
    floor_band(ax, np.float64, scale=1.0)
    if path is not None:
        savefig(fig, path, dpi=110)
        plt.close(fig)
    return fig
