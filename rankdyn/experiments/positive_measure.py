"""Target ``positive-measure`` (work in progress)."""

from __future__ import annotations

import math


def wilson_interval(successes: int, trials: int, z: float = 1.959963984540054) -> tuple[float, float]:
    r"""Wilson score interval for a binomial proportion (95% for the default ``z``).

    $\frac{\hat p + z^2/2n \pm z\sqrt{\hat p(1-\hat p)/n + z^2/4n^2}}{1 + z^2/n}$; unlike the
    normal approximation it stays inside [0, 1] and is informative at 0 or n successes.

    Raises:
        ValueError: if ``trials < 0`` or ``successes`` is not in ``[0, trials]``.
    """
    if trials < 0 or not 0 <= successes <= trials:
        raise ValueError(f"need 0 <= successes <= trials, got successes={successes}, trials={trials}.")
    if trials == 0:
        return (0.0, 1.0)
    p = successes / trials
    z2 = z * z
    centre = (p + z2 / (2 * trials)) / (1 + z2 / trials)
    half = z * math.sqrt(p * (1 - p) / trials + z2 / (4 * trials**2)) / (1 + z2 / trials)
    return (max(0.0, centre - half), min(1.0, centre + half))
