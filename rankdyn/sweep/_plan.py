"""How a sweep is computed: groups of cells that share one compiled program, cut into chunks.

Cells are grouped by the parameters that change shapes or program structure (`STRUCTURAL`);
inside a group every other parameter only changes arrays, so the group compiles once.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .._memory import MemoryEstimate
from .._scan import estimate_parts
from ._params import STRUCTURAL
from ._schema import SweepConfig

__all__ = ["SweepPlan", "sweep_plan", "sweep_memory"]


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


def sweep_memory(cfg: SweepConfig, plan: SweepPlan, itemsize: int | None = None) -> MemoryEstimate:
    """Peak memory of the sweep's largest chunk and of the assembled dataset, per part.

    A chunk runs all its cells' trajectories at once (``vmap`` over cells), so its working set
    is the depth scan's (`rankdyn._scan.estimate_parts`, the estimate `rankdyn.simulate` uses)
    for ``cells x batch`` trajectories in one chunk, plus the cells' initial tokens, weights and
    final metrics; the dataset holds ``(mean, std)`` per cell, saved layer and metric (float64).
    """
    if itemsize is None:
        import jax

        itemsize = 8 if jax.config.jax_enable_x64 else 4
    worst: dict[str, int] = {}
    for gi, (g, _) in enumerate(plan.groups):
        traj = plan.chunk_cells[gi] * g["batch"]
        saved = g["layers"] // g["save_every"] + 1
        parts = estimate_parts(
            num=traj,
            chunk=traj,
            n=g["n"],
            d=g["d"],
            heads=g["heads"],
            itemsize=itemsize,
            num_saved=saved,
            num_metrics=len(cfg.per_layer),
            per_trajectory=False,
            save_states=False,
        )
        weights = g["layers"] if g["per_layer_weights"] else 1
        parts["initial tokens of one chunk"] = 2 * traj * g["n"] * g["d"] * itemsize
        parts["weights of one chunk"] = plan.chunk_cells[gi] * weights * 6 * g["d"] * g["d"] * itemsize
        parts["final metrics of one chunk"] = traj * max(len(cfg.final), 1) * (itemsize + 8)
        if sum(parts.values()) > sum(worst.values()):
            worst = parts
    max_layers = max(g["layers"] for g, _ in plan.groups)
    max_batch = max(g["batch"] for g, _ in plan.groups)
    saved = max_layers // cfg.fixed["save_every"] + 1
    # Two copies: the NumPy arrays and the xarray dataset written from them.
    per_cell = (len(cfg.per_layer) + 1) * saved * 2 + len(cfg.final) * max_batch + 12
    worst["assembled dataset"] = 2 * cfg.num_cells * per_cell * 8
    return MemoryEstimate(worst)
