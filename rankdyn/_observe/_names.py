"""The metric names and their parser, without JAX (the CLI checks ``--metrics`` before JAX loads)."""

from __future__ import annotations

from collections.abc import Iterable

from .._errors import UsageError

__all__ = ["METRIC_NAMES", "ALL_METRICS", "SPECTRAL_METRICS", "CHEAP_METRICS", "parse_metrics"]

#: Metrics saved per layer by `rankdyn.simulate` (and written to ``metrics.json``).
METRIC_NAMES = (
    "mu",
    "mu_rel",
    "mu_normalized",
    "row_norm_mean",
    "row_norm_min",
    "min_cos",
    "mean_abs_cos",
    "sigma_max",
    "sigma_min",
    "sigma_ratio",
    "stable_rank",
    "num_rank",
    "eff_rank",
)
#: Every name an observer accepts: the metrics and the smallest attention weight ``eps_min``.
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
