"""How a sweep is computed: groups of cells that share one compiled program, cut into chunks.

Cells are grouped by the parameters that change shapes or program structure (`STRUCTURAL`);
inside a group every other parameter only changes arrays, so the group compiles once.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import partial

from .._run._memory import MemoryEstimate
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
        per = max(1, cfg.chunk // structs[key]["batch"])
        num = math.ceil(len(cells) / per)
        size = math.ceil(len(cells) / num)  # balanced chunks: at most num - 1 padded cells in all
        sizes.append(size)
        for c in range(num):
            chunks.append((gi, tuple(cells[c * size : (c + 1) * size])))
    return SweepPlan(tuple(out_groups), tuple(chunks), tuple(sizes))


def sweep_memory(cfg: SweepConfig, plan: SweepPlan, itemsize: int | None = None) -> MemoryEstimate:
    """Peak memory of the sweep's largest chunk and of the assembled dataset, per part.

    A chunk runs all its cells' trajectories at once (``vmap`` over cells), so its working set
    is the depth scan's (`rankdyn._run._plan.SimulatePlan.memory`, the estimate `rankdyn.simulate` uses)
    for ``cells x batch`` trajectories in one chunk, plus the cells' initial tokens, weights and
    final metrics; the dataset holds ``(mean, std)`` per cell, saved layer and metric (float64).
    """
    from .._model._mask_structure import MaskStructure
    from .._run._plan import SimulatePlan

    if itemsize is None:
        import jax

        itemsize = 8 if jax.config.jax_enable_x64 else 4
    worst: dict[str, int] = {}
    for gi, (g, _) in enumerate(plan.groups):
        traj = plan.chunk_cells[gi] * g["batch"]
        # The depth scan's plan of one chunk: its attention path and block are the layer's, which
        # the sweep builds on the complete mask before it sets each cell's mask
        # (`rankdyn._sweep._program`).
        parts = dict(
            SimulatePlan(
                n=g["n"],
                d=g["d"],
                heads=g["heads"],
                batch=traj,
                num_layers=g["num_layers"],
                save_every=g["save_every"],
                rank_tol=g["rank_tol"],
                chunk=traj,
                itemsize=itemsize,
                metrics=tuple(cfg.per_layer),
                attention=g["attention"],
                attn_dropout=g["attn_dropout"],
                mask=partial(MaskStructure.complete, g["n"]),
            )
            .memory()
            .parts
        )
        weights = g["num_layers"] if g["per_layer_weights"] else 1
        parts["initial tokens of one chunk"] = 2 * traj * g["n"] * g["d"] * itemsize
        parts["weights of one chunk"] = plan.chunk_cells[gi] * weights * 6 * g["d"] * g["d"] * itemsize
        parts["final metrics of one chunk"] = traj * max(len(cfg.final), 1) * (itemsize + 8)
        if sum(parts.values()) > sum(worst.values()):
            worst = parts
    max_layers = max(g["num_layers"] for g, _ in plan.groups)
    max_batch = max(g["batch"] for g, _ in plan.groups)
    saved = max_layers // cfg.fixed["save_every"] + 1
    worst["assembled dataset"] = dataset_bytes(
        cfg.num_cells, saved, max_batch, len(cfg.per_layer), len(cfg.final)
    )
    return MemoryEstimate(worst)


#: CPU seconds to check and plan one cell before compute (from a grid of 10^5 cells on a loaded
#: 2-core CPU: benchmarks/README.md; a quiet machine is faster): a grid of 10^7 cells
#: takes about half an hour before the first chunk starts.
CHECK_S_PER_CELL = 1.6e-4


def dataset_bytes(num_cells: int, saved: int, batch: int, num_per_layer: int, num_final: int) -> int:
    """Bytes of the assembled dataset: ``(mean, std)`` per cell, saved layer and per-layer metric
    (plus ``eps_min``), the final metrics per sample, a dozen per-cell scalars; float64, twice
    (the NumPy arrays and the xarray dataset written from them)."""
    per_cell = (num_per_layer + 1) * saved * 2 + num_final * batch + 12
    return 2 * num_cells * per_cell * 8


def grid_estimate(data, num_cells: int) -> MemoryEstimate | None:
    """The dataset's memory from the raw TOML mapping alone (before the cells are checked).

    Uses the largest ``num_layers`` and ``batch`` (axis or fixed value, else the defaults); None if
    the values are not plain numbers (the full check will name them).
    """
    from ._params import CHEAP_METRICS, SWEEP_PARAMS

    def biggest(key):
        vals = data.get("axes", {}).get(key, [data.get("fixed", {}).get(key, SWEEP_PARAMS[key][0])])
        return max(int(v) for v in vals)

    try:
        obs = data.get("observe", {})
        per_layer = obs.get("per_layer", obs.get("metrics", CHEAP_METRICS))
        saved = biggest("num_layers") // max(biggest("save_every"), 1) + 1
        num_final = len(obs.get("final", range(13)))
        size = dataset_bytes(num_cells, saved, biggest("batch"), len(per_layer), num_final)
    except (TypeError, ValueError, AttributeError):
        return None
    return MemoryEstimate({"assembled dataset": size})
