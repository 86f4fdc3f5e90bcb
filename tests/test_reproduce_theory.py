"""The theory targets of ``rankdyn reproduce`` (counterexample-2d, equilibria-ranks,
positive-measure): the result contract, and oracles from the paper's closed forms.

The result is the main job's quick run in out/reproduce/ when this source made it
(`helpers.quick_result`), else a fresh run at a tiny size (with its progress counted): every
statement holds at both sizes.
"""

import json
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import REPRODUCE_OUT, quick_result

import rankdyn as rd
from rankdyn._reproduce import RESULT_KEYS, VERDICTS, run_target
from rankdyn._reproduce.theory import counterexample_2d as ce, equilibria_ranks as er, positive_measure as pm
from rankdyn._reproduce.theory._counterexample_2d_runs import _tokens
from rankdyn._reproduce.theory._intervals import wilson_interval
from rankdyn._run._io import to_jsonable
from rankdyn._run._progress import target_progress
from rankdyn._theory._constructions import example_2d, uniform_causal_layer


def _result(module, tmp_path):
    """The quick run's result, its folder and None; else a tiny run's, ``tmp_path`` and its progress."""
    if (res := quick_result(module.NAME)) is not None:
        return res, REPRODUCE_OUT, None
    with target_progress(module.NAME, enabled=False) as steps:
        res = run_target(module.NAME, tmp_path, quick=True, seed=0, size=module.sizes(True, tiny=True))
    return res, tmp_path, steps


def _check_contract(res, module, out, steps):
    # Progress per step of real work: the target planned its steps and reported every one.
    assert steps is None or (steps.total is not None and steps.done == steps.total >= 1)
    assert set(RESULT_KEYS) <= set(res)
    assert res["name"] == module.NAME
    assert res["claim"] == module.CLAIM
    assert res["verdict"] in VERDICTS
    assert res["criterion"] and isinstance(res["notes"], str)
    assert res["figures"]
    for fig in res["figures"]:
        assert (out / fig).stat().st_size > 1000
    json.dumps(to_jsonable(res))  # everything is JSON-serialisable


@pytest.mark.slow
def test_counterexample_2d_result(tmp_path):
    res, out, steps = _result(ce, tmp_path)
    _check_contract(res, ce, out, steps)
    m = res["measured"]["w=2"]
    step = res["setting"]["basin_step"]
    # Oracle (docs/theory.md#constructions): the basin of B is the single arc (theta_A, 270) with
    # theta_A = 120 deg at w = 2.
    assert m["basin_num_arcs"] == 1 and m["basin_undecided"] == 0
    assert m["theta_A_deg"] == pytest.approx(120.0, abs=1e-12)
    assert max(abs(e) for e in m["basin_boundary_error_deg"]) <= step / 2 + 1e-9
    # Token 1's ratio grows by exactly w per step.
    assert m["first_token_max_rel_increment_error"] < 1e-12
    # Joint dynamics: a positive fraction keeps rank 2, far below the conditional basin's 150/360.
    joint = res["measured"]["joint w=2"]
    assert 0 < joint["noncollapse_fraction"][-1] < 150 / 360 / 2
    assert res["verdict"] == "reproduced"


@pytest.mark.slow
def test_basin_points_on_both_sides_of_a():
    """Starts just either side of A go to B (inside the arc) or to (0, 1) (outside)."""
    with jax.enable_x64(True):
        ex = example_2d(3.0)
        layer = uniform_causal_layer(2, 2, ex["W_V"])
        th = np.array([ex["theta_A"] - 0.01, ex["theta_A"] + 0.01, 269.99, 270.01])
        x2 = _tokens(th)
        x0 = jnp.asarray(np.stack([np.broadcast_to([0.0, 1.0], x2.shape), x2], axis=-2))
        # The states are the check: one cheap metric, not the default spectral ones (an SVD per
        # saved layer in the program); the states are the same bits either way.
        xf = np.asarray(
            rd.simulate(layer, x0, 600, save_states=True, save_every=600, metrics="mu").states[:, -1, 1]
        )
    b, e = np.asarray(ex["B"]), np.array([0.0, 1.0])
    np.testing.assert_allclose(xf[[1, 2]], np.stack([b, b]), atol=1e-10)
    np.testing.assert_allclose(xf[[0, 3]], np.stack([e, e]), atol=1e-10)


@pytest.mark.slow  # end-to-end (a whole target, or a fresh process)
def test_equilibria_ranks_result(tmp_path):
    res, out, steps = _result(er, tmp_path)
    _check_contract(res, er, out, steps)
    m = res["measured"]["N=d=4, w=4"]
    for k in range(1, 5):
        e = m[f"k={k}"]
        assert e["count"] == e["distinct"] == 2**k
        assert e["max_residual"] < 1e-12
        assert e["ranks"] == [k]
    # App. F.2 bound for the full-rank ones: 4 / (4 - 3/16).
    assert m["full_rank_bound"] == pytest.approx(4 / (4 - 3 / 16))
    assert m["full_rank_stable_rank_max"] <= m["full_rank_bound"]
    # docs/theory.md#constructions worked example: SRank 1.2042 for N = d = 5, w = 2.
    assert res["measured"]["spec_worked_example_N5_w2"]["stable_rank"] == pytest.approx(1.2042, abs=5e-5)
    assert res["verdict"] == "reproduced"
    # The exact census (independent of the closed forms) at N = d = 4, w = 4: every closed form
    # is in it, and the 2^k family is a minority of the equilibria.
    cen = m["census"]
    assert cen["method"] == "exact" and cen["closed_forms_in_census"] and cen["max_numpy_residual"] < 1e-12
    assert cen["closed_form_classes_by_rank"] == {"1": 1, "2": 2, "3": 4, "4": 8}
    assert cen["classes"] > 15


@pytest.mark.slow
def test_positive_measure_result(tmp_path):
    res, out, steps = _result(pm, tmp_path)
    _check_contract(res, pm, out, steps)
    lem = next(v for k, v in res["measured"].items() if k.startswith("lemma13 d=3, w=2"))
    # Lemma 13 at d = 3 (docs/theory.md#constructions: no violations): every start keeps
    # X_(2,d-1) <= -1/w and rank 2.
    assert lem["paper"]["noncollapse"] == lem["paper"]["samples"]
    assert lem["paper"]["invariance_violated_any_step"] == 0
    assert lem["paper"]["token1_stayed_at_e_d"]
    for k, v in res["measured"].items():
        if k.startswith("joint"):
            # The interval against an independent implementation (scipy's Wilson interval).
            from scipy.stats import binomtest

            trials = v["valid_samples"][0]
            hits = int(round(v["random_fraction"][-1] * trials))
            ci = binomtest(hits, trials).proportion_ci(confidence_level=0.95, method="wilson")
            np.testing.assert_allclose(v["random_wilson95"][-1], (ci.low, ci.high), atol=1e-9)


@pytest.mark.slow
def test_lemma13_track_matches_states():
    """The per-step running max equals the max over a saved trajectory (reference: simulate)."""
    from rankdyn._reproduce.theory._positive_measure_runs import lemma13_track
    from rankdyn._theory._constructions import lemma13_sample, uniform_causal_layer

    with jax.enable_x64(True):
        d, w, steps = 4, 3.0, 12
        layer = uniform_causal_layer(2, d, rd.weights.bidiagonal(d, w))
        x0 = lemma13_sample(jax.random.PRNGKey(1), d, w, 16)
        xf, first, mx = lemma13_track(layer, x0, steps, d - 2)
        st = np.asarray(rd.simulate(layer, x0, steps, save_states=True, observe=lambda t, x, args: {}).states)
    np.testing.assert_allclose(np.asarray(xf), st[:, -1], atol=1e-14)
    np.testing.assert_allclose(np.asarray(first), st[:, 1, 1, d - 2], atol=1e-14)
    np.testing.assert_allclose(np.asarray(mx), st[:, 1:, 1, d - 2].max(axis=1), atol=1e-14)


def test_wilson_interval():
    z = 1.959963984540054
    # Closed form at 0 successes: [0, z^2 / (n + z^2)].
    assert wilson_interval(0, 10) == (0.0, pytest.approx(z**2 / (10 + z**2)))
    lo, hi = wilson_interval(5, 10)
    assert lo == pytest.approx(1 - hi) and lo == pytest.approx(0.2365931, abs=1e-6)
    assert wilson_interval(10, 10)[1] == 1.0
    with pytest.raises(ValueError):
        wilson_interval(11, 10)
    assert math.isclose(sum(wilson_interval(3, 400)) / 2, (3 / 400 + z**2 / 800) / (1 + z**2 / 400))
