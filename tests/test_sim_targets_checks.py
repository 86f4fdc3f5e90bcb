"""The simulation targets' checks and notes on synthetic `Measured` results (no simulation).

For each of masks-collapse, temperature, layernorm-orthogonal, depth-table and ablation: a
result that matches the claim gets "reproduced"; one with a plausible failure gets a failing
check and a weaker verdict; the JSON of ``measured`` has the keys of the file format; and the
notes state a conclusion only when the numbers make it so.
"""

import numpy as np

from rankdyn._reproduce import _verdict as V
from rankdyn._reproduce._masktable import PAPER_MASKS
from rankdyn._reproduce.sim import (
    ablation as AB,
    depth_table as DT,
    layernorm_orthogonal as LO,
    masks_collapse as MC,
    temperature as TE,
)
from rankdyn._reproduce.sim._ablation_runs import VARIANTS

LAYERS = np.arange(3)


def _failed(cs):
    return [c.name for c in cs if c.testable and not c.passed]


# masks-collapse -------------------------------------------------------------------------------


def _mc_row(radius=1, **kw):
    base = dict(
        strongly_connected=True,
        quasi_strongly_connected=True,
        num_centers=1,
        radius=radius,
        eps_measured=0.1,
        log10_eps_pow_r=-float(radius),
        bound_rate=0.95,
        fitted_rate=0.9,
        fit_window=(2, 20),
        mu_ratio=0.1,
        mu_normalized_ratio=0.1,
        mu_rel_ratio=0.1,
        row_norm_ratio=0.5,
        avg_rate_mu_normalized=0.9,
        avg_rate_mu_normalized_early=0.9,
        nonfinite=0,
    )
    return MC.MaskCollapse(**(base | kw))


def _mc(**rows):
    # Early and final factors in the paper's locality order: complete < causal < window < uni window.
    order = {"complete": 0.5, "causal": 0.6, "window": 0.8, "window-uni": 0.9, "dilated": 0.7, "global": 0.6}
    per_mask = {
        k: rows.get(k, _mc_row(avg_rate_mu_normalized=f, avg_rate_mu_normalized_early=f))
        for k, f in order.items()
    }
    setting = {"n": 8, "d": 8, "batch": 2, "depth": 100, "dtype": "float32"}
    return MC.MasksCollapseMeasured(per_mask, 3, LAYERS, {}, setting)


def test_masks_collapse_checks_pass_and_fail():
    good = _mc()
    cs = MC.checks(good)
    assert V.verdict(cs) == "reproduced" and len(cs) == 2 * len(MC.MASKS) + 2
    d = good.to_dict()
    assert list(d) == ["per_mask", "layers_saved"]
    assert "avg_rate_mu_normalized_first_12" in d["per_mask"]["complete"]
    # Every bound is testable here, so the notes must not say that a check cannot fail.
    assert "cannot fail" not in MC.notes(good) and "could fail" in MC.notes(good)
    bad = _mc(
        complete=_mc_row(mu_ratio=0.95, avg_rate_mu_normalized=0.5, avg_rate_mu_normalized_early=0.5),
        # A vacuous bound (1 in float64) and the uni window faster than the window: ordering fails.
        **{
            "window-uni": _mc_row(
                radius=60, bound_rate=1.0, log10_eps_pow_r=-60.0, avg_rate_mu_normalized_early=0.7
            )
        },
    )
    cs = MC.checks(bad)
    assert _failed(cs) == ["complete: decays", "locality ordering over the first 12 layers"]
    assert [c.name for c in cs if not c.testable] == ["uni window: fitted rate <= (1-eps^r)^(1/r)"]
    assert V.verdict(cs) == "partially"
    text = MC.notes(bad)
    assert "loose for uni window:" in text and "exactly 1 for uni window" in text and "cannot fail" in text
    assert "locality ordering failed" in text


def test_masks_collapse_factor_averages_over_the_layers_above_the_floor():
    """A mask that reaches the round-off floor early gets its own factor, not floor^(1/T): the
    former clamp gave complete and causal (floor)^(1/128) = 0.9319 in float32 whatever they did."""
    t = np.arange(129)
    floor = float(np.finfo(np.float32).eps) * 1000
    complete = np.where(t == 0, 1.0, np.where(t == 1, 1e-3, 1e-9))  # at the floor from layer 2
    causal = 0.5**t  # reaches the floor at layer 14 (0.5^13 > 1.19e-4 > 0.5^14)
    f, first = MC.floor_factor(t, complete, 128, floor)
    assert first == 2 and abs(f - 1e-3) < 1e-12
    f, first = MC.floor_factor(t, causal, 128, floor)
    assert first == 14 and abs(f - 0.5) < 1e-12
    assert MC.floor_factor(t, causal, 12, floor) == (0.5, 14)
    f, first = MC.floor_factor(t, 0.99**t, 128, floor)  # never at the floor: over all 128 layers
    assert first is None and abs(f - 0.99) < 1e-12
    # At the floor at the first saved layer (every 4th saved): floor^(1/4), an upper estimate.
    assert MC.floor_factor(t[::4], complete[::4], 128, floor) == (floor**0.25, 4)

    def measured(curves):
        rows = {}
        for k in MC.MASKS:
            mun = curves.get(k, 0.9**t)
            g, fl = MC.floor_factor(t, mun, 128, floor)
            g0, _ = MC.floor_factor(t, mun, MC.EARLY, floor)
            rows[k] = _mc_row(avg_rate_mu_normalized=g, avg_rate_mu_normalized_early=g0, floor_layer=fl)
        setting = {"n": 8, "d": 8, "batch": 2, "depth": 128, "dtype": "float32"}
        return MC.MasksCollapseMeasured(rows, 129, t, {}, setting)

    good = {"complete": complete, "causal": causal, "window": 0.998**t, "window-uni": 0.999**t}
    cs = MC.ordering_checks(measured(good))
    assert [c.passed for c in cs] == [True, True], cs
    assert "complete 0.001 (floor at layer 2)" in cs[1].detail
    # Wrong results fail: the causal mask slower than the window, and the window slower than the
    # uni window (the measured quick run's real failure, 0.9978 > 0.9755).
    assert not MC.ordering_checks(measured(good | {"causal": 0.9995**t}))[1].passed
    assert not MC.ordering_checks(measured(good | {"window-uni": 0.9755**t}))[1].passed


# temperature ----------------------------------------------------------------------------------


def _te(spearman=None, effect=None):
    falling = list(np.linspace(0.9, 0.5, len(TE.DQKS)))
    rates = {m: falling for m in PAPER_MASKS}
    spearman = spearman or {m: -1.0 for m in PAPER_MASKS}
    effect = effect or {"complete": 0.4, "causal": 0.3, "window": 0.1, "window-uni": 0.05}
    spread = {m: 0.4 for m in PAPER_MASKS}
    eps = {m: list(np.linspace(1e-6, 1e-2, len(TE.DQKS))) for m in PAPER_MASKS}
    setting = {"depth": 32, "dtype": "float32"}
    return TE.TemperatureMeasured(rates, rates, eps, spearman, effect, spread, spread, LAYERS, {}, setting)


def test_temperature_checks_pass_and_fail():
    good = _te()
    assert V.verdict(TE.checks(good)) == "reproduced"
    assert list(good.to_dict()) == [
        "early_rate",
        "late_rate",
        "median_eps_layer0",
        "spearman",
        "monotone",
        "effect_1_64_minus_64",
        "complete_effect_largest",
        "spread_shallow",
        "spread_deep",
    ]
    assert "not monotone" not in TE.notes(good)
    bad = _te(
        spearman={"complete": -1.0, "causal": -0.5, "window": -0.9, "window-uni": float("nan")},
        effect={"complete": 0.05, "causal": 0.3, "window": 0.1, "window-uni": 0.05},
    )
    cs = TE.checks(bad)
    assert len(_failed(cs)) == 3 and V.verdict(cs) == "not reproduced"
    assert bad.to_dict()["monotone"] == {
        "complete": True,
        "causal": False,
        "window": True,
        "window-uni": False,
    }
    assert "causal: not monotone (Spearman -0.50)" in TE.notes(bad)


# layernorm-orthogonal -------------------------------------------------------------------------


def _lo_case(placement, mask, x0, inside, **kw):
    base = dict(
        placement=placement,
        mask=mask,
        x0=x0,
        inside_hypotheses=inside,
        strongly_connected=mask in ("complete", "window"),
        quasi_strongly_connected=True,
        num_centers=1,
        radius=1,
        eps_measured=0.12,
        bound="Theorem 2",
        log10_c_eps_pow_2r=-2.0,
        bound_rate=0.99,
        fitted_rate=0.9,
        fit_window=(2, 50),
        mu_0=1.0,
        mu_T=1e-5,
        mu_ratio=1e-5,
        min_cos_0=0.1,
        min_cos_T=1.0,
        frac_min_cos0_nonneg=1.0,
        nonfinite=0,
        degenerate_ln=0,
    )
    return LO.LayerNormCase(**(base | kw))


def _lo(changes=None, gap=0.01):
    cases = {}
    for p in LO.PLACEMENTS:
        for m, k, inside in LO.CASES:
            key = f"{p}/{m}/{k}"
            cases[key] = _lo_case(p, m, k, inside, **(changes or {}).get(key, {}))
    neighbours = {m: 8 for m, _, _ in LO.CASES}
    return LO.LayerNormMeasured(cases, gap, LAYERS, {}, neighbours, {"dtype": "float32"})


def test_layernorm_orthogonal_checks_pass_and_fail():
    good = _lo()
    cs = LO.checks(good)
    assert V.verdict(cs) == "reproduced" and len(cs) == 2 * 2 * 4  # 2 checks x 2 placements x 4 cases inside
    assert list(good.to_dict()) == ["cases", "max_log10_gap_pre_vs_post_mu_ratio"]
    text = LO.notes(good, cs)
    assert "nearly uniform" in text and "cannot fail" not in text and "agree here" in text
    assert "+-1e-07 in float32" in text and "did not meet" not in text
    bad = _lo(
        {
            "post/window/sphere": {"mu_ratio": 0.5},  # has not collapsed
            "pre/window-uni/nonneg": {"bound_rate": 1.0, "log10_c_eps_pow_2r": -40.0},  # vacuous bound
            "post/complete/sphere": {"eps_measured": 0.01},  # far from uniform attention
        },
        gap=3.0,
    )
    cs = LO.checks(bad)
    assert _failed(cs) == ["post/window/sphere: collapses"] and V.verdict(cs) == "partially"
    text = LO.notes(bad, cs)
    assert "nearly uniform" not in text and "pre/window-uni/nonneg are tiny" in text
    assert "differ here by up to 3 decades" in text and "mixing time" in text


# depth-table ----------------------------------------------------------------------------------

PATTERN = {"complete": 1e-3, "window": 0.3, "causal": 0.9, "window-uni": 1.1}


def _dt_stats(ratio, zero_rows=0.0, first_zero=0.0, live=0.5, mu_T=1.0):
    five = [1.0] * 4 + [mu_T]
    return DT.MaskStats(
        five, [0.1] * 5, [0.0] * 4 + [zero_rows], [0.0] * 5, first_zero, live, live, ratio, ratio, 0
    )


def _dt(eval_ratios, att_ratios):
    n, d, depth, p = 32, 64, 128, DT.MODES["attn-dropout"][0]
    k = p * depth
    # The zero-row model holds in the attention-dropout mode: k zero rows, live tokens collapsed.
    att = {
        m: _dt_stats(r, k, 1.0, 1e-7, float(np.sqrt(d * k * (n - k) / n)))
        if m in ("causal", "window-uni")
        else _dt_stats(r)
        for m, r in att_ratios.items()
    }
    stats = {
        "eval": {m: _dt_stats(r) for m, r in eval_ratios.items()},
        "attn-dropout": att,
        "attn+hidden-dropout": {m: _dt_stats(r, live=0.3) for m, r in att_ratios.items()},
    }
    graph = {m: {"strongly_connected": m in ("complete", "window")} for m in PAPER_MASKS}
    mech = DT.zero_row_model(att, n, d, p, depth)
    setting = {
        "n": n,
        "d": d,
        "dk": 8,
        "dqk": 8.0,
        "batch": 2,
        "depth": depth,
        "table_layers": (0, 32, 64, 96, 128),
    }
    return DT.DepthTableMeasured(stats, graph, mech, LAYERS, {}, setting | {"dtype": "float32"})


def test_depth_table_checks_pass_and_fail():
    good = _dt(PATTERN, PATTERN)
    cs = DT.checks(good)
    # Every mode's four checks and the mechanism check: no mode is chosen after the run, so
    # attention dropout's collapsed live tokens cap the verdict although two modes match.
    assert V.verdict(cs) == "partially" and len(cs) == 13
    assert {name.split(":")[0] for name in _failed(cs)} == {"attn-dropout"}
    d = good.to_dict()
    assert list(d) == [
        "stats",
        "graph",
        "mode_verdicts",
        "mode_checks",
        "mechanism",
        "mechanism_checks",
        "mechanism_established",
    ]
    assert d["mechanism_established"] is True
    # Attention dropout: mu held up by zero rows while the live tokens collapsed is not "does not collapse".
    assert d["mode_verdicts"] == {
        "eval": "reproduced",
        "attn-dropout": "partially",
        "attn+hidden-dropout": "reproduced",
    }
    assert "only in a dropout mode" not in DT.notes(good)
    # The pattern in all three modes: reproduced.
    good.stats["attn-dropout"] = {m: _dt_stats(r) for m, r in PATTERN.items()}
    assert V.verdict(DT.checks(good)) == "reproduced"
    # The rebuttal's pattern only under dropout: eval's causal mask collapses.
    bad = _dt({**PATTERN, "causal": 1e-4}, PATTERN)
    cs = DT.checks(bad)
    assert _failed(cs)[-1].startswith("mechanism: the pattern holds without dropout")
    assert V.verdict(cs) == "partially"
    text = DT.notes(bad)
    assert "only in a dropout mode (attn+hidden-dropout)" in text and "causal: collapsed" in text


# ablation -------------------------------------------------------------------------------------


def _ab(full_ratio=1.0, ln_ratio=0.5):
    modes = ("eval", "attn-dropout")
    mu_s = {"complete": 1.0, "causal": 1.5, "window": 2.0, "window-uni": 3.0}
    summary = {}
    for label, _, ln, _ in VARIANTS:
        for p in modes if ln else ("eval",):
            for m in PAPER_MASKS:
                ratio = {"SAN": 1e-3, "SAN+skip": 0.5, "full": full_ratio}.get(label, ln_ratio)
                summary[f"{label}|{m}|{p}"] = AB.AblationRow(
                    label, m, p, 10.0, mu_s[m], 10 * ratio, 0.1, ratio, 1.0, 0.1, 0, 0, 12, 128
                )
    setting = {"n": 32, "d": 64, "heads": 4, "batch": 8, "depth": 128, "dtype": "float32"}
    norm = {m: 0.3 for m in PAPER_MASKS}
    return AB.AblationMeasured(summary, {}, LAYERS, {}, norm, modes, setting)


def test_ablation_checks_pass_and_fail():
    good = _ab()
    assert V.verdict(AB.checks(good)) == "reproduced"
    d = good.to_dict()
    assert list(d) == ["summary", "masks", "mode_verdicts"]
    assert list(d["summary"]["SAN|complete|eval"])[3:8] == [
        "mu_0",
        "mu_12",
        "mu_128",
        "ratio_12",
        "ratio_128",
    ]
    assert "LN does not prevent collapse" not in AB.notes(good)
    bad = _ab(full_ratio=1e-3)  # the full block collapses in every mode: c4 fails in each
    cs = AB.checks(bad)
    assert _failed(cs) == ["c4 (eval): full block stable", "c4 (attn-dropout): full block stable"]
    assert V.verdict(cs) == "partially"
    text = AB.notes(bad)
    assert "LN does not prevent collapse for: full|complete" in text and "no dropout mode here passes" in text
