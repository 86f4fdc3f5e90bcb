"""The figure rules of rankdyn.plotting, checked on the matplotlib objects (no images compared).

Every plotting function: a y label on every panel, semi-log y for decay (log-log on request),
shared y limits for compared panels, legends outside the axes, no empty panel slot, the round-off
band at 10 eps(dtype) x scale for float32 data, and rates drawn as 1 - rate on a log axis. The
oracles are NumPy's ``finfo`` and the input arrays themselves, never the code's own output.
"""

import io
from contextlib import redirect_stdout
from types import SimpleNamespace

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pytest
from matplotlib.patches import Polygon, Rectangle

from rankdyn import plotting as P

EPS32 = float(np.finfo(np.float32).eps)


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def _decay(rate, layers, start=10.0, floor=None):
    """A geometric curve start * rate^t, clipped at a float32-like plateau ``floor``."""
    m = start * rate ** np.asarray(layers, float)
    return m if floor is None else np.maximum(m, floor)


def _data_axes(fig):
    """The panels of a figure (colour bars left out)."""
    bars = {a for a in fig.axes if a.get_label() == "<colorbar>"}
    return [a for a in fig.axes if a not in bars and a.get_visible()]


def _bands(ax):
    """y extents of the horizontal spans (axhspan) on ``ax``: the round-off band."""
    out = []
    for p in ax.patches:
        if isinstance(p, Rectangle | Polygon):
            # axhspan spans the whole width in axes coordinates.
            y = p.get_xy()
            ys = (
                np.asarray(y)[:, 1]
                if isinstance(p, Polygon)
                else np.array([p.get_y(), p.get_y() + p.get_height()])
            )
            out.append((float(ys.min()), float(ys.max())))
    return out


def _panels(layers, dtype):
    """Five compared panels (one per 'variant') of two curves each, plateauing at the float32 floor."""
    floor = 3 * EPS32  # relative plateau at round-off, scale 10
    return {
        f"variant {k}": {
            "complete": {
                "mean": _decay(0.2 + 0.1 * k, layers, floor=10 * floor).astype(dtype),
                "std": np.full(len(layers), 0.1),
            },
            "window": {"mean": _decay(0.97, layers).astype(dtype), "std": None},
        }
        for k in range(5)
    }


def test_band_panels_rules_float32():
    layers = np.arange(33)
    fig = P.plot_band_panels(layers, _panels(layers, np.float32), ncols=3, dtype="float32")
    axes = _data_axes(fig)
    # Exactly one axes per panel: the 3 + 2 layout leaves no empty slot behind.
    assert len(fig.axes) == 5 == len(axes)
    for i, ax in enumerate(axes):
        # The panels share their y range: each row says its label once, on the left.
        assert bool(ax.get_ylabel().strip()) == (i % 3 == 0), ax.get_title()
        assert ax.get_yscale() == "log" and ax.get_xscale() == "linear"  # semi-log y by default
        assert ax.get_legend() is None  # one legend for the figure, outside the panels
    lims = {tuple(np.round(ax.get_ylim(), 12)) for ax in axes}
    assert len(lims) == 1  # compared panels share one y range
    assert len(fig.legends) == 1
    assert {t.get_text() for t in fig.legends[0].get_texts()} == {"complete", "window"}
    # The band: from the bottom up to 10 eps(float32) x the largest layer-0 value (10 here).
    for ax in axes:
        bands = _bands(ax)
        assert len(bands) == 1
        assert bands[0][1] == pytest.approx(10 * EPS32 * 10.0, rel=1e-6)
        assert bands[0][0] <= ax.get_ylim()[0]
    # A curve that sits at its plateau lies inside the band (that is the point of drawing it).
    plateau = axes[0].get_lines()[0].get_ydata()[-1]
    assert plateau < _bands(axes[0])[0][1]


def test_band_panels_float64_band_below_data_and_loglog():
    layers = np.arange(20)
    panels = {
        "a": {"x": {"mean": _decay(0.9, layers), "std": None}},
        "b": {"x": {"mean": _decay(0.8, layers), "std": None}},
    }
    fig = P.plot_band_panels(layers, panels, dtype="float64", loglog=True, ylabel="mu")
    for i, ax in enumerate(_data_axes(fig)):
        assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
        assert ax.get_ylabel() == ("mu" if i == 0 else "")  # one row sharing its range: labelled once
        # float64's floor (2e-14 at scale 10) is far below the data: no band, limits untouched.
        assert _bands(ax) == []
        assert ax.get_ylim()[0] > 1e-6


def test_band_panels_per_panel_labels_rows_and_linear():
    layers = np.arange(10)
    panels = {
        "mu a": {"c": {"mean": _decay(0.5, layers), "std": None}},
        "mu b": {"c": {"mean": _decay(0.1, layers), "std": None}},
        "cos a": {"c": {"mean": _decay(0.9, layers, start=1e-2), "std": None}},
        "cos b": {"c": {"mean": _decay(0.99, layers, start=1e-2), "std": None}},
    }
    fig = P.plot_band_panels(
        layers, panels, ylabels={"mu a": "mu", "mu b": "mu"}, ylabel="1 - cos", sharey="row"
    )
    ax_a, ax_b, ax_c, ax_d = _data_axes(fig)
    # A row that shares its y axis labels it once, on its first panel (no repeated labels).
    assert [a.get_ylabel() for a in (ax_a, ax_b, ax_c, ax_d)] == ["mu", "", "1 - cos", ""]
    assert ax_a.get_ylim() == ax_b.get_ylim() and ax_c.get_ylim() == ax_d.get_ylim()  # shared per row
    assert ax_a.get_ylim() != ax_c.get_ylim()  # but not across rows (other quantity)

    panels = {
        "mu": {"c": {"mean": _decay(0.1, layers), "std": None}},  # reaches 1e-8 < the float32 floor
        "rank": {"c": {"mean": np.linspace(8, 1, 10), "std": None}},
    }
    fig = P.plot_band_panels(
        layers, panels, ylabels={"rank": "numerical rank"}, sharey=False, linear_y=("rank",), dtype="float32"
    )
    ax_mu, ax_rank = _data_axes(fig)
    assert ax_rank.get_yscale() == "linear" and _bands(ax_rank) == []  # bounded quantity: no log, no band
    assert ax_rank.get_ylabel() == "numerical rank" and ax_mu.get_ylabel().startswith("mu")
    assert len(_bands(ax_mu)) == 1


def test_metric_band_default_semilog_and_floor():
    layers = np.arange(30)
    ax = P.plot_metric_band(
        layers, _decay(0.3, layers, floor=1e-5), np.full(30, 1e-6), ylabel="mu", dtype=np.float32
    )
    assert ax.get_xscale() == "linear" and ax.get_yscale() == "log" and ax.get_ylabel() == "mu"
    assert _bands(ax)[0][1] == pytest.approx(10 * EPS32 * 10.0, rel=1e-6)
    ax = P.plot_metric_band(layers, _decay(0.3, layers), loglog=True)
    assert ax.get_xscale() == "log" and "0.5" in ax.get_xlabel()


def test_round_off_floor_follows_dtype_and_refuses_bad_input():
    assert P.round_off_floor("float32") == pytest.approx(10 * EPS32)
    assert P.round_off_floor(np.float64, 3.0) == pytest.approx(30 * np.finfo(np.float64).eps)
    with pytest.raises(ValueError, match="floating dtype"):
        P.round_off_floor("int32")
    with pytest.raises(ValueError, match="scale"):
        P.round_off_floor("float32", float("nan"))


def test_rates_vs_bounds_one_minus_rate_on_log_axis():
    fitted = np.array([0.5, 0.99, 0.999, 1.02])
    bounds = np.array([0.9, 0.999, 1.0, 0.9999])
    ax = P.plot_rates_vs_bounds(["a", "b", "c", "d"], fitted, bounds)
    assert ax.get_yscale() == "log" and ax.get_ylabel() == "decay per layer of mu (1 - factor)"
    lines = {ln.get_label(): ln for ln in ax.get_lines()}
    fit = lines["1 - fitted factor"]
    np.testing.assert_allclose(fit.get_xdata(), [0, 1, 2])
    np.testing.assert_allclose(fit.get_ydata(), 1 - fitted[:3], rtol=1e-12)
    bnd = next(ln for lab, ln in lines.items() if lab.startswith("1 - bound (measured"))
    np.testing.assert_allclose(bnd.get_ydata(), 1 - bounds[[0, 1, 3]], rtol=1e-9)
    # Bound = 1 in double precision and a factor >= 1 are marked on the bottom edge, not dropped.
    unresolved = next(ln for lab, ln in lines.items() if "< 1e-16" in lab)
    assert list(unresolved.get_xdata()) == [2]
    no_decay = next(ln for lab, ln in lines.items() if "no decay" in lab)
    assert list(no_decay.get_xdata()) == [3]
    assert ax.get_legend() is not None and ax.get_legend().get_bbox_to_anchor().y0 < ax.get_window_extent().y0


def test_rate_vs_dqk_log_decay():
    dqks = 2.0 ** np.arange(-3, 4)
    rates = {"complete": np.linspace(0.9, 0.01, 7), "window": np.linspace(0.99, 0.95, 7)}
    ax = P.plot_rate_vs_dqk(dqks, rates)
    assert ax.get_yscale() == "log" and ax.get_ylabel()
    np.testing.assert_allclose(ax.get_lines()[0].get_ydata(), 1 - rates["complete"])
    leg = ax.get_legend()
    assert (
        leg is not None and leg.get_bbox_to_anchor().x0 >= ax.get_window_extent().x1 - 1
    )  # right of the axes


def _sweep_ds():
    xr = pytest.importorskip("xarray")
    layers = np.arange(16)
    masks, dqks = ["complete", "window"], [0.125, 8.0]
    mu = np.empty((2, 2, 16, 2))
    for i in range(2):
        for j in range(2):
            mu[i, j, :, 0] = _decay(0.3 if i == 0 else 0.95 - 0.02 * j, layers, floor=4e-6)
            mu[i, j, :, 1] = 0.1 * mu[i, j, :, 0]
    rate = np.array([[0.3, 0.3], [0.95, 1.01]])
    ranks = np.array([[[1, 1, 1], [1, 1, 2]], [[4, 4, 3], [4, 4, 4]]], float)
    return xr.Dataset(
        {
            "mu": (("mask", "dqk", "layer", "stat"), mu),
            "mu_rate": (("mask", "dqk"), rate),
            "radius": (("mask", "dqk"), np.array([[1.0, 1.0], [7.0, 7.0]])),
            "final_num_rank": (("mask", "dqk", "sample"), ranks),
        },
        coords={"mask": masks, "dqk": dqks, "layer": layers, "stat": ["mean", "std"]},
        attrs={"name": "t", "dtype": "float32"},
    )


def test_sweep_mu_rules():
    fig = P.plot_sweep_mu(_sweep_ds(), hue="dqk")
    axes = _data_axes(fig)
    assert len(axes) == 2
    for ax in axes:
        assert ax.get_ylabel() and ax.get_yscale() == "log" and ax.get_xscale() == "linear"
    # The complete mask reaches the float32 floor, shaded; the window panel stays far above it.
    assert len(_bands(axes[0])) == 1 and _bands(axes[0])[0][1] == pytest.approx(10 * EPS32 * 10.0, rel=1e-6)
    assert not _bands(axes[1]) and axes[1].get_ylim()[0] > 10 * EPS32 * 10.0
    # A shared range would squeeze the window panel (0.4 decades) into 7% of a 5.7-decade axis:
    # each panel keeps its own, and it fits its curves.
    assert axes[0].get_ylim() != axes[1].get_ylim()
    assert np.log10(np.divide(*axes[1].get_ylim()[::-1])) < 1
    # Panels of similar ranges share one.
    ds = _sweep_ds()
    ds["mu"][0] = ds["mu"][1].values
    shared = _data_axes(P.plot_sweep_mu(ds, hue="dqk"))
    assert shared[0].get_ylim() == shared[1].get_ylim()
    assert len(fig.legends) == 1 and {t.get_text() for t in fig.legends[0].get_texts()} == {
        "dqk=0.125",
        "dqk=8",
    }


def test_sweep_rate_heatmap_of_one_minus_rate():
    from matplotlib.colors import LogNorm

    ds = _sweep_ds()
    fig = P.plot_sweep_rate(ds, "mask", "dqk")
    (ax,) = _data_axes(fig)
    assert ax.get_ylabel() == "dqk"
    img = ax.get_images()[0]
    assert isinstance(img.norm, LogNorm)
    # Image rows = dqk, columns = mask; the no-decay cell (rate 1.01) is masked, not coloured.
    arr = np.ma.filled(img.get_array().astype(float), np.nan)
    np.testing.assert_allclose(arr[0], [0.7, 0.05], rtol=1e-12)
    assert arr[1, 0] == pytest.approx(0.7) and np.isnan(arr[1, 1])
    texts = sorted(t.get_text() for t in ax.texts)
    assert texts == sorted(["0.7", "0.7", "0.05", "no decay"])
    cbars = [a for a in fig.axes if a.get_label() == "<colorbar>"]
    assert cbars and cbars[0].get_ylabel().startswith("1 -")


def test_sweep_rank_labels():
    fig = P.plot_sweep_rank(_sweep_ds())
    ax = _data_axes(fig)[0]
    assert ax.get_ylabel() and ax.get_xlabel()
    hist = ax.get_images()[0].get_array()
    np.testing.assert_allclose(np.asarray(hist)[0, 1], 1.0)  # cell (complete, 0.125): all samples rank 1


def _theory_inputs():
    rng = np.random.default_rng(0)
    t = np.linspace(0, 1, 6)[:, None]
    states = np.stack([np.stack([np.cos(t[:, 0] + i), np.sin(t[:, 0] + i)], -1) for i in range(2)], 1)
    example = {"A": np.array([0.6, 0.8]), "B": np.array([-0.6, -0.8]), "theta_A": 53.0}
    angles = np.linspace(0, 355, 72)
    basins = {2.0: {"angles": angles, "outcome": (angles > 200).astype(int), "predicted_arc": (200.0, 270.0)}}
    th = np.linspace(0, 355, 8)
    joints = {
        2.0: {
            "noncollapse": [rng.random((8, 8)) > 0.9],
            "theta1": th,
            "theta2": th,
            "horizons": [10, 100],
            "fraction": [0.2, 0.1],
            "ci": [(0.1, 0.3), (0.05, 0.2)],
        }
    }
    eq = [
        {
            "k": [1, 2, 2],
            "stable_rank": [1.0, 1.5, 1.7],
            "n": 2,
            "w": 2.0,
            "bound_full_rank": 1.8,
            "spectral_radius": [1.0, 1.2, 0.9],
        }
    ]
    frac = {"horizons": [10, 100], "fraction": [0.3, 0.2], "wilson95": [(0.2, 0.4), (0.1, 0.3)]}
    pm = {
        "joint": {(2, 2, 2.0): {"random": frac, "token1_at_e_d": frac}},
        "spec_joint": {(2, 2, 2.0): 0.06},
        "lemma": {(2, 2.0): {"cond": {"noncollapse": 3, "samples": 10, "invariance_violated_any_step": 1}}},
    }
    return states, example, basins, joints, eq, pm


def test_theory_figures_label_every_panel_and_keep_legends_outside():
    states, example, basins, joints, eq, pm = _theory_inputs()
    figs = [
        P.plot_counterexample_2d(states, states[None], example, title_w=2.0),
        P.plot_counterexample_2d_basins(basins, joints, {2.0: 0.07}),
        P.plot_equilibria_ranks(eq),
        P.plot_positive_measure(pm),
    ]
    for fig in figs:
        fig.canvas.draw()
        for ax in _data_axes(fig):
            assert ax.get_ylabel().strip(), (fig, ax.get_title())
            leg = ax.get_legend()
            if leg is not None:  # outside: the legend box does not overlap the data area
                lb, ab = leg.get_window_extent(), ax.get_window_extent()
                assert lb.x0 >= ab.x1 - 1 or lb.y1 <= ab.y0 + 1, ax.get_title()


def test_simulate_table_flags_layers_at_the_floor():
    from rankdyn._commands._table import print_table

    layers = np.arange(6)
    rel = np.array([1.0, 1e-2, 1e-5, 2e-6, 5e-7, 1e-7])  # float32 floor: 10 eps = 1.19e-6
    summary = {
        c: {"mean": np.ones(6)}
        for c in ("mu", "mu_normalized", "min_cos", "sigma_min", "num_rank", "eps_min")
    }
    summary["mu_rel"] = {"mean": rel}
    # The table reads the run's float dtype from the streamed summary's counts.
    traj = SimpleNamespace(layers=layers, summary=SimpleNamespace(count=np.ones(6, np.float32)))
    info = SimpleNamespace(strongly_connected=True, num_centers=1, radius=1)
    result = {
        "flags": {"nonfinite": 0, "degenerate_ln": 0, "batch": 1},
        "timing": {"compile_s": 0.0, "run_s": 0.0},
    }
    buf = io.StringIO()
    with redirect_stdout(buf):
        print_table(traj, summary, info, result)
    rows = [ln for ln in buf.getvalue().splitlines() if ln[:5].strip().isdigit()]
    flagged = [int(r.split()[0]) for r in rows if r.endswith("* at floor")]
    assert flagged == [4, 5]
    assert "float32" in buf.getvalue()
    # In float64 the same numbers are far above the floor: nothing is flagged.
    traj64 = SimpleNamespace(layers=layers, summary=SimpleNamespace(count=np.ones(6, np.float64)))
    buf = io.StringIO()
    with redirect_stdout(buf):
        print_table(traj64, summary, info, result)
    assert "at floor" not in buf.getvalue()
