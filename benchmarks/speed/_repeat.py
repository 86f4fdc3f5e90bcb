"""Repeated measurements: every figure is the median of >= 3 runs with its spread and the load."""

from __future__ import annotations

import os
import statistics

from ._hardware import Clock, cores

#: Above this 1-minute load average per core at the start, a run is "loaded machine, not
#: comparable": its figures are kept in the JSON but never written into the tables of HISTORY.md.
MAX_START_LOAD_PER_CORE = 0.25


def load() -> float:
    return os.getloadavg()[0]


def loaded(load_before: float) -> bool:
    return load_before > MAX_START_LOAD_PER_CORE * cores()


def repeat(fn, repeats: int) -> dict:
    """Run ``fn()`` ``repeats`` times: median, min and max of wall and process-CPU seconds, loads."""
    walls, cpus, l0 = [], [], load()
    for _ in range(repeats):
        with Clock() as c:
            fn()
        walls.append(c.wall)
        cpus.append(c.cpu)
    return {
        "wall_s": statistics.median(walls),
        "wall_min_s": min(walls),
        "wall_max_s": max(walls),
        "cpu_s": statistics.median(cpus),
        "cpu_min_s": min(cpus),
        "cpu_max_s": max(cpus),
        "repeats": repeats,
        "load_before": l0,
        "load_after": load(),
    }


def spread(r) -> str:
    """``median (min-max)`` wall seconds and the median CPU seconds, for a table cell."""
    if not r or r.get("status", "ok") != "ok":
        return (r or {}).get("status", "-")
    return f"{r['wall_s']:.2f} ({r['wall_min_s']:.2f}-{r['wall_max_s']:.2f}; cpu {r['cpu_s']:.2f})"
