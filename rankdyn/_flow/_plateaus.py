"""Plateaus of a cluster-count series: how long the flow's metastable states last.

A token configuration of the flow passes through long-lived states of ``k`` clusters before it
reaches one point (metastability, docs/theory.md#continuous-time); `plateaus` finds them in the
saved counts of one trajectory.
"""

from __future__ import annotations

import numpy as np

__all__ = ["plateaus", "longest_plateau"]


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
