"""``rankdyn flow``'s bad input (refused before compute) and the flow targets' checks on synthetic
results that must fail."""

import dataclasses
import json

import numpy as np
import pytest

import rankdyn as rd
from rankdyn._reproduce.flow import flow_causal, flow_clustering, flow_limit, flow_metastability
from rankdyn._reproduce.flow._flow_runs import longest_plateau, plateaus
from rankdyn.cli import main

BAD = {
    "beta<0": (["--beta", "-1"], "--beta"),
    "beta nan": (["--beta", "nan"], "--beta"),
    "beta inf": (["--beta", "inf"], "--beta"),
    "T=0": (["--time", "0"], "--time"),
    "d=1": (["--d", "1"], "--d"),
    "n=0": (["--n", "0"], "--n"),
    "saves=1": (["--saves", "1"], "--saves"),
    "dt<=0": (["--solver", "euler", "--dt", "0"], "--dt"),
    "dt adaptive": (["--dt", "0.1"], "--dt"),
    "fixed no dt": (["--solver", "rk4"], "--dt"),
    "rtol<=0": (["--rtol", "0"], "--rtol"),
    "atol<0": (["--atol=-1e-9"], "--atol"),
    "rtol fixed": (["--solver", "euler", "--dt", "0.1", "--rtol", "1e-6"], "--rtol"),
    "batch=0": (["--batch", "0"], "--batch"),
}


@pytest.fixture
def no_compute(monkeypatch):
    import rankdyn._flow._solve as solve

    def computed(*a, **k):
        raise AssertionError("compute was reached although the input is bad")

    monkeypatch.setattr(solve, "solve_flow", computed)


def test_cli_bad_input_is_one_error_line_exit_2(tmp_path, capsys, no_compute):
    for name, (argv, flag) in BAD.items():
        rc = main(["flow", *argv, "--out", str(tmp_path / "o"), "--no-progress"])
        err = capsys.readouterr().err.strip().splitlines()
        assert rc == 2, name
        assert len(err) == 1 and err[0].startswith("rankdyn flow: error:") and flag in err[0], (name, err)
        assert "Traceback" not in "\n".join(err)
    assert not (tmp_path / "o").exists()


@pytest.mark.slow  # end to end: `rankdyn flow` with states and figure
def test_cli_writes_metrics_states_and_figure(tmp_path, capsys):
    out = tmp_path / "run"
    rc = main(
        [
            "flow",
            "--n",
            "5",
            "--d",
            "3",
            "--batch",
            "3",
            "--time",
            "2",
            "--saves",
            "5",
            "--x64",
            "--save-states",
            "--solver",
            "rk4",
            "--dt",
            "0.1",
            "--out",
            str(out),
            "--no-progress",
        ]
    )
    assert rc == 0
    r = json.loads((out / "metrics.json").read_text())
    assert len(r["times"]) == 5 and r["times"][0] == 0 and r["times"][-1] == 2
    for name in ("clusters", "energy", "mu_normalized", "diameter"):
        assert len(r["metrics"][name]["mean"]) == 5
    assert r["seed"] == 0 and "provenance" in r and r["config"]["beta"] == 1.0
    assert r["solver"]["steps_limit_hit"] == 0 and r["solver"]["drift_from_sphere"] < 1e-12
    states = np.load(out / "states.npy")
    assert states.shape == (3, 5, 5, 3)  # (batch, saves, n, d): batch first, as simulate
    np.testing.assert_allclose(np.linalg.norm(states, axis=-1), 1.0, atol=1e-12)
    assert (out / "flow.png").stat().st_size > 0
    assert "flow:" in capsys.readouterr().out


@pytest.mark.slow
def test_step_limit_is_reported(tmp_path, capsys):
    from rankdyn import RESULTS
    from rankdyn.flow import FlowField, solve_flow
    from rankdyn.masks import complete_mask

    f = FlowField(complete_mask(4), 3)
    x0 = np.random.default_rng(0).normal(size=(2, 4, 3))
    sol = solve_flow(f, x0, 50.0, beta=1.0, saves=3, solver="rk4", dt=0.1, max_steps=5)
    assert int(sol.steps_limit_hit) == 2
    assert np.asarray(sol.result == RESULTS.max_steps_reached).tolist() == [True, True]
    assert not np.any(np.asarray(sol.successful))
    with pytest.raises(rd.SolveError, match="2 trajectory"):
        solve_flow(f, x0, 50.0, beta=1.0, saves=3, solver="rk4", dt=0.1, max_steps=5, throw=True)


def test_plateaus():
    t = np.arange(8.0)
    c = [9, 4, 4, 2, 2, 2, 1, 1]
    ps = plateaus(t, c)
    assert [(p["k"], p["start"], p["end"]) for p in ps] == [(4, 1.0, 3.0), (2, 3.0, 6.0)]
    assert longest_plateau(t, c)["k"] == 2 and longest_plateau(t, [5, 1, 1]) is None


def _statuses(checks):
    return [c.passed for c in checks]


def _clustering(final, fraction, steps=(0, 0)):
    return flow_clustering.FlowClusteringMeasured(
        betas=(1.0, 2.0),
        final_fraction=tuple(final),
        final_clusters_max=(1.0, 1.0),
        median_time_to_cluster=(5.0, 3.0),
        steps_limit_hit=tuple(steps),
        drift=1e-15,
        times=np.array([0.0, 1.0, 10.0]),
        fraction=np.array(fraction),
        batch=10,
    )


def test_flow_clustering_checks_fail_on_wrong_results():
    good = _clustering([1.0, 1.0], [[0, 0.5, 1.0], [0, 0.7, 1.0]])
    assert all(_statuses(flow_clustering.checks(good)))
    # Too few clustered at T, a fraction that drops (a clustered run came apart), a step-limit hit.
    bad = _clustering([0.5, 0.95], [[0, 0.9, 0.5], [0, 0.7, 0.95]], steps=(0, 3))
    assert _statuses(flow_clustering.checks(bad)) == [False, False, False, False]
    # The JSON keeps the summary: the full series are off it.
    assert set(good.to_dict()) == {
        "betas",
        "final_fraction",
        "final_clusters_max",
        "median_time_to_cluster",
        "steps_limit_hit",
        "drift",
    }


def test_flow_limit_checks_fail_on_wrong_results():
    FL = flow_limit
    hs = (0.1, 0.05, 0.025)
    lim = FL.FlowLimitMeasured(hs, {"causal": FL.SettingErrors((0.1, 0.05, 0.025), 1.0)})
    assert all(_statuses(flow_limit.checks(lim)))
    wrong = FL.FlowLimitMeasured(hs, {"causal": FL.SettingErrors((0.1, 0.025, 0.00625), 2.0)})
    assert _statuses(flow_limit.checks(wrong)) == [True, False]


def test_flow_causal_checks_fail_on_wrong_results():
    FC = flow_causal
    row = FC.CausalBeta(beta=1.0, converged_fraction=1.0, max_distance_to_token1=1e-4)
    good = FC.FlowCausalMeasured(first_token_displacement=0.0, per_beta=(row,), steps_limit_hit=(0,))
    assert all(_statuses(FC.checks(good)))
    moved = FC.FlowCausalMeasured(
        first_token_displacement=1e-3,
        per_beta=(FC.CausalBeta(beta=1.0, converged_fraction=0.5, max_distance_to_token1=0.3),),
        steps_limit_hit=(2,),
    )
    assert _statuses(FC.checks(moved)) == [False, False, False]
    assert set(good.to_dict()) == {"first_token_displacement", "per_beta", "steps_limit_hit"}


def _stats(beta, med, flat=(0.01, 0.02), step=0.0):
    return flow_metastability.PlateauStats(
        beta=beta,
        trajectories_with_plateau=3,
        median_plateau=med,
        min_energy_increment_rel=step,
        plateau_energy_share=tuple(flat),
    )


def test_flow_metastability_checks_fail_on_wrong_results():
    FM = flow_metastability
    saddle = FM.PlateauState(plateau_k=2, clusters=2, residual=1e-12, converged=True, kind="saddle", index=1)
    meta = FM.FlowMetastabilityMeasured(
        per_beta=(_stats(1.0, 3.0), _stats(2.0, 20.0)), fit_c=1.9, fit_a=0.0, saddles=(saddle,)
    )
    assert all(_statuses(FM.checks(meta)))
    # Plateaus that shorten with beta, an energy that drops and rises on its plateaus, a stable state.
    wrong = FM.FlowMetastabilityMeasured(
        per_beta=(_stats(1.0, 30.0), _stats(2.0, 20.0, (0.5, 0.6), step=-1e-3)),
        fit_c=-0.4,
        fit_a=0.0,
        saddles=(dataclasses.replace(saddle, kind="stable", index=0),),
    )
    assert _statuses(FM.checks(wrong)) == [True, False, False, False, False, False]
    keys = {"per_beta", "fit_c", "fit_a", "saddles", "steps_limit_hit", "drift"}
    assert set(meta.to_dict()) == keys and meta.to_dict()["saddles"][0]["kind"] == "saddle"


def test_flow_clustering_notes_follow_the_numbers(tmp_path, monkeypatch):
    import rankdyn.plotting

    drawn = []
    monkeypatch.setattr(rankdyn.plotting, "plot_phase_diagram", lambda *a, **k: drawn.append(k["path"]))
    good = _clustering([1.0, 1.0], [[0, 0.5, 1.0], [0, 0.7, 1.0]])
    shown = flow_clustering.render(tmp_path, good, flow_clustering.checks(good))
    figures, notes = shown.figures, shown.notes
    assert drawn == [tmp_path / figures[0]]
    assert "for every beta" in notes and "counts against" not in notes
    bad = _clustering([1.0, 0.5], [[0, 0.5, 1.0], [0, 0.7, 0.5]])
    notes = flow_clustering.render(tmp_path, bad, flow_clustering.checks(bad)).notes
    assert "Below 99% at T for beta = 2;" in notes and "for every beta" not in notes
