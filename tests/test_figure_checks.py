"""Figures that argue for their verdict, each with the check a weaker version of it fails:
a figure draws the quantity its target's checks test, no cell of its grid is empty, a binary map has
a legend of its two outcomes, a count has integer ticks, a diverging map is centred at 0 and a title
does not sit on a y label. Figures are drawn by each target's own ``render`` from the synthetic
results of tests/figure_measured.py (no simulation); every figure of the targets in
``test_figures.CHECKED_ROUND4`` is checked here, not twice.
"""

import matplotlib
import numpy as np
import pytest

matplotlib.use("Agg")
import figure_measured  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
from test_figures import _render, check_figure_kept  # noqa: E402


def _grid_cells_used(fig) -> bool:
    """Every cell of the grid the figure's panels sit on holds an axes (data or a legend)."""
    specs = [ax.get_subplotspec() for ax in fig.axes if ax.get_subplotspec() is not None]
    rows, cols = specs[0].get_gridspec().get_geometry()
    used = set()
    for sp in specs:
        used |= {(r, c) for r in sp.rowspan for c in sp.colspan}
    return len(used) == rows * cols


def test_metastability_draws_the_fitted_plateau_lengths(tmp_path):
    module, m = figure_measured.flow_metastability()
    figs, _ = _render(module, m, tmp_path)
    (fig,) = figs.values()
    check_figure_kept(fig, "flow_metastability")
    betas = np.array([r.beta for r in m.per_beta])
    fits = [(ax, ln) for ax in fig.axes for ln in ax.get_lines() if ln.get_label().startswith("fit: log T")]
    assert len(fits) == 1, "the fitted line log T = a + c beta is drawn once"
    ax, fit = fits[0]
    x = np.asarray(fit.get_xdata(), float)
    assert np.allclose(fit.get_ydata(), np.exp(m.fit_a + m.fit_c * x)) and ax.get_yscale() == "log"
    assert x.min() == betas.min() and x.max() == betas.max()
    assert f"{m.fit_c:.2f}" in fit.get_label()
    (med,) = [ln for ln in ax.get_lines() if ln.get_label() == "median per beta"]
    assert np.allclose(med.get_xdata(), betas)
    assert np.allclose(med.get_ydata(), [r.median_plateau for r in m.per_beta])
    # Every run's plateau is a point on that panel, the censored ones (lower bounds) apart.
    runs = [ln for ln in ax.get_lines() if ln.get_marker() in ("o", "^")]
    assert sum(len(ln.get_xdata()) for ln in runs) == sum(len(r.durations) for r in m.per_beta)
    assert sum(len(ln.get_xdata()) for ln in runs if ln.get_marker() == "^") == 3
    # The cluster count, an integer, has integer ticks.
    (clusters,) = [a for a in fig.axes if a.get_ylabel() == "clusters"]
    ticks = [t for t in clusters.get_yticks() if clusters.get_ylim()[0] <= t <= clusters.get_ylim()[1]]
    assert np.allclose(ticks, np.round(ticks)), ticks
    plt.close(fig)


def test_flow_causal_draws_the_distance_to_token_1(tmp_path):
    module, m = figure_measured.flow_causal()
    figs, _ = _render(module, m, tmp_path)
    (fig,) = figs.values()
    check_figure_kept(fig, "flow_causal")
    dist, share = fig.axes
    assert "token 1" in dist.get_ylabel() and dist.get_yscale() == "log"
    # The tolerance of the check, and the fraction it requires, are drawn as lines.
    lines = [ln for ln in dist.get_lines() if ln.get_transform() is not dist.transData]
    eps = [ln for ln in lines if ln.get_ydata()[0] == module.EPS]
    assert eps, "the tolerance EPS is a reference line"
    assert any(ln.get_ydata()[0] == module.FRACTION for ln in share.get_lines())
    # The share of runs within EPS at T, per beta, ends at the fraction the check reads.
    curves = [ln for ln in share.get_lines() if ln.get_label().startswith("beta=")]
    assert [ln.get_ydata()[-1] for ln in curves] == [r.converged_fraction for r in m.per_beta]
    assert "token 1 moved" in fig.get_suptitle()
    plt.close(fig)


def test_counterexample_basin_fills_its_grid_and_has_a_discrete_legend(tmp_path):
    module, m = figure_measured.counterexample_2d()
    figs, _ = _render(module, m, tmp_path)
    fig = figs["counterexample_2d_basin.png"]
    check_figure_kept(fig, "counterexample_2d_basin")
    assert _grid_cells_used(fig), "a cell of the grid is left empty"
    assert not [ax for ax in fig.axes if ax.get_label() == "<colorbar>"], "a binary map with a colour bar"
    (img,) = [im for ax in fig.axes for im in ax.images]
    assert img.get_cmap().N == 2
    leg = img.axes.get_legend()
    labels = [t.get_text() for t in leg.get_texts()]
    assert len(labels) == 2 and "collapsed" in labels[0] and "rank 2 kept" in labels[1], labels
    traj = figs["counterexample_2d_trajectories.png"]
    check_figure_kept(traj, "counterexample_2d_trajectories")
    (arc,) = [ln for ln in traj.axes[1].get_lines() if ln.get_label().startswith("predicted basin")]
    radius = np.hypot(arc.get_xdata(), arc.get_ydata())
    assert np.allclose(radius, 1.0), f"the basin arc is drawn at radius {radius.min():.3g}, off the circle"
    plt.close("all")


@pytest.mark.slow
def test_geometry_rank_panel_counts_and_cosines_centre_at_zero(tmp_path):
    module, m = figure_measured.geometry()
    figs, _ = _render(module, m, tmp_path)
    fig = figs["geometry.png"]
    (rank,) = [ax for ax in fig.axes if ax.get_title() == "numerical rank"]
    ticks = [t for t in rank.get_yticks() if rank.get_ylim()[0] <= t <= rank.get_ylim()[1]]
    assert np.allclose(ticks, np.round(ticks)) and m.full_rank in ticks, ticks  # a rank is whole
    assert rank.get_ylim()[0] == 0 and rank.get_ylim()[1] > m.full_rank  # read against 0 and full
    check_figure_kept(fig, "geometry")
    cos = figs["geometry_initial_cosines.png"]
    off = np.asarray(m.initial_cosines)[:, ~np.eye(np.shape(m.initial_cosines)[-1], dtype=bool)]
    for img in [im for ax in cos.axes for im in ax.images]:
        norm = img.norm
        assert np.isclose(norm(0.0), 0.5), "the diverging map is centred at 0"
        assert norm(off.min()) <= 0.01, "the most negative cosine is full blue, not a pale cell"
        assert norm(1.0) >= 0.99
    check_figure_kept(cos, "geometry_initial_cosines")
    plt.close("all")


def _decades(lo, hi):
    return np.log10(hi / lo)


@pytest.mark.slow
def test_pretrained_ablation_fills_its_grid_and_fits_each_panel_to_its_data(tmp_path):
    module, m = figure_measured.pretrained_ablation()
    figs, _ = _render(module, m, tmp_path)
    assert set(figs) == {"pretrained_ablation_own.png"}  # quick mode: the checkpoint's own depth
    fig = figs["pretrained_ablation_own.png"]
    check_figure_kept(fig, "pretrained_ablation_own")
    assert _grid_cells_used(fig), "the sixth cell of the 3 + 2 grid is empty"
    panels = [ax for ax in fig.axes if ax.has_data()]
    assert len(panels) == 5
    for ax in panels:
        ys = [
            np.asarray(ln.get_ydata(), float) for ln in ax.get_lines() if ln.get_transform() is ax.transData
        ]
        y = np.concatenate(ys)
        y = y[np.isfinite(y) & (y > 0)]
        # No range forced from another panel: the axis spans at most a decade more than its data.
        assert _decades(*ax.get_ylim()) <= _decades(y.min(), y.max()) + 1, (ax.get_title(), ax.get_ylim())
    plt.close(fig)


def test_attention_sinks_title_clears_the_y_labels(tmp_path):
    module, m = figure_measured.attention_sinks()
    figs, _ = _render(module, m, tmp_path)
    assert set(figs) == {"attention_sinks.png"}
    fig = figs["attention_sinks.png"]
    check_figure_kept(fig, "attention_sinks")  # the title clear of every label (check_figure)
    # The model by its name, the excerpts' n and their text (docs/figures.md).
    title = fig.get_suptitle()
    assert m.run.model["name"] in title and f"n = {m.run.n}" in title and m.run.corpus["name"] in title
    fig.canvas.draw()
    r = fig.canvas.get_renderer()
    top = fig._suptitle.get_window_extent(r)
    for ax in fig.axes:
        assert ax.yaxis.label.get_window_extent(r).y1 < top.y0, ax.get_ylabel()
    plt.close(fig)
