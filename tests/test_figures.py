"""Every reproduce figure, drawn by its target's own ``render`` from a synthetic ``Measured``
(tests/figure_measured.py: no simulation), is one a paper could print: at most 2400 px a side at
100 dpi and 3:1, a y range per panel that holds its data, no text on top of a panel or of another
tick label, no minor tick labels on log axes, no layout warning, every series visible, no clipped
error bar, a colorbar for every colour map, legend entries that match what is drawn, and no
isolated spike of round-off. Then, per figure, the check that its old version failed.
"""

import warnings

import matplotlib
import numpy as np
import pytest

matplotlib.use("Agg")
import figure_measured  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
from figure_rules import check_convention, check_not_testable_distinct  # noqa: E402

from rankdyn import plotting  # noqa: E402
from rankdyn._plotting._style import tidy_log_ticks  # noqa: E402
from rankdyn._reproduce._registry import REGISTRY  # noqa: E402

MAX_PX = 2400
LAYERS = np.arange(0, 65)
MASKS = ("complete", "causal", "sliding window", "uni-dir. window")


def _band(rate, start=1.0, floor=0.0):
    mean = np.maximum(start * rate ** LAYERS.astype(float), floor)
    return {"mean": mean, "std": 0.2 * mean}


def _boxes_overlap(a, b, min_area=2.0) -> bool:
    w = min(a.x1, b.x1) - max(a.x0, b.x0)
    h = min(a.y1, b.y1) - max(a.y0, b.y0)
    return w > 0 and h > 0 and w * h > min_area


def _texts(ax):
    """The text an axes draws around itself: title, axis labels, visible tick labels."""
    out = [ax.title, ax._left_title, ax._right_title, ax.xaxis.label, ax.yaxis.label]
    for axis in (ax.xaxis, ax.yaxis):
        out += _drawn_ticklabels(axis, minor=False) + _drawn_ticklabels(axis, minor=True)
    return [t for t in out if t.get_visible() and t.get_text().strip()]


def _drawn_ticklabels(axis, *, minor: bool):
    """Tick labels inside the axis's view (matplotlib keeps labels of ticks outside it, undrawn)."""
    lo, hi = sorted(axis.get_view_interval())
    locs = axis.get_minorticklocs() if minor else axis.get_majorticklocs()
    labels = axis.get_ticklabels(minor=minor)
    tol = 1e-9 * max(abs(lo), abs(hi), 1e-300)
    return [t for x, t in zip(locs, labels) if lo - tol <= x <= hi + tol and t.get_visible() and t.get_text()]


def _data_y(ax):
    ys = []
    for line in ax.get_lines():
        if line.get_visible() and line.get_transform() is ax.transData:
            ys.append(np.asarray(line.get_ydata(), float))
    for coll in ax.collections:
        if coll.get_offset_transform() is ax.transData and len(coll.get_offsets()):
            ys.append(np.asarray(coll.get_offsets(), float)[:, 1])
    y = np.concatenate(ys) if ys else np.zeros(0)
    y = y[np.isfinite(y)]
    return y[y > 0] if ax.get_yscale() == "log" else y


MAX_ASPECT = 3.0


def _in_view(ax, x, y):
    """Mask of the points drawn inside the axes' view (finite, positive on a log axis)."""
    x, y = np.asarray(x, float).ravel(), np.asarray(y, float).ravel()
    ok = np.isfinite(x) & np.isfinite(y)
    for v, scale, (lo, hi) in ((x, ax.get_xscale(), ax.get_xlim()), (y, ax.get_yscale(), ax.get_ylim())):
        lo, hi = sorted((lo, hi))
        tol = 1e-9 * max(abs(lo), abs(hi))
        ok &= (v >= lo - tol) & (v <= hi + tol) & ((v > 0) if scale == "log" else True)
    return ok


def _data_lines(ax):
    return [
        ln for ln in ax.get_lines()
        if ln.get_visible() and ln.get_transform() is ax.transData and len(np.atleast_1d(ln.get_xdata()))
    ]  # fmt: skip


def _dash(ln):
    """How a line is drawn: its dash pattern (a custom one reads as "--" in get_linestyle) and marker."""
    return (ln.get_linestyle(), str(getattr(ln, "_unscaled_dash_pattern", None)), ln.get_marker())


#: A labelled line spanning less than this share of the x view hides at the edge of the others.
SHORT_SPAN = 0.02


def _has_marker(ln) -> bool:
    return ln.get_marker() not in (None, "None", "", " ")


def check_series_visible(fig, name: str, *, drawn: bool = False) -> None:
    """Every plotted series shows: enough points inside the view (two for a line without markers),
    not drawn over another series (same line style and marker, within 1.5 px everywhere), and a
    labelled line that spans almost no x range (a curve that is 0 from t = 1) has markers and is
    named in its panel (an annotation), else it hides behind the others at the left edge.
    ``drawn``: the caller has just drawn the figure (`check_figure`): these rules then read the
    layout its other rules read (constrained layout moves panels by a few px on each new draw)."""
    if not drawn:
        fig.canvas.draw()
    for ax in fig.axes:
        lines = _data_lines(ax)
        named = " ".join(t.get_text() for t in ax.texts)
        for ln in lines:
            ok = _in_view(ax, ln.get_xdata(), ln.get_ydata())
            shown = ok.sum()
            need = 1 if _has_marker(ln) else 2
            assert shown >= need, (
                f"{name} / {ax.get_title()!r}: series {ln.get_label()!r} has {shown} point(s) in view"
            )
            lab, x = ln.get_label(), np.asarray(ln.get_xdata(), float)[ok]
            lo, hi = sorted(ax.get_xlim())
            drawn_as_line = ln.get_linestyle() not in ("None", "", " ")  # markers alone always show
            if drawn_as_line and lab and not lab.startswith("_") and ax.get_xscale() == "linear" and x.size:
                if np.ptp(x) < SHORT_SPAN * (hi - lo):
                    assert _has_marker(ln) and lab in named, (
                        f"{name} / {ax.get_title()!r}: {lab!r} spans {np.ptp(x):g} of {hi - lo:g} in x "
                        "without markers and a label in the panel: it hides at the edge"
                    )
        for i, a in enumerate(lines):
            xa, ya = np.asarray(a.get_xdata(), float), np.asarray(a.get_ydata(), float)
            for b in lines[i + 1 :]:
                xb, yb = np.asarray(b.get_xdata(), float), np.asarray(b.get_ydata(), float)
                if xa.shape != xb.shape or xa.size < 2 or not np.array_equal(xa, xb):
                    continue
                if _dash(a) != _dash(b):
                    continue  # drawn differently: both stay readable where they coincide
                both = _in_view(ax, xa, ya) & _in_view(ax, xb, yb)
                if both.sum() < 2:
                    continue
                pa = ax.transData.transform(np.c_[xa[both], ya[both]])
                pb = ax.transData.transform(np.c_[xb[both], yb[both]])
                assert np.max(np.abs(pa - pb)) > 1.5, (
                    f"{name} / {ax.get_title()!r}: {b.get_label()!r} lies on top of {a.get_label()!r}"
                )


def check_errorbars_not_clipped(fig, name: str) -> None:
    """No error bar runs past its axes (its end would be cut off, hiding the interval)."""
    from matplotlib.container import ErrorbarContainer

    for ax in fig.axes:
        for cont in ax.containers:
            if not isinstance(cont, ErrorbarContainer):
                continue
            for coll in cont.lines[2]:
                for seg in coll.get_segments():
                    seg = np.asarray(seg, float)
                    assert _in_view(ax, seg[:, 0], seg[:, 1]).all(), (
                        f"{name} / {ax.get_title()!r}: an error bar of {cont.get_label()!r} is clipped "
                        f"({seg[:, 1].min():.3g}..{seg[:, 1].max():.3g} outside {ax.get_ylim()})"
                    )


def check_ticks_were_run(axis, values, name: str) -> None:
    """Every labelled tick of ``axis`` sits at a value that was run (``values``)."""
    vals = np.asarray(values, float)
    for loc, t in zip(axis.get_majorticklocs(), axis.get_ticklabels()):
        lo, hi = sorted(axis.get_view_interval())
        if t.get_text() and lo <= loc <= hi:
            assert np.isclose(vals, loc, rtol=1e-9, atol=1e-12).any(), (
                f"{name}: tick {t.get_text()!r} at {loc:g} is a value never run ({vals.tolist()})"
            )


def check_no_spikes(fig, name: str) -> None:
    """No line has an isolated spike: a vertex more than a decade (log y) away from two equal
    neighbours, the mark a lone round-off sample leaves between two substituted values."""
    for ax in fig.axes:
        if ax.get_yscale() != "log":
            continue
        for ln in ax.get_lines():
            if ln.get_transform() is not ax.transData or _has_marker(ln):
                continue
            y = np.asarray(ln.get_ydata(), float)
            with np.errstate(divide="ignore", invalid="ignore"):
                ly = np.log10(y)
            a, b, c = ly[:-2], ly[1:-1], ly[2:]
            spike = np.isfinite(a + b + c) & (np.abs(a - c) < 1e-9) & (np.abs(b - a) > 1)
            assert not spike.any(), (
                f"{name} / {ax.get_title()!r}: a spike at x = {np.asarray(ln.get_xdata())[1:-1][spike][:3]}"
            )


def check_ticklabels_apart(fig, name: str) -> None:
    """The drawn tick labels of an axis do not overlap one another. Rotated labels are parallel
    slanted lines: apart when their anchors' distance across the slant exceeds a line's height."""
    renderer = fig.canvas.get_renderer()
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            texts = _drawn_ticklabels(axis, minor=False)
            for i, a in enumerate(texts):
                for b in texts[i + 1 :]:
                    rot = np.deg2rad(a.get_rotation() % 180)
                    if a.get_rotation() % 90:
                        pa, pb = (ax.transData.transform(t.get_position()) for t in (a, b))
                        along = abs(pa[0] - pb[0]) if axis is ax.xaxis else abs(pa[1] - pb[1])
                        across = along * (np.sin(rot) if axis is ax.xaxis else np.cos(rot))
                        lines = a.get_text().count("\n") + 1
                        high = lines * a.get_fontsize() * fig.dpi / 72
                        assert across > 0.9 * high, (
                            f"{name} / {ax.get_title()!r}: {a.get_text()!r} on {b.get_text()!r}"
                        )
                    else:
                        wa, wb = a.get_window_extent(renderer), b.get_window_extent(renderer)
                        assert not _boxes_overlap(wa, wb), (
                            f"{name} / {ax.get_title()!r}: {a.get_text()!r}, {b.get_text()!r} overlap"
                        )


def check_aspect(fig, name: str) -> None:
    w, h = fig.get_size_inches()
    assert max(w / h, h / w) <= MAX_ASPECT, f"{name}: aspect {w:.1f} x {h:.1f} in is beyond {MAX_ASPECT}:1"


def check_colorbars(fig, name: str) -> None:
    """Every colour-mapped artist (image, mesh, coloured scatter) has a colorbar: its own, or one
    shared with artists of the same colour map and limits."""
    mapped = []
    for ax in fig.axes:
        if ax.get_label() == "<colorbar>":
            continue  # a colorbar's own axes draws its scale as a mesh
        for art in [*ax.images, *ax.collections]:
            if getattr(art, "get_array", None) is None or art.get_array() is None or not art.get_visible():
                continue
            mapped.append((ax, art))
    scales = {(a.get_cmap().name, tuple(a.get_clim())) for _, a in mapped if getattr(a, "colorbar", None)}
    for ax, art in mapped:
        if getattr(art, "colorbar", None) is None and not _categories_in_legend(ax, art):
            assert (art.get_cmap().name, tuple(art.get_clim())) in scales, (
                f"{name} / {ax.get_title()!r}: a colour map without a colorbar"
            )


def _categories_in_legend(ax, art) -> bool:
    """A map of a few discrete outcomes (a `ListedColormap` of at most 8 colours) explained by a
    legend of patches, one per colour: a colour bar would suggest a continuum between them."""
    from matplotlib.colors import ListedColormap, to_rgba
    from matplotlib.patches import Patch

    cmap, leg = art.get_cmap(), ax.get_legend()
    if not isinstance(cmap, ListedColormap) or cmap.N > 8 or leg is None:
        return False
    shown = {to_rgba(h.get_facecolor()) for h in leg.legend_handles if isinstance(h, Patch)}
    return all(to_rgba(c) in shown for c in cmap.colors)


def _style(art):
    from matplotlib.colors import to_rgba

    return (art.get_marker(), art.get_linestyle() if art.get_marker() in ("None", "", " ") else None,
            to_rgba(art.get_color()))  # fmt: skip


def check_legend_matches(fig, name: str) -> None:
    """Every legend entry stands for something drawn: its own artist shows data in view, or (a
    proxy entry) a drawn line has the same marker, style and colour."""
    from matplotlib.lines import Line2D

    labelled = {}
    drawn = []
    for ax in fig.axes:
        for art, lab in zip(*ax.get_legend_handles_labels()):
            labelled.setdefault(lab, []).append((ax, art))
        drawn += [(ax, ln) for ln in _data_lines(ax) if _in_view(ax, ln.get_xdata(), ln.get_ydata()).any()]
        # Reference lines (axhline, axvline) span the axes by construction.
        drawn += [
            (ax, ln) for ln in ax.get_lines() if ln.get_visible() and ln.get_transform() is not ax.transData
        ]
    legends = list(fig.legends) + [ax.get_legend() for ax in fig.axes if ax.get_legend()]
    for leg in legends:
        for text in leg.get_texts():
            lab = text.get_text()
            arts = labelled.get(lab, [])
            lines = [(ax, a) for ax, a in arts if isinstance(a, Line2D) and a.get_transform() is ax.transData]
            if not lines or len(lines) < len(arts):
                continue  # patches, collections, containers: drawn by construction
            if any(_in_view(ax, a.get_xdata(), a.get_ydata()).any() for ax, a in lines):
                continue
            style = _style(lines[0][1])
            # A key of a line style alone (no marker: "dashed = unstable") matches any line drawn in
            # that style; one with a marker must match a drawn marker's shape and colour.
            key = (lambda st: st[:2]) if style[0] in ("None", "", " ") else (lambda st: st)
            assert any(key(_style(ln)) == key(style) for _, ln in drawn), (
                f"{name}: legend entry {lab!r} ({style[0]!r}) matches nothing drawn"
            )


def check_figure(fig, name: str) -> None:
    """The printable-figure rules; a layout warning (tight_layout, constrained) is an error."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        tidy_log_ticks(fig)  # as save_figure does before saving
        fig.canvas.draw()
    w, h = fig.get_size_inches() * 100
    assert w <= MAX_PX and h <= MAX_PX, f"{name}: {w:.0f} x {h:.0f} px at 100 dpi"
    renderer = fig.canvas.get_renderer()
    axes = [ax for ax in fig.axes if ax.get_visible() and ax.has_data()]
    assert axes, name
    boxes = {ax: ax.get_window_extent(renderer) for ax in axes}
    for ax in axes:
        y = _data_y(ax)
        lo, hi = sorted(ax.get_ylim())
        if y.size:
            span = (np.log10(hi) - np.log10(lo)) if ax.get_yscale() == "log" else hi - lo
            pad = 1e-6 * span
            inside = (
                (np.log10(y) >= np.log10(lo) - pad) & (np.log10(y) <= np.log10(hi) + pad)
                if ax.get_yscale() == "log"
                else (y >= lo - pad) & (y <= hi + pad)
            )
            assert inside.mean() >= 0.99, (
                f"{name} / {ax.get_title()!r}: y range {lo:.3g}..{hi:.3g} cuts the data"
            )
        for axis in (ax.xaxis, ax.yaxis):
            minor = [t.get_text() for t in _drawn_ticklabels(axis, minor=True)]
            assert not minor or axis.get_scale() != "log", f"{name}: minor tick labels {minor[:3]}"
        for t in _texts(ax):
            tb = t.get_window_extent(renderer)
            for other, ob in boxes.items():
                if other is not ax:
                    assert not _boxes_overlap(tb, ob), f"{name}: {t.get_text()!r} lies on another panel"
    check_aspect(fig, name)
    check_series_visible(fig, name, drawn=True)  # drawn above
    check_no_spikes(fig, name)
    check_ticklabels_apart(fig, name)
    check_errorbars_not_clipped(fig, name)
    check_colorbars(fig, name)
    check_legend_matches(fig, name)
    check_convention(fig, name)  # docs/figures.md: log ticks, model names, dashes, round-off band
    legends = list(fig.legends) + [ax.get_legend() for ax in fig.axes if ax.get_legend()]
    extra = legends + ([fig._suptitle] if fig._suptitle is not None else [])
    for artist in extra:
        ab = artist.get_window_extent(renderer)
        for ax, ob in boxes.items():
            assert not _boxes_overlap(ab, ob), f"{name}: legend or title lies on panel {ax.get_title()!r}"
    if fig._suptitle is not None:
        tb = fig._suptitle.get_window_extent(renderer)
        for ax in axes:  # a title above the panels, clear of their titles, labels and ticks
            for t in _texts(ax):
                assert not _boxes_overlap(t.get_window_extent(renderer), tb), (
                    f"{name}: the title lies on {t.get_text()!r}"
                )
        for leg in legends:
            assert not _boxes_overlap(leg.get_window_extent(renderer), tb), (
                f"{name}: a legend lies on the title"
            )
    plt.close(fig)


def test_eigen_moduli_grid_is_printable_for_hundreds_of_equilibria():
    rng = np.random.default_rng(0)
    ranks = np.repeat([1, 2, 3, 4], [40, 200, 300, 60]).tolist()
    moduli = [rng.uniform(0.1, 2.0, 12) for _ in ranks]
    fig = plotting.plot_equilibria_moduli_grid(
        moduli, ranks, closed_form=(rng.random(len(ranks)) > 0.5).tolist(), title="t"
    )
    assert len(fig.axes) == 4
    rows, cols = fig.axes[0].get_subplotspec().get_gridspec().get_geometry()
    assert rows * cols == 4, f"{rows} x {cols} grid for 4 ranks: empty cells"
    assert all("equilibria" not in ax.get_title() for ax in fig.axes)  # classes, as the CLI counts them
    check_figure(fig, "eigen_moduli")
    one = plotting.plot_equilibria_moduli_grid([moduli[0]], [1], title="t")
    assert one.axes[0].get_title() == "rank 1: 1 class"
    plt.close(one)


@pytest.mark.slow
def test_checks_catch_a_cut_y_range_and_a_strip():
    # The checks can fail: a y range cut by hand, and an 8-panel strip wider than 2400 px.
    fig, ax = plt.subplots(layout="constrained")
    ax.plot(LAYERS, _band(0.5)["mean"])
    ax.set_yscale("log")
    ax.set_ylim(1e-3, 10)
    with pytest.raises(AssertionError, match="cuts the data"):
        check_figure(fig, "cut")
    fig = plotting.plot_band_panels(LAYERS, {f"p{i}": {"a": _band(0.5)} for i in range(8)}, ncols=8)
    with pytest.raises(AssertionError, match="px at 100 dpi"):
        check_figure(fig, "strip")
    plt.close("all")


# -- Figures rendered by each target's own ``render`` from a synthetic ``Measured`` (no compute) --


def _render(module, measured, tmp_path, *, quick=True):
    """Run a target's ``render``, keeping the figures it saves open: ``{file name: Figure}``, the
    ``Rendered``. Its figures are saved (and closed) in the order of ``Rendered.figures``."""
    kept = []

    def keep(fig=None):  # save_figure closes each figure once saved: keep it for the checks
        kept.append(fig)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(plt, "close", keep)
        rendered = module.render(tmp_path, measured, module.checks(measured), quick=quick)
    figs = [f for f in kept if isinstance(f, matplotlib.figure.Figure)]
    assert len(figs) == len(rendered.figures), (len(figs), rendered.figures)
    assert all((tmp_path / f).is_file() for f in rendered.figures)
    return dict(zip(rendered.figures, figs)), rendered


def _rendered(target: str, tmp_path):
    """The figures of ``target`` (a registry name) drawn from its synthetic measured result."""
    module, measured = getattr(figure_measured, target.replace("-", "_"))()
    return _render(module, measured, tmp_path)


def check_figure_kept(fig, name):
    """`check_figure` without closing the figure (the caller reads it further)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(plt, "close", lambda *a: None)
        check_figure(fig, name)


#: Targets whose every figure a test below renders and checks in full (not drawn twice).
CHECKED_BELOW = ("ablation", "undirected", "temperature", "flow-clustering", "flow-limit")
#: ... and those whose every figure a test of tests/test_figure_checks.py renders and checks.
CHECKED_ROUND4 = (
    "flow-metastability",
    "flow-causal",
    "counterexample-2d",
    "pretrained-ablation",
    "attention-sinks",
)
#: ... and those whose every figure a test of tests/test_figure_convention.py renders and checks.
CHECKED_CONVENTION = ("long-context-radius", "normalisation-speed", "layernorm-orthogonal")
SLOW_RENDERS = ("masks-collapse", "geometry", "layernorm-orthogonal", "depth-table", "pretrained-temperature")


def test_every_target_has_a_synthetic_result():
    # A new target cannot skip the figure checks: each registered one has a builder (and a render).
    for t in REGISTRY:
        assert callable(getattr(figure_measured, t.name.replace("-", "_"), None)), t.name
        assert callable(t.load().render), t.name


@pytest.mark.parametrize(
    "target",
    [
        pytest.param(t.name, marks=pytest.mark.slow) if t.name in SLOW_RENDERS else t.name
        for t in REGISTRY
        if t.name not in CHECKED_BELOW + CHECKED_ROUND4 + CHECKED_CONVENTION
    ],
)
def test_every_target_renders_printable_figures(target, tmp_path):
    # Every registered target draws its figures from a synthetic result, and each passes every check.
    figs, rendered = _rendered(target, tmp_path)
    assert figs, f"{target}: no figure"
    for name, fig in figs.items():
        check_figure(fig, f"{target}/{name}")


# -- Figures, each with the check its old version failed ---------------------------


def test_undirected_draws_the_certified_equilibria_beside_the_searches(tmp_path):
    module, m = figure_measured.undirected()
    figs, _ = _render(module, m, tmp_path)
    fig = figs["undirected.png"]
    assert len(fig.axes) == 3, "the searches, and two panels of certified equilibria"
    search, ratio, radius = fig.axes
    # Every certified equilibrium (this run's and the stored, re-proven ones) in both lower panels,
    # the window masks among them.
    want = len(m.certificates) + len(m.stored)
    for ax in (ratio, radius):
        drawn = sum(len(ln.get_xdata()) for ln in ax.get_lines() if ln.get_transform() is ax.transData
                    and _has_marker(ln))  # fmt: skip
        assert drawn == want, (ax.get_title(), drawn, want)
        ticks = " ".join(t.get_text() for t in ax.get_xticklabels())
        assert "window" in ticks and "complete" in ticks, ticks
    bounds = [ln.get_ydata()[0] for ln in radius.get_lines() if _has_marker(ln)]
    assert max(bounds) < 1 < radius.get_ylim()[1]  # stable: under the drawn line at 1
    # A search that found nothing is drawn at its value, 0, inside the axes (not "below the axis").
    zeros = [p for p in m.points if p["share"] == 0]
    at_zero = [c for c in search.containers if np.asarray(c.lines[0].get_ydata(), float).tolist() == [0.0]]
    assert len(at_zero) >= 2 * len(zeros), "every share of 0 (held-out and basin) drawn at 0"
    assert search.get_yscale() == "linear" and search.get_ylim()[0] < 0 < search.get_ylim()[1]
    # Every undirected-mask equilibrium here is a stored certificate: the figure says so.
    assert "stored certificates" in " ".join(t.get_text() for t in ratio.texts)
    check_figure_kept(fig, "undirected")  # the legend matches what is drawn, among the rest
    plt.close(fig)


@pytest.mark.slow
def test_layernorm_complete_curve_is_named_and_no_round_off_spike(tmp_path):
    figs, _ = _rendered("layernorm-orthogonal", tmp_path)
    fig = figs["layernorm_orthogonal_mu.png"]
    for ax in fig.axes:
        # The complete mask's lone round-off sample at t = 355 (below the floor, between exact
        # zeros) is not drawn at all: no line has a vertex there.
        for ln in ax.get_lines():
            x = np.asarray(ln.get_xdata(), float)
            y = np.asarray(ln.get_ydata(), float)
            assert not (np.isfinite(y) & (x == 355) & (y < 1e-8)).any(), ax.get_title()
    check_no_spikes(fig, "layernorm_orthogonal_mu")
    for ax in fig.axes:
        (complete,) = [ln for ln in ax.get_lines() if ln.get_label() == "complete / sphere"]
        assert _has_marker(complete)
        assert any("complete / sphere" in t.get_text() and "t = 1" in t.get_text() for t in ax.texts)
    check_figure_kept(fig, "layernorm_orthogonal_mu")  # check_series_visible among the rest
    plt.close(fig)


@pytest.mark.slow  # renders a whole target's figures
def test_ablation_axes_stop_near_the_floor_and_labels_are_shared(tmp_path):
    figs, _ = _rendered("ablation", tmp_path)
    for view in (128, 12):
        fig = figs[f"ablation_depth{view}.png"]
        # float32 underflow (1e-40) is not an axis: every panel stops 3 decades under the floor.
        assert min(ax.get_ylim()[0] for ax in fig.axes) > 1e-12
        # The quantity is named once; rows by variant, columns by mask; no two panels repeat a label.
        labels = [ax.get_ylabel() for ax in fig.axes if ax.get_ylabel()]
        assert len(labels) == len(set(labels)) == 5, labels
        assert fig._supylabel is not None and "mu" in fig._supylabel.get_text()
        assert sum("eval only" in lab for lab in labels) == 2  # SAN and SAN+skip ran in eval mode only
        # A legend entry drawn in only some rows says which.
        (leg,) = fig.legends
        for text in leg.get_texts():
            lab = text.get_text()
            panels = sum(any(ln.get_label() == lab for ln in ax.get_lines()) for ax in fig.axes)
            assert panels in (0, len(fig.axes)) or "only" in lab, (lab, panels)
        check_figure_kept(fig, f"ablation_depth{view}")
        plt.close(fig)


@pytest.mark.slow
def test_rates_figure_draws_bounds_of_one_below_the_axis_with_their_value(tmp_path):
    module, m = figure_measured.masks_collapse()
    figs, _ = _render(module, m, tmp_path)
    fig = figs["masks_collapse_rates.png"]
    (ax,) = fig.axes
    one = [k for k, v in m.per_mask.items() if v.bound_rate == 1.0]
    (below,) = [ln for ln in ax.get_lines() if ln.get_marker() == "v"]
    # On the bottom edge (axes coordinates), not at a data value such as 1e-11, with its value.
    assert below.get_transform() is not ax.transData and np.all(np.asarray(below.get_ydata()) == 0)
    assert len(below.get_xdata()) == len(one)
    written = [t.get_text() for t in ax.texts]
    for k in one:
        v = m.per_mask[k]
        want = v.log10_eps_pow_r - np.log10(v.radius)  # 1 - (1 - x)^(1/r) = x / r for x ~ 1e-41
        assert any(f"e{int(np.floor(want))}" in t for t in written), (k, written)
    # A vacuous bound's fitted point is drawn "not testable", not as a pass (docs/figures.md).
    untestable = [k for k, v in m.per_mask.items() if not module._bound_check(k, v).testable]
    check_not_testable_distinct(fig, sum(m.per_mask[k].fitted_rate < 1 for k in untestable), "masks_collapse")
    check_figure_kept(fig, "masks_collapse_rates")
    plt.close(fig)


@pytest.mark.slow
def test_temperature_and_flow_clustering_keep_their_fixes(tmp_path):
    figs, _ = _render(*figure_measured.temperature(same=True), tmp_path)
    for name, fig in figs.items():
        check_figure(fig, name)  # two coinciding curves stay apart (dash patterns)
    figs, rendered = _rendered("flow-clustering", tmp_path)
    fig = figs["flow_clustering.png"]
    ax = fig.axes[0]
    check_ticks_were_run(ax.yaxis, np.arange(4), "flow_clustering")  # one row per beta run ...
    assert [t.get_text() for t in ax.get_yticklabels()] == ["0.5", "1", "2", "3"]  # ... labelled with it
    assert ax.get_xscale() == "log", "the clustering happens early: a log time axis"
    assert "48 starts" in ax.get_title()
    check_figure(fig, "flow_clustering")


def test_flow_limit_draws_every_setting_with_a_tick_at_every_step(tmp_path):
    module, m = figure_measured.flow_limit()
    figs, _ = _render(module, m, tmp_path)
    fig = figs["flow_limit.png"]
    check_figure_kept(fig, "flow_limit")
    ax = fig.axes[0]
    labels = " ".join(t.get_text() for t in ax.get_legend().get_texts())
    assert "causal" in labels and "complete" in labels, labels  # both settings checked, both drawn
    check_ticks_were_run(ax.xaxis, m.hs, "flow_limit")
    shown = [t.get_text() for t in ax.get_xticklabels() if t.get_text()]
    assert sorted(shown, key=float) == sorted(f"{h:g}" for h in m.hs), shown  # the leftmost too
    plt.close(fig)


def test_every_check_fails_on_the_figure_it_targets():
    # Each generic check, on a figure drawn the way the figure was: a check that cannot
    # fail would pass these too.
    from matplotlib.lines import Line2D

    fig, ax = plt.subplots(figsize=(6, 4), layout="constrained")  # two series drawn alike, on top
    ax.semilogy(LAYERS, _band(0.5)["mean"], label="a")
    ax.semilogy(LAYERS, _band(0.5)["mean"], label="b")
    with pytest.raises(AssertionError, match="lies on top of"):
        check_series_visible(fig, "same")
    fig, ax = plt.subplots(figsize=(6, 4), layout="constrained")  # a curve that is 0 after t = 0
    ax.semilogy(LAYERS, np.r_[1.0, np.zeros(64)], label="complete")
    ax.semilogy(LAYERS, _band(0.9)["mean"], label="causal")
    with pytest.raises(AssertionError, match="point\\(s\\) in view"):
        check_series_visible(fig, "zero")
    fig, ax = plt.subplots(figsize=(6, 4), layout="constrained")  # error bars cut at the top
    ax.errorbar([1, 2], [0.98, 0.99], yerr=[[0.1, 0.1], [0.1, 0.1]], label="x")
    ax.set_ylim(0, 1.0)
    with pytest.raises(AssertionError, match="clipped"):
        check_errorbars_not_clipped(fig, "clip")
    fig, ax = plt.subplots(figsize=(6, 4), layout="constrained")  # betas 1.5, 2.5 never run
    ax.pcolormesh([0, 1, 2], [0.5, 1, 2, 3], np.ones((3, 2)))
    with pytest.raises(AssertionError, match="never run"):
        check_ticks_were_run(ax.yaxis, [0.5, 1, 2, 3], "ticks")
    with pytest.raises(AssertionError, match="colorbar"):
        check_colorbars(fig, "cmap")
    with pytest.raises(AssertionError, match="aspect"):
        check_aspect(plt.figure(figsize=(20.5, 5.3)), "strip")
    fig, ax = plt.subplots(figsize=(6, 4), layout="constrained")  # a grey proxy matching nothing
    ax.plot([1, 2], [1, 2], "v", color="C0", label="search")
    ax.plot([], [], "v", mfc="none", color="0.3", label="0 / below axis")
    ax.legend()
    with pytest.raises(AssertionError, match="matches nothing drawn"):
        check_legend_matches(fig, "proxy")
    assert Line2D  # the proxy above is a Line2D without data
    plt.close("all")
