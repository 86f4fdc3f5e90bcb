"""Target normalisation-speed: its rate fit and checks on synthetic curves, and a tiny run."""

import dataclasses

import numpy as np
import pytest

from rankdyn._reproduce._registry import run_target
from rankdyn._reproduce.flow import normalisation_speed as T


def _rows(exponents, drops):
    return tuple(T.SchemeRate(s, exponents[s], 1.0, 100.0, 10, drops[s]) for s in T.SCHEMES)


def test_fit_exponent_recovers_each_class_and_tells_them_apart():
    t = np.concatenate([[0.0], np.geomspace(0.01, 1000.0, 61)])
    # The exact solutions of Var' = -2 Var / scale(t) for scale 1, sqrt(t + 1) and 1 + t.
    curves = {
        0.0: 1e-6 * np.exp(-2 * t),
        0.5: 1e-6 * np.exp(-4 * (np.sqrt(t + 1) - 1)),
        1.0: 1e-6 * (1 + t) ** -2.0,
    }
    for (p_star, v), scheme in zip(curves.items(), ("post", "lns", "pre")):
        p, lo, hi, k = T.fit_exponent(t, v, T.T_MIN[scheme], T.floor(16))
        assert abs(p - p_star) <= T.TOL_P and hi / lo >= T.SPAN and k >= 3, (p_star, p, lo, hi)
    # A flat curve (no clustering) has no positive rate: no exponent.
    assert np.isnan(T.fit_exponent(t, np.full_like(t, 1e-3), 1.0, T.floor(16))[0])


def test_checks_pass_on_the_claim_and_fail_off_it():
    good = T.NormalisationSpeedMeasured(
        flow=_rows(
            T.CLASS, {"post": 5.0, "ngpt": 9.0, "lns": 20.0, "pre": 90.0, "mix": 80.0, "peri": np.inf}
        ),
        steps_limit_hit=0,
        layers_final={"post": 1e-9, "ngpt": 1e-8, "lns": 1e-6, "pre": 1e-3, "mix": 1e-4, "peri": 1e-3},
        checkpoint_final=None,
    )
    cs = T.checks(good)
    assert all(c.passed for c in cs if c.testable) and not cs[-1].testable
    # Every scheme put in the wrong class, lns slower than peri, a step limit hit, post slowest.
    wrong = dataclasses.replace(
        good,
        flow=_rows(
            {s: T.CLASS[s] + 0.5 for s in T.SCHEMES},
            {"post": 5.0, "ngpt": 9.0, "lns": 95.0, "pre": 90.0, "mix": 80.0, "peri": 99.0},
        ),
        steps_limit_hit=3,
        layers_final=dict(good.layers_final, post=1.0),
        checkpoint_final=dict(good.layers_final, lns=1.0),
    )
    assert [c.passed for c in T.checks(wrong)] == [False] * 10


@pytest.mark.slow
def test_tiny_run(tmp_path):
    # Three schemes and no checkpoint: each scheme is one more flow and layer program to compile.
    schemes = ["post", "lns", "pre"]
    size = dict(
        n=4, d=3, batch=1, t1=2.0, saves=5, depth=2, ckpt_n=0, ckpt_batch=1, ckpt_depth=1, schemes=schemes
    )
    res = run_target(T.NAME, tmp_path, quick=True, seed=0, size=size)
    assert res["name"] == T.NAME and (tmp_path / "normalisation_speed.png").exists()
    assert [r["scheme"] for r in res["measured"]["flow"]] == schemes
    statuses = [c["status"] for c in res["checks"]]
    assert len(statuses) == 7 and statuses[-1] == "not testable here"
    assert res["verdict"] in ("partially", "not reproduced")  # an untestable check caps it
