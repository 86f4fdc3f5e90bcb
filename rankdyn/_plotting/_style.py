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

import functools
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
    shade_below(ax, top, f"{np.dtype(dtype).name} round-off floor" if label else None)
    return top


def shade_below(ax, top: float, text: str | None = None) -> None:
    """The floor band of `floor_band` at a given ``top`` (a floor that is not a dtype's round-off:
    a solver's resolution, a squared quantity's), labelled in place with ``text``."""
    lo, hi = ax.get_ylim()
    if top > lo:
        ax.axhspan(min(lo, top) / 10, top, color=BAND_COLOR, alpha=0.6, lw=0, zorder=0)
        ax.axhline(top, color="0.55", lw=0.6, ls=":", zorder=0.5)
        if text:  # labelled in place, not in the legend: every panel with a band says what it is
            ax.text(
                0.98,
                top,
                text,
                transform=ax.get_yaxis_transform(),
                ha="right",
                va="top",
                fontsize=6,
                color="0.35",
                zorder=0.6,
            )
    ax.set_ylim(lo, hi)


def coinciding(curves: dict, *, rtol: float = 0.05) -> list[list[str]]:
    """Groups of labels whose curves ``{label: (x, y)}`` coincide: the same x and every y within a
    factor ``1 + rtol`` where both are finite and positive (drawn on top of each other on a log
    axis). A figure names each group in its panel (docs/figures.md)."""
    groups: list[list[str]] = []
    items = [(k, np.asarray(x, float), np.asarray(y, float)) for k, (x, y) in curves.items()]
    for k, x, y in items:
        for g in groups:
            _, x0, y0 = next(it for it in items if it[0] == g[0])
            if x.shape != x0.shape or not np.array_equal(x, x0):
                continue
            ok = np.isfinite(y) & np.isfinite(y0) & (y > 0) & (y0 > 0)
            if ok.sum() >= 2 and np.all(np.abs(np.log(y[ok] / y0[ok])) <= np.log1p(rtol)):
                g.append(k)
                break
        else:
            groups.append([k])
    return [g for g in groups if len(g) > 1]


def note_coinciding(ax, curves: dict, *, rtol: float = 0.05) -> list[list[str]]:
    """Write in ``ax`` which of its ``curves`` coincide (`coinciding`); returns the groups."""
    groups = coinciding(curves, rtol=rtol)
    if groups:
        text = "\n".join(" = ".join(g) for g in groups) + f"\n(curves coincide within {100 * rtol:g}%)"
        ax.text(0.02, 0.03, text, transform=ax.transAxes, fontsize=6, color="0.25", va="bottom", ha="left")
    return groups


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
    decade: 0.6, 0.8, 1, 2), so it still carries numbers; one that would still show fewer than
    `MIN_LOG_TICKS` labels (100..130, or 0.015..2) gets a few round values (`_few_ticks`)."""
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
            if lo > 0 and len(_in_view(axis.get_major_locator().tick_values(lo, hi), lo, hi)) < MIN_LOG_TICKS:
                # Too few decades or digits in view to read the scale (100..130 shows "100" alone;
                # 0.015..2 shows 0.1 and 1): plain numbers at a few round values instead.
                axis.set_major_locator(_few_ticks_locator()())
                axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:.3g}"))
            axis.set_minor_formatter(NullFormatter())


#: The fewest labelled ticks a log axis shows (docs/figures.md): two cannot say it is a log scale.
MIN_LOG_TICKS = 3


def _in_view(ticks, lo: float, hi: float) -> np.ndarray:
    t = np.asarray(ticks, float)
    tol = 1e-9 * hi
    return t[(t >= lo - tol) & (t <= hi + tol)]


@functools.cache
def _few_ticks_locator():
    """The `Locator` class of `_few_ticks` (made on first use: matplotlib is imported lazily)."""
    from matplotlib.ticker import Locator

    class FewTicks(Locator):
        """`_few_ticks` of the axis's view when drawn (limits set later keep at least three)."""

        def __call__(self):
            return self.tick_values(*self.axis.get_view_interval())

        def tick_values(self, vmin, vmax):
            lo, hi = sorted((vmin, vmax))
            return _few_ticks(lo, hi) if lo > 0 else []

    return FewTicks


def _few_ticks(lo: float, hi: float) -> list[float]:
    """At least `MIN_LOG_TICKS` round values in ``[lo, hi]``: the 1-2-5 (then every digit) values
    of each decade, or, for a range under one step of those, evenly spaced round numbers."""
    for subs in ((1.0, 2.0, 5.0), (1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0)):
        decades = np.arange(np.floor(np.log10(lo)), np.ceil(np.log10(hi)) + 1)
        vals = _in_view((10.0 ** decades[:, None] * np.asarray(subs)).ravel(), lo, hi)
        if len(vals) >= MIN_LOG_TICKS:
            return vals.tolist()
    from matplotlib.ticker import MaxNLocator

    for nbins in range(4, 10):
        vals = _in_view(MaxNLocator(nbins=nbins, steps=[1, 2, 2.5, 5, 10]).tick_values(lo, hi), lo, hi)
        if len(vals) >= MIN_LOG_TICKS:
            break
    return vals.tolist()


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
