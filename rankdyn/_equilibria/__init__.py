"""The implementation of `rankdyn.equilibria` (the public names are in rankdyn/equilibria.py).

The constants and step rules here are JAX-free: ``rankdyn continue`` checks them before JAX loads.
"""

import math

#: A continuation's default steps: ``ds`` = |p1 - p0| / DS_DIVISOR, ``ds_min`` = DS_MIN_RATIO ds.
DS_DIVISOR = 50
DS_MIN_RATIO = 1e-6

#: Largest n * d of a continuation: every corrector step forms the dense Jacobian (8 (n d)^2 bytes)
#: and an SVD of it. Here, not in `_arclength`, so that ``rankdyn continue`` checks it before JAX loads.
MAX_STATE = 2048


def step_resolution(p0: float, p1: float) -> float:
    """The smallest parameter step float64 resolves over [p0, p1] (8 ulps of the larger end): a
    smaller one leaves p unchanged, the secant zero and the parameters NaN."""
    return 8 * math.ulp(max(abs(p0), abs(p1)))
