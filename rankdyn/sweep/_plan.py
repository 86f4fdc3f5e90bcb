"""How a sweep is computed: groups of cells that share one compiled program, cut into chunks.

Cells are grouped by the parameters that change shapes or program structure (`STRUCTURAL`);
inside a group every other parameter only changes arrays, so the group compiles once.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ._params import STRUCTURAL
from ._schema import SweepConfig

__all__ = ["SweepPlan", "sweep_plan"]


@dataclass(frozen=True)
class SweepPlan:
    """How a sweep is computed: groups of cells sharing one compiled program, cut into chunks.

    Attributes:
        groups: per group, the structural parameter values and the flat cell indices.
        chunks: per chunk, ``(group, flat cell indices)``; chunks of a group have equal size
            (``chunk_cells[group]``) after padding, so a group compiles once.
    """

    groups: tuple[tuple[dict, tuple[int, ...]], ...]
    chunks: tuple[tuple[int, tuple[int, ...]], ...]
    chunk_cells: tuple[int, ...]


def sweep_plan(cfg: SweepConfig) -> SweepPlan:
    """Group the cells by `STRUCTURAL` parameters and cut each group into equal chunks."""
    groups: dict[tuple, list[int]] = {}
    structs: dict[tuple, dict] = {}
    for flat, idx in enumerate(cfg.indices()):
        p = cfg.cell(idx)
        key = tuple(p[k] for k in STRUCTURAL)
        groups.setdefault(key, []).append(flat)
        structs[key] = {k: p[k] for k in STRUCTURAL}
    out_groups, chunks, sizes = [], [], []
    for gi, (key, cells) in enumerate(groups.items()):
        out_groups.append((structs[key], tuple(cells)))
        per = max(1, cfg.chunk_trajectories // structs[key]["batch"])
        num = math.ceil(len(cells) / per)
        size = math.ceil(len(cells) / num)  # balanced chunks: at most num - 1 padded cells in all
        sizes.append(size)
        for c in range(num):
            chunks.append((gi, tuple(cells[c * size : (c + 1) * size])))
    return SweepPlan(tuple(out_groups), tuple(chunks), tuple(sizes))
