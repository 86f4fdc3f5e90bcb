"""The figure convention (docs/figures.md), each rule on the figure issue 55 found breaking it.

Figures are drawn from stored records, never by running a target or a command's compute: the
reproduce targets' synthetic `Measured` (tests/figure_measured.py), and the README's `rankdyn
continue` and `rankdyn basins` outputs trimmed to what their figures read
(tests/figure_records/). Each test names the rule and the old figure that failed it; the rules
are in tests/figure_rules.py (`check_figure` runs the ones that need only the figure).
"""

import json
from pathlib import Path
from types import SimpleNamespace as NS

import matplotlib
import numpy as np
import pytest

matplotlib.use("Agg")
import figure_measured  # noqa: E402
import figure_rules as R  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
from test_figures import _render, check_figure_kept  # noqa: E402

RECORDS = Path(__file__).parent / "figure_records"


def _kept(draw):
    """Run ``draw()`` (a command's own figure code, which saves and closes), keeping its figures."""
    kept = []
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(plt, "close", lambda fig=None: kept.append(fig))
        draw()
    return [f for f in kept if isinstance(f, matplotlib.figure.Figure)]


def test_long_context_radius_shades_the_round_off_floor(tmp_path):
    # Old: mu_t / mu_0 plateaus near 1e-15, below float64's floor, on a white background.
    from rankdyn._observe._tolerances import round_off_floor

    module, m = figure_measured.long_context_radius()
    (fig,) = _render(module, m, tmp_path)[0].values()
    R.check_floor_band(fig.axes[0], round_off_floor(np.float64), "long_context_radius")
    check_figure_kept(fig, "long_context_radius")  # check_round_off_shaded among the rest
    plt.close(fig)


def test_normalisation_speed_shades_its_floors_names_the_model_and_the_coinciding_curves(tmp_path):
    # Old: the flow's post falls to 1e-29, eight decades under the solver's floor, unshaded; the
    # checkpoint's panel was titled "bert model.zip"; pre and peri lay on each other unremarked.
    from rankdyn._observe._tolerances import round_off_floor

    module, m = figure_measured.normalisation_speed()
    (fig,) = _render(module, m, tmp_path)[0].values()
    flow, layers, ckpt = fig.axes[:3]
    R.check_floor_band(flow, m.var_floor, "normalisation_speed flow")
    R.check_floor_band(layers, round_off_floor(np.float64) ** 2, "normalisation_speed layers")
    assert ckpt.get_title().startswith("all-MiniLM-L6-v2"), ckpt.get_title()
    notes = " ".join(t.get_text() for t in flow.texts)
    assert "pre = peri" in notes and "coincide" in notes, notes
    assert "coincide" not in " ".join(t.get_text() for t in ckpt.texts)  # apart: no note
    check_figure_kept(fig, "normalisation_speed")
    plt.close(fig)


def test_normalisation_speed_names_the_checkpoint_by_its_name(monkeypatch):
    # Old: "bert model.zip", the architecture and the file of the installed all-MiniLM-L6-v2.
    import rankdyn._trained._installed as I
    from rankdyn._reproduce.flow.normalisation_speed import checkpoint_title

    ckpt = NS(path="/cache/rankdyn/minilm/model.zip", arch="bert", num_layers=6, sha256="53aa51172d14" * 5)
    monkeypatch.setattr(I, "known_model_name", lambda path: I.MODEL_NAMES["minilm"])  # installed
    title = checkpoint_title(ckpt)
    assert title.startswith("all-MiniLM-L6-v2 (bert, 6 layers") and R.FILE_LIKE.search(title) is None, title


@pytest.mark.slow  # layernorm_orthogonal_mu.png is a slow render (test_figures.SLOW_RENDERS)
def test_rate_plots_draw_not_testable_apart_from_passes(tmp_path):
    # Old: a fitted point whose bound is vacuous ("not testable") was the same blue dot as a pass.
    # (masks_collapse_rates.png: in test_figures' test_rates_figure_draws_bounds_of_one_below_...)
    module, m = figure_measured.layernorm_orthogonal()
    figs, _ = _render(module, m, tmp_path)
    untestable = [k for k, v in m.scored.items() if not module._bound_check(k, v).testable]
    assert untestable, "the record has no vacuous bound: the rule is not exercised"
    drawn = sum(m.scored[k].fitted_rate < 1 for k in untestable)  # a factor >= 1 sits on the edge
    R.check_not_testable_distinct(figs["layernorm_orthogonal_rates.png"], drawn, "layernorm_orthogonal")
    for name, fig in figs.items():
        check_figure_kept(fig, name)
    plt.close("all")


def _continue_figure(tmp_path):
    from rankdyn._commands import continuation as C

    rec = json.loads((RECORDS / "readme_continue.json").read_text())
    args = NS(measure="projection", mask="causal", value="bidiagonal", qk="zero", n=2, d=2, out=tmp_path)
    (fig,) = _kept(lambda: C._plot(rec["branches"], args))
    return fig, rec["branches"]


def test_readme_continue_draws_every_branch_and_labels_both_folds(tmp_path):
    # Old: branch 2 (the same curve as branch 1, from its other end) hid under it, the unstable
    # branches were 2-point dashed segments (solid when dense), and one of the two folds had a label.
    fig, branches = _continue_figure(tmp_path)
    (ax,) = fig.axes
    R.check_dashes_survive(fig, "bifurcation")
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert any(lab.startswith("branch 2 (on the curve of branch 1") for lab in labels), labels
    # The hidden branch is drawn wider than the one above it, with its points marked.
    wide = [ln for ln in ax.get_lines() if ln.get_linewidth() >= 4 and len(ln.get_xdata())]
    assert wide and all(ln.get_marker() == "o" and ln.get_zorder() < 2 for ln in wide)
    folds = [(i, b) for i, br in enumerate(branches) for b in br["bifurcations"] if b["kind"] == "fold"]
    assert len(folds) == 2
    text = " ".join(t.get_text() for t in ax.texts)
    for i, _ in folds:  # each fold's branch is named in its label
        assert str(i) in text.split("fold")[1], text
    check_figure_kept(fig, "readme_continue")
    plt.close(fig)


def test_dense_unstable_branch_is_one_dashed_line():
    # Old: one Line2D per segment, each restarting the dash: 200 short dashed pieces read as solid.
    from rankdyn.plotting import plot_bifurcation

    p = np.linspace(0, 1, 201)
    pts = np.stack([np.array([[1.0, 0.0], [np.cos(t), np.sin(t)]]) for t in p])
    br = {"params": p, "points": pts, "stable": p < 0.3, "bifurcations": [], "param_name": "w"}
    ax = plot_bifurcation([br])
    drawn = [ln for ln in ax.get_lines() if len(ln.get_xdata())]
    assert sorted(ln.get_linestyle() for ln in drawn) == ["-", "--"]  # one run each
    (dashed,) = [ln for ln in drawn if ln.get_linestyle() == "--"]
    assert len(dashed.get_xdata()) == 1 + np.sum(p >= 0.3)  # from the last stable point on
    R.check_dashes_survive(ax.figure, "dense")
    plt.close(ax.figure)


def test_readme_basins_marks_where_the_rank_2_attractor_is_born(tmp_path):
    # Old: basins.png did not mark the fold the scan is about (w = 1, where rank 2 is born).
    from rankdyn._commands import basins as B

    rec = json.loads((RECORDS / "readme_basins.json").read_text())
    a = np.asarray
    scan = NS(params=a(rec["param"]), attractors=list(zip(rec["periods"], rec["labels"])),
              fractions=a(rec["fractions"]), lo=a(rec["lo"]), hi=a(rec["hi"]),
              not_settled=a(rec["not_settled"]))  # fmt: skip
    args = NS(mask="causal", value="bidiagonal", qk="zero", n=2, d=2, starts=1000, horizon=1000, param="w")
    args.out = tmp_path
    (fig,) = _kept(lambda: B._plot(scan, rec["attractors"], args))
    (ax,) = fig.axes
    (note,) = [t.get_text() for t in ax.texts if "first reached" in t.get_text()]
    assert "rank 2" in note and "(1, 1.1]" in note, note
    spans = [
        p for p in ax.patches if np.isclose(p.get_x(), 1.0) and np.isclose(p.get_x() + p.get_width(), 1.1)
    ]
    assert spans, "the interval where rank 2 is born is shaded"
    check_figure_kept(fig, "readme_basins")
    plt.close(fig)


def test_log_axes_carry_three_ticks_on_a_checkpoint_mu_figure(tmp_path):
    # Old: a checkpoint run's mu.png (mu 100..130 along 7 layers) showed one tick, "100".
    from rankdyn._plotting._runs import save_mu_figure

    t = np.arange(7)
    mu = (100 + 5 * t, 2 + 0 * t)
    rel = (0.9 - 0.05 * t, 0.01 + 0 * t)
    (fig,) = _kept(lambda: save_mu_figure(t, mu, rel, tmp_path / "mu.png", title="SmolLM2", dtype=np.float32))
    fig.canvas.draw()
    R.check_log_ticks(fig, "mu.png")
    check_figure_kept(fig, "mu.png")
    plt.close(fig)


def test_attention_sinks_cli_title_names_model_n_and_text(monkeypatch):
    # Old: the checkpoint run's attention_sinks.png was titled "llama full".
    import rankdyn._trained._installed as I
    from rankdyn._commands._checkpoint import run_title
    from rankdyn.plotting import plot_attention_sinks

    monkeypatch.setattr(I, "known_model_name", lambda path: I.MODEL_NAMES["smollm2"])  # installed
    ckpt = NS(path="/cache/SmolLM2-135M-Instruct-Q4_1.gguf", arch="llama", d=576)
    title = run_title(ckpt, "full", "causal", {"text": "/home/me/corpus.txt"}, 8, 64)
    assert "SmolLM2-135M-Instruct" in title and "n=64" in title and "corpus.txt" in title, title
    _, m = figure_measured.attention_sinks()
    drawn = {"this run": m.stats["trained full"], "scale-matched control": m.stats["scale-matched full"]}
    fig = plot_attention_sinks(drawn, title=title)
    check_figure_kept(fig, "attention_sinks (CLI)")  # check_titles_name_models among the rest
    plt.close(fig)


def test_every_rule_fails_on_the_figure_it_targets():
    # Each rule on a figure drawn the way the figure was.
    fig, ax = plt.subplots()  # one tick on a narrow log axis
    ax.semilogy([0, 1], [100, 130])
    ax.set_ylim(95, 135)
    fig.canvas.draw()
    with pytest.raises(AssertionError, match="labelled tick"):
        R.check_log_ticks(fig, "narrow")
    fig, ax = plt.subplots()
    ax.set_title("bert model.zip")
    ax.plot([0, 1], [0, 1])
    with pytest.raises(AssertionError, match="names a file"):
        R.check_titles_name_models(fig, "file")
    fig.suptitle("llama full")
    ax.set_title("")
    with pytest.raises(AssertionError, match="names a file"):
        R.check_titles_name_models(fig, "arch")
    fig, ax = plt.subplots()  # a branch drawn segment by segment
    for j in range(10):
        ax.plot([j, j + 1], [j, j + 1], "--")
    with pytest.raises(AssertionError, match="dashed two-point"):
        R.check_dashes_survive(fig, "segments")
    fig, ax = plt.subplots()  # a curve at 1e-29, no band
    ax.semilogy(np.arange(30), np.geomspace(1, 1e-29, 30))
    with pytest.raises(AssertionError, match="no floor band"):
        R.check_round_off_shaded(fig, "unshaded")
    with pytest.raises(AssertionError, match="no round-off band"):
        R.check_floor_band(ax, 2.2e-15, "unshaded")
    fig, ax = plt.subplots()  # not testable drawn as the pass
    ax.plot([0, 1], [0.1, 0.2], "o", color="tab:blue", label="1 - fitted factor")
    with pytest.raises(AssertionError, match="drawn as not testable"):
        R.check_not_testable_distinct(fig, 1, "same")
    ax.plot([2], [0.3], "o", color="tab:blue", label="not testable")
    with pytest.raises(AssertionError, match="drawn like a tested series"):
        R.check_not_testable_distinct(fig, 1, "same")
    plt.close("all")
