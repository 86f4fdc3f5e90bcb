"""The strict verdict rules on synthetic check lists (no simulation)."""

import math

import pytest

from rankdyn._reproduce import _verdict as V

P, F = V.check("p", True), V.check("f", False)
U = V.untestable("u", "cannot fail here")


@pytest.mark.parametrize(
    "checks, expected",
    [
        ([P, P, P], "reproduced"),
        ([P], "reproduced"),
        ([P, P, U], "partially"),  # an untestable check caps the verdict
        ([U], "not testable here"),  # nothing testable: nothing shown, nothing refuted
        ([], "not testable here"),
        ([P, F], "partially"),  # exactly half
        ([P, P, F], "partially"),
        ([P, F, F], "not reproduced"),  # one of three, the old lenient rule said "partially"
        ([F, F, U], "not reproduced"),
        ([P, F, U, U], "partially"),
        ([F], "not reproduced"),
    ],
)
def test_verdict_rules(checks, expected):
    assert V.verdict(checks) == expected


def test_bound_check_at_one_is_not_testable():
    # A bound equal to 1 within 1e-6: any non-expanding rate passes, so it must not count.
    c = V.bound_check("window", 0.9999999, 1.0 - 1e-7)
    assert not c.testable and c.passed is None
    c = V.bound_check("window", 0.5, 1.0)
    assert not c.testable
    # Just below the tolerance it is testable, and a rate above the bound fails.
    assert V.bound_check("x", 0.99, 1.0 - 2e-6).passed is True
    assert V.bound_check("x", 0.999999, 0.9).passed is False
    # A finite bound below 1 with no measured rate fails (the collapse was not seen).
    assert V.bound_check("x", math.nan, 0.9).passed is False
    assert not V.bound_check("x", math.nan, 1.0).testable


def test_count_from_own_enumeration_is_not_testable():
    assert not V.count_check("2^k", 8, 8, independent=False).testable
    assert V.count_check("2^k", 8, 8, independent=True).passed is True
    assert V.count_check("2^k", 7, 8, independent=True).passed is False


def test_checks_json_and_markdown():
    rows = V.checks_json([P, F, U])
    assert [r["status"] for r in rows] == ["pass", "FAIL", "not testable here"]
    md = V.checks_markdown([P, U])
    assert md.splitlines()[0] == "| check | result | detail |" and "not testable here" in md
    # NaN comparisons are failures, never passes.
    assert V.check("nan", math.nan < 1.0).passed is False
