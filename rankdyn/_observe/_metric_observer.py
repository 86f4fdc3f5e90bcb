r"""What is recorded at each saved layer: a chosen subset of the collapse metrics.

The metrics are those of `rankdyn.collapse_metrics` (``docs/theory.md#metrics``): $\mu$ of
eq. (4) and its scale-free forms, token norms, cosines, and the singular-value measures, plus
``eps_min`` (Theorem 1's $\epsilon$, recorded by the depth scan itself). A subset really skips
work: the batched SVD, the expensive part on CPUs, is only traced when a spectral metric is asked.
"""

from __future__ import annotations

from collections.abc import Iterable

import equinox as eqx
import jax.numpy as jnp
from jaxtyping import Array, Float

from .._errors import UsageError
from ._metrics import METRIC_NAMES, collapse_metrics, direction_metrics
from ._names import (
    ALL_METRICS as ALL_METRICS,
    CHEAP_METRICS as CHEAP_METRICS,
    SPECTRAL_METRICS as SPECTRAL_METRICS,
    parse_metrics as parse_metrics,
)
from ._tolerances import RANK_TOL

__all__ = ["MetricObserver", "ALL_METRICS", "SPECTRAL_METRICS", "CHEAP_METRICS", "parse_metrics"]

# SPECTRAL_METRICS and CHEAP_METRICS live in `_names` (JAX-free: the CLI's checks read them).


class MetricObserver(eqx.Module):
    """``x -> {name: scalar}`` for a subset of `METRIC_NAMES` of one ``(n, d)`` token matrix.

    A Module, so that equal observers (same names, any ``rank_tol``) reuse one compiled program.

    Attributes:
        names: the metrics to compute (``eps_min`` is ignored here: the scan records it).
        rank_tol: relative tolerance of the numerical rank.
    """

    rank_tol: Float[Array, ""]
    names: tuple[str, ...] = eqx.field(static=True)

    def __init__(self, names: Iterable[str] = METRIC_NAMES, rank_tol: float = RANK_TOL):
        self.names = tuple(k for k in names if k != "eps_min")
        bad = [k for k in self.names if k not in METRIC_NAMES]
        if bad:
            raise UsageError(f"unknown metric {bad[0]!r}; valid names: {', '.join(METRIC_NAMES)}.")
        self.rank_tol = jnp.asarray(rank_tol)

    def __call__(self, x: Float[Array, "n d"]) -> dict[str, Float[Array, ""]]:
        if any(k in SPECTRAL_METRICS for k in self.names):
            out = collapse_metrics(x, self.rank_tol)
        else:
            # No SVD in the program; XLA drops the unused direction metrics too.
            out = direction_metrics(x) if self.names else {}
        return {k: out[k] for k in self.names}
