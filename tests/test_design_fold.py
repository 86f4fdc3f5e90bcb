"""The ``design-fold`` target: its checks on synthetic results, and the quick run's compute + checks."""

import dataclasses

import pytest
from figure_measured import design_fold as synthetic


def test_checks_pass_and_fail_on_synthetic_results():
    T, m = synthetic()
    assert all(c.passed for c in T.checks(m))
    d = m.designs[0]
    for bad in (
        dict(status="design_unreachable"),
        dict(projected_gradient=2 * T.KKT_TOL),
        dict(continued_folds=(d.w_target + 2 * T.FOLD_TOL,)),
        dict(continued_folds=()),
        dict(probe_min_increase=-1e-12),
    ):
        worse = dataclasses.replace(m, designs=(dataclasses.replace(d, **bad),))
        assert not all(c.passed for c in T.checks(worse)), bad
    assert not all(c.passed for c in T.checks(dataclasses.replace(m, base_fold=m.closed_form + 1e-5)))


@pytest.mark.slow
def test_quick_design_passes_its_rule():
    from rankdyn._reproduce.theory import design_fold as T

    m = T.compute(T.sizes(True), 0)
    failed = [c for c in T.checks(m) if not c.passed]
    assert not failed, failed
    (d,) = m.designs
    # Smaller than the naive design (shift the (1, 2) entry of W_V by w* - w_A).
    assert d.norm < abs(m.closed_form - d.w_target)
