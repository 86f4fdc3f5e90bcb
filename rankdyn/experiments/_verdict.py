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
- "not reproduced": otherwise, and when no check is testable at all.
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
    "VERDICT_RULE",
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
    "otherwise not reproduced."
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
        return "not reproduced"
    passed = sum(bool(c.passed) for c in testable)
    if passed == len(testable) and len(testable) == len(checks):
        return "reproduced"
    if 2 * passed >= len(testable):
        return "partially"
    return "not reproduced"


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
