"""The steps of a continuation, checked once and without JAX: `ContinuationPlan`.

`rankdyn.equilibria.continue_branch` and ``rankdyn continue`` resolve the interval and the
arclength steps with the same rules: the first step ``ds`` (default ``|p1 - p0| / DS_DIVISOR``),
its bounds ``ds_min`` (default ``DS_MIN_RATIO ds``) and ``ds_max`` (default ``4 ds``), and the
float64 resolution of the parameter over the interval, below which a step leaves ``p`` unchanged
(`step_resolution`). The command line builds the plan before JAX loads (``flags=True``: the
messages name ``--from``, ``--to``, ``--ds`` and ``--max-steps``).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from .._arguments import check_count
from .._errors import UsageError
from . import DS_DIVISOR, DS_MIN_RATIO, step_resolution

__all__ = ["ContinuationPlan"]


@dataclasses.dataclass(frozen=True)
class ContinuationPlan:
    """A continuation's interval and steps (module docstring), resolved in ``__post_init__``.

    Attributes:
        p_start, p_end: the interval, as floats (``p_start != p_end``, both finite).
        ds, ds_min, ds_max: the first step and its bounds; None: the defaults, resolved here.
        max_steps: accepted points at most.
        param: the parameter's name, for messages.
        flags: messages name the command line's flags rather than the arguments.
    """

    # Any: the values are checked in __post_init__ (a UsageError naming them), not by annotation.
    p_start: Any
    p_end: Any
    ds: Any = None
    ds_min: Any = None
    ds_max: Any = None
    max_steps: Any = 400
    param: str = "p"
    flags: bool = False

    def __post_init__(self):
        f = self.flags
        start, end = ("--from", "--to") if f else ("p_start", "p_end")
        try:
            p0, p1 = float(self.p_start), float(self.p_end)
        except (TypeError, ValueError):
            raise UsageError(
                f"{start} and {end} must be real numbers, got {self.p_start!r} and {self.p_end!r}."
            ) from None
        if not (math.isfinite(p0) and math.isfinite(p1)):
            raise UsageError(f"{start} and {end} must be finite, got {p0} and {p1}.")
        if p0 == p1:
            raise UsageError(f"{start} and {end} are equal ({p0:g}): give an interval to continue over.")
        ds = abs(p1 - p0) / DS_DIVISOR if self.ds is None else self.ds
        try:
            ds = math.nan if isinstance(ds, bool) else float(ds)
        except (TypeError, ValueError):
            ds = math.nan
        if not (math.isfinite(ds) and ds > 0):
            raise UsageError(f"{'--ds ' if f else 'ds='}{self.ds}: expected a finite number > 0.")
        ds_min = DS_MIN_RATIO * ds if self.ds_min is None else float(self.ds_min)
        ds_max = 4 * ds if self.ds_max is None else float(self.ds_max)
        if not 0 < ds_min <= ds <= ds_max:
            raise UsageError(f"need 0 < ds_min <= ds <= ds_max, got {ds_min}, {ds}, {ds_max}.")
        resolution = step_resolution(p0, p1)
        if ds_min < resolution:
            where = (
                f"--from {p0!r} --to {p1!r}: the interval"
                if f
                else f"the interval [{min(p0, p1)!r}, {max(p0, p1)!r}]"
            )
            fix = " or raise --ds" if f and self.ds is not None else "" if f else " (or give a larger ds_min)"
            raise UsageError(
                f"{where} is too narrow for float64 steps: the smallest step, ds_min = {ds_min:.3g} "
                f"({DS_MIN_RATIO:g} of the first), is below the resolution of {self.param} there "
                f"({resolution:.3g}); widen the interval{fix}."
            )  # fmt: skip
        steps = check_count(self.max_steps, "max_steps", flags=True if f else None)
        for name, v in (("p_start", p0), ("p_end", p1), ("ds", ds), ("ds_min", ds_min), ("ds_max", ds_max)):
            object.__setattr__(self, name, v)
        object.__setattr__(self, "max_steps", steps)
