"""The simulation targets of ``rankdyn reproduce`` at tiny sizes, the framework, and the CLI.

Each target: the result honours the contract (keys, verdict computed from its checks, figures
on disk) and one numeric statement that a wrong implementation would break.
"""

import json
import sys
import types
from pathlib import Path

import numpy as np
import pytest

import rankdyn.experiments as ex
from rankdyn.cli import main
from rankdyn.experiments import _common as C


def _check_contract(res, out: Path, name: str):
    for k in ex.RESULT_KEYS:
        assert k in res, k
    assert res["name"] == name
    assert res["verdict"] in ex.VERDICTS
    assert res["claim"] and res["criterion"]
    assert res["figures"], "every target draws at least one figure"
    for f in res["figures"]:
        assert (out / f).is_file() and (out / f).stat().st_size > 1000
    assert "seed" in res["setting"]
    # The result must be JSON-serialisable through the project's writer.
    from rankdyn._io import write_json

    write_json(out / f"{name}.json", res)
    json.loads((out / f"{name}.json").read_text())


def test_masks_collapse_tiny(tmp_path):
    from rankdyn.experiments import masks_collapse as T

    n = 12
    res = T.run(tmp_path, quick=True, seed=0, size={"n": n, "d": 8, "batch": 4, "depth": 24})
    _check_contract(res, tmp_path, "masks-collapse")
    pm = res["measured"]["per_mask"]
    # Graph facts (SPEC §3) and the round-off collapse of the complete mask (radius 1).
    assert pm["window"]["radius"] == n // 2 and pm["window-uni"]["radius"] == n - 1
    assert pm["complete"]["mu_ratio"] < 1e-6
    # Theorem 1's bound with eps > 0 is a factor strictly inside (0, 1] and the fit obeys it for r = 1.
    assert 0 < pm["complete"]["bound_rate"] < 1 and pm["complete"]["fitted_rate"] <= pm["complete"]["bound_rate"]
    checks = res["measured"]["checks"]
    scored = [v for k, v in checks.items() if "not scored" not in k]
    assert (res["verdict"] == "reproduced") == all(scored)


def test_temperature_tiny(tmp_path):
    from rankdyn.experiments import temperature as T

    res = T.run(tmp_path, quick=True, seed=0, size={"n": 12, "d": 8, "batch": 4, "depth": 8, "weight_layers": 24})
    _check_contract(res, tmp_path, "temperature")
    early = res["measured"]["early_rate"]["complete"]
    assert len(early) == len(T.DQKS)
    # Sharper attention (d_QK = 1/64) must collapse more slowly than near-uniform attention (d_QK = 64).
    assert early[0] > early[-1]
    assert np.all(np.asarray(res["measured"]["median_eps_layer0"]["complete"])[:-1] <= np.asarray(
        res["measured"]["median_eps_layer0"]["complete"])[1:] + 1e-12), "eps grows with the temperature"


def test_layernorm_orthogonal_tiny(tmp_path):
    from rankdyn.experiments import layernorm_orthogonal as T

    res = T.run(tmp_path, quick=True, seed=0, size={"n": 6, "d": 8, "batch": 4, "depth": 96, "save_every": 2})
    _check_contract(res, tmp_path, "layernorm-orthogonal")
    cases = res["measured"]["cases"]
    assert len(cases) == 2 * len(T.CASES)
    for v in cases.values():
        if v["x0"] == "nonneg":
            assert v["frac_min_cos0_nonneg"] == 1.0  # Corollary 1's hypothesis holds by construction
        if v["inside_hypotheses"]:
            # Theorem 2 / Corollary 1: tokens meet at one point of the sphere.
            assert v["mu_ratio"] < 1e-2 and v["min_cos_T"] > 0.999, v


def test_depth_table_tiny(tmp_path):
    from rankdyn.experiments import depth_table as T

    res = T.run(tmp_path, quick=True, seed=0,
                size={"n": 8, "d": 16, "dk": 4, "dqk": 4.0, "batch": 2, "depth": 8})
    _check_contract(res, tmp_path, "depth-table")
    stats = res["measured"]["stats"]
    assert res["setting"]["table_layers"] == (0, 2, 4, 6, 8)
    # Same inputs for every mask and normalisation: identical layer-0 mu.
    mu0 = [stats[ln][m]["mu_mean"][0] for ln in T.NORMS for m in C.PAPER_MASKS]
    np.testing.assert_allclose(mu0, mu0[0], rtol=1e-12)
    # No LN, orthogonal W_V, complete mask (radius 1): Theorem 1 contracts mu.
    assert stats["none"]["complete"]["ratio_T_0"] < 0.5
    assert res["markdown"].count("| complete |") == len(T.NORMS)


def _tiny_ablation():
    return {"n": 8, "d": 16, "heads": 2, "batch": 2, "depth": 12, "dropouts": (0.0,)}


@pytest.mark.slow
def test_ablation_and_geometry_tiny(tmp_path):
    from rankdyn.experiments import ablation as A
    from rankdyn.experiments import geometry as G

    res = A.run(tmp_path, quick=True, seed=0, size=_tiny_ablation())
    _check_contract(res, tmp_path, "ablation")
    summ = res["measured"]["summary"]
    # 5 variants x 4 masks (dropout 0 only at this size).
    assert len(summ) == 5 * 4
    # Pure SAN at BERT-like init: mu shrinks for every mask.
    for m in C.PAPER_MASKS:
        assert summ[f"SAN|{m}|0"]["ratio_12"] < 0.5
    res_g = G.run(tmp_path, quick=True, seed=0, size=_tiny_ablation())
    _check_contract(res_g, tmp_path, "geometry")
    for v in res_g["measured"]["per_model"].values():
        # Stable rank never exceeds the rank; the rank never exceeds min(n, d).
        if np.isfinite(v["stable_rank_T"]):
            assert v["stable_rank_T"] <= v["num_rank_T"] + 1e-9
        assert v["num_rank_min_over_depth"] <= 8
    assert all(np.isfinite(v["stable_rank_T"]) for v in res_g["measured"]["full_block"].values())
    checks = res_g["measured"]["checks"]
    assert (res_g["verdict"] == "reproduced") == all(checks.values())


def test_bound_rate_matches_rates_module():
    from rankdyn import corollary1_rate, theorem1_rate, theorem2_rate

    assert C.bound_rate(0.1, 3) == pytest.approx(theorem1_rate(0.1, 3), rel=1e-12)
    assert C.bound_rate(0.05, 2, 2, 10) == pytest.approx(theorem2_rate(0.05, 2, 10), rel=1e-12)
    assert C.bound_rate(0.3, 4, 2, 1) == pytest.approx(corollary1_rate(0.3, 4, 1), rel=1e-12)
    assert C.bound_rate(0.05, 127) == 1.0  # eps^127 underflows: the bound is vacuous
    assert C.log10_bound_gap(0.1, 127) == pytest.approx(-127.0)


def test_log_fit_recovers_geometric_rate():
    t = np.arange(0, 40)
    mu = 3.0 * 0.8**t
    rho, window = C.log_fit(t, mu, mu / mu[0], 1e-30)
    assert rho == pytest.approx(0.8, rel=1e-10) and window[1] == 39
    # A curve at the floor after one layer gives the upper estimate floor ** (1 / 1).
    mu2 = np.array([1.0, 1e-20, 1e-20])
    rho2, w2 = C.log_fit(np.arange(3), mu2, mu2, 1e-12)
    assert rho2 == pytest.approx(1e-12) and w2 == (0, 1)


def _fake_modules(monkeypatch):
    good = types.ModuleType("_rankdyn_fake_target")
    good.NAME, good.CLAIM = "fake", "Fake claim (Theorem 0)."

    def run(out, *, quick, seed):
        (Path(out) / "fake.png").write_bytes(b"\x89PNG fake")
        value = 0.25 + seed
        return {"name": "fake", "claim": good.CLAIM, "setting": {"n": 3, "seed": seed, "quick": quick},
                "measured": {"value": value, "curve": list(np.linspace(0, 1, 20))},
                "verdict": "reproduced" if value < 1 else "not reproduced", "criterion": "value < 1",
                "figures": ["fake.png"], "notes": "a note", "markdown": "| a | b |\n|---|---|\n| 1 | 2 |"}

    good.run = run
    bad = types.ModuleType("_rankdyn_broken_target")
    bad.NAME, bad.CLAIM = "broken", "Broken."

    def run_bad(out, *, quick, seed):
        raise RuntimeError("boom")

    bad.run = run_bad
    monkeypatch.setitem(sys.modules, good.__name__, good)
    monkeypatch.setitem(sys.modules, bad.__name__, bad)
    monkeypatch.setattr(ex, "TARGETS", {"fake": good.__name__, "broken": bad.__name__})


def test_run_targets_writes_report(tmp_path, monkeypatch):
    _fake_modules(monkeypatch)
    res = ex.run_targets(["all"], tmp_path, quick=True, seed=0, progress=False)
    assert res["failed"] == ["broken"]
    data = json.loads((tmp_path / "fake.json").read_text())
    assert data["verdict"] == "reproduced" and "provenance" in data and data["runtime_s"] >= 0
    assert json.loads((tmp_path / "broken.json").read_text())["verdict"] == "error"
    rep = (tmp_path / "report.md").read_text()
    for piece in ("| target | verdict |", "total runtime", "Provenance", "Fake claim (Theorem 0).", "**Setting**",
                  "`n`: 3", "**Measured:**", "`value`: 0.25", "Criterion: value < 1", "![fake: fake.png](fake.png)",
                  "**Notes.** a note", "| a | b |", "RuntimeError: boom", "(20 values)"):
        assert piece in rep, piece
    assert rep.index("## `fake`") < rep.index("## `broken`")
    # A long listing folds into <details> but stays in the report.
    long = {"name": "x", "claim": "c", "setting": {}, "verdict": "partially", "criterion": "k", "figures": [],
            "notes": "", "measured": {f"k{i}": i for i in range(50)}}
    text = ex.render_target(long)
    assert "<details>" in text and "`k49`: 49" in text


def test_resolve_targets_order_and_errors():
    assert ex.resolve_targets([]) == list(ex.TARGETS)
    assert ex.resolve_targets(["geometry", "masks-collapse"]) == ["masks-collapse", "geometry"]
    assert list(ex.TARGETS) == ["masks-collapse", "temperature", "layernorm-orthogonal", "depth-table",
                                "counterexample-2d", "equilibria-ranks", "positive-measure", "ablation", "geometry"]
    with pytest.raises(ValueError, match="valid targets: all, masks-collapse"):
        ex.resolve_targets(["masks-colapse"])


def test_cli_unknown_target(tmp_path, capsys):
    rc = main(["reproduce", "no-such-target", "--out", str(tmp_path / "o"), "--quick"])
    err = capsys.readouterr().err
    assert rc == 2
    assert "unknown target(s) 'no-such-target'" in err and "geometry" in err
    assert not (tmp_path / "o").exists()
