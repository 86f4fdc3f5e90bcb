"""The theory targets' checks, JSON and prose on synthetic results (no simulation): each target's
``checks`` pass on a right result and fail, check by check, on a wrong one; ``to_dict`` keeps the
JSON's names; a sentence that states a conclusion follows the numbers."""

import dataclasses
import json

import numpy as np

from rankdyn._reproduce._target import TargetResult
from rankdyn._reproduce.theory import counterexample_2d as ce, equilibria_ranks as er, positive_measure as pm

replace = dataclasses.replace


def _failed(checks) -> list[str]:
    return [c.name for c in checks if not c.passed]


# --- counterexample-2d


def _basin(**kw):
    good = dict(
        theta_A_deg=120.0,
        first_token_max_rel_increment_error=1e-13,
        first_token_sign_preserved=True,
        first_token_t_w_x11_at_end=(0.998, 0.999),
        basin_measured_arc_deg=(120.04, 269.96),
        basin_predicted_arc_deg=(120.0, 270.0),
        basin_boundary_error_deg=(0.04, -0.04),
        basin_num_arcs=1,
        basin_undecided=0,
        basin_fraction_of_circle=150 / 360,
        angles=np.arange(3.0),
        outcome=np.ones(3, int),
    )
    return ce.BasinRun(**(good | kw))


def _joint2d(fraction=(0.07, 0.07), lo=0.05):
    return ce.JointRun(
        horizons=(100, 1000),
        noncollapse_fraction=np.array(fraction),
        wilson95=((lo, 0.09), (lo, 0.09)),
        fraction_token2_near_B=np.array(fraction),
        num_starts_valid=1000,
        num_starts_degenerate=30,
        min_theta1_deg_noncollapse=25.0,
        spec_fraction_at_20000=0.071,
        theta1=np.zeros(2),
    )


def _ce(basin=None, joint=None, mu_t=1e-12):
    noln = ce.NoLNRun(steps=60, mu_0=1.0, mu_T=mu_t, one_minus_cos_T=0.0, row_norm_T=np.array([32.0, 32.0]))
    return ce.Counterexample2DMeasured(
        basins={2.0: basin or _basin()},
        joints={2.0: joint or _joint2d()},
        noln={"W_V": noln},
        fig1_starts={"non-collapsing": (75.0, 200.0), "collapsing": (30.0, 200.0)},
        fig1_sigma_ratio={"non-collapsing": 0.5, "collapsing": 1e-9},
        basin_step_deg=0.1,
    )


def test_counterexample_2d_checks_json_and_notes():
    m = _ce()
    assert _failed(ce.checks(m)) == []
    # One wrong number per check: each fails its own check and no other.
    assert _failed(ce.checks(_ce(basin=_basin(first_token_max_rel_increment_error=1e-6)))) == ["ratio w=2"]
    assert _failed(ce.checks(_ce(basin=_basin(first_token_sign_preserved=False)))) == ["ratio w=2"]
    assert _failed(ce.checks(_ce(basin=_basin(basin_boundary_error_deg=(0.06, 0.0))))) == ["basin w=2"]
    assert _failed(ce.checks(_ce(basin=_basin(basin_num_arcs=2)))) == ["basin w=2"]
    assert _failed(ce.checks(_ce(basin=_basin(basin_boundary_error_deg=(np.nan, 0.0))))) == ["basin w=2"]
    assert _failed(ce.checks(_ce(joint=_joint2d(lo=0.0)))) == ["joint w=2 positive"]
    assert _failed(ce.checks(_ce(mu_t=1e-7))) == ["no-LN collapse W_V"]
    # The JSON keys of old, without the figure data.
    d = m.to_dict()
    assert list(d) == [
        "w=2",
        "joint w=2",
        "no-LN W_V",
        "fig1 starts (theta1, theta2) deg",
        "fig1 sigma2/sigma1 at end",
    ]
    assert "angles" not in d["w=2"] and "theta1" not in d["joint w=2"] and "states" not in d["no-LN W_V"]
    assert d["joint w=2"]["wilson95"] == [[0.05, 0.09], [0.05, 0.09]] and d["w=2"]["basin_num_arcs"] == 1
    # Prose: "decided within the first 100 steps" only when the fraction did not move with T.
    assert "decided within the first 100 steps" in " ".join(ce._joint_notes(m, (100, 1000)))
    moving = _ce(joint=_joint2d(fraction=(0.2, 0.07)))
    assert "still changes after T = 100" in " ".join(ce._joint_notes(moving, (100, 1000)))
    assert "far fewer than the conditional basin" in " ".join(ce._basin_notes(m))
    assert "far fewer" not in " ".join(ce._basin_notes(_ce(joint=_joint2d(fraction=(0.4, 0.4)))))
    assert "converges algebraically" not in " ".join(
        ce._basin_notes(_ce(_basin(first_token_t_w_x11_at_end=(0.5,))))
    )
    assert "(the tokens align)" not in " ".join(ce._noln_notes(_ce(mu_t=0.5)))


# --- equilibria-ranks


def _summary(k, **kw):
    good = dict(
        count=2**k,
        distinct=2**k,
        expected=2**k,
        max_residual=1e-15,
        ranks=[k],
        min_sigma_k_over_sigma_1=0.1,
        max_sigma_k1_over_sigma_1=0.0,
        stable_rank_min_max=(1.0, 1.1),
        projected_bound_ok=True,
        spectral_radius_min_max=(1.0, 2.5),
        classification={"unstable": 2**k},
        min_contracting_dims=1,
    )
    return er.RankSummary(**(good | kw))


def _census(**kw):
    good = dict(
        method="exact",
        classes=10,
        members=20,
        by_rank={"1": 3, "2": 7},
        by_rank_and_class={
            "1": {"stable": 0, "marginal": 3, "unstable": 0},
            "2": {"stable": 0, "marginal": 1, "unstable": 6},
        },
        closed_form_classes_by_rank={"1": 1, "2": 2},
        max_numpy_residual=1e-15,
        max_error_estimate=1e-14,
        closed_forms_in_census=True,
        seconds=0.1,
    )
    return er.Census(**(good | kw))


def _er(k2=None, srank=1.1, census=None):
    fam = er.RankFamily(
        n=2,
        w=2.0,
        per_k={1: _summary(1), 2: k2 or _summary(2)},
        full_rank_stable_rank_max=srank,
        full_rank_bound=2 / (2 - 1 / 4),
        full_rank_bound_holds=srank <= 2 / 1.75,
        full_rank_all_unstable=True,
        census=census or _census(),
    )
    return er.EquilibriaRanksMeasured((fam,), er.WorkedExample(1.2042, 1.2042, 1.25))


def test_equilibria_ranks_checks_and_json():
    m = _er()
    assert _failed(er.checks(m)) == []
    assert _failed(er.checks(_er(_summary(2, max_residual=1e-11)))) == ["residual < 1e-12 (NumPy map)"]
    assert _failed(er.checks(_er(_summary(2, ranks=[1, 2])))) == ["rank == k"]
    assert _failed(er.checks(_er(_summary(2, distinct=3)))) == ["2^k distinct per rank"]
    assert _failed(er.checks(_er(srank=1.2))) == ["full-rank SRank <= bound"]
    census = "exact census contains the 2^k closed forms of each rank"
    assert _failed(er.checks(_er(census=_census(closed_forms_in_census=False)))) == [census]
    assert _failed(er.checks(_er(census=_census(closed_form_classes_by_rank={"1": 1, "2": 1})))) == [census]
    d = m.to_dict()
    assert list(d) == ["N=d=2, w=2", "spec_worked_example_N5_w2", "checks"]
    assert (
        d["N=d=2, w=2"]["k=2"]["expected_2^k"] == 4 and "max_sigma_k+1_over_sigma_1" in d["N=d=2, w=2"]["k=1"]
    )
    assert d["checks"] == {c.name: c.passed for c in er.checks(m)}
    # The standard verdict rule: 4 of 5 checks pass -> partially.
    res = TargetResult("t", "c", {}, _er(srank=1.2), er.checks(_er(srank=1.2))).to_dict()
    assert res["verdict"] == "partially" and res["measured"]["checks"]["full-rank SRank <= bound"] is False
    json.dumps(res)


# --- positive-measure


def _lemma(noncollapse=64, valid=True, over=0):
    r = pm.Lemma13Condition(
        samples=64,
        all_inputs_valid=valid,
        noncollapse=noncollapse,
        within_1e_2_of_B_d=64,
        max_distance_to_B_d=1e-3,
        invariance_violated_any_step=over,
        invariance_violated_first_step=over,
        max_overshoot=0.1 if over else -0.2,
        token1_stayed_at_e_d=True,
        min_sigma_ratio_at_T=0.5,
    )
    return pm.LemmaCase(4, 3.0, 300, {"paper": r}, (0.05, 0.06))


def _frac(lo, counts=(5, 5)):
    c = np.array(counts)
    return pm.Fractions((100, 300), c, 64, 0, c / 64, ((lo, 0.2), (lo, 0.2)))


def _pm(lemma=None, rnd=0.02, ed=0.3, rnd_wide=0.0):
    joint = (
        pm.JointCase(2, 2, 2.0, _frac(rnd), _frac(ed, (25, 25)), 0.06),
        pm.JointCase(4, 8, 4.0, _frac(rnd_wide), _frac(ed, (25, 25)), 0.0),
    )
    return pm.PositiveMeasureMeasured((lemma or _lemma(),), joint)


def test_positive_measure_checks_json_and_notes():
    m = _pm()
    names = [c.name for c in pm.checks(m)]
    assert _failed(pm.checks(m)) == []  # the N < d case's zero lower bound is not judged
    assert _failed(pm.checks(_pm(_lemma(noncollapse=63)))) == [names[0]]
    assert _failed(pm.checks(_pm(_lemma(valid=False)))) == [names[0]]
    assert _failed(pm.checks(_pm(rnd=0.0))) == [names[1]]
    assert _failed(pm.checks(_pm(ed=0.0))) == [names[2]]
    d = _pm(_lemma(over=3)).to_dict()
    lem = d["lemma13 d=4, w=3 (N=2, token 1 at e_d, T=300)"]
    assert lem["paper"]["within_1e-2_of_B_d"] == 64 and "within_1e_2_of_B_d" not in lem["paper"]
    assert lem["paper"]["first_step_overshoot_fraction"] == 3 / 64 and lem["spec_first_step_overshoot"] == [
        0.05,
        0.06,
    ]
    assert d["joint N=4, d=8, w=4"]["valid_samples"] == [64, 64]
    assert (
        d["lemma13_per_step_invariance_never_violated"] is False
        and m.to_dict()["lemma13_per_step_invariance_never_violated"]
    )
    # Prose: "the lemma's conclusion holds" only when every start kept rank 2.
    assert "conclusion holds but" in " ".join(pm._lemma_notes(_pm(_lemma(over=3))))
    broken = " ".join(pm._lemma_notes(_pm(_lemma(noncollapse=60, over=3))))
    assert "conclusion holds but" not in broken and "nor the conclusion holds" in broken
    notes = " ".join(pm._joint_notes(m, (100, 300)))
    assert "decided early" in notes and "(4, 8, 4)" in notes
    moving = pm.PositiveMeasureMeasured(m.lemma, (replace(m.joint[0], random=_frac(0.02, (9, 5))),))
    assert "decided early" not in " ".join(pm._joint_notes(moving, (100, 300)))
