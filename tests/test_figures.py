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
        yield f"ablation_depth{view}", ablation.depth_figure(LAYERS, abl, setting, view)
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
    pm = {
        "lemma": {(3, 2.0): {"paper": {"noncollapse": 30, "samples": 64, "invariance_violated_any_step": 2},
                             "proof": {"noncollapse": 64, "samples": 64, "invariance_violated_any_step": 0}}},
        "joint": {(2, 2, 2.0): {"random": frac, "token1_at_e_d": frac},
                  (3, 3, 2.0): {"random": frac, "token1_at_e_d": frac}},
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
    check_figure(fig, "eigen_moduli")


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
