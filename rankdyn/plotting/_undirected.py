"""The ``undirected`` target's figure: share of held-out inputs that keep rank >= 2, with intervals."""

from __future__ import annotations

from .._run._io import savefig
from ._style import legend_outside

#: The bottom of the log axis; a share of 0 (or below this) is drawn there as an open
#: down-triangle, labelled "0 / below axis", never as a point of the data.
BOTTOM = 1e-4


def plot_undirected(points, *, ax=None, path=None, title=None):
    r"""Points with Wilson 95% intervals: per size $N = d$ (panel), mask (x) and attention
    (colour), the share of held-out sphere inputs whose final tokens keep $\sigma_2 > 10^{-3}\sigma_1$
    at the long evaluation depth, for the searched $W_V$ (and the paper's $W_V = I + wS$ as crosses
    where its share is not 0).

    Arguments:
        points: list of dicts with ``n``, ``mask``, ``attention``, ``share``, ``lo``, ``hi``
            (the interval) and optionally ``paper`` (the paper's W_V share).
        ax: a matplotlib Axes for a single size (created, one panel per size, when None).
        path: save the figure here (and close it).
        title: figure title.

    Returns:
        The Figure.
    """
    import matplotlib.pyplot as plt

    ns = sorted({p["n"] for p in points})
    if ax is None:
        fig, axes = plt.subplots(
            1, len(ns), figsize=(max(3.2 * len(ns) + 2, 7.5), 3.8), layout="constrained", squeeze=False
        )
        axes = list(axes[0])
    else:
        fig, axes = ax.figure, [ax]
    atts = list(dict.fromkeys(p["attention"] for p in points))
    colours = {a: f"C{i}" for i, a in enumerate(atts)}
    labelled = set()
    for axis, n in zip(axes, ns):
        pts = [p for p in points if p["n"] == n]
        masks = list(dict.fromkeys(p["mask"] for p in pts))
        for p in pts:
            j = atts.index(p["attention"])
            x = masks.index(p["mask"]) + (j - (len(atts) - 1) / 2) * 0.22
            c = colours[p["attention"]]
            lab = None if p["attention"] in labelled else f"search, {p['attention']} attention"
            labelled.add(p["attention"])
            hi = max(p["hi"], BOTTOM)
            if p["share"] >= BOTTOM:
                lo = max(p["lo"], BOTTOM)
                axis.errorbar(
                    x, p["share"], yerr=[[p["share"] - lo], [hi - p["share"]]], fmt="o", color=c, label=lab
                )
            else:
                # Below the axis: an open triangle at the bottom, the interval's top still drawn.
                axis.vlines(x, BOTTOM, hi, color=c)
                axis.plot(x, BOTTOM, "v", mfc="none", color=c, ms=8, label=lab)
            if p.get("paper") is not None and p["paper"] >= BOTTOM:  # zeros: not drawn
                pv = p["paper"]
                lab2 = "paper's W_V = I + wS" if "paper" not in labelled else None
                labelled.add("paper")
                axis.plot(x, pv, "x", color="k", ms=7, label=lab2)
        axis.set_yscale("log")
        axis.set_ylim(BOTTOM / 1.5, 1.5)
        axis.set_xticks(
            range(len(masks)), [m + (" (control)" if m == "causal" else "") for m in masks], rotation=20
        )
        axis.set_title(f"N = d = {n}")
        axis.set_ylabel("share keeping rank >= 2 (Wilson 95%)")
    axes[-1].plot([], [], "v", mfc="none", color="0.3", label="0 / below axis")
    legend_outside(axes[-1])
    if title:
        fig.suptitle(title)
    if path is not None:
        savefig(fig, path, dpi=110)
        plt.close(fig)
    return fig
