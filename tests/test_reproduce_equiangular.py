"""The `equiangular` target's checks: they pass on numbers that meet the rules and fail on each
plausible miss (the end-to-end quick run is in docs/reproduce.md)."""

import dataclasses

import figure_measured

from rankdyn._reproduce.flow import equiangular as E
from rankdyn.theory import equiangular_rate


def _passed(m):
    return [c.passed for c in E.checks(m)]


def test_checks_pass_on_numbers_within_the_rules():
    _, m = figure_measured.equiangular()
    assert all(_passed(m))


def test_each_check_fails_on_a_miss():
    _, m = figure_measured.equiangular()
    misses = [
        (0, dict(flow_err={"sa": {"1.0": 2e-8}})),
        (1, dict(layer_err=1e-12)),
        (2, dict(long_slopes={"rho=0.3, p=0.5": -0.5})),  # the n^-|p-1| instead of n^-2|p-1|
        (2, dict(long_monotone={"rho=0.3, p=1": False}, long_slopes={"rho=0.3, p=1": -1.0})),
        (3, dict(sim_err=1e-10)),
        (4, dict(placements={"post": {"law": "exp", "ratio": 1.001}})),
        (4, dict(placements={"pre": {"law": "power", "ratio": 1.0, "k_ratio": 1.001}})),
        (4, dict(placements={"peri": {"law": "power", "ratio": 0.9, "k_ratio": 1.0}})),
        (5, dict(steps_limit_hit=[0, 1])),
    ]
    for index, change in misses:
        passed = _passed(dataclasses.replace(m, **change))
        assert passed[index] is False, (index, change)
        assert sum(not p for p in passed) == 1, (index, change)


def test_placement_horizon_reaches_the_target_gap():
    # T is where the asymptote predicts 1 - rho = PL_GAP, for each law.
    for pl in E.EQUIANGULAR_PLACEMENTS:
        kw = {"mix": {"mix_time": E.PL_TAU}, "ngpt": {"ngpt_alpha": E.PL_ALPHA}}.get(pl, {})
        rate = equiangular_rate(pl, E.PL_BETA, 4, rho0=E.RHO0, **kw)
        t = E._placement_time(rate)
        pred = {
            "exp": lambda: rate.prefactor * 2.718281828459045 ** (-rate.exponent * t),
            "exp_sqrt": lambda: rate.prefactor * 2.718281828459045 ** (-rate.exponent * (t + 1) ** 0.5),
            "power": lambda: rate.prefactor * t**-2.0,
        }[rate.law]()
        assert abs(pred / E.PL_GAP - 1) < 1e-12, pl
