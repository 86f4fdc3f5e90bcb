"""The simulation targets of ``rankdyn reproduce``, the framework, and the CLI.

Each target: the result honours the contract (keys, verdict computed from its checks, figures
on disk) and one numeric statement that a wrong implementation would break. The result is the
main job's quick run in out/reproduce/ when this source made it (`helpers.target_result`), else
a fresh run at a tiny size: every statement holds at both sizes.
"""

import json
import sys
import types
from pathlib import Path

import numpy as np
import pytest
from helpers import target_result

import rankdyn
import rankdyn._reproduce as ex
from rankdyn._reproduce._masktable import PAPER_MASKS
from rankdyn._theory._rates import bound_rate, fit_rate_window, log10_bound_gap
from rankdyn.cli import main


def _check_contract(res, out: Path, name: str, tmp_path: Path):
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
    from rankdyn._run._io import write_json

    write_json(tmp_path / f"{name}.json", res)
    json.loads((tmp_path / f"{name}.json").read_text())


@pytest.mark.slow  # end-to-end (a whole target, or a fresh process)
def test_masks_collapse_result(tmp_path):
    from rankdyn._reproduce.sim import masks_collapse as T

    res, out = target_result(T.NAME, tmp_path, size={"n": 12, "d": 8, "batch": 4, "depth": 24})
    _check_contract(res, out, "masks-collapse", tmp_path)
    n, pm = res["setting"]["n"], res["measured"]["per_mask"]
    # Graph facts (docs/theory.md#masks-as-graphs) and the round-off collapse of the complete mask (radius 1).
    assert pm["window"]["radius"] == n // 2 and pm["window-uni"]["radius"] == n - 1
    assert pm["complete"]["mu_ratio"] < 1e-6
    # Theorem 1's bound with eps > 0 is a factor strictly inside (0, 1] and the fit obeys it for r = 1.
    assert (
        0 < pm["complete"]["bound_rate"] < 1 and pm["complete"]["fitted_rate"] <= pm["complete"]["bound_rate"]
    )
    # The complete mask's bound is below 1, so its check is testable (and it passes).
    status = {c["name"]: c["status"] for c in res["checks"]}
    assert status["complete: fitted rate <= (1-eps^r)^(1/r)"] == "pass"


@pytest.mark.slow  # end-to-end (a whole target, or a fresh process)
def test_temperature_result(tmp_path):
    from rankdyn._reproduce.sim import temperature as T

    res, out = target_result(
        T.NAME, tmp_path, size={"n": 12, "d": 8, "batch": 4, "depth": 8, "weight_layers": 24}
    )
    _check_contract(res, out, "temperature", tmp_path)
    early = res["measured"]["early_rate"]["complete"]
    assert len(early) == len(T.DQKS) == len(res["setting"]["dqk_sweep"])
    # Sharper attention (d_QK = 1/64) must collapse more slowly than near-uniform attention (d_QK = 64).
    assert early[0] > early[-1]
    assert np.all(
        np.asarray(res["measured"]["median_eps_layer0"]["complete"])[:-1]
        <= np.asarray(res["measured"]["median_eps_layer0"]["complete"])[1:] + 1e-12
    ), "eps grows with the temperature"


@pytest.mark.slow  # end-to-end (a whole target, or a fresh process)
def test_layernorm_orthogonal_result(tmp_path):
    from rankdyn._reproduce.sim import layernorm_orthogonal as T

    res, out = target_result(
        T.NAME, tmp_path, size={"n": 6, "d": 8, "batch": 4, "depth": 96, "save_every": 2}
    )
    _check_contract(res, out, "layernorm-orthogonal", tmp_path)
    cases = res["measured"]["cases"]
    assert len(cases) == 2 * len(T.CASES)
    for v in cases.values():
        if v["x0"] == "nonneg":
            assert v["frac_min_cos0_nonneg"] == 1.0  # Corollary 1's hypothesis holds by construction
        if v["inside_hypotheses"]:
            # Theorem 2 / Corollary 1: tokens meet at one point of the sphere.
            assert v["mu_ratio"] < 1e-2 and v["min_cos_T"] > 0.999, v


@pytest.mark.slow  # end-to-end (a whole target, or a fresh process)
def test_depth_table_result(tmp_path):
    from rankdyn._reproduce.sim import depth_table as T

    res, out = target_result(
        T.NAME, tmp_path, size={"n": 8, "d": 16, "dk": 4, "dqk": 4.0, "batch": 2, "depth": 8}
    )
    _check_contract(res, out, "depth-table", tmp_path)
    stats, depth = res["measured"]["stats"], res["setting"]["depth"]
    assert list(res["setting"]["table_layers"]) == [depth * i // 4 for i in range(5)]
    # Same inputs for every mask and mode: identical layer-0 mu.
    mu0 = [stats[mode][m]["mu_mean"][0] for mode in T.MODES for m in PAPER_MASKS]
    np.testing.assert_allclose(mu0, mu0[0], rtol=1e-12)
    # Without dropout no row can become exactly zero; with dropout on, the complete mask needs all
    # n >= 8 weights of a row dropped (p^n <= 1e-8), so it has none either.
    assert all(s["zero_rows_mean"][-1] == 0.0 for s in stats["eval"].values())
    assert stats["attn-dropout"]["complete"]["zero_rows_mean"][-1] == 0.0
    # Eval and attention dropout differ (the key reaches the layer); the three tables are there.
    assert stats["eval"]["causal"]["mu_mean"] != stats["attn-dropout"]["causal"]["mu_mean"]
    assert res["markdown"].count("| complete |") == len(T.MODES)


def _geometric_stats(ratio, live=0.5):
    """MaskStats whose mu decays (or grows) geometrically to ``ratio`` x mu_0 at T."""
    from rankdyn._reproduce.sim import depth_table as T

    mu = [float(ratio ** (i / 4)) for i in range(5)]
    return T.MaskStats(mu, [0.1] * 5, [0.0] * 5, [0.0] * 5, 0.0, live, live, ratio, ratio, 0)


def test_depth_table_pattern_checks_follow_the_rebuttal():
    from rankdyn._reproduce import _verdict as V
    from rankdyn._reproduce.sim import depth_table as T

    def pattern_checks(ratios, mode):
        return T.pattern_checks({k: _geometric_stats(r) for k, r in ratios.items()}, mode)

    rebuttal = {"complete": 1e-3, "window": 0.3, "causal": 0.9, "window-uni": 1.1}
    assert V.verdict(pattern_checks(rebuttal, "m")) == "reproduced"
    eval_like = {**rebuttal, "causal": 1e-4}  # causal collapses too: 3 of 4 checks pass
    assert V.verdict(pattern_checks(eval_like, "m")) == "partially"
    flat = {m: 1.0 for m in rebuttal}  # nothing decreases: 2 of 4
    assert V.verdict(pattern_checks(flat, "m")) == "partially"
    reversed_ = {"complete": 1.0, "window": 0.9, "causal": 0.1, "window-uni": 0.2}
    assert V.verdict(pattern_checks(reversed_, "m")) == "not reproduced"


def _tiny_ablation():
    return {"n": 8, "d": 16, "heads": 2, "batch": 2, "depth": 12, "modes": ("eval",)}


@pytest.mark.slow
def test_ablation_result(tmp_path):
    from rankdyn._reproduce.sim import ablation as A

    cache = {}
    res, out = target_result(A.NAME, tmp_path, size=_tiny_ablation(), cache=cache)
    _check_contract(res, out, "ablation", tmp_path)
    summ = res["measured"]["summary"]
    # 5 variants x 4 masks in eval mode (the only mode at the tiny size).
    assert sum(k.endswith("|eval") for k in summ) == 5 * 4
    # Pure SAN at BERT-like init: mu shrinks for every mask.
    for m in PAPER_MASKS:
        assert summ[f"SAN|{m}|eval"]["ratio_12"] < 0.5
    if out == tmp_path:  # a fresh run: its layers were built once
        assert len(cache) == 1
    # geometry now runs on a trained checkpoint: tests/test_pretrained.py


def test_bound_rate_closed_forms():
    # The theorems' factors written out directly (docs/theory.md#theorems).
    assert bound_rate(0.1, 3) == pytest.approx((1 - 0.1**3) ** (1 / 3), rel=1e-14)
    assert bound_rate(0.05, 2, 2, 10) == pytest.approx((1 - 10 * 0.05**4) ** (1 / 4), rel=1e-14)
    assert bound_rate(0.3, 4, 2, 1) == pytest.approx((1 - 0.3**8) ** (1 / 8), rel=1e-14)
    # A tiny term is kept through log1p: 1 - 1e-12 / 1 is not rounded to 1.
    assert 1.0 - bound_rate(1e-12, 1) == pytest.approx(1e-12, rel=1e-3)
    assert bound_rate(0.05, 127) == 1.0  # eps^127 underflows: the bound is vacuous
    assert bound_rate(0.9, 1, 2, 5) == 0.0  # the term exceeds 1: collapse in one step
    assert log10_bound_gap(0.1, 127) == pytest.approx(-127.0)


def test_log_fit_recovers_geometric_rate():
    t = np.arange(0, 40)
    mu = 3.0 * 0.8**t
    rho, window = fit_rate_window(t, mu, mu / mu[0], 1e-30)
    assert rho == pytest.approx(0.8, rel=1e-10) and window[1] == 39
    # A curve at the floor after one layer gives the upper estimate floor ** (1 / 1).
    mu2 = np.array([1.0, 1e-20, 1e-20])
    rho2, w2 = fit_rate_window(np.arange(3), mu2, mu2, 1e-12)
    assert rho2 == pytest.approx(1e-12) and w2 == (0, 1)


def _fake_modules(monkeypatch):
    from rankdyn._reproduce._target import Description, Rendered
    from rankdyn._reproduce._verdict import check, untestable

    good = types.ModuleType("_rankdyn_fake_target")
    good.NAME, good.CLAIM = "fake", "Fake claim (Theorem 0)."
    seen_caches = []
    good.sizes = lambda quick: {"n": 3}

    def compute(sizes, seed, cache=None):
        seen_caches.append(cache)
        return {"value": 0.25 + seed, "curve": list(np.linspace(0, 1, 20))}

    good.compute = compute
    good.checks = lambda m: [
        check("value < 1", m["value"] < 1, "0.25"),
        untestable("bound", "bound is 1"),
    ]

    def render(out, m, cs, *, quick):
        (Path(out) / "fake.png").write_bytes(b"\x89PNG fake")
        tables = "| a | b |\n|---|---|\n| 1 | 2 |"
        return Rendered(figures=["fake.png", "never_written.png"], notes="a note", tables=tables)

    good.render = render
    good.describe = lambda m, cs, sizes, *, seed, quick: Description(
        setting={**sizes, "seed": seed, "quick": quick},
        key_numbers={"value": 0.123456},
        criterion="value < 1",
        verdict_word="reproduced" if m["value"] < 1 else "not reproduced",
    )
    good.seen_caches = seen_caches
    bad = types.ModuleType("_rankdyn_broken_target")
    bad.NAME, bad.CLAIM = "broken", "Broken."
    bad.sizes = lambda quick: {}

    def compute_bad(sizes, seed):
        raise RuntimeError("boom")

    bad.compute = compute_bad
    monkeypatch.setitem(sys.modules, good.__name__, good)
    monkeypatch.setitem(sys.modules, bad.__name__, bad)
    monkeypatch.setattr(ex, "TARGETS", {"fake": good.__name__, "broken": bad.__name__})
    records = {
        "fake": ex.Target("fake", good.__name__, shares_runs=True),
        "broken": ex.Target("broken", bad.__name__),
    }
    monkeypatch.setattr(ex._registry, "_BY_NAME", records)
    return good


def _image_links(md: Path):
    import re

    return [md.parent / p for p in re.findall(r"!\[[^\]]*\]\(([^)]+)\)", md.read_text())]


def test_run_targets_writes_short_report_and_listings(tmp_path, monkeypatch):
    good = _fake_modules(monkeypatch)
    res = ex.run_targets(["all"], tmp_path, quick=True, seed=0, progress=False)
    assert res["failed"] == ["broken"]
    assert isinstance(good.seen_caches[0], dict)  # a target that asks for the cache gets one
    data = json.loads((tmp_path / "fake.json").read_text())
    assert data["verdict"] == "reproduced" and "provenance" in data and data["runtime_s"] >= 0
    assert json.loads((tmp_path / "broken.json").read_text())["verdict"] == "error"
    rep = (tmp_path / "report.md").read_text()
    for piece in (
        "| target | verdict |",
        "| [fake](#fake) | reproduced | 1 / 1 / 2 |",
        "Fake claim (Theorem 0).",
        "value 0.123",
        "bound: not testable here",
        "](report/fake.md)",
        "![fake: main figure](fake.png)",
    ):
        assert piece in rep, piece
    assert "0.123456" not in rep  # key numbers to 3 significant digits
    full = (tmp_path / "report" / "fake.md").read_text()
    for piece in (
        "`n`: 3",
        "`value`: 0.25",
        "Criterion: value < 1",
        "**Notes.** a note",
        "| a | b |",
        "(20 values)",
        "never_written.png was not written",
    ):
        assert piece in full, piece
    assert "RuntimeError: boom" in (tmp_path / "report" / "broken.md").read_text()
    # Every figure referenced from the report exists; the missing one is named, not linked.
    links = _image_links(tmp_path / "report.md") + [
        p for md in (tmp_path / "report").glob("*.md") for p in _image_links(md)
    ]
    assert links and all(p.is_file() for p in links), links
    assert len(rep.splitlines()) <= 200


def test_report_refuses_more_than_max_lines(tmp_path):
    from rankdyn._reproduce._report import MAX_LINES, write_report

    many = {
        f"t{i}": {
            "name": f"t{i}",
            "claim": "c",
            "verdict": "partially",
            "figures": [],
            "checks": [{"name": "x", "status": "pass", "detail": ""}],
            "key_numbers": {"a": 1.0},
        }
        for i in range(40)
    }
    with pytest.raises(RuntimeError, match=f"limit {MAX_LINES}"):
        write_report(tmp_path, many, runtime_s=0.0, quick=True, seed=0)


def test_resolve_targets_order_and_errors():
    main = [n for n in ex.TARGETS if n not in ex.EXTENDED_TARGETS]
    assert ex.resolve_targets([]) == ex.resolve_targets(["all"]) == main
    assert ex.resolve_targets([], extended=True) == list(ex.TARGETS)
    assert ex.EXTENDED_TARGETS and set(ex.EXTENDED_TARGETS) < set(ex.TARGETS)
    # The main job is the paper's claims: no target of it tests another paper's result.
    others = ("Geshkovski", "Karagodin", "Lyapunov", "continuation", "attention sinks")
    assert not [n for n in main if any(w in ex.target(n).claim for w in others)], main
    assert ex.resolve_targets(["geometry", "masks-collapse"]) == ["masks-collapse", "geometry"]
    assert list(ex.TARGETS)[:5] == [
        "masks-collapse",
        "temperature",
        "layernorm-orthogonal",
        "depth-table",
        "counterexample-2d",
    ]
    with pytest.raises(ValueError, match="valid targets: all, masks-collapse"):
        ex.resolve_targets(["masks-colapse"])
    for mix in (["all", "foo"], ["all", "geometry"], ["foo", "all"]):
        with pytest.raises(ValueError, match="'all' cannot be combined"):
            ex.resolve_targets(mix)


def test_extended_tier_is_left_out_of_all_and_added_by_the_flag(monkeypatch):
    names = list(ex.TARGETS)
    monkeypatch.setattr(ex, "EXTENDED_TARGETS", (names[1],))
    assert ex.resolve_targets(["all"]) == [names[0], *names[2:]]
    assert ex.resolve_targets(["all"], extended=True) == names
    assert ex.resolve_targets([names[1]]) == [names[1]]  # by name it runs without the flag
    with pytest.raises(rankdyn.UsageError, match="--extended"):
        ex.resolve_targets([names[0]], extended=True)


@pytest.mark.parametrize("argv", [["no-such-target"], ["all", "foo"]])
def test_cli_bad_targets(tmp_path, capsys, argv):
    rc = main(["reproduce", *argv, "--out", str(tmp_path / "o"), "--quick"])
    err = capsys.readouterr().err
    assert rc == 2
    assert "error:" in err and "geometry" in err and "Traceback" not in err
    assert not (tmp_path / "o").exists()


QUICK_FLAGS_SCRIPT = """
import json, os, sys
import rankdyn._reproduce as ex
from rankdyn._run._io import provenance
from rankdyn.cli import main

ex.run_targets = lambda names, out, **kw: {"results": {}, "runtime_s": 0.0, "report": out, "failed": []}
main(["reproduce", "temperature", "--out", sys.argv[1], "--devices", "1", *sys.argv[2:]])
print(json.dumps(provenance()["xla_flags"]))
"""


@pytest.mark.slow  # three fresh processes
@pytest.mark.parametrize(
    "extra, env_flags, want",
    [
        (["--quick"], "", "--xla_backend_optimization_level=1"),
        ([], "", ""),
        (["--quick"], "--xla_backend_optimization_level=3", "--xla_backend_optimization_level=3"),
        (
            ["--quick"],
            "--xla_cpu_enable_fast_math=false",
            "--xla_cpu_enable_fast_math=false --xla_backend_optimization_level=1",
        ),
    ],
)
def test_quick_compiles_at_level_one_unless_the_user_chose(tmp_path, extra, env_flags, want):
    """`reproduce --quick` in a fresh process adds the optimisation level to XLA_FLAGS before JAX
    starts (and the results record it); a level the user set, and non-quick runs, are left alone."""
    import os
    import subprocess

    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"} | {"XLA_FLAGS": env_flags}
    cmd = [sys.executable, "-c", QUICK_FLAGS_SCRIPT, str(tmp_path / "out"), *extra]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got == want


def test_report_names_the_xla_flags_it_was_compiled_with(tmp_path, monkeypatch):
    _fake_modules(monkeypatch)
    monkeypatch.setenv("XLA_FLAGS", "--xla_backend_optimization_level=1")
    ex.run_targets(["fake"], tmp_path, quick=True, seed=0, progress=False)
    mode = next(
        line for line in (tmp_path / "report.md").read_text().splitlines() if line.startswith("Mode:")
    )
    assert "XLA_FLAGS `--xla_backend_optimization_level=1`" in mode
    prov = json.loads((tmp_path / "fake.json").read_text())["provenance"]
    assert prov["xla_flags"] == "--xla_backend_optimization_level=1"
