"""Every reproduce figure, rendered from a small synthetic result (no simulation), is one a paper
could print: at most 2400 px a side at 100 dpi, a y range per panel that holds its data, no text
on top of a panel, no minor tick labels on log axes, and no layout warning.

Each figure is drawn by the same plotting call, with the same options, as its target draws it
(the call sites named in the comments); the data are synthetic bands and dicts of the shapes the
targets pass.
"""

import warnings

import matplotlib
import numpy as np
import pytest

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from rankdyn import plotting  # noqa: E402
from rankdyn.experiments.sim import ablation  # noqa: E402
from rankdyn.plotting._style import tidy_log_ticks  # noqa: E402

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


def check_series_visible(fig, name: str) -> None:
    """Every plotted series shows: enough points inside the view (two for a line without markers),
    and not drawn over another series (same line style and marker, within 1.5 px everywhere)."""
    fig.canvas.draw()
    for ax in fig.axes:
        lines = _data_lines(ax)
        for ln in lines:
            shown = _in_view(ax, ln.get_xdata(), ln.get_ydata()).sum()
            need = 1 if ln.get_marker() not in (None, "None", "", " ") else 2
            assert shown >= need, (
                f"{name} / {ax.get_title()!r}: series {ln.get_label()!r} has {shown} point(s) in view"
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


def check_aspect(fig, name: str) -> None:
    w, h = fig.get_size_inches()
    assert max(w / h, h / w) <= MAX_ASPECT, f"{name}: aspect {w:.1f} x {h:.1f} in is beyond {MAX_ASPECT}:1"


def check_colorbars(fig, name: str) -> None:
    """Every colour-mapped artist (image, mesh, coloured scatter) has a colorbar."""
    for ax in fig.axes:
        if ax.get_label() == "<colorbar>":
            continue  # a colorbar's own axes draws its scale as a mesh
        for art in [*ax.images, *ax.collections]:
            if getattr(art, "get_array", None) is None or art.get_array() is None:
                continue
            if getattr(art, "colorbar", None) is None and art.get_visible():
                assert False, f"{name} / {ax.get_title()!r}: a colour map without a colorbar"


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
            assert any(_style(ln) == style for _, ln in drawn), (
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
    check_series_visible(fig, name)
    check_errorbars_not_clipped(fig, name)
    check_colorbars(fig, name)
    check_legend_matches(fig, name)
    legends = list(fig.legends) + [ax.get_legend() for ax in fig.axes if ax.get_legend()]
    extra = legends + ([fig._suptitle] if fig._suptitle is not None else [])
    for artist in extra:
        ab = artist.get_window_extent(renderer)
        for ax, ob in boxes.items():
            assert not _boxes_overlap(ab, ob), f"{name}: legend or title lies on panel {ax.get_title()!r}"
    plt.close(fig)


def _sim_figures():
    """The simulation targets' figures (rankdyn/experiments/<target>.py, their plot calls)."""
    dt = np.float32
    # masks_collapse.run: four quantities, each its own y range.
    bands = {m: _band(r) for m, r in zip(MASKS, (0.3, 0.5, 0.97, 0.95))}
    panels = {
        "mu (eq. 4)": bands,
        "mu(LN(X)): direction only": bands,
        "mu / ||X||_F": {m: _band(0.9) for m in MASKS},
        "mean row norm: norm shrinkage": {m: _band(0.99, floor=0.1) for m in MASKS},
    }
    yield (
        "masks_collapse_mu",
        plotting.plot_band_panels(
            LAYERS,
            panels,
            ylabels={t: t.split(":")[0] for t in panels},
            sharey=False,
            dtype=dt,
            floor_panels=list(panels)[:3],
            suptitle="SAN without LN",
        ),
    )
    fig, ax = plt.subplots(figsize=(6, 3.5), layout="constrained")
    plotting.plot_rates_vs_bounds(
        list(MASKS), [0.3, 0.5, 1.01, 0.99], [0.9, 0.95, 1.0, 1 - 1e-30], ax=ax, title="t"
    )
    yield "masks_collapse_rates", fig
    # temperature.run: one panel per temperature, then the rate against d_QK.
    yield (
        "temperature_mu",
        plotting.plot_band_panels(
            LAYERS, {f"d_QK = {q}": bands for q in ("1/64", "1", "64")}, ncols=3, dtype=dt, suptitle="t"
        ),
    )
    fig, ax = plt.subplots(figsize=(5.5, 3.8), layout="constrained")
    dqks = 2.0 ** np.arange(-6, 7)
    plotting.plot_rate_vs_dqk(
        dqks, {m: 1 - 0.5 / (1 + dqks) / (i + 1) for i, m in enumerate(MASKS)}, ax=ax, marks=[1]
    )
    yield "temperature_rate", fig
    # layernorm_orthogonal.run: mu and 1 - min cosine, post and pre LN, a y range per row.
    cases = [f"{m} / {k}" for m in MASKS[:3] for k in ("sphere", "nonneg")]
    mu = {c: _band(0.9 + 0.01 * i, floor=1e-7) for i, c in enumerate(cases)}
    # The complete mask with LN: every token equal after one layer, mu exactly 0 from t = 1.
    mu[cases[0]] = {"mean": np.r_[1.0, np.zeros(64)], "std": np.zeros(65)}
    cos = {c: _band(0.8, start=0.5, floor=1e-7) for c in cases}
    shown = {
        "post-LN: mu": mu,
        "pre-LN: mu": mu,
        "post-LN: 1 - min cosine": cos,
        "pre-LN: 1 - min cosine": cos,
    }
    yield (
        "layernorm_orthogonal_mu",
        plotting.plot_band_panels(
            LAYERS, shown, ylabels={t: t.split(": ")[1] for t in shown}, sharey="row", dtype=dt, suptitle="t"
        ),
    )
    fig, ax = plt.subplots(figsize=(7, 3.8), layout="constrained")
    plotting.plot_rates_vs_bounds(cases, np.linspace(0.5, 0.99, 6), np.full(6, 1 - 1e-3), ax=ax, title="t")
    yield "layernorm_orthogonal_rates", fig
    # depth_table.run: eval vs train mode per mask.
    yield "depth_table_mu", plotting.plot_band_panels(
        LAYERS,
        {f"{m}, {p}": {"eval": _band(0.9), "train": _band(0.8)}
         for p in ("eval", "train") for m in MASKS[:3]},
        ncols=3, dtype=dt, suptitle="t",
    )  # fmt: skip
    # ablation.depth_figure: a row per variant, a column per mask; the SAN collapses to 1e-40.
    variants = ("SAN", "SAN+skip", "SAN+LN", "SAN+skip+LN", "full")
    modes = ("eval", "attn-dropout", "attn+hidden-dropout")
    abl = {
        f"{v}: {m}": {
            p: _band(0.25 if v == "SAN" else 0.999 - 0.002 * j, floor=1e-41)
            | {"color": f"C{j}", "linestyle": ("-", "--", ":")[j]}
            for j, p in enumerate(modes if "LN" in v or v == "full" else modes[:1])
        }
        for v in variants
        for m in MASKS
    }
    setting = {"n": 32, "d": 64, "heads": 4, "batch": 8, "dtype": dt}
    for view in (64, 12):
        fig = ablation.depth_figure(LAYERS, abl, setting, view)
        # One y label per row (the row shares its range), and a row run in eval mode only says so.
        assert sum(bool(ax.get_ylabel()) for ax in fig.axes) == len(variants)
        assert sum("(eval only)" in ax.get_title() for ax in fig.axes) == 2 * len(MASKS)
        yield f"ablation_depth{view}", fig
    # geometry.run: four quantities, linear y for the bounded ones.
    geo = {"num_rank": {m: {"mean": np.full(65, 32.0), "std": np.zeros(65)} for m in MASKS}}
    geo |= {"sigma_min": {m: _band(0.99) for m in MASKS}, "mean |cos|": {m: _band(1.0, 0.1) for m in MASKS}}
    geo |= {"stable_rank": {m: {"mean": np.linspace(20, 2, 65), "std": np.ones(65)} for m in MASKS}}
    yield "geometry", plotting.plot_band_panels(
        LAYERS, geo, ncols=2, panel_size=(3.4, 2.6), sharey=False, ylabels={t: t for t in geo},
        linear_y=("num_rank", "mean |cos|", "stable_rank"), suptitle="t",
    )  # fmt: skip


def _theory_figures():
    """The theory targets' figures (counterexample_2d, equilibria_ranks, positive_measure, undirected)."""
    from rankdyn._theory._constructions import example_2d

    ex = example_2d(2.0)
    th = np.linspace(0, 1.2, 20)
    path = np.stack([np.cos(th), np.sin(th)], -1)
    states = np.stack([path, path[::-1]], 1)  # (S, 2 tokens, 2)
    yield (
        "counterexample_2d_trajectories",
        plotting.plot_counterexample_2d(0.5 * states, np.stack([states, states]), ex, title_w=2.0),
    )
    angles = np.arange(0, 360, 2.0)
    arc = {"angles": angles, "outcome": (angles > 120) & (angles < 270), "predicted_arc": (121.0, 270.0)}
    basins = {w: arc for w in (1.5, 2.0, 3.0)}
    hor = [100, 1000]
    joint = {"theta1": np.linspace(-80, 80, 9), "theta2": np.linspace(0, 350, 8), "horizons": hor,
             "noncollapse": np.random.default_rng(0).random((2, 9, 8)) > 0.5, "fraction": [0.3, 0.28],
             "ci": [(0.25, 0.35), (0.22, 0.33)]}  # fmt: skip
    yield (
        "counterexample_2d_basin",
        plotting.plot_counterexample_2d_basins(basins, {1.5: joint, 2.0: joint, 3.0: joint}, {2.0: 0.27}),
    )
    results = []
    for n, w in ((3, 3.0), (4, 8.0)):
        k = np.repeat(np.arange(1, n + 1), 2 ** np.arange(1, n + 1))
        results.append({"n": n, "w": w, "k": k, "stable_rank": 1 + 0.3 * (k - 1), "bound_full_rank": 2.0,
                        "spectral_radius": 1 + 0.1 * k})  # fmt: skip
    yield "equilibria_ranks", plotting.plot_equilibria_ranks(results)
    frac = {"horizons": hor, "fraction": [0.4, 0.4], "wilson95": [(0.3, 0.5), (0.3, 0.5)]}
    kept = {"horizons": hor, "fraction": [1.0, 1.0], "wilson95": [(0.95, 1.0), (0.95, 1.0)]}  # all kept
    pm = {
        "lemma": {(3, 2.0): {"paper": {"noncollapse": 30, "samples": 64, "invariance_violated_any_step": 2},
                             "proof": {"noncollapse": 64, "samples": 64, "invariance_violated_any_step": 0}}},
        "joint": {(2, 2, 2.0): {"random": frac, "token1_at_e_d": kept},
                  (3, 3, 2.0): {"random": frac, "token1_at_e_d": kept}},
        "spec_joint": {(2, 2, 2.0): 0.35},
    }  # fmt: skip
    yield "positive_measure", plotting.plot_positive_measure(pm)
    pts = [
        dict(n=n, mask=m, attention=a, share=sh, lo=max(sh - 0.01, 0.0), hi=sh + 0.01,
             paper=0.05 if m == "causal" else 0.0)
        for n in (3, 6)
        for m in ("causal", "complete", "window", "window2")
        for a, sh in (("uniform", 0.0), ("symmetric", 0.07), ("generic", 0.004))
    ]  # fmt: skip
    yield "undirected", plotting.plot_undirected(pts, title="share keeping rank >= 2")


@pytest.mark.slow  # 15 figures drawn: about 20 s of CPU
def test_every_reproduce_figure_is_printable():
    names = []
    for name, fig in [*_sim_figures(), *_theory_figures()]:
        check_figure(fig, name)
        names.append(name)
    # One figure per figure a target writes (rankdyn/experiments/*.py "figures").
    assert len(names) == len(set(names)) == 15, names


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


def _temperature_measured(same: bool):
    from rankdyn.experiments._masktable import MASK_LABELS, PAPER_MASKS
    from rankdyn.experiments.sim import temperature as T

    q = len(T.DQKS)
    rates = {m: [0.5 + 0.03 * i + 0.01 * j for j in range(q)] for i, m in enumerate(PAPER_MASKS)}
    # ``same``: two masks' mu curves coincide (the windows at a high temperature, as measured).
    curves = {
        f"d_QK = 2^{int(np.log2(d))}": {
            MASK_LABELS[m]: _band(0.6 if same and i >= 2 else 0.3 + 0.1 * i)
            for i, m in enumerate(PAPER_MASKS)
        }
        for d in T.PAPER_DQKS
    }
    one = {m: 0.1 for m in PAPER_MASKS}
    return T.TemperatureMeasured(
        early_rate=rates, late_rate=rates, median_eps_layer0={m: [0.1] * q for m in PAPER_MASKS},
        spearman={m: -0.9 for m in PAPER_MASKS}, effect_1_64_minus_64=one,
        spread_shallow=one, spread_deep=one,
        layers=LAYERS, curves=curves, setting={"dtype": np.float32, "n": 32, "d": 64, "depth": 64},
    )  # fmt: skip


def _flow_clustering_measured():
    from rankdyn.experiments.flow import flow_clustering as F

    betas = (0.5, 1.0, 2.0, 3.0)
    times = np.concatenate([[0.0], np.geomspace(0.1, 3000.0, 40)])
    frac = np.clip((np.log10(times[None] + 1e-3) + 1) / 3 * (1 + 0.2 * np.arange(4)[:, None]), 0, 1)
    return F.FlowClusteringMeasured(
        betas=betas, final_fraction=tuple(float(f) for f in frac[:, -1]),
        final_clusters_max=(1.0, 1.0, 1.0, 2.0),
        median_time_to_cluster=(30.0, 40.0, 50.0, 80.0), steps_limit_hit=(0, 0, 0, 0), drift=1e-12,
        times=times, fraction=frac, batch=48,
    )  # fmt: skip


def test_targets_render_figures_that_pass_every_check(tmp_path):
    from rankdyn.experiments.flow import flow_clustering
    from rankdyn.experiments.sim import temperature

    figs, _ = _render(temperature, _temperature_measured(same=True), tmp_path)
    for name, fig in figs.items():
        check_figure(fig, name)
    figs, rendered = _render(flow_clustering, _flow_clustering_measured(), tmp_path)
    fig = figs["flow_clustering.png"]
    ax = fig.axes[0]
    check_ticks_were_run(ax.yaxis, np.arange(4), "flow_clustering")  # one row per beta run ...
    assert [t.get_text() for t in ax.get_yticklabels()] == ["0.5", "1", "2", "3"]  # ... labelled with it
    assert ax.get_xscale() == "log", "the clustering happens early: a log time axis"
    assert "48 starts" in ax.get_title()
    check_figure(fig, "flow_clustering")


def test_flow_limit_draws_every_setting_with_a_tick_at_every_step(tmp_path):
    from rankdyn.experiments.flow import flow_limit as L

    hs = (0.2, 0.1, 0.05, 0.025)
    settings = {
        k: L.SettingErrors(errors=tuple(float(c * h) for h in hs), order=1.0)
        for k, c in (("causal", 1.0), ("complete", 3.0))
    }
    figs, _ = _render(L, L.FlowLimitMeasured(hs=hs, settings=settings), tmp_path)
    fig = figs["flow_limit.png"]
    check_figure_kept(fig, "flow_limit")
    ax = fig.axes[0]
    labels = " ".join(t.get_text() for t in ax.get_legend().get_texts())
    assert "causal" in labels and "complete" in labels, labels  # both settings checked, both drawn
    check_ticks_were_run(ax.xaxis, hs, "flow_limit")
    shown = [t.get_text() for t in ax.get_xticklabels() if t.get_text()]
    assert sorted(shown, key=float) == sorted(f"{h:g}" for h in hs), shown  # the leftmost too
    plt.close(fig)


def check_figure_kept(fig, name):
    """`check_figure` without closing the figure (the caller reads it further)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(plt, "close", lambda *a: None)
        check_figure(fig, name)


def test_every_check_fails_on_the_figure_it_targets():
    # Each generic check, on a figure drawn the way the issue's figure was: a check that cannot
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
