"""Checks of plain Python arguments, shared by the library's functions: one definition each.

A count given as ``2.5`` or ``"10"``, a tolerance of NaN or a band outside its range reached deep
code as a truncation, a ``TypeError`` or a silently different run. These checks turn each into a
`UsageError` that names the argument, what it must be and what it got, before any compute.
"""

from __future__ import annotations

import math
import numbers

from ._errors import UsageError

__all__ = ["STABILITY_BAND", "check_count", "check_real"]

#: What a stability tolerance is, for messages: a band on the multipliers' moduli around 1.
STABILITY_BAND = " (a band on |lambda| - 1)"


def check_count(value, name: str, *, minimum: int = 1, maximum: int | None = None, why: str = "") -> int:
    """``value`` as an ``int`` in ``[minimum, maximum]``.

    Integral floats (``10.0``) are taken; ``2.5``, strings, booleans and other types are refused
    (a count is never truncated).

    Raises:
        UsageError: naming ``name``, the range and the value received (and ``why``, when given, for
            the upper bound).
    """
    ok = isinstance(value, numbers.Integral) or (
        isinstance(value, numbers.Real) and math.isfinite(float(value)) and float(value).is_integer()
    )
    if isinstance(value, bool) or not ok:
        raise UsageError(f"{name} must be an integer >= {minimum}, got {value!r}.")
    count = int(value)
    if count < minimum:
        raise UsageError(f"{name} must be an integer >= {minimum}, got {count}.")
    if maximum is not None and count > maximum:
        raise UsageError(f"{name} must be at most {maximum}{why}, got {count}.")
    return count


def check_real(
    value,
    name: str,
    *,
    above: float | int | None = None,
    below: float | int | None = None,
    minimum: float | int | None = None,
    what: str = "",
) -> float:
    """``value`` as a finite ``float`` with ``above < value < below`` and ``value >= minimum`` (each
    bound optional).

    Raises:
        UsageError: for a non-number, a NaN or infinity, or a value outside the open interval
            (``what`` says what the number is, in the message).
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise UsageError(f"{name} must be a real number{what}, got {value!r}.")
    x = float(value)
    lo = f"[{minimum:g}" if minimum is not None else "(-inf" if above is None else f"({above:g}"
    hi = "inf" if below is None else f"{below:g}"
    low = (above is not None and x <= above) or (minimum is not None and x < minimum)
    if not math.isfinite(x) or low or (below is not None and x >= below):
        raise UsageError(f"{name} must be finite, in {lo}, {hi}){what}, got {value!r}.")
    return x
