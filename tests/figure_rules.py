"""The figure convention of docs/figures.md, as checks on a matplotlib ``Figure``.

`check_convention` runs the rules that need nothing but the figure (`check_figure` in
tests/test_figures.py calls it for every figure it checks); `check_floor_band` and
`check_not_testable_distinct` also take what the figure is about (the floor it must shade, how
many of its points are "not testable"), so each figure's test calls them with that.
"""

from __future__ import annotations

import re

import numpy as np

#: The fewest labelled major ticks a log axis shows.
MIN_LOG_TICKS = 3
#: A title that names a model by its file ("bert model.zip", "x.gguf") or by its architecture and
#: variant alone ("llama full").
FILE_LIKE = re.compile(
    r"\S+\.(zip|gguf|safetensors|npz|pt|bin)\b|\b(llama|bert|gpt2|gpt-2|mpnet|qwen2|mistral)\s+full\b",
    re.IGNORECASE,
)
#: A log-y panel whose data fall this many decades below their top reach round-off (float64's
#: floor is 2.2e-15 of the scale): it must shade the floor.
ROUND_OFF_DECADES = 13.0
#: Dashed lines of two points each, this many or more in one panel: a line cut into segments, each
#: restarting its dash pattern (a dense branch then reads as solid).
MAX_DASHED_SEGMENTS = 4


def _ticks_in_view(axis) -> list[float]:
    """The major ticks inside the view whose label the formatter writes (not the labels' texts:
    a panel sharing its axis with its neighbour hides the same labels, left unset)."""
    lo, hi = sorted(axis.get_view_interval())
    tol = 1e-9 * max(abs(lo), abs(hi), 1e-300)
    locs = [float(x) for x in axis.get_majorticklocs() if lo - tol <= x <= hi + tol]
    labels = axis.get_major_formatter().format_ticks(locs) if locs else []
    return [x for x, t in zip(locs, labels) if t.strip()]


def check_log_ticks(fig, name: str) -> None:
    """Every log axis of a panel with data shows at least `MIN_LOG_TICKS` labelled major ticks
    (call after ``fig.canvas.draw()``: labels are set when drawn)."""
    for ax in fig.axes:
        if not ax.get_visible() or not ax.has_data() or ax.get_label() == "<colorbar>":
            continue
        for axis in (ax.xaxis, ax.yaxis):
            if axis.get_scale() != "log":
                continue
            ticks = _ticks_in_view(axis)
            assert len(ticks) >= MIN_LOG_TICKS, (
                f"{name} / {ax.get_title()!r}: a log axis with {len(ticks)} labelled tick(s) {ticks} "
                f"on {axis.get_view_interval()}"
            )


def _titles(fig) -> list[str]:
    out = [fig._suptitle.get_text()] if fig._suptitle is not None else []
    for ax in fig.axes:
        out += [ax.title.get_text(), ax._left_title.get_text(), ax._right_title.get_text()]
    return [t for t in out if t]


def check_titles_name_models(fig, name: str) -> None:
    """No title names a model by a file name or by its architecture and variant alone."""
    for title in _titles(fig):
        hit = FILE_LIKE.search(title)
        assert hit is None, f"{name}: title {title!r} names a file or 'arch full' ({hit.group(0)!r})"


def _is_dashed(ln) -> bool:
    return ln.get_linestyle() not in ("-", "None", "", " ", "solid")


def check_dashes_survive(fig, name: str) -> None:
    """A dashed curve is one polyline: no panel draws `MAX_DASHED_SEGMENTS` or more dashed
    two-point lines (one line per segment restarts the dash at every point)."""
    for ax in fig.axes:
        pieces = [
            ln
            for ln in ax.get_lines()
            if ln.get_transform() is ax.transData
            and _is_dashed(ln)
            and len(np.atleast_1d(ln.get_xdata())) == 2
        ]
        assert len(pieces) < MAX_DASHED_SEGMENTS, (
            f"{name} / {ax.get_title()!r}: {len(pieces)} dashed two-point lines (draw one line per run)"
        )


def floor_bands(ax) -> list[float]:
    """The tops of the full-width shaded bands (`axhspan`) of ``ax``, in data units."""
    from matplotlib.patches import Polygon, Rectangle

    tops = []
    for p in ax.patches:
        if not isinstance(p, Polygon | Rectangle) or p.get_transform() is ax.transData:
            continue
        # axhspan: x in axes fraction (0..1), y in data.
        xy = p.get_xy() if isinstance(p, Polygon) else p.get_bbox().get_points()
        xy = np.asarray(xy, float)
        if np.isclose(xy[:, 0].min(), 0) and np.isclose(xy[:, 0].max(), 1):
            tops.append(float(xy[:, 1].max()))
    return tops


def check_floor_band(ax, floor: float, name: str) -> None:
    """``ax`` shades the y range under ``floor`` (a band whose top is ``floor`` within 1%)."""
    tops = floor_bands(ax)
    assert any(np.isclose(t, floor, rtol=1e-2) for t in tops), (
        f"{name} / {ax.get_title()!r}: no round-off band at {floor:.3g} (bands: {tops})"
    )


def check_round_off_shaded(fig, name: str) -> None:
    """A log-y panel whose data fall `ROUND_OFF_DECADES` below their top (to round-off) shades a
    floor band, and that band lies above the lowest data (the curve's plateau sits in it)."""
    for ax in fig.axes:
        if ax.get_yscale() != "log" or ax.get_label() == "<colorbar>":
            continue
        ys = [
            np.asarray(ln.get_ydata(), float)
            for ln in ax.get_lines()
            if ln.get_visible() and ln.get_transform() is ax.transData
        ]
        y = np.concatenate(ys) if ys else np.zeros(0)
        y = y[np.isfinite(y) & (y > 0)]
        if y.size < 2 or np.log10(y.max() / y.min()) < ROUND_OFF_DECADES:
            continue
        tops = floor_bands(ax)
        assert tops and max(tops) >= y.min(), (
            f"{name} / {ax.get_title()!r}: data fall {np.log10(y.max() / y.min()):.0f} decades, "
            "to round-off, and no floor band is shaded above them"
        )


def check_not_testable_distinct(fig, num_untestable: int, name: str) -> None:
    """Exactly ``num_untestable`` points are drawn in a series labelled "not testable", in a style
    (marker, face, colour) no other labelled series uses: a "not testable" is not drawn as a pass."""
    from matplotlib.colors import to_rgba

    def style(ln):
        face = ln.get_markerfacecolor()
        return (
            ln.get_marker(),
            "none" if face in ("none", "None") else to_rgba(face),
            to_rgba(ln.get_color()),
        )

    series = [
        ln
        for ax in fig.axes
        for ln in ax.get_lines()
        if ln.get_label() and not ln.get_label().startswith("_") and ln.get_marker() not in ("None", "", " ")
    ]
    untestable = [ln for ln in series if "not testable" in ln.get_label()]
    drawn = sum(len(np.atleast_1d(ln.get_xdata())) for ln in untestable)
    assert drawn == num_untestable, f"{name}: {drawn} point(s) drawn as not testable, {num_untestable} are"
    others = {style(ln) for ln in series if ln not in untestable}
    for ln in untestable:
        assert style(ln) not in others, f"{name}: {ln.get_label()!r} is drawn like a tested series"


def check_convention(fig, name: str) -> None:
    """The rules of docs/figures.md that need only the figure (after ``fig.canvas.draw()``)."""
    check_log_ticks(fig, name)
    check_titles_name_models(fig, name)
    check_dashes_survive(fig, name)
    check_round_off_shaded(fig, name)
