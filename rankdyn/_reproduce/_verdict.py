"""Strict verdicts: a target's verdict computed from a list of checks, by one set of rules.

A check is *testable* when a wrong implementation or a false claim could make it fail. Checks
that cannot fail are kept in the report as "not testable here", never counted as passes:

- a rate compared with a bound that equals 1 within `BOUND_ONE_TOL` (every rate <= 1 passes);
- an estimate compared with its own confidence interval;
- a count taken from the library's own enumeration instead of an independent search.

Rules (`verdict`):

- "reproduced": every check is testable and passes;
- "partially": at least half of the testable checks pass, or every testable one passes but some
  check was not testable (an untestable check caps the target at "partially");
- "not reproduced": otherwise;
- "not testable here": no check is testable at all (nothing here could have failed, so nothing
  was reproduced or refuted).

Open questions (a conjecture, not a claim the paper proves) get their own words
(`open_question_verdict`): "counterexample found", "no evidence against", "inconclusive".
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

__all__ = [
    "Check",
    "check",
    "untestable",
    "bound_check",
    "count_check",
    "verdict",
    "open_question_verdict",
    "VERDICT_RULE",
    "OPEN_QUESTION_RULE",
    "checks_json",
    "checks_markdown",
    "BOUND_ONE_TOL",
]

#: A bound within this distance of 1 cannot be failed by a measured per-layer rate.
BOUND_ONE_TOL = 1e-6

#: The rules in one sentence, for the ``criterion`` of every target.
VERDICT_RULE = (
    "reproduced = every check testable and passed; partially = at least half of the testable checks pass "
    "(a check that cannot fail here is shown as 'not testable' and caps the verdict at partially); "
    "otherwise not reproduced; not testable here = no check could fail here."
)

#: The rules of `open_question_verdict` in one sentence.
OPEN_QUESTION_RULE = (
    "counterexample found = the search found a case the conjecture rules out; no evidence against = it found "
    "none while its positive control (a case known to exist) was found; inconclusive = it found none and "
    "missed the positive control, so finding none means nothing."
)


class Check(NamedTuple):
    """One check of a target.

    Attributes:
        name: short identifier, e.g. ``"complete: fitted rate <= Theorem 2 bound"``.
        passed: True / False when testable; None when not testable.
        testable: False for a check that cannot fail in this setting.
        detail: the numbers behind it (or why it is not testable).
    """

    name: str
    passed: bool | None
    testable: bool = True
    detail: str = ""


def check(name: str, passed, detail: str = "") -> Check:
    """A testable check; ``passed`` is coerced to a Python bool (a NaN comparison fails)."""
    return Check(name, bool(passed), True, detail)


def untestable(name: str, reason: str) -> Check:
    """A check that cannot fail here, with the reason (shown as "not testable here")."""
    return Check(name, None, False, reason)


def bound_check(name: str, measured: float, bound: float, *, slack: float = 1e-9) -> Check:
    """``measured <= bound`` for a per-layer rate; not testable when the bound is 1 within
    `BOUND_ONE_TOL` (any rate of a non-expanding map passes) or either number is not finite."""
    detail = f"measured {measured:.6g}, bound {bound:.9g}"
    if not (math.isfinite(bound) and math.isfinite(measured)):
        if math.isfinite(bound) and bound < 1.0 - BOUND_ONE_TOL:
            return Check(name, False, True, detail + " (no finite measured rate)")
        return untestable(name, detail + ": not finite")
    if bound >= 1.0 - BOUND_ONE_TOL:
        return untestable(name, detail + f": the bound is 1 within {BOUND_ONE_TOL:g}, so no rate can fail it")
    return check(name, measured <= bound + slack, detail)


def count_check(name: str, found: int, expected: int, *, independent: bool, detail: str = "") -> Check:
    """``found == expected``; not testable when ``found`` comes from the library's own
    enumeration of the expected objects (it would equal ``expected`` by construction)."""
    d = f"found {found}, expected {expected}" + (f"; {detail}" if detail else "")
    if not independent:
        return untestable(name, d + ": counted from the library's own enumeration, not an independent search")
    return check(name, found == expected, d)


def verdict(checks: Sequence[Check]) -> str:
    """The verdict of a list of checks by the rules of this module (see the module docstring)."""
    testable = [c for c in checks if c.testable]
    if not testable:
        return "not testable here"
    passed = sum(bool(c.passed) for c in testable)
    if passed == len(testable) and len(testable) == len(checks):
        return "reproduced"
    if 2 * passed >= len(testable):
        return "partially"
    return "not reproduced"


def partially_why(checks_json: Sequence[dict]) -> str:
    """Why a verdict is "partially", in words, from the result's ``checks`` (`checks_json`): the
    failed checks and the ones that could not fail here (which cap the verdict at "partially")."""
    failed = sum(c["status"].lower() == "fail" for c in checks_json)
    untested = sum(c["status"] == "not testable here" for c in checks_json)
    parts = [f"{failed} check{'s' * (failed != 1)} failed"] if failed else []
    if untested:
        parts.append(f"{untested} could not fail here (not testable)")
    return "; ".join(parts)


def open_question_verdict(found: bool, control_passed: bool) -> str:
    """The verdict of an open question (`OPEN_QUESTION_RULE`) searched with a positive control.

    Arguments:
        found: the search found a counterexample to the conjecture (a case it rules out).
        control_passed: the search found the positive control, a case known to exist (so it can
            find what it looks for).

    Returns:
        "counterexample found" when ``found`` (a found case stands whatever the control did; the
        report shows the control next to it), else "no evidence against" when the control passed,
        else "inconclusive".
    """
    if found:
        return "counterexample found"
    return "no evidence against" if control_passed else "inconclusive"


def checks_json(checks: Sequence[Check]) -> list[dict]:
    """JSON-able list: name, status (pass / fail / not testable here) and detail."""
    return [{"name": c.name, "status": _status(c), "detail": c.detail} for c in checks]


def checks_markdown(checks: Sequence[Check]) -> str:
    """A Markdown table of the checks."""
    rows = ["| check | result | detail |", "|---|---|---|"]
    rows += [f"| {c.name} | {_status(c)} | {c.detail} |" for c in checks]
    return "\n".join(rows)


def _status(c: Check) -> str:
    if not c.testable:
        return "not testable here"
    return "pass" if c.passed else "FAIL"
