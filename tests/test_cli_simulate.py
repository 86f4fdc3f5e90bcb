"""`rankdyn simulate`: the flag contract, metrics.json schema, errors without tracebacks."""

import json

import numpy as np
import pytest

from rankdyn.cli import main

METRICS = ["mu", "mu_rel", "mu_normalized", "row_norm_mean", "min_cos", "mean_abs_cos", "sigma_min",
           "stable_rank", "num_rank", "eff_rank", "eps_min"]


def test_simulate_writes_metrics_and_plot(tmp_path, capsys):
    out = tmp_path / "run"
    rc = main(["simulate", "--mask", "window", "--window", "1", "--n", "6", "--d", "6", "--dqk", "2",
               "--layers", "8", "--batch", "5", "--norm", "post", "--ln", "sphere", "--value", "orthogonal",
               "--qk", "bert", "--x0", "sphere", "--per-layer-weights", "--seed", "3", "--x64",
               "--out", str(out), "--no-progress"])
    assert rc == 0
    data = json.loads((out / "metrics.json").read_text())
    assert (out / "mu.png").stat().st_size > 1000
    assert data["config"]["mask"] == "window" and data["config"]["seed"] == 3 and data["config"]["x64"]
    assert data["graph"] == {**data["graph"], "strongly_connected": True, "quasi_strongly_connected": True,
                             "radius": 3, "diameter": 5, "centers": list(range(6))}
    assert data["layers"] == list(range(9))
    for name in METRICS:
        assert len(data["metrics"][name]["mean"]) == 9 and len(data["metrics"][name]["std"]) == 9
    assert data["flags"] == {"nonfinite": 0, "degenerate_ln": 0, "batch": 5}
    assert set(data["timing"]) >= {"compile_s", "run_s"}
    # Post-LN: the mean token norm is exactly 1 at every layer after the first.
    np.testing.assert_allclose(data["metrics"]["row_norm_mean"]["mean"][1:], 1.0, atol=1e-12)
    # The printed table names the graph and the metrics.
    assert "radius=3" in capsys.readouterr().out


def test_simulate_reports_degenerate_ln(tmp_path):
    """Uniform causal attention, identity W_V, 2 tokens: a random start is fine; the count is reported."""
    out = tmp_path / "deg"
    assert main(["simulate", "--mask", "causal", "--n", "2", "--d", "2", "--qk", "zero", "--value", "identity",
                 "--layers", "3", "--batch", "4", "--out", str(out), "--no-progress", "--x64"]) == 0
    data = json.loads((out / "metrics.json").read_text())
    assert data["flags"]["degenerate_ln"] == 0  # opposite tokens have probability zero


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--dqk", "0"], "--dqk must be > 0"),
        (["--mask", "window", "--window", "40", "--n", "8"], "--window 40 must be smaller than --n 8"),
        (["--value", "jordan", "--jordan-k", "9", "--d", "4"], "--jordan-k must be in"),
        (["--heads", "3", "--d", "8"], "--heads must divide --d"),
    ],
)
def test_simulate_bad_flags_give_clear_errors(tmp_path, capsys, argv, message):
    rc = main(["simulate", "--layers", "2", "--batch", "2", "--out", str(tmp_path), *argv])
    assert rc == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_unknown_flag_value_is_rejected(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["simulate", "--mask", "diagonal"])
    assert exc.value.code == 2
    assert "invalid choice: 'diagonal'" in capsys.readouterr().err


