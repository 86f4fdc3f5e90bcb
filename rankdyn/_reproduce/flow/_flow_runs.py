"""Shared pieces of the flow targets: starts, plateaus of the cluster count, and a log-linear fit."""

from __future__ import annotations

import jax
import numpy as np

from ..._flow._plateaus import longest_plateau as longest_plateau, plateaus as plateaus


def unit_starts(seed: int, batch: int, n: int, d: int, salt: int = 0) -> np.ndarray:
    """``(batch, n, d)`` tokens uniform on the sphere (normalised Gaussians), float64."""
    key = jax.random.fold_in(jax.random.key(seed), salt)
    x = np.asarray(jax.random.normal(key, (batch, n, d)), dtype=np.float64)
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


def log_slope(x, y) -> tuple[float, float]:
    """Least-squares fit ``log y = a + c x``: returns ``(c, a)`` (NaN if fewer than 2 finite points)."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    ok = np.isfinite(x) & np.isfinite(y) & (y > 0)
    if ok.sum() < 2:
        return float("nan"), float("nan")
    c, a = np.polyfit(x[ok], np.log(y[ok]), 1)
    return float(c), float(a)


def step_limit_check(steps_limit_hit):
    """The check every flow target makes: no trajectory stopped at the solver's step limit
    (``steps_limit_hit``: the count per beta)."""
    from .._verdict import check

    hit = list(steps_limit_hit)
    return check("no run hit the solver's step limit", sum(hit) == 0, str(hit))
