"""`rankdyn lyapunov` and `rankdyn flow --lyapunov`: outputs, schema, one error line per bad flag."""

import json

import numpy as np
import pytest

from rankdyn.cli import main


@pytest.mark.slow  # end to end: `rankdyn lyapunov` with JSON and figures
def test_lyapunov_writes_json_and_figures(tmp_path, capsys):
    out = tmp_path / "run"
    argv = ["lyapunov", "--n", "4", "--d", "3", "--num-layers", "32", "--batch", "3", "--k", "5"]
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
    printed = capsys.readouterr().out
    assert "tangent space (dim 8)" in printed
    # Every exponent asked for is printed with its role, not only the first four.
    rows = [line.split() for line in printed.splitlines() if line.strip()[:1].isdigit()]
    assert [int(r[0]) for r in rows] == [1, 2, 3, 4, 5] and [r[-1] for r in rows] == s["roles"]


def test_exponent_roles_follow_the_fixed_rule():
    """Neutral within max(1e-3, log 10 / T); below log eps of the dtype is rounding-limited."""
    from rankdyn._lyapunov._result import exponent_roles

    mean = [0.02, 0.005, -0.0085, -0.0095, -0.7, -16.0, -15.8, float("nan")]
    # T = 256: neutral up to log(10)/256 = 0.00899; float32 eps gives a floor of -15.94.
    assert exponent_roles(mean, np.float32, 256) == [
        "expanding",
        "neutral",
        "neutral",
        "contracting",
        "contracting",
        "rounding-limited",
        "contracting",
        "not finite",
    ]
    # float64 resolves -16 (its floor is -36.04); a run 10x longer narrows the neutral band to 1e-3.
    assert exponent_roles(mean[:6], np.float64, 2560)[1:] == [
        "expanding",
        "contracting",
        "contracting",
        "contracting",
        "contracting",
    ]


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
        "--num-layers",
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


@pytest.mark.slow  # end to end: two `rankdyn flow --lyapunov` runs
def test_flow_lyapunov_flag(tmp_path, capsys):
    out = tmp_path / "flow"
    argv = ["flow", "--n", "3", "--d", "3", "--time", "4", "--saves", "9", "--batch", "2", "--lyapunov", "3"]
    assert main(argv + ["--x64", "--no-progress", "--out", str(out)]) == 0
    s = json.loads((out / "lyapunov.json").read_text())["spectrum"]
    assert s["unit"] == "per unit time" and s["k"] == 3 and (out / "spectrum.png").exists()
    assert main(argv[:-1] + ["7", "--out", str(out)]) == 2
    assert "--lyapunov 7" in capsys.readouterr().err


def _measured(**changes):
    from rankdyn._reproduce.sim.lyapunov_rates import LyapunovRatesMeasured

    base = dict(
        exponents={
            "none/causal": [0.0, 0.0, 0.0, 0.0, -0.69, -0.7],
            "post/complete": [0.0, 0.0, 0.0, -41.0, -41.0],
        },
        transverse={"none/causal": -0.69, "post/complete": -41.0},
        transverse_early={"none/causal": -0.688, "post/complete": -41.0},
        limit={"none/causal": -0.6931, "post/complete": -float("inf")},
        log_bound={"none/causal": -0.004, "post/complete": -3.6e-5},
        bound_name={"none/causal": "Theorem 1", "post/complete": "Theorem 2"},
        outside_hypotheses={},
        log_mu_rate={"none/causal": -0.693, "post/complete": -6.0},
        mu_at_floor={"none/causal": 0, "post/complete": 0},
        neutral_dims={"none/causal": 4, "post/complete": 3},
        equilibrium_errors=[1e-12],
        equilibrium_classes={},
        setting={},
    )
    return LyapunovRatesMeasured(**(base | changes))


def test_lyapunov_rates_checks_pass_and_fail():
    from rankdyn._reproduce._verdict import verdict
    from rankdyn._reproduce.sim.lyapunov_rates import checks

    assert verdict(checks(_measured())) == "reproduced"
    bad = [
        _measured(transverse={"none/causal": 0.01, "post/complete": -41.0}),  # above the bound
        _measured(limit={"none/causal": -0.9, "post/complete": -float("inf")}),  # off its limit
        _measured(exponents={"none/causal": [0.0, 0.0, 0.0, -0.1, -0.69], "post/complete": [0.0] * 5}),
        _measured(equilibrium_errors=[1e-12, 3e-3]),  # an equilibrium off its multipliers
    ]
    for m, failing in zip(bad, ["bound", "= log|lambda_2(A*)|", "neutral", "stable equilibria"]):
        cs = checks(m)
        assert verdict(cs) != "reproduced"
        assert [c.name for c in cs if c.passed is False and failing in c.name], [c.name for c in cs]
    assert verdict(checks(_measured(equilibrium_errors=[]))) == "partially"
    # A bound of 1 to working precision (a window mask's eps^(2r)) is reported untestable, with
    # the reason, and caps the verdict; any other bound is tested.
    vacuous = checks(_measured(log_bound={"none/causal": -0.004, "post/complete": -2e-10}))
    (bound,) = [c for c in vacuous if c.name.startswith("post LN") and "bound" in c.name]
    assert bound.testable is False and "is 1 - 2e-10" in bound.detail and "(1 - n eps^(2r))" in bound.detail
    assert verdict(vacuous) == "partially"
