"""The figure of the `equiangular` target: the flow against its closed form, the per-placement
clustering laws against their asymptotes, and one layer's long-context limits."""

from __future__ import annotations

import numpy as np

from ._reproduce_sim import save_figure
from ._style import LINE_STYLES, floor_band, legend_outside, panel_grid


def _positive(x, y):
    x, y = np.asarray(x, float), np.asarray(y, float)
    ok = np.isfinite(x) & np.isfinite(y) & (y > 0)
    return x[ok], y[ok]


def plot_equiangular(flow: dict, placements: dict, long_context: dict, *, path=None):
    r"""Three panels of $1 - \rho$ (or a gap to a limit), each on log axes with its float64 floor.

    Arguments:
        flow: ``{label: (times, measured gap, closed-form gap)}``: the post-LN flow.
        placements: ``{placement: (times, measured gap, asymptote)}``.
        long_context: ``{label: (ns, |rho'_n - limit|)}``: the exact one-layer cosine's distance to its
            limit at $\beta = \gamma\log n$.
        path: save there (PNG) and close the figure; otherwise return it.
    """
    fig, (a, b, c) = panel_grid(3, 3, panel_size=(3.4, 2.8))
    # Runs with the same closed form (SA and USA at beta = 0) are drawn once, with both labels.
    merged: dict = {}
    for label, (t, got, want) in flow.items():
        same = [k for k, v in merged.items() if np.array_equal(np.asarray(v[2]), np.asarray(want))]
        if same:
            merged[same[0] + " = " + label] = merged.pop(same[0])
        else:
            merged[label] = (t, got, want)
    for i, (label, (t, got, want)) in enumerate(merged.items()):
        x, y = _positive(t, want)
        a.plot(x, y, color=f"C{i}", ls=LINE_STYLES[i % len(LINE_STYLES)], lw=1.1, label=f"flow {label}")
        x, y = _positive(t, got)
        a.plot(x, y, "o", color=f"C{i}", ms=3, mfc="none")
    a.set_yscale("log")
    a.set_xlabel("time t")
    a.set_ylabel(r"$1 - \rho(t)$")
    a.set_title("post-LN flow: solve_flow (o) and closed form", fontsize=8)
    for i, (name, (t, got, asym)) in enumerate(placements.items()):
        x, y = _positive(t, got)
        b.plot(x, y, color=f"C{i}", ls=LINE_STYLES[i % len(LINE_STYLES)], lw=1.1, label=name)
        x, y = _positive(t, asym)
        b.plot(x, y, color=f"C{i}", ls=":", lw=0.8)
    b.set_xscale("log")
    b.set_yscale("log")
    b.set_xlabel("time t")
    b.set_ylabel(r"$1 - \rho(t)$")
    b.set_title("placements: solve_flow and asymptote (dotted)", fontsize=8)
    for i, (label, (ns, gaps)) in enumerate(long_context.items()):
        x, y = _positive(ns, gaps)
        c.plot(x, y, marker="s", ms=3, color=f"C{i}", ls=LINE_STYLES[i % len(LINE_STYLES)], lw=1, label=label)
    c.set_xscale("log")
    c.set_yscale("log")
    c.set_xlabel("tokens n")
    c.set_ylabel(r"$|\rho'_n - \lim|$, one layer")
    c.set_title(r"one layer at $\beta = \gamma\log n$", fontsize=8)
    for ax in (a, b, c):
        floor_band(ax, np.float64)
    legend_outside(fig, title="run")
    fig.suptitle("equiangular closed forms", fontsize=9)
    return save_figure(fig, path) if path is not None else fig
