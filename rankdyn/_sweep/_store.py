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

import numpy as np

from .._errors import UsageError
from .._run._interrupt import check_interrupt
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
from ._chunks import _chunk_path, _load_chunk, chunk_problem
from ._plan import SweepPlan, sweep_memory, sweep_plan
from ._schema import SweepConfig
from ._tasks import FOLDER_LOCK, TASKS_DIR, TaskLock, TaskShare, folder_lock, missing_report

__all__ = ["run_sweep", "assemble_folder", "read_sweep_folder"]

_MEMORY_FIX = "lower [fixed] batch, n or d, or [run] chunk (trajectories per chunk)."


def _chunk_written(i: int) -> None:
    """Called after chunk ``i`` is on disk; tests monkeypatch it to interrupt a sweep there."""


def _atomic_savez(path: Path, arrays: dict[str, np.ndarray]) -> None:
    savez(path, arrays, fsync=True)


def _atomic_write_text(path: Path, text: str) -> None:
    atomic_write(path, lambda f: f.write(text), binary=False)


def _dtype_name() -> str:
    import jax  # here, not at the top: the folder checks of --assemble load no JAX

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
    _refuse_foreign(out)
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


def _refuse_foreign(out: Path) -> None:
    """Refuse a folder that holds files but no sweep manifest (only rankdyn's own empty start is new)."""
    if (out / "manifest.json").exists() or not out.is_dir():
        return
    for p in out.iterdir():
        # What a start killed before its manifest leaves: the locks, an empty chunks/ and a
        # half-written manifest (which `_prepare_dir` names with its own fix).
        ours = (
            p.name in (FOLDER_LOCK, TASKS_DIR)
            or (p.name == "chunks" and p.is_dir() and not any(p.iterdir()))
            or (p.name.startswith(".manifest.json.") and p.name.endswith(".tmp"))
        )
        if not ours:
            if (out / "manifest.json").exists():
                # Checked before the folder lock: another task, starting at the same moment, wrote
                # its manifest (and then its files) while this loop ran; the check under the lock
                # decides. (Seen under load: tasks 0 and 2 of one sweep refused each other's folder.)
                return
            raise UsageError(
                f"{str(out)!r} exists, is not empty and holds no sweep manifest; choose another --out."
            )


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
    progress: bool = False,
    task: TaskShare | tuple[int, int] | None = None,
):
    r"""Run (or complete) a sweep, or one task's share of it, into folder ``out``.

    Writes ``out/config.toml`` and ``out/manifest.json`` (config hash, chunk list, versions),
    one ``out/chunks/chunk_NNNNN.npz`` per chunk (atomic: temp file + rename) and finally
    ``out/sweep.nc`` (netCDF-4 via the netCDF4 library), assembled from the chunk files only.

    With ``task = (I, N)`` only the chunks $i$ with $i \bmod N = I$ are computed (`rankdyn._sweep._tasks`),
    into the same ``out`` that the other tasks share (a folder holding this sweep is joined
    without ``resume``; the task's chunks already on disk are kept, so a killed task started
    again resumes). The process that finds every chunk on disk when it finishes (the last task)
    assembles ``sweep.nc``; the others return None. A second process running the same task at
    the same time is refused at start.

    Arguments:
        cfg: a `SweepConfig` (`load_sweep_config`).
        out: output folder; must be new/empty, or hold this same sweep with ``resume=True`` or
            a ``task``.
        resume: compute only the chunks missing in ``out``.
        progress: a tqdm bar over all trajectories of the sweep (of the task), with ETA.
        task: ``(index, count)`` or a `TaskShare`: compute this task's share only.

    Returns:
        The `xarray.Dataset` (see `assemble_sweep`), or None for a task that finished while
        chunks of other tasks were still missing.

    Raises:
        UsageError: if ``out`` holds a different sweep (other config hash or dtype), or holds
            this sweep and neither ``resume`` nor ``task`` is given; if its manifest is damaged;
            if another process runs the same task (or the whole sweep) in ``out``; if a chunk's
            estimated memory exceeds the available memory; if the disk is full.
    """
    out = Path(out)
    if task is not None and not isinstance(task, TaskShare):
        from ._tasks import parse_task

        task = parse_task(f"{task[0]}/{task[1]}", flag="task")
    share = task or TaskShare(0, 1)
    plan = sweep_plan(cfg)
    check_memory(sweep_memory(cfg, plan), what=f"sweep {cfg.name!r}", fix=_MEMORY_FIX)
    _refuse_foreign(out)  # before the locks create anything in a folder that is not ours
    with folder_lock(out):  # concurrent tasks starting at once: one at a time checks the manifest
        _prepare_dir(cfg, out, plan, resume or task is not None)
        lock = TaskLock(out, share, share.label if task is not None else "the whole sweep")
        for stale in out.glob(".*.tmp"):  # top-level files are written under this lock only
            stale.unlink(missing_ok=True)
    try:
        mine = [i for i in range(len(plan.chunks)) if share.owns(i)]
        todo = [
            i for i in mine if _load_chunk(_chunk_path(out, i), cfg, plan.chunks[i][1], report=True) is None
        ]
        for i in todo:  # temp files of this task's chunks, left by a killed writer (no one else writes them)
            for stale in (out / "chunks").glob(f".{_chunk_path(out, i).name}.*.tmp"):
                stale.unlink(missing_ok=True)
        timing = _compute(cfg, out, plan, mine, todo, progress, share.label if task is not None else "")
        # The last task to finish assembles: under the folder lock, so two never write at once
        # (assembling twice is harmless: the same chunk files give the same dataset).
        with folder_lock(out):
            missing = [
                i for i, (_, c) in enumerate(plan.chunks) if _load_chunk(_chunk_path(out, i), cfg, c) is None
            ]
            if task is not None:
                write_json(out / TASKS_DIR / f"{share.lock_name[:-5]}.timing.json", timing)
            if missing:
                return None
            ds = _write_dataset(cfg, out)
            write_json(out / "timing.json", timing)
        return ds
    finally:
        lock.release()


def _compute(cfg, out: Path, plan: SweepPlan, mine: list[int], todo: list[int], progress: bool, label: str):
    """Compute chunks ``todo`` (of this process's ``mine``), writing each as soon as it is done."""
    import jax  # JAX loads here, after every check

    from ._program import chunk_arrays, launch_chunk, run_pieces

    batch = [plan.groups[g][0]["batch"] for g, _ in plan.chunks]
    total = sum(len(plan.chunks[i][1]) * batch[i] for i in mine)
    done = total - sum(len(plan.chunks[i][1]) * batch[i] for i in todo)
    bar = None
    if progress:
        from .._run._progress import progress_bar as tqdm

        desc = f"sweep {cfg.name}" + (f" {label}" if label else "")
        bar = tqdm(total=total, initial=done, desc=desc, unit="traj", smoothing=0.1)
    timing = {"compile_s": 0.0, "total_s": 0.0, "chunks_computed": len(todo), "chunks_owned": len(mine)}
    t0 = time.perf_counter()
    # Whole chunks side by side, one per local device (a chunk is never split, so its numbers do
    # not depend on the device count: rankdyn._sweep._program); written in order as they finish.
    devices = jax.local_devices()
    with CompileTimer() as timer:
        for start in range(0, len(todo), len(devices)):
            wave = todo[start : start + len(devices)]
            launched = []
            for i, device in zip(wave, devices):
                g, cells = plan.chunks[i]
                dev = device if len(devices) > 1 else None
                launched.append(launch_chunk(cfg, plan.groups[g][0], cells, plan.chunk_cells[g], dev))
            # Depth piece by depth piece, a check for signals between two: a signal drops the
            # chunks in flight (complete chunks only are kept).
            run_pieces(launched)
            for i, run in zip(wave, launched):
                arrays = chunk_arrays(run)
                arrays["config_hash"] = np.asarray(cfg.hash)
                _atomic_savez(_chunk_path(out, i), arrays)
                if bar is not None:
                    bar.update(len(plan.chunks[i][1]) * batch[i])
                _chunk_written(i)
                check_interrupt()  # between chunks: every chunk so far is saved (CLI signals only)
    if bar is not None:
        bar.close()
    timing["compile_s"] = timer.compile_s
    timing["total_s"] = time.perf_counter() - t0
    return timing


def _write_dataset(cfg: SweepConfig, out: Path):
    ds = assemble_sweep(cfg, out)
    with atomic_path(out / "sweep.nc") as tmp:
        ds.to_netcdf(tmp, engine=NETCDF_ENGINE)
    return ds


def read_sweep_folder(out: str | os.PathLike) -> tuple[SweepConfig, dict]:
    """The `SweepConfig` and the manifest of a sweep folder, checked against each other.

    Reads ``out/config.toml`` and ``out/manifest.json`` only (no chunk, no JAX), so that the
    command line can check its own flags against the sweep's axes before anything is assembled.

    Raises:
        UsageError: ``out`` is not a sweep folder, or its manifest is damaged or does not match
            its ``config.toml``.
    """
    from ._schema import load_sweep_config

    out = Path(out)
    manifest, config = out / "manifest.json", out / "config.toml"
    if not out.is_dir() or not manifest.exists() or not config.exists():
        raise UsageError(
            f"--assemble {str(out)!r}: not a sweep folder (no manifest.json and config.toml in it); "
            "give the --out folder of a sweep."
        )
    try:
        meta = json.loads(manifest.read_text())
        num_cells = int(meta["num_cells"])
    except (ValueError, KeyError, TypeError, UnicodeDecodeError) as err:
        raise UsageError(f"{str(manifest)!r} is damaged ({err}); run the sweep again.") from None
    cfg = load_sweep_config(config, max_cells=max(num_cells, 1))
    if meta.get("config_hash") != cfg.hash:
        raise UsageError(
            f"{str(config)!r} (hash {cfg.hash}) does not match {str(manifest)!r} (hash "
            f"{meta.get('config_hash')}): the folder was edited; run the sweep again into a new --out."
        )
    return cfg, meta


def assemble_folder(out: str | os.PathLike, *, command: str = ""):
    """Assemble ``out/sweep.nc`` from a sweep folder alone (the spec is read from ``out``).

    What ``rankdyn sweep --assemble DIR`` does: reads ``out/config.toml``, checks it against
    ``out/manifest.json`` and that every chunk is on disk, then writes ``out/sweep.nc``.
    Assembling twice is harmless (the same chunk files give the same dataset).

    Arguments:
        out: a sweep folder.
        command: how the user would run the sweep (for the message naming missing chunks).

    Returns:
        ``(cfg, ds)``: the `SweepConfig` read from the folder and the `xarray.Dataset`.

    Raises:
        UsageError: ``out`` is not a sweep folder, its manifest is damaged or does not match its
            ``config.toml``, or chunks are missing (named, with the task that owns each).
    """
    out = Path(out)
    cfg, meta = read_sweep_folder(out)
    config = out / "config.toml"
    plan = sweep_plan(cfg)
    with folder_lock(out):
        problems = {i: chunk_problem(_chunk_path(out, i), cfg, c)[1] for i, (_, c) in enumerate(plan.chunks)}
        missing = [i for i, why in problems.items() if why]
        if missing:
            cmd = command or f"rankdyn sweep {config} --out {out}"
            cmd += " --x64" if meta.get("dtype") == "float64" else ""
            # A file on disk that cannot be used is named with its reason, not called "missing".
            unusable = [
                f"{_chunk_path(out, i).name}: {why}"
                for i, why in problems.items()
                if why not in ("", "missing")
            ]
            named = f" ({'; '.join(unusable[:3])}{'; ...' if len(unusable) > 3 else ''})" if unusable else ""
            report = missing_report(out, missing, len(plan.chunks), cmd)
            if unusable:
                report = report.replace(" missing in ", " missing or unusable in ", 1)
            raise UsageError(f"--assemble: {report[:-1]}{named}.")
        return cfg, _write_dataset(cfg, out)
