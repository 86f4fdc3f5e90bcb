"""`rankdyn lyapunov` and `rankdyn flow --lyapunov`: outputs, schema, one error line per bad flag."""

import json

import numpy as np
import pytest

from rankdyn.cli import main


def test_lyapunov_writes_json_and_figures(tmp_path, capsys):
    out = tmp_path / "run"
    argv = ["lyapunov", "--n", "4", "--d", "3", "--layers", "32", "--batch", "3", "--k", "5"]
    rc = main(argv + ["--discard", "8", "--per-trajectory", "--x64", "--no-progress", "--out", str(out)])
    assert rc == 0
    data = json.loads((out / "lyapunov.json").read_text())
    s = data["spectrum"]
    assert s["space"] == "tangent" and s["dim"] == 8 and s["k"] == 5 and s["unit"] == "per layer"
    mean = np.asarray(s["exponents"]["mean"])
    assert mean.shape == (5,) and np.all(np.diff(mean) <= 0)
    per = np.asarray(s["per_trajectory"]["exponents"])
    np.testing.assert_allclose(per.mean(axis=0), mean, atol=1e-12)
    assert data["seed"] == 0 and data["config"]["k"] == 5 and "provenance" in data
    assert (out / "spectrum.png").stat().st_size > 0 and (out / "convergence.png").stat().st_size > 0
    assert "tangent space (dim 8)" in capsys.readouterr().out


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--k", "9"], "--k 9: expected 1 <= k <= 8"),
        (["--k", "0"], "--k 0"),
        (["--discard", "32"], "--discard 32"),
        (["--qr-every", "0"], "--qr-every 0"),
        (["--qr-every", "5"], "multiples of --qr-every 5"),
        (["--dropout", "0.1"], "--dropout"),
    ],
)
def test_bad_flags_are_one_error_line(tmp_path, capsys, extra, message):
    argv = [
        "lyapunov",
        "--n",
        "4",
        "--d",
        "3",
        "--layers",
        "32",
        "--batch",
        "2",
        "--out",
        str(tmp_path / "o"),
    ]
    assert main(argv + extra) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("rankdyn lyapunov: error:"), err
    assert message in err[0]
    assert not (tmp_path / "o" / "lyapunov.json").exists()


def test_flow_lyapunov_flag(tmp_path, capsys):
    out = tmp_path / "flow"
    argv = ["flow", "--n", "3", "--d", "3", "--time", "4", "--saves", "9", "--batch", "2", "--lyapunov", "3"]
    assert main(argv + ["--x64", "--no-progress", "--out", str(out)]) == 0
    s = json.loads((out / "lyapunov.json").read_text())["spectrum"]
    assert s["unit"] == "per unit time" and s["k"] == 3 and (out / "spectrum.png").exists()
    assert main(argv[:-1] + ["7", "--out", str(out)]) == 2
    assert "--lyapunov 7" in capsys.readouterr().err
