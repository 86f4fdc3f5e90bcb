"""Figures that show what a reproduce target's check tests (issue 44, item 10).

Each function takes plain numbers and returns a matplotlib ``Figure``; none calls ``plt.show()``.
"""

from __future__ import annotations

import numpy as np

from ._style import legend_outside


def plot_factor_vs_depth(curves: dict, scored: dict, *, title: str, ylabel: str):
    """The decay per layer, 1 - factor, of a per-layer factor averaged over the first t layers,
    against t, one curve per mask (log axes: factors near 1 differ in their decay), with the scored
    depths marked.

    Arguments:
        curves: ``{label: (t, factor)}``.
        scored: ``{depth: (what, passed)}``: a vertical line at each scored depth, labelled with
            its check's result.
        title: the figure's title (the rule the checks test); ylabel: the quantity.

    Returns:
        The figure.
    """
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 3.6), layout="constrained")
    for label, (t, f) in curves.items():
        decay = 1.0 - np.asarray(f, float)
        ax.plot(np.asarray(t, float), np.where(decay > 0, decay, np.nan), label=label)
    for depth, (what, passed) in scored.items():
        ax.axvline(depth, color="0.3", lw=0.8, ls="--")
        ax.annotate(
            f"checked {what}: {'pass' if passed else 'FAIL'}",
            (depth, 0.03),
            xycoords=("data", "axes fraction"),
            rotation=90,
            va="bottom",
            ha="right",
            fontsize=7,
        )
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("depth t (layers averaged over)")
    ax.set_ylabel(ylabel, fontsize=8)
    ax.set_title(title, fontsize=9)
    legend_outside(fig)
    return fig


def plot_rate_limits(rows: dict, *, title: str):
    """Per configuration: the measured late exponent with its convergence window, the limit it is
    checked against, and the comparisons outside the theorems' hypotheses (drawn hollow, not
    checked).

    Arguments:
        rows: ``{label: {"late": float, "early": float, "limit": float, "bound": float,
            "bound_checked": bool, "log_mu_rate": float}}``; values below -5 are drawn at -5.
        title: the figure's title.

    Returns:
        The figure.
    """
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.8, 3.6), layout="constrained")
    keys = list(rows)
    x = np.arange(len(keys))

    def clip(v):
        v = float(v)
        return max(v, -5.0) if np.isfinite(v) or v < 0 else np.nan

    col = {q: [clip(rows[k][q]) for k in keys] for q in ("late", "early", "limit", "log_mu_rate", "bound")}
    ax.plot(x, col["late"], "o", color="C0", label="exponent, last quarter (checked)")
    ax.plot(x, col["early"], ".", color="C0", alpha=0.5, label="exponent, third quarter (convergence)")
    ax.plot(x, col["limit"], "_", color="C2", ms=16, mew=2, label="limit log|lambda_2(A*)| (checked)")
    ax.plot(x, col["log_mu_rate"], "x", color="C1", ms=6, label="log rate of mu (reported)")
    checked = np.array([rows[k]["bound_checked"] for k in keys], bool)
    b = np.asarray(col["bound"], float)
    ax.plot(x[checked], b[checked], "v", color="C3", label="log of the theorem's bound (checked)")
    ax.plot(
        x[~checked],
        b[~checked],
        "v",
        mfc="none",
        color="C3",
        label="bound outside its hypotheses (not checked)",
    )
    ax.set_xticks(x, keys, rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("per-layer log rate (clipped at -5)")
    ax.axhline(0.0, color="0.4", lw=0.8, ls="--")
    ax.set_title(title, fontsize=9)
    legend_outside(fig, below=True)
    return fig
