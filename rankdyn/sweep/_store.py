"""Run a sweep into a folder: atomic chunk files, a manifest, exact resume after a kill.

Each chunk is written atomically to ``DIR/chunks/`` (temp file + rename) as soon as it is done,
so an interrupted sweep loses at most the chunk in flight and ``resume=True`` computes only what
is missing. The dataset is assembled from the chunk files alone, so a resumed sweep gives the
same ``DIR/sweep.nc`` as an uninterrupted one.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import jax
import numpy as np

from .._errors import UsageError
from .._run._io import (
    CompileTimer,
    atomic_path,
    atomic_write,
    package_version,
    provenance,
    savez,
    versions,
    write_json,
)
from .._run._memory import check_memory
from ._assemble import NETCDF_ENGINE, assemble_sweep
from ._chunks import _chunk_path, _load_chunk
from ._plan import SweepPlan, sweep_memory, sweep_plan
from ._program import compute_chunk
from ._schema import SweepConfig

__all__ = ["run_sweep"]

_MEMORY_FIX = "lower [fixed] batch, n or d, or [run] chunk_trajectories (trajectories per chunk)."


def _chunk_written(i: int) -> None:
    """Called after chunk ``i`` is on disk; tests monkeypatch it to interrupt a sweep there."""


def _atomic_savez(path: Path, arrays: dict[str, np.ndarray]) -> None:
    savez(path, arrays, fsync=True)


def _atomic_write_text(path: Path, text: str) -> None:
    atomic_write(path, lambda f: f.write(text), binary=False)


def _dtype_name() -> str:
    return "float64" if jax.config.jax_enable_x64 else "float32"


def _prepare_dir(cfg: SweepConfig, out: Path, plan: SweepPlan, resume: bool) -> None:
    """Create DIR or check that it belongs to this very sweep; refuse to mix results."""
    manifest = out / "manifest.json"
    stray = sorted(out.glob(".manifest.json.*.tmp")) if out.is_dir() else []
    if stray and not manifest.exists():
        raise UsageError(
            f"{str(stray[0])!r} is a manifest left half-written by a sweep interrupted while it started "
            f"(no chunk was computed yet): delete the folder {str(out)!r} and run the sweep again."
        )
    for tmp in stray:  # a later manifest write was interrupted; the complete one is in place
        tmp.unlink(missing_ok=True)
    if manifest.exists():
        try:
            old = json.loads(manifest.read_text())
            if not isinstance(old, dict):
                raise ValueError("not a JSON object")
        except (ValueError, UnicodeDecodeError) as err:
            raise UsageError(
                f"{str(manifest)!r} is damaged ({err}); the chunks in {str(out / 'chunks')!r} cannot be "
                f"matched to it. Delete the folder {str(out)!r} and run the sweep again (or choose another "
                "--out)."
            ) from None
        if old.get("config_hash") != cfg.hash:
            raise UsageError(
                f"{str(out)!r} holds a sweep with a different configuration (hash {old.get('config_hash')} "
                f"vs {cfg.hash} now; the old config is in {str(out / 'config.toml')!r}). Refusing to mix "
                "results: choose another --out or delete that folder."
            )
        if old.get("dtype") != _dtype_name():
            raise UsageError(
                f"{str(out)!r} was computed in {old.get('dtype')} but this run uses {_dtype_name()}; "
                "resume with the same --x64 setting or choose another --out."
            )
        if not resume:
            raise UsageError(
                f"{str(out)!r} already holds this sweep; pass --resume (resume=True) to complete it, "
                "or choose another --out."
            )
        # The hash ignores comments and names: a resume with an edited comment is the same
        # sweep, and config.toml is rewritten so the folder shows the text that was run last.
        _write_config_text(cfg, out)
        return
    if out.exists() and any(p.name != "chunks" or any(p.iterdir()) for p in out.iterdir()):
        raise UsageError(
            f"{str(out)!r} exists, is not empty and holds no sweep manifest; choose another --out."
        )
    (out / "chunks").mkdir(parents=True, exist_ok=True)
    # The manifest first: a sweep killed right after it resumes; one killed before it left an
    # folder that is empty but for chunks/, which the check above accepts as new.
    write_json(
        manifest,
        {
            "config_hash": cfg.hash,
            "dtype": _dtype_name(),
            "num_cells": cfg.num_cells,
            "num_chunks": len(plan.chunks),
            "chunks": [
                {"file": _chunk_path(out, i).name, "group": g, "cells": list(c)}
                for i, (g, c) in enumerate(plan.chunks)
            ],
            "normalized_config": cfg.normalized(),
            "provenance": provenance(),
            "versions": _versions(),
        },
    )
    _write_config_text(cfg, out)


def _write_config_text(cfg: SweepConfig, out: Path) -> None:
    _atomic_write_text(out / "config.toml", cfg.text or json.dumps(cfg.normalized(), indent=1))


def _versions() -> dict[str, str]:
    """Versions of the packages that shape the numbers and the file."""
    return versions() | {name: package_version(name) for name in ("xarray", "netCDF4")}


def run_sweep(
    cfg: SweepConfig,
    out: str | os.PathLike,
    *,
    resume: bool = False,
    progress: bool = True,
):
    """Run (or complete) a sweep into folder ``out`` and return the dataset.

    Writes ``out/config.toml`` and ``out/manifest.json`` (config hash, chunk list, versions),
    one ``out/chunks/chunk_NNNNN.npz`` per chunk (atomic: temp file + rename) and finally
    ``out/sweep.nc`` (netCDF-4 via the netCDF4 library), assembled from the chunk files only.

    Arguments:
        cfg: a `SweepConfig` (`load_sweep_config`).
        out: output folder; must be new/empty, or hold this same sweep with ``resume=True``.
        resume: compute only the chunks missing in ``out``.
        progress: a tqdm bar over all trajectories of the sweep, with ETA.

    Returns:
        The `xarray.Dataset` (see `assemble_sweep`).

    Raises:
        UsageError: if ``out`` holds a different sweep (other config hash or dtype), or holds
            this sweep and ``resume`` is False; if its manifest is damaged; if a chunk's
            estimated memory exceeds the available memory; if the disk is full.
    """
    out = Path(out)
    plan = sweep_plan(cfg)
    check_memory(sweep_memory(cfg, plan), what=f"sweep {cfg.name!r}", fix=_MEMORY_FIX)
    _prepare_dir(cfg, out, plan, resume)
    todo = [
        i for i in range(len(plan.chunks)) if _load_chunk(_chunk_path(out, i), cfg, report=resume) is None
    ]
    for stale in [*(out / "chunks").glob(".*.tmp"), *out.glob(".*.tmp")]:  # left by a killed writer
        stale.unlink(missing_ok=True)
    batch = [plan.groups[g][0]["batch"] for g, _ in plan.chunks]
    total = sum(len(c) * batch[i] for i, (_, c) in enumerate(plan.chunks))
    done = total - sum(len(plan.chunks[i][1]) * batch[i] for i in todo)
    bar = None
    if progress:
        from .._run._progress import progress_bar as tqdm

        bar = tqdm(total=total, initial=done, desc=f"sweep {cfg.name}", unit="traj", smoothing=0.1)
    timing = {"compile_s": 0.0, "total_s": 0.0, "chunks_computed": len(todo)}
    t0 = time.perf_counter()
    with CompileTimer() as timer:
        for i in todo:
            g, cells = plan.chunks[i]
            arrays = compute_chunk(cfg, plan.groups[g][0], cells, plan.chunk_cells[g])
            arrays["config_hash"] = np.asarray(cfg.hash)
            _atomic_savez(_chunk_path(out, i), arrays)
            if bar is not None:
                bar.update(len(cells) * batch[i])
            _chunk_written(i)
    if bar is not None:
        bar.close()
    timing["compile_s"] = timer.compile_s
    timing["total_s"] = time.perf_counter() - t0
    ds = assemble_sweep(cfg, out)
    with atomic_path(out / "sweep.nc") as tmp:
        ds.to_netcdf(tmp, engine=NETCDF_ENGINE)
    write_json(out / "timing.json", timing)
    return ds
