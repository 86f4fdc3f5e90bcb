"""Confidence intervals for the counts the targets report."""

from __future__ import annotations

from ..._theory._basins import wilson_interval as _wilson

__all__ = ["wilson_interval"]


def wilson_interval(successes: int, trials: int, z: float = 1.959963984540054) -> tuple[float, float]:
    """Scalar form of `rankdyn.theory.wilson_interval` for one count: ``(0, 1)`` for no trials.

    Raises:
        ValueError: if ``trials < 0`` or ``successes`` is not in ``[0, trials]``.
    """
    if trials < 0 or not 0 <= successes <= trials:
        raise RuntimeError(f"need 0 <= successes <= trials, got successes={successes}, trials={trials}.")
    if trials == 0:
        return (0.0, 1.0)
    lo, hi = _wilson(successes, trials, z)
    return float(lo), float(hi)
