"""The noisy-transition target's S^2 part: its checks fail, check by check, on wrong synthetic results.

The measured run is `tests/test_noisy_transition.py::test_quick_run_reproduces` (slow): the quick
target includes the S^2 cases."""

from rankdyn._reproduce.theory import noisy_transition as T, noisy_transition_sphere as S
from rankdyn.theory import critical_noise, transition_type


def _case(dynamics="usa", beta=1.2, **kw):
    sc = critical_noise(beta, d=3, dynamics=dynamics)
    degrees = S.degree_thresholds(beta, dynamics, 0.75 * sc, 1.25 * sc)
    continuous = transition_type(beta, d=3) == "continuous"
    good = dict(
        dynamics=dynamics,
        beta=beta,
        sigma_c=sc,
        continuous_stated=continuous,
        uniform_status="parameter_end",
        branch_points=degrees,
        other=(),
        stable_above=True,
        unstable_below=True,
        degree_thresholds=degrees,
        cluster_order=0.9,
        cluster_stable=True,
        cluster_status="parameter_end",
        folds=(sc,) if continuous else (1.05 * sc, sc, 1.05 * sc),
    )
    return S.SphereCaseMeasured(**{**good, **kw})


def _failed(cases):
    return [c.name for c in S.sphere_checks(cases) if not c.passed]


def test_sphere_checks_pass_on_the_closed_forms_and_fail_on_each_wrong_number():
    assert _failed([_case("usa", 1.2), _case("usa", 3.0), _case("sa", 2.0)]) == []
    # Degree 1's threshold is sigma_c; at beta = 1.2 and 3 no other degree lies within 25% of it.
    assert S.degree_thresholds(3.0, "usa", 0.75 * 1.2227810154914, 1.25 * 1.2227810154914) == (
        S.degree_threshold(3.0, "usa", 1),
    )
    assert transition_type(1.2, d=3) == "continuous" and transition_type(3.0, d=3) == "discontinuous"
    sc = critical_noise(1.2, d=3)
    wrong = [
        _case(branch_points=(sc + 2e-6,)),  # threshold off by 2e-6
        _case(branch_points=(sc, 0.9 * sc)),  # a spurious branch point
        _case(other=("period-doubling",)),
        _case(unstable_below=False),
        _case(folds=(1.01 * sc, sc)),  # discontinuous where the statement says continuous
        _case(folds=()),
        _case(cluster_stable=False),
    ]
    for c in wrong:
        assert len(_failed([c])) == 1, c
    # The target's checks include the S^2 part.
    m = T.NoisyTransitionMeasured(24, (), (_case(branch_points=()),))
    assert [c.name for c in T.checks(m) if not c.passed] == _failed([_case(branch_points=())])
    assert "sphere_cases" in T.sizes(True) and "sphere_band" in T.sizes(False)
