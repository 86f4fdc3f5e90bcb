"""Verdicts whose rule is fixed before the numbers (issue 44, item 10): each test feeds a check
function synthetic numbers that the former rule accepted and the fixed rule refuses."""

import numpy as np

from rankdyn._reproduce import _verdict as V
from rankdyn._reproduce._masktable import PAPER_MASKS, masks_for
from rankdyn._reproduce.sim import ablation as AB, depth_table as DT, masks_collapse as MC
from rankdyn._reproduce.sim._ablation_runs import VARIANTS


def _ablation(ln_ratio_by_mode):
    modes = tuple(ln_ratio_by_mode)
    mu_s = {"complete": 1.0, "causal": 1.5, "window": 2.0, "window-uni": 3.0}
    summary = {}
    for label, _, ln, _ in VARIANTS:
        for p in modes if ln else ("eval",):
            for m in PAPER_MASKS:
                r = {"SAN": 1e-3, "SAN+skip": 0.5}.get(label, ln_ratio_by_mode[p])
                summary[f"{label}|{m}|{p}"] = AB.AblationRow(
                    label, m, p, 10.0, mu_s[m], 10 * r, 0.1, r, 1.0, 0.1, 0, 0, 12, 128
                )
    setting = {"n": 32, "d": 64, "heads": 4, "batch": 8, "depth": 128, "dtype": "float32"}
    return AB.AblationMeasured(summary, {}, np.arange(3), {}, {m: 0.3 for m in PAPER_MASKS}, modes, setting)


def test_ablation_does_not_pick_the_dropout_mode_that_passes():
    # LN collapses without dropout and holds with it: the former rule chose the passing mode
    # ("reproduced"); the fixed rule scores c3 and c4 of every mode.
    m = _ablation({"eval": 1e-3, "attn-dropout": 1e-3, "attn+hidden-dropout": 0.8})
    cs = AB.checks(m)
    assert [c.name.split(":")[0] for c in cs if not c.passed] == [
        "c3 (eval)",
        "c4 (eval)",
        "c3 (attn-dropout)",
        "c4 (attn-dropout)",
    ]
    assert len(cs) == 3 + 2 * 3 and V.verdict(cs) == "partially"  # 5 of 9 pass
    assert m.to_dict()["mode_verdicts"]["attn+hidden-dropout"] == "reproduced"
    assert V.verdict(
        AB.checks(_ablation({"eval": 0.8, "attn-dropout": 0.8, "attn+hidden-dropout": 0.8}))
    ) == ("reproduced")


def _mc(early, final):
    rows = {}
    for k in MC.MASKS:
        f0, f1 = early.get(k, 0.6), final.get(k, 0.6)
        rows[k] = MC.MaskCollapse(
            True, True, 1, 1, 0.1, -1.0, 0.95, 0.9, (2, 20), 0.1, 0.1, 0.1, 0.5, f1, f0, 0
        )
    setting = {"n": 8, "d": 8, "batch": 2, "depth": 128, "dtype": "float32"}
    return MC.MasksCollapseMeasured(rows, 3, np.arange(3), {}, setting)


def test_masks_collapse_scores_the_ordering_at_the_final_depth_too():
    ok = {"complete": 0.5, "causal": 0.6, "window": 0.8, "window-uni": 0.9}
    # The ordering holds over 12 layers and reverses at depth 128 (uni window faster than window):
    # the former rule scored only the first 12 layers and reported "reproduced".
    m = _mc(ok, {**ok, "window-uni": 0.7})
    cs = MC.checks(m)
    assert [c.name for c in cs if not c.passed] == ["locality ordering over all 128 layers"]
    assert V.verdict(cs) == "partially"
    assert V.verdict(MC.checks(_mc(ok, ok))) == "reproduced"
    keys = MC.describe(m, cs, {}, seed=0, quick=True).key_numbers
    assert keys["factor mu(LN(X)) all 128 layers, uni window"] == 0.7


def _stats(mu_mean, live=0.5):
    r = float(mu_mean[-1] / mu_mean[0])
    return DT.MaskStats(
        [float(x) for x in mu_mean], [0.1] * 5, [0.0] * 5, [0.0] * 5, 0.0, live, live, r, r, 0
    )


def test_depth_table_quasi_masks_do_not_collapse_rule():
    strong = {"complete": _stats([1, 0.1, 1e-2, 1e-3, 1e-4]), "window": _stats([1, 0.6, 0.4, 0.3, 0.2])}
    # Loses 2/3 of mu early, then holds a level: "does not collapse" (the former >= 0.5 refused it).
    level = _stats([274.8, 120.0, 95.0, 93.0, 92.3])
    # Geometric decay to 0.6 of mu_0: the former rule accepted it; so does the new (not a clear decrease).
    mild = _stats([1.0, 0.88, 0.775, 0.68, 0.6])
    # Geometric decay to 0.3: collapse (equal halves), refused by both rules.
    geometric = _stats([1.0, 0.74, 0.548, 0.405, 0.3])
    # mu held up while the live tokens collapsed (dropout's zero rows): the former rule accepted it.
    zero_rows = _stats([1.0, 1.2, 1.3, 1.4, 1.5], live=1e-7)
    for quasi, want in ((level, True), (mild, True), (geometric, False), (zero_rows, False)):
        cs = DT.pattern_checks(strong | {"causal": quasi, "window-uni": mild}, "eval")
        assert cs[2].passed is want, cs[2]
        assert cs[3].passed and cs[0].passed and cs[1].passed


def test_lyapunov_rates_consensus_limit_and_converged_rule():
    from rankdyn._model._masks import causal_mask
    from rankdyn._reproduce.sim import lyapunov_rates as LR

    masks = {m: np.asarray(v) for m, v in masks_for(PAPER_MASKS, 8).items()}
    lim = {m: LR.consensus_limit(v) for m, v in masks.items()}
    # Uniform attention at consensus: diag 1/(i+1) (causal), 1/2 (uni window, a Jordan block), rank one.
    assert lim["causal"] == lim["window-uni"] == np.log(0.5) and lim["complete"] == -np.inf
    assert np.log(0.5) < lim["window"] < 0 and LR.consensus_limit(np.asarray(causal_mask(3))) == np.log(0.5)
    # The former rule: -0.63 against mu's -0.57 within 20% passed. The fixed rule: a transient that
    # has not converged is not testable, and a converged -0.63 is refused against log 1/2.
    assert not LR.limit_check("uni", -0.63, -0.66, np.log(0.5)).testable
    c = LR.limit_check("uni", -0.63, -0.632, np.log(0.5))
    assert c.testable and not c.passed
    assert LR.limit_check("uni", -0.685, -0.68, np.log(0.5)).passed


def test_lyapunov_rates_outside_hypotheses_are_not_checks():
    from rankdyn._reproduce.sim import lyapunov_rates as LR

    keys = ("none/causal", "post/causal")
    m = LR.LyapunovRatesMeasured(
        exponents={k: [0.0, 0.0, -0.69] for k in keys},
        transverse={k: -0.69 for k in keys},
        transverse_early={k: -0.688 for k in keys},
        limit={k: float(np.log(0.5)) for k in keys},
        log_bound={"none/causal": -0.004, "post/causal": -0.9},  # post: "fails" its bound, outside hypotheses
        bound_name={"none/causal": "Theorem 1", "post/causal": "Corollary 1"},
        outside_hypotheses={"post/causal": "Corollary 1 needs nonnegative initial cosines"},
        log_mu_rate={k: -0.5 for k in keys},
        mu_at_floor={k: 0 for k in keys},
        neutral_dims={k: 2 for k in keys},
        equilibrium_errors=[1e-12],
        equilibrium_classes={},
        setting={},
    )
    cs = LR.checks(m)
    assert not any("Corollary 1" in c.name for c in cs) and V.verdict(cs) == "reproduced"
    assert any("Theorem 1" in c.name for c in cs)


def test_attention_sinks_scores_the_scale_matched_control():
    from rankdyn._reproduce.pretrained import attention_sinks as AS
    from rankdyn._run._sinks import SinkStats

    def stats(ratio, u=0.1):
        mass = np.repeat((np.asarray(ratio, float) * u)[:, None], 2, axis=1)  # (layers, heads)
        cos = np.asarray([0.1, 0.5, 0.9], float)
        return SinkStats(mass, mass, u, u, cos, cos, (0,))

    sink, flat = stats([5.0, 6.0, 7.0]), stats([1.0, 1.1, 0.9])
    # The near-uniform N(0, 0.02^2) control shows no sink; the scale-matched control does: s2 fails.
    m = AS.AttentionSinksMeasured(
        {"trained full": sink, "trained san-skip-ln": sink, "random full": flat, "scale-matched full": sink},
        {},
        "causal",
    )
    s2 = AS.checks(m)[1]
    assert s2.name.startswith("s2: scale-matched") and s2.passed is False
