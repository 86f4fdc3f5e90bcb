"""`rankdyn plot DIR [DIR ...] --metric M`: overlays saved runs, labelled by what differs; bad
input is one error line and exit 2. The runs are small synthetic metrics.json files (no compute)."""

import json

import numpy as np
import pytest

from rankdyn._commands.plot import run_labels
from rankdyn.cli import main


def _run(tmp_path, name, rate, **config):
    layers = np.arange(9)
    mean = 2.0 * rate**layers
    run = {
        "config": {"command": "simulate", "mask": "causal", "dqk": None, "n": 8, "out": str(tmp_path / name)}
        | config,
        "layers": layers.tolist(),
        "metrics": {"mu": {"mean": mean.tolist(), "std": (0.1 * mean).tolist()}},
    }
    (tmp_path / name).mkdir()
    (tmp_path / name / "metrics.json").write_text(json.dumps(run))
    return tmp_path / name


def test_plot_overlays_runs_with_labels_from_configs(tmp_path, capsys):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from rankdyn.plotting import plot_runs

    a = _run(tmp_path, "a", 0.5, mask="causal")
    b = _run(tmp_path, "b", 0.8, mask="complete", dqk=4.0)
    out = tmp_path / "mu.png"
    assert main(["plot", str(a), str(b), "--metric", "mu", "--logx", "--out", str(out)]) == 0
    assert out.stat().st_size > 1000
    assert "mask=causal dqk=None; mask=complete dqk=4.0" in capsys.readouterr().out
    # The overlay itself: both curves with their labels, log-log with --logx, log-y without.
    runs = [json.loads((d / "metrics.json").read_text()) for d in (a, b)]
    for logx, xscale in ((True, "log"), (False, "linear")):
        ax = plot_runs(runs, "mu", ["A", "B"], logx=logx)
        assert (ax.get_xscale(), ax.get_yscale()) == (xscale, "log")
        assert [ln.get_label() for ln in ax.get_lines()][:2] == ["A", "B"]
        np.testing.assert_allclose(ax.get_lines()[1].get_ydata(), runs[1]["metrics"]["mu"]["mean"])
        plt.close(ax.figure)


def test_labels_fall_back_to_folder_names(tmp_path):
    same = [_run(tmp_path, f"seed{i}", 0.5) for i in range(2)]
    runs = [json.loads((d / "metrics.json").read_text()) for d in same]
    assert run_labels(runs, same) == ["seed0", "seed1"]  # "out" differs, but it is not a setting


@pytest.mark.parametrize(
    "make, argv_tail, message",
    [
        (lambda p: p / "missing", ["--metric", "mu"], "no such folder"),
        (lambda p: p, ["--metric", "mu"], "no metrics.json"),
        (lambda p: _run(p, "r", 0.5), ["--metric", "eff_rank"], "--metric eff_rank: not recorded"),
        (lambda p: _run(p, "r", 0.5), ["--metric", "mu", "--out", "x.pdf"], "ending in .png"),
    ],
)
def test_bad_input_is_one_error_line(tmp_path, capsys, make, argv_tail, message):
    assert main(["plot", str(make(tmp_path)), *argv_tail]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("rankdyn plot: error:") and message in err[0], err


def test_overlay_has_a_title_and_shades_the_float32_floor(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from rankdyn._observe._tolerances import round_off_floor
    from rankdyn.plotting import plot_runs

    # A SAN-like run that reaches float32 round-off (2 * 0.05^8 ~ 8e-11) next to a slow one.
    runs = [
        json.loads((_run(tmp_path, n, r) / "metrics.json").read_text()) for n, r in (("a", 0.05), ("b", 0.9))
    ]
    ax = plot_runs(runs, "mu", ["A", "B"], title="mu: 2 runs overlaid")
    assert ax.get_title() == "mu: 2 runs overlaid"
    floor = round_off_floor(np.float32, 2.0)
    tops = [p.get_path().get_extents(p.get_transform() - ax.transData).y1 for p in ax.patches]
    assert any(np.isclose(t, floor, rtol=1e-6) for t in tops), (tops, floor)
    plt.close(ax.figure)
    # Every run in float64 (--x64): the band is float64's, far below these curves' data.
    for r in runs:
        r["config"]["x64"] = True
    ax = plot_runs(runs, "mu", ["A", "B"])
    tops = [p.get_path().get_extents(p.get_transform() - ax.transData).y1 for p in ax.patches]
    assert not any(np.isclose(t, floor, rtol=1e-6) for t in tops)
    plt.close(ax.figure)


def test_overlay_keeps_the_axes_wide_with_long_labels(tmp_path):
    # Labels of runs that differ in many flags (as `rankdyn plot` writes them) go under the axes,
    # one per line: right of them they took two thirds of the width.
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from rankdyn.plotting import plot_runs

    runs = [
        json.loads((_run(tmp_path, n, r) / "metrics.json").read_text()) for n, r in (("a", 0.5), ("b", 0.7))
    ]
    labels = [
        f"mask={m} dqk=64.0 norm=pre placement=attention-input init=orthogonal" for m in ("causal", "window")
    ]
    ax = plot_runs(runs, "mu", labels)
    fig = ax.figure
    fig.canvas.draw()
    assert ax.get_window_extent().width > 0.6 * fig.bbox.width
    (leg,) = fig.legends
    assert [t.get_text() for t in leg.get_texts()] == labels
    assert leg.get_window_extent().y1 < ax.get_window_extent().y0  # under the axes
    plt.close(fig)


def test_plot_names_the_folder_it_was_given(tmp_path, capsys):
    """A `rankdyn continue` folder is named as such (it was "metrics.json is not part of the
    result", i.e. re-run), and a symlink loop is not "no such folder"."""
    from rankdyn._run._io import write_json
    from rankdyn._run._result_files import recording_result

    folder = tmp_path / "cont"
    folder.mkdir()
    with recording_result(folder, "continue"):
        write_json(folder / "branches.json", {})
    loop_a, loop_b = tmp_path / "a", tmp_path / "b"
    loop_a.symlink_to(loop_b)
    loop_b.symlink_to(loop_a)
    for d, words in (
        (folder, "holds the result of `rankdyn continue`, which writes no metrics.json"),
        (loop_a, "a symbolic link that leads nowhere"),
    ):
        assert main(["plot", str(d), "--out", str(tmp_path / "o.png")]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and words in err[0], err
