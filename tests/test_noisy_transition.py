"""The noisy-transition target: its checks fail, check by check, on wrong synthetic results; its
quick run reproduces (slow)."""

import dataclasses

import pytest

from rankdyn._reproduce.theory import noisy_transition as T


def _case(dynamics="usa", beta=2.0, **kw):
    sc = T.sigma_c(beta, dynamics)
    modes = T.mode_thresholds(beta, dynamics, 0.75 * sc, 1.25 * sc)
    good = dict(
        dynamics=dynamics,
        beta=beta,
        sigma_c=sc,
        bessel_ratio=T.bessel_ratio(beta),
        uniform_status="parameter_end",
        branch_points=modes,
        other=(),
        stable_above=True,
        unstable_below=True,
        mode_thresholds=modes,
        cluster_order=0.9,
        cluster_stable=True,
        cluster_status="parameter_end",
        folds=(sc,) if T.bessel_ratio(beta) < 0.5 else (1.005 * sc, sc, 1.005 * sc),
    )
    return T.CaseMeasured(**{**good, **kw})


def _failed(cases):
    return [c.name for c in T.checks(T.NoisyTransitionMeasured(24, tuple(cases))) if not c.passed]


def test_checks_pass_on_the_closed_forms_and_fail_on_each_wrong_number():
    assert _failed([_case("usa", 2.0), _case("usa", 3.0), _case("sa", 2.0)]) == []
    # Mode 2's threshold lies in the interval at beta = 3: a branch point missing there fails.
    assert T.mode_thresholds(3.0, "usa", 0.75 * T.sigma_c(3.0, "usa"), 1.25 * T.sigma_c(3.0, "usa"))[1:]
    sc = T.sigma_c(2.0, "usa")
    wrong = [
        _case(branch_points=(sc + 2e-6,)),  # threshold off by 2e-6
        _case(branch_points=(sc, 0.9 * sc)),  # a spurious branch point
        _case(other=("period-doubling",)),
        _case(stable_above=False),
        _case(folds=(1.01 * sc, sc)),  # subcritical where the statement says supercritical
        _case(folds=()),
        _case(cluster_stable=False),
    ]
    for c in wrong:
        assert len(_failed([c])) == 1, c
    # SA's type is reported, not checked: its folds do not enter the checks.
    assert _failed([_case("sa", 2.0, folds=(1.01 * T.sigma_c(2.0, "sa"),))]) == []
    assert dataclasses.asdict(_case())["sigma_c"] == pytest.approx(1.2612045253000521, rel=1e-15)


@pytest.mark.slow
def test_quick_run_reproduces(tmp_path):
    from rankdyn._reproduce._registry import run_target

    res = run_target("noisy-transition", tmp_path, quick=True, seed=0)
    assert res["verdict"] == "reproduced", [c for c in res["checks"] if c["status"] != "pass"]
    assert (tmp_path / "noisy_transition.png").exists()
