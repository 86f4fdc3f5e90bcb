"""Figures for the equilibrium search (`rankdyn.find_equilibria`, ``rankdyn equilibria``)."""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib.pyplot as plt
import numpy as np


def plot_equilibria_moduli(
    moduli: Sequence,
    ranks: Sequence[int],
    *,
    closed_form: Sequence[bool] | None = None,
    ax=None,
    title: str | None = None,
):
    """Multiplier moduli |lambda| of each equilibrium, equilibria grouped by rank.

    Arguments:
        moduli: one list of eigenvalue moduli per equilibrium class (tangent Jacobian).
        ranks: the rank of each equilibrium.
        closed_form: optional flags; equilibria matching a paper closed form are drawn as
            filled dots, the others as open circles.
        ax: a matplotlib axes (a new figure if None).
        title: optional title.

    Returns:
        The axes. The dashed line is |lambda| = 1 (above: expanding directions).
    """
    if ax is None:
        _, ax = plt.subplots(figsize=(max(5.0, 0.12 * len(ranks) + 3), 4))
    ranks = np.asarray(ranks)
    order = np.argsort(ranks, kind="stable")
    cf = np.ones(len(ranks), bool) if closed_form is None else np.asarray(closed_form, bool)
    colors = plt.cm.viridis(np.linspace(0, 0.9, max(1, ranks.max(initial=1))))
    for pos, i in enumerate(order):
        m = np.asarray(moduli[i], float)
        c = colors[ranks[i] - 1]
        ax.scatter(
            np.full(m.shape, pos),
            np.maximum(m, 1e-6),
            s=10,
            color=c if cf[i] else "none",
            edgecolors=c,
            linewidths=0.8,
        )
    # Rank group boundaries and labels.
    for k in np.unique(ranks):
        idx = np.nonzero(ranks[order] == k)[0]
        ax.axvspan(idx[0] - 0.5, idx[-1] + 0.5, color=colors[k - 1], alpha=0.08, lw=0)
        ax.text(
            (idx[0] + idx[-1]) / 2,
            1.02,
            f"rank {k}",
            transform=ax.get_xaxis_transform(),
            ha="center",
            fontsize=8,
        )
    ax.axhline(1.0, color="k", ls="--", lw=0.8)
    ax.set_yscale("log")
    ax.set_xlabel("equilibrium (grouped by rank; open = not a closed form)")
    ax.set_ylabel("|eigenvalue| of the tangent Jacobian")
    ax.set_xlim(-1, len(ranks))
    if title:
        ax.set_title(title, fontsize=9, pad=14)
    return ax


def plot_equilibria_moduli_grid(
    moduli: Sequence,
    ranks: Sequence[int],
    *,
    closed_form: Sequence[bool] | None = None,
    title: str | None = None,
    ncols: int = 3,
    panel_size=(3.4, 2.6),
):
    """`plot_equilibria_moduli` as a grid: one panel per rank, at a printable size however many
    equilibria there are (a single strip of 600 equilibria is 5000 px wide and unreadable).

    Each panel shows every equilibrium of one rank along x (in search order) with all its
    multiplier moduli; the panels share one log y axis, and the dashed line is |lambda| = 1.

    Arguments:
        moduli: one list of eigenvalue moduli per equilibrium (tangent Jacobian).
        ranks: the rank of each equilibrium.
        closed_form: optional flags; a paper closed form is a filled dot, another an open circle.
        title: the figure's title.
        ncols: panels per row.
        panel_size: inches per panel.

    Returns:
        The ``Figure``.
    """
    from ._style import panel_grid

    ranks = np.asarray(ranks, int)
    cf = np.ones(len(ranks), bool) if closed_form is None else np.asarray(closed_form, bool)
    levels = sorted(set(ranks.tolist())) or [1]
    # Rows as full as they can be: 4 ranks on 2 x 2, not 3 + 1 with two empty cells.
    rows = -(-len(levels) // max(1, ncols))
    from matplotlib.ticker import MaxNLocator

    fig, axes = panel_grid(len(levels), -(-len(levels) // rows), panel_size, sharey=True)
    for ax, k in zip(axes, levels):
        idx = np.nonzero(ranks == k)[0]
        for closed in (True, False):  # one scatter per kind of marker: fast for thousands of points
            sel = [(pos, i) for pos, i in enumerate(idx) if cf[i] == closed]
            if not sel:
                continue
            xs = np.concatenate([np.full(np.shape(moduli[i]), pos) for pos, i in sel])
            ys = np.maximum(np.concatenate([np.asarray(moduli[i], float) for _, i in sel]), 1e-6)
            ax.scatter(
                xs, ys, s=8, color="tab:blue" if closed else "none", edgecolors="tab:blue", linewidths=0.6
            )
        ax.axhline(1.0, color="k", ls="--", lw=0.8)
        ax.set_yscale("log")
        ax.set_xlim(-1, max(len(idx), 1))
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # equilibria are counted, not measured
        ax.set_title(f"rank {k}: {len(idx)} {'class' if len(idx) == 1 else 'classes'}", fontsize=9)
        ax.set_xlabel("equilibrium (search order)", fontsize=8)
        ax.set_ylabel("|eigenvalue|, tangent Jacobian", fontsize=8)
    ax = axes[0]
    ax.scatter([], [], s=8, color="tab:blue", label="closed form")
    ax.scatter([], [], s=8, color="none", edgecolors="tab:blue", label="not a closed form")
    ax.plot([], [], "k--", lw=0.8, label="|lambda| = 1 (above: expanding)")
    from ._style import legend_outside

    legend_outside(fig)
    if title:
        fig.suptitle(title, fontsize=9)
    return fig
