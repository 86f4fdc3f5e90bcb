"""Shared pieces of the flow targets: starts, plateaus of the cluster count, and a log-linear fit."""

from __future__ import annotations

import jax
import numpy as np


def unit_starts(seed: int, batch: int, n: int, d: int, salt: int = 0) -> np.ndarray:
    """``(batch, n, d)`` tokens uniform on the sphere (normalised Gaussians), float64."""
    key = jax.random.fold_in(jax.random.PRNGKey(seed), salt)
    x = np.asarray(jax.random.normal(key, (batch, n, d)), dtype=np.float64)
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


def plateaus(times, counts) -> list[dict]:
    """The plateaus of one cluster-count series: maximal runs of one count ``k`` with
    ``2 <= k`` after the first change (the start, where every token is its own cluster, is a
    transient, and ``k = 1`` is the end state).

    Returns:
        ``[{"k", "start", "end", "duration", "censored", "mid"}]``: times of the first save with
        the count and of the first save after it (``end = T`` and ``censored`` if it lasts to T),
        and the saved index in its middle (in log time).
    """
    t, c = np.asarray(times, float), np.rint(np.asarray(counts, float))
    change = np.flatnonzero(np.diff(c) != 0) + 1
    starts = np.concatenate([[0], change])
    ends = np.concatenate([change, [c.size]])
    out = []
    for j, (a, b) in enumerate(zip(starts, ends)):
        if j == 0 or c[a] < 2:
            continue
        end = t[b] if b < c.size else t[-1]
        mid = int(round(np.sqrt(a * max(b - 1, a)))) if a > 0 else a
        out.append(
            dict(
                k=int(c[a]),
                start=float(t[a]),
                end=float(end),
                duration=float(end - t[a]),
                censored=b == c.size,
                mid=mid,
            )
        )
    return out


def longest_plateau(times, counts) -> dict | None:
    """The longest plateau of `plateaus` (None if there is none)."""
    ps = plateaus(times, counts)
    return max(ps, key=lambda p: p["duration"]) if ps else None


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


def plot_examples(times, examples: dict, title: str, path) -> None:
    """Cluster-count and energy staircases of the example starts: ``examples[label] = (clusters,
    energy)``, each ``(starts, saves)`` on ``times`` (the first save, t = 0, is left out of the
    log-time axis)."""
    from ... import plotting

    plotting.plot_staircases(
        np.asarray(times)[1:],
        {k: np.asarray(v[0])[:, 1:] for k, v in examples.items()},
        {k: np.asarray(v[1])[:, 1:] for k, v in examples.items()},
        title=title,
        path=path,
    )
