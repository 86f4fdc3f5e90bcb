"""Checks of plain Python arguments, shared by the library's functions: one definition each.

A count given as ``2.5`` or ``"10"``, a tolerance of NaN or a band outside its range reached deep
code as a truncation, a ``TypeError`` or a silently different run. These checks turn each into a
`UsageError` that names the argument, what it must be and what it got, before any compute.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable
from typing import Any

from ._errors import UsageError

__all__ = ["STABILITY_BAND", "Naming", "check_count", "check_real", "show"]

#: What a stability tolerance is, for messages: a band on the multipliers' moduli around 1.
STABILITY_BAND = " (a band on |lambda| - 1)"


#: How messages name a value: True a flag (``--num-layers 5``), False an argument (``num_layers=5``),
#: or a function ``(name, value) -> str``.
Naming = bool | Callable[[str, Any], str]


def show(name: str, value, flags: Naming) -> str:
    """``--num-layers 5`` (a flag, ``flags=True``) or ``num_layers=5`` (an argument); ``flags`` may
    also be a function ``(name, value) -> str`` (a sweep's ``[axes] num_layers = 5``)."""
    if callable(flags):
        return flags(name, value)
    return f"--{name.replace('_', '-')} {value}" if flags else f"{name}={value!r}"


def check_count(
    value,
    name: str,
    *,
    minimum: int = 1,
    maximum: int | None = None,
    why: str = "",
    flags: Naming | None = None,
) -> int:
    """``value`` as an ``int`` in ``[minimum, maximum]``: the one check of a count, for the library's
    arguments and the command line's flags.

    A count is a Python or NumPy integer: ``2.5`` (once truncated), ``10.0``, strings and booleans
    are refused, so a count is never truncated and a float never reaches a ``range`` or an array's
    shape.

    Arguments:
        flags: how the message names the value: None (the library's default) says
            ``name must be an integer >= 1, got 2.5``; otherwise `show` names it, as a flag
            (``--batch 0: expected an integer >= 1``, ``flags=True``), as an argument (``batch=0``,
            ``flags=False``) or by a function ``(name, value) -> str``.

    Raises:
        UsageError: naming ``name``, the range and the value received (and ``why``, when given, for
            the upper bound).
    """
    ok = isinstance(value, numbers.Integral) and not isinstance(value, bool)
    if not ok or value < minimum:
        if flags is None:
            raise UsageError(f"{name} must be an integer >= {minimum}, got {value!r}.")
        raise UsageError(f"{show(name, value, flags)}: expected an integer >= {minimum}.")
    count = int(value)
    if maximum is not None and count > maximum:
        if flags is None:
            raise UsageError(f"{name} must be at most {maximum}{why}, got {count}.")
        raise UsageError(f"{show(name, value, flags)}: expected an integer <= {maximum}{why}.")
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
