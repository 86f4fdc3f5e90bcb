"""The flow's normalisation schemes by name, and the check of their arguments, without JAX.

The command line refuses a bad ``--placement``, ``--ngpt-alpha`` or ``--mix-time`` from here before
JAX loads; `rankdyn._flow._schemes` (the velocities, which need JAX) re-exports these names.
"""

from __future__ import annotations

import numpy as np

from .._errors import UsageError

__all__ = ["FLOW_PLACEMENTS", "RADIAL_PLACEMENTS", "check_scheme_arguments"]

#: The schemes of `FlowField`'s ``placement``, Table 2 of arXiv 2510.22026 (module docstring).
FLOW_PLACEMENTS = ("post", "pre", "mix", "peri", "ngpt", "lns")
#: The schemes whose radius moves ($\dot r_j \ne 0$): their state is not projected to the sphere.
RADIAL_PLACEMENTS = ("pre", "mix", "peri")


def _positive(name: str, value, *, zero: bool) -> float:
    ok = (
        isinstance(value, (int, float, np.integer, np.floating))
        and not isinstance(value, bool)
        and np.isfinite(value)
        and (value >= 0 if zero else value > 0)
    )
    if not ok:
        raise UsageError(f"{name} must be a finite number {'>= 0' if zero else '> 0'}, got {value!r}.")
    return float(value)


def check_scheme_arguments(placement, ngpt_alpha, mix_time) -> tuple[str, float, float]:
    """``(placement, alpha, tau)`` checked: ``ngpt_alpha`` with ``ngpt`` only, ``mix_time`` with ``mix``.

    Raises:
        UsageError: an unknown placement, a missing or non-positive ``ngpt_alpha`` for ``ngpt``, a
            missing or negative ``mix_time`` for ``mix``, or either one given to another placement.
    """
    if placement not in FLOW_PLACEMENTS:
        raise UsageError(f"placement must be one of {FLOW_PLACEMENTS}, got {placement!r}.")
    if placement != "ngpt" and ngpt_alpha is not None:
        raise UsageError(f"ngpt_alpha applies to placement='ngpt' only, not {placement!r}.")
    if placement != "mix" and mix_time is not None:
        raise UsageError(f"mix_time applies to placement='mix' only, not {placement!r}.")
    alpha, tau = 1.0, 0.0
    if placement == "ngpt":
        if ngpt_alpha is None:
            raise UsageError(
                "placement='ngpt' needs ngpt_alpha, the rate alpha > 0 of its speed |A_j| / alpha."
            )
        alpha = _positive("ngpt_alpha", ngpt_alpha, zero=False)
    if placement == "mix":
        if mix_time is None:
            raise UsageError(
                "placement='mix' needs mix_time, the time tau >= 0 at which post-LN turns pre-LN."
            )
        tau = _positive("mix_time", mix_time, zero=True)
    return placement, alpha, tau
