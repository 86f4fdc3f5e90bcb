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


def test_particle_grid_and_checks_fail_on_each_wrong_number():
    """The particle part: T = 5 / lambda_1 with lambda_1 = (d - 1)(sigma_c^2 - (0.8 sigma_c)^2) / 2
    (USA), a step within the bias bound that divides every saved interval; and the checks pass on
    good synthetic values and fail, one at a time, on each wrong one."""
    import math

    from rankdyn._reproduce.theory import _noisy_particles as P
    from rankdyn.theory import critical_noise

    for d, beta in ((2, 2.0), (3, 1.2)):
        sc, rate, t1, steps = P.particle_grid("usa", d, beta, 0.15)
        assert sc == pytest.approx(float(critical_noise(beta, d=d)), rel=1e-14)
        assert rate == pytest.approx((d - 1) * 0.36 * sc**2 / 2, rel=1e-12)
        assert t1 * rate == pytest.approx(5.0)
        assert steps % (P.PARTICLE_SAVES - 1) == 0 and t1 / steps <= 0.15 / (3 * (1.2 * sc) ** 2)
    n = 256
    good = dict(dynamics="usa", d=2, beta=2.0, sigma_c=1.26, rate=0.29, n=n, t=17.5, dt=0.01,
                order_below=(0.9, 0.85, 0.8, 0.88), order_above=(0.1, 0.05, 0.08, 0.12), drift=1e-15,
                successful=True)  # fmt: skip

    def failed(**kw):
        return [c.name for c in P.particle_checks([P.ParticleMeasured(**{**good, **kw})]) if not c.passed]

    assert failed() == []
    bound = 4 / math.sqrt(n)
    for wrong in (
        dict(order_below=(0.9, 0.29, 0.8, 0.88)),  # one trajectory not clustered
        dict(order_above=(bound + 0.01,) * 4),  # the uniform state not held
        dict(drift=1e-6),  # the radius moved
        dict(successful=False),
    ):
        assert len(failed(**wrong)) == 1, wrong
    # The target's checks include the particle part.
    m = T.NoisyTransitionMeasured(24, (), (), (P.ParticleMeasured(**{**good, "successful": False}),))
    assert len([c for c in T.checks(m) if not c.passed]) == 1
    assert "particle_cases" in T.sizes(True) and len(T.sizes(False)["particle_cases"]) == 4
