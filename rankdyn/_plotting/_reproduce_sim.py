"""Figures of the simulation targets of ``rankdyn reproduce`` (Theorems 1-2, Fig. 2/3/4/6/7).

Every function takes plain results (layer indices, ``{"mean": ..., "std": ...}`` bands) and
returns a matplotlib ``Figure`` or draws into a given ``ax``; none calls ``plt.show()``. The
shared rules (semi-log y, y labels, shared limits, legends outside, round-off band) live in
`rankdyn._plotting._style`.
"""

from __future__ import annotations

import numpy as np

from ._collapse import plot_metric_band
from ._style import (
    BAND_COLOR,
    LINE_STYLES,
    _unique_handles,
    floor_band,
    gap_axes,
    legend_outside,
    panel_grid,
    round_off_floor,
    share_ylim,
    tidy_log_ticks,
)

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
    legend_below: bool = False,
    legend_in_gap: bool = False,
):
    r"""A grid of panels; each panel draws several mean +- std curves against depth.

    Semi-log y (a geometric rate is a straight line); every y axis is labelled, once per row
    where the panels share their range; compared panels share one y range; one legend for the
    whole figure sits right of the panels (none for a single unnamed curve). With ``dtype`` the
    round-off floor of that dtype is shaded (scale: the largest layer-0 value in the panel), so a
    float32 plateau near $10^{-7}\,\mu(X^{(0)})$ reads as collapse. On a log axis a value of
    exactly 0 is not drawn: a down-triangle on the bottom edge marks the first such layer, and a
    curve whose drawn part spans under `SHORT_SPAN` of the layers gets markers and a named arrow.
    Under the floor a curve is drawn thin and cut `CUT_BELOW_FLOOR` times the floor down.

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
        legend_title: a title over the legend.
        legend_below: the legend under the panels (long labels), not right of them.
        legend_in_gap: the legend in the empty cells of a shortened last row (5 panels on 3 + 2:
            the sixth cell), so no cell of the grid is left blank; right of the panels otherwise.

    Returns:
        The ``Figure``.
    """
    fig, axes = panel_grid(len(panels), ncols, panel_size, sharey=False)
    t = np.asarray(layers)
    sel = slice(None) if xmax is None else t <= xmax
    scales, clipped = {}, {}
    palette, dashes = {}, {}  # one colour and one dash pattern per curve label across panels
    for curves in panels.values():
        for label in curves:
            dashes.setdefault(label, LINE_STYLES[len(palette) % len(LINE_STYLES)])
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
        drawn = [
            _draw_curve(
                ax,
                t[sel],
                np.asarray(b["mean"], dtype=float)[sel],
                None if b.get("std") is None else np.asarray(b["std"], dtype=float)[sel],
                label=label,
                color=b.get("color", palette[label]),
                style=b.get("linestyle", dashes[label]),
                floor=floor,
                log_y=title not in linear_y,
                loglog=loglog,
            )
            for label, b in curves.items()
        ]
        clipped[title] = any(c for c, _ in drawn)
        _note_exact_zeros(ax, [z for _, z in drawn if z is not None])
        ax.set_xlim(*_padded(t[sel], loglog))  # the layers run, also where a curve is not drawn
        ax.set_title(title, fontsize=9)
        ax.set_ylabel((ylabels or {}).get(title, ylabel), fontsize=8)
    if sharey == "row":
        for row in range(0, len(axes), max(1, min(ncols, len(axes)))):
            share_ylim(axes[row : row + ncols])
    elif sharey:
        share_ylim(axes)
    if sharey:  # panels that share their y range say its label once per row, on the left
        per_row = max(1, min(ncols, len(axes)))
        for i, ax in enumerate(axes):
            if i % per_row and ax.get_ylabel() == axes[i - i % per_row].get_ylabel():
                ax.set_ylabel("")
    if dtype is not None:
        for ax, title in zip(axes, panels):
            if (floor_panels is None or title in floor_panels) and title not in linear_y:
                floor_band(ax, dtype, scales[title])
    handles, labels = _unique_handles(axes)
    # A label's legend sample is a line without markers where one is drawn (markers only mark a
    # curve that drops to 0 at once in some panel).
    plain = {
        lab: h
        for ax in axes
        for h, lab in zip(*ax.get_legend_handles_labels())
        if getattr(h, "get_marker", lambda: "x")() in ("None", "")
    }
    handles = [plain.get(lab, h) for h, lab in zip(handles, labels)]
    if any(clipped.values()):  # said once, in the legend, next to the band's colour
        from matplotlib.patches import Patch

        handles.append(Patch(color=BAND_COLOR, alpha=0.6, lw=0))
        labels.append(
            f"{np.dtype(dtype).name} round-off floor (curves under it: float noise, "
            f"cut {-int(np.log10(CUT_BELOW_FLOOR))} decades down)"
        )
    gap = gap_axes(fig, axes) if legend_in_gap else None
    if (len(labels) > 1 or legend_title) and gap is not None:
        gap.legend(
            handles, labels, loc="center", title=legend_title, fontsize=8, title_fontsize=8, frameon=False
        )
    elif len(labels) > 1 or legend_title:  # one unnamed curve per panel needs no legend
        legend_outside(fig, handles, labels, title=legend_title, below=legend_below)
    if suptitle:
        fig.suptitle(suptitle, fontsize=10)
    return fig


#: Inside the round-off band a curve is float noise; it is drawn down to this factor of the floor
#: (lower values at that height), so the axis does not run to 1e-40 for a float32 underflow.
CUT_BELOW_FLOOR = 1e-3
#: A curve whose drawn part spans less than this share of the x range (it drops to 0 at once) gets
#: markers and a label in the panel: as a line it would hide under the others at the left edge.
SHORT_SPAN = 0.02


def _draw_curve(ax, t, mean, std, *, label, color, style, floor, log_y, loglog):
    """One mean +- std curve of `plot_band_panels`; returns ``(clipped, (label, t, color) or None)``.

    On a log axis, layers where the mean is exactly 0 are not drawn (log 0); the first is marked
    by a down-triangle on the bottom edge, and returned so the panel can say what it means. Below
    the round-off ``floor`` the curve is float noise (a spike of one sample's rounding, e.g. near
    layer 350 of a long float32 run): drawn thin and faint, without a band, cut at
    `CUT_BELOW_FLOOR` times the floor, so it reads as "collapsed to the floor", not as a feature.
    """
    zero = None
    if log_y and (zeros := np.flatnonzero(mean <= 0)).size:
        mean = np.where(mean <= 0, np.nan, mean)
        ax.plot(t[zeros[0]], 0, "v", color=color, ms=6, transform=ax.get_xaxis_transform(), clip_on=False)
        zero = (label, t[zeros[0]], color)
    clipped = False
    if floor is not None and (below := np.flatnonzero(mean <= floor)).size:
        cut, low = below[0] + 1, floor * CUT_BELOW_FLOOR
        faint = mean[cut - 1 :]
        clipped = bool((faint < low).any())
        if np.isfinite(faint).sum() > 1:  # a lone value under the floor is not a line
            ax.plot(t[cut - 1 :], np.maximum(faint, low), color=color, ls=style, lw=0.6, alpha=0.45)
        mean, std = mean.copy(), None if std is None else std.copy()
        mean[cut:] = np.nan
        # The first value under the floor closes the line down to it; alone (no value before it)
        # it is noise like the rest, left to the faint line.
        mean[cut - 1] = max(mean[cut - 1], low) if cut > 1 and np.isfinite(mean[cut - 2]) else np.nan
        if std is not None:
            std[cut - 1 :] = np.nan
    shown = t[np.isfinite(mean)]
    short = shown.size < 3 or np.ptp(shown) < SHORT_SPAN * max(np.ptp(t), 1e-300)
    plot_metric_band(
        t,
        mean,
        std,
        ax=ax,
        label=label,
        loglog=loglog,
        log_y=log_y,
        color=color,
        linestyle=style,
        marker="o" if short else None,
    )
    return clipped, (zero if short or zero is None else (None, zero[1], zero[2]))


def _padded(t, loglog: bool) -> tuple[float, float]:
    """The x range of the layers ``t`` with matplotlib's 5% margins (layer 0 at 0.5 on log-log)."""
    lo, hi = float(np.min(t)), float(np.max(t))
    if loglog:
        lo = max(lo, 0.5)
        r = (hi / lo) ** 0.05
        return lo / r, hi * r
    pad = 0.05 * (hi - lo) or 0.5
    return lo - pad, hi + pad


def _note_exact_zeros(ax, zeros) -> None:
    """Say in the panel what the down-triangles mean; a curve that is 0 almost at once (its line
    would hide at the left edge) is named, with an arrow to its triangle."""
    named = [z for z in zeros if z[0] is not None]
    if len(named) < len(zeros):
        ax.text(0.02, 0.03, "v: exactly 0 from here", transform=ax.transAxes, fontsize=6, color="0.35")
    for i, (label, t0, color) in enumerate(named):
        ax.annotate(
            f"{label}:\nexactly 0 from t = {t0:g} (v)",
            xy=(t0, 0),
            xycoords=ax.get_xaxis_transform(),
            xytext=(0.22, 0.42 - 0.1 * i),
            textcoords="axes fraction",
            fontsize=7,
            color=color,
            bbox=dict(boxstyle="round,pad=0.15", fc="white", ec="none", alpha=0.8),
            arrowprops=dict(arrowstyle="->", color=color, lw=0.8, relpos=(0.0, 0.5)),
        )


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
    ax.set_ylabel("decay per layer of mu (1 - factor)")
    legend_outside(ax)
    return ax


def plot_rates_vs_bounds(labels, fitted, bounds, *, ax=None, title=None, log10_gaps=None, testable=None):
    r"""Decay per layer, $1 - \rho$, fitted against the theorem's guarantee $1 - \bar\rho$.

    The theorems say $\rho \le \bar\rho$, i.e. the fitted point lies on or above the bound's
    marker. Both on a log axis: the bounds $\bar\rho = (1-\epsilon^r)^{1/r}$ sit within
    $10^{-3}$ to $10^{-60}$ of 1, which bars on a linear axis draw as identical bars at 1. A bound
    that equals 1 in double precision ($1 - \bar\rho < 10^{-16}$) is below any axis that shows
    the fitted points: it is drawn as a down-triangle on the bottom edge ("below the axis"), with
    its value written next to it when ``log10_gaps`` gives it; a fitted factor $\ge 1$ (no decay)
    as a cross on the bottom edge.

    Arguments:
        labels: one name per case.
        fitted: fitted per-layer factors $\rho$ (NaN: no fit).
        bounds: the bound $\bar\rho$ with the measured $\epsilon$.
        ax: axes to draw into (a new figure when None).
        title: the axes' title.
        log10_gaps: optional $\log_{10}(1 - \bar\rho)$ per case, computed without rounding (for
            the bounds that are 1 in double precision).
        testable: optional bool per case, whether its check "fitted <= bound" can fail; a case
            that cannot (a vacuous bound) is drawn as an open grey circle, not as a pass.

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
    tested = np.ones(len(labels), bool) if testable is None else np.asarray(testable, bool)
    ax.plot(
        x[ok_fit & tested], fit_gap[ok_fit & tested], "o", color="tab:blue", ms=6, label="1 - fitted factor"
    )
    if (ok_fit & ~tested).any():  # a check that cannot fail is not a pass (docs/figures.md)
        ax.plot(
            x[ok_fit & ~tested],
            fit_gap[ok_fit & ~tested],
            "o",
            mfc="none",
            mew=1.2,
            color="0.45",
            ms=7,
            label="1 - fitted factor, bound vacuous: not testable",
        )
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
    edge = ax.get_xaxis_transform()  # x in data, y in axes fraction: 0 is the bottom edge
    if (~resolved).any():
        ax.plot(
            x[~resolved],
            np.zeros((~resolved).sum()),
            "v",
            color="tab:orange",
            ms=8,
            clip_on=False,
            transform=edge,
            label="1 - bound < 1e-16, below the axis (its value written above the marker)",
        )
        for i in x[~resolved]:
            g = None if log10_gaps is None else float(np.asarray(log10_gaps, float)[i])
            text = (
                f"1 - bound\n= {10 ** (g % 1):.0f}e{int(np.floor(g))}"
                if g is not None and np.isfinite(g)
                else "1 - bound\n< 1e-16"
            )
            ax.text(i, 0.03, text, transform=edge, ha="center", va="bottom", fontsize=6, color="tab:orange")
    bad = np.isfinite(fit_gap) & (fit_gap <= 0)
    if bad.any():
        ax.plot(
            x[bad],
            np.zeros(bad.sum()),
            "x",
            color="tab:red",
            ms=7,
            clip_on=False,
            transform=edge,
            label="fitted factor >= 1 (no decay): on the bottom edge",
        )
    ax.set_xticks(x)
    ax.set_xticklabels(labels, rotation=30, ha="right", fontsize=7)
    ax.set_ylabel("decay per layer of mu (1 - factor)")
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
