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
from ._tolerances import RANK_TOL

__all__ = ["MetricObserver", "ALL_METRICS", "SPECTRAL_METRICS", "CHEAP_METRICS", "parse_metrics"]

#: Every name `--metrics` accepts: the collapse metrics and Theorem 1's epsilon.
ALL_METRICS = METRIC_NAMES + ("eps_min",)
#: The metrics that need singular values.
SPECTRAL_METRICS = ("sigma_max", "sigma_min", "sigma_ratio", "stable_rank", "num_rank", "eff_rank")
#: The metrics without an SVD (`rankdyn.metrics.direction_metrics`): cheap enough for every layer of
#: large batches, the sweep's default ``per_layer``.
CHEAP_METRICS = tuple(k for k in METRIC_NAMES if k not in SPECTRAL_METRICS)


def parse_metrics(spec: str | Iterable[str] | None, *, where: str = "metrics") -> tuple[str, ...]:
    """``"all"``, None, a comma-separated string or a list of names -> a tuple in canonical order.

    Raises:
        UsageError: naming ``where`` and listing the valid names, for unknown, empty or repeated names.
    """
    if spec is None or spec == "all":
        return ALL_METRICS
    names = [s.strip() for s in spec.split(",")] if isinstance(spec, str) else list(spec)
    if not names or any(not isinstance(k, str) or not k for k in names):
        raise UsageError(
            f"{where}: expected metric names separated by commas, got {spec!r}; "
            f"valid names: all, {', '.join(ALL_METRICS)}."
        )
    bad = [k for k in names if k not in ALL_METRICS]
    if bad:
        raise UsageError(f"{where}: unknown metric {bad[0]!r}; valid names: all, {', '.join(ALL_METRICS)}.")
    if len(set(names)) != len(names):
        raise UsageError(f"{where}: a metric is named twice in {spec!r}; name each once.")
    return tuple(k for k in ALL_METRICS if k in names)


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
