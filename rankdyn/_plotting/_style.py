r"""The shared figure rules of rankdyn: one place for what every plot must obey.

* **Exponential decay is drawn on semi-log y** (linear depth): a geometric rate
  $\mu(X^{(t)}) \le C\rho^t$ (Theorems 1-2) is then a straight line whose slope is $\log\rho$. The
  paper's log-log view stays available (``loglog=True``; layer 0 is then drawn at 0.5).
* **Every y axis is labelled**, and panels that are compared share their y limits; panels that
  share their range say the label once per row, on the left (no repeated small labels).
* **Legends sit outside the data** (to the right of the axes or of the whole figure).
* **The round-off floor is a band.** A token matrix whose tokens agree to the last bit of the
  dtype has $\mu(X)/\|X\|_F \approx \epsilon_{\text{mach}}$, not 0, so a float32 curve flattens
  near $10^{-7}$ relative to its scale. Below `round_off_floor` a value is indistinguishable from
  full collapse; the grey band marks that region so a plateau there does not read as "no collapse".
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from .._observe._tolerances import round_off_floor as round_off_floor  # noqa: E402

#: The x label of every against-depth plot.
DEPTH_LABEL = "layer t"
#: One dash pattern per curve label (with its colour): curves that coincide stay distinguishable.
LINE_STYLES = ("-", (0, (5, 2)), (0, (1, 1.5)), (0, (6, 1.5, 1, 1.5)), (0, (3, 1, 1, 1, 1, 1)), (0, (9, 3)))
#: The colour of the round-off band.
BAND_COLOR = "0.85"


def floor_band(ax, dtype, scale: float = 1.0, *, label: bool = True):
    """Shade the y range below `round_off_floor` (``dtype``, ``scale``) on a log-y ``ax``.

    Call it after the data are drawn and the y limits are final: the band fills from the bottom of
    the axes up to the floor and leaves the limits as they are (a float64 floor far below the data
    stays out of sight instead of stretching the axis). Returns the floor value.
    """
    top = round_off_floor(dtype, scale)
    lo, hi = ax.get_ylim()
    name = np.dtype(dtype).name
    if top > lo:
        ax.axhspan(min(lo, top) / 10, top, color=BAND_COLOR, alpha=0.6, lw=0, zorder=0)
        ax.axhline(top, color="0.55", lw=0.6, ls=":", zorder=0.5)
        if label:  # labelled in place, not in the legend: every panel with a band says what it is
            ax.text(
                0.98,
                top,
                f"{name} round-off floor",
                transform=ax.get_yaxis_transform(),
                ha="right",
                va="top",
                fontsize=6,
                color="0.35",
                zorder=0.6,
            )
    ax.set_ylim(lo, hi)
    return top


def depth_axis(ax, *, loglog: bool = False, log_y: bool = True) -> None:
    """Scales and x label of a metric-against-depth panel: semi-log y, or log-log on request."""
    if log_y:
        ax.set_yscale("log")
    if loglog:
        ax.set_xscale("log")
        ax.set_xlabel(DEPTH_LABEL + " (layer 0 drawn at 0.5)")
    else:
        ax.set_xlabel(DEPTH_LABEL)


def legend_outside(
    target, handles=None, labels=None, *, title: str | None = None, fontsize: float = 7, below: bool = False
):
    """A legend outside the data: right of a single ``Axes`` (``below=True``: under it, clear of
    rotated tick labels), or right of a whole ``Figure`` (``below=True``: under it, in two
    columns, for long labels).

    For a figure the legend collects the unique labels of all its axes (panels that show the same
    curves get one legend, not one each); the figure should use ``layout="constrained"`` so the
    legend gets its own room. Returns the legend, or None when there is nothing to label.
    """
    from matplotlib.figure import Figure

    if handles is None:
        handles, labels = _unique_handles(target.axes if isinstance(target, Figure) else [target])
    if not handles:
        return None
    if isinstance(target, Figure):
        return target.legend(
            handles,
            labels,
            loc="outside lower center" if below else "outside right upper",
            ncols=2 if below else 1,
            fontsize=fontsize,
            title=title,
            title_fontsize=fontsize,
            frameon=False,
        )
    if below:
        return target.legend(
            handles,
            labels,
            loc="upper center",
            bbox_to_anchor=(0.5, -0.3),
            ncol=2,
            fontsize=fontsize,
            title=title,
            title_fontsize=fontsize,
            frameon=False,
        )
    return target.legend(
        handles,
        labels,
        loc="upper left",
        bbox_to_anchor=(1.02, 1.0),
        borderaxespad=0.0,
        fontsize=fontsize,
        title=title,
        title_fontsize=fontsize,
        frameon=False,
    )


def _unique_handles(axes: Iterable):
    seen, handles, labels = set(), [], []
    for ax in axes:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            if lab and not lab.startswith("_") and lab not in seen:
                seen.add(lab)
                handles.append(h)
                labels.append(lab)
    return handles, labels


def gap_axes(fig, axes):
    """An axes without frame over the empty cells of the grid's last row (None when it is full)."""
    spec = axes[0].get_subplotspec()
    if spec is None:
        return None
    rows, cols = spec.get_gridspec().get_geometry()
    used = len(axes) - (rows - 1) * cols
    if used >= cols:
        return None
    ax = fig.add_subplot(spec.get_gridspec()[rows - 1, used:])
    ax.set_axis_off()
    return ax


def share_ylim(axes: Iterable) -> None:
    """Give compared panels one y range (the union of their own), so heights can be read across."""
    axes = [ax for ax in axes if ax.get_visible() and ax.has_data()]
    if not axes:
        return
    lims = np.array([ax.get_ylim() for ax in axes])
    lo, hi = float(lims.min()), float(lims.max())
    for ax in axes:
        ax.set_ylim(lo, hi)


#: The widest (and tallest) a figure may be, width over height: a wider strip does not fit a page.
MAX_ASPECT = 3.0


def printable_size(width: float | int, height: float | int) -> tuple[float, float]:
    """``(width, height)`` in inches, the height raised where the figure would be wider than
    `MAX_ASPECT`:1 (and the width where it would be taller)."""
    return float(max(width, height / MAX_ASPECT)), float(max(height, width / MAX_ASPECT))


def panel_grid(num_panels: int, ncols: int, panel_size=(3.6, 2.8), *, sharey: bool = False):
    """A constrained-layout figure with exactly ``num_panels`` axes (no empty slot is left visible)."""
    import math

    import matplotlib.pyplot as plt

    ncols = max(1, min(ncols, num_panels))
    nrows = max(1, math.ceil(num_panels / ncols))
    fig, grid = plt.subplots(
        nrows,
        ncols,
        figsize=printable_size(panel_size[0] * ncols + 1.6, panel_size[1] * nrows + 0.5),
        squeeze=False,
        sharey=sharey,
        layout="constrained",
    )
    axes = list(grid.flat)
    for ax in axes[num_panels:]:
        fig.delaxes(ax)
    return fig, axes[:num_panels]


def tidy_log_ticks(fig) -> None:
    """No minor tick labels on base-10 log axes (matplotlib labels minor ticks such as
    "6x10^0" when an axis spans under a decade, which clutters small panels). An axis spanning
    under two decades gets plain-number major ticks instead (1-2-5, or every digit under one
    decade: 0.6, 0.8, 1, 2), so it still carries numbers."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, LogLocator, NullFormatter

    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            if axis.get_scale() != "log" or getattr(axis.get_transform(), "base", 10) != 10:
                continue
            if isinstance(axis.get_major_locator(), FixedLocator):
                continue  # ticks placed on purpose (at the values run): kept
            lo, hi = sorted(axis.get_view_interval())
            if lo > 0 and hi / lo < 100:
                subs = _log_subs(ax, axis, float(np.log10(hi / lo)), dense=bool(hi / lo < 10))
                axis.set_major_locator(LogLocator(base=10, subs=subs))
                axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:.3g}"))
            axis.set_minor_formatter(NullFormatter())


#: Plain-number ticks per decade, densest first, with the smallest gap between two (in decades).
_SUBS = (((1.0, 2.0, 3.0, 4.0, 6.0, 8.0), np.log10(10 / 8)), ((1.0, 2.0, 5.0), np.log10(2)),
         ((1.0, 3.0), np.log10(3)), ((1.0,), 1.0))  # fmt: skip


def _log_subs(ax, axis, decades: float, *, dense: bool) -> tuple:
    """The densest `_SUBS` whose labels stay apart on this axis's length (a short panel gets
    fewer: 6, 8, 10 crowd a 1-decade axis 120 px high); under a decade starts from every digit."""
    box = ax.get_window_extent()
    length = box.height if axis is ax.yaxis else box.width
    font = axis.get_ticklabels()[0].get_fontsize() if axis.get_ticklabels() else 10.0
    need = (1.3 if axis is ax.yaxis else 2.6) * font * ax.figure.dpi / 72  # x labels are wider
    choices = _SUBS if dense else _SUBS[1:]
    for subs, gap in choices:
        if gap * length / max(decades, 1e-9) >= need:
            return subs
    return choices[-1][0]
