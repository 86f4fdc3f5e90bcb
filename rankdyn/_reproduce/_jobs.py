r"""``rankdyn reproduce --jobs N``: the targets in N worker processes, with the cores split between them.

XLA compiles on one thread, and compiling is most of every quick target, so one process leaves
the other cores idle for most of the main job. Here the targets are dealt to ``N`` worker
processes (``spawn``ed, so each starts its own JAX):

* **Cores.** The process's cores (its affinity mask) are split into ``N`` disjoint sets of
  $\lfloor C/N \rfloor$ or $\lceil C/N \rceil$ cores; worker ``k`` is pinned to set ``k``
  (``os.sched_setaffinity``) before JAX starts, gets ONE XLA CPU device, an intra-op pool sized for
  its own cores (`rankdyn.use_cpu_devices`, which reads the affinity mask), and
  ``OMP_NUM_THREADS`` / ``torch.set_num_threads`` equal to its core count. No core runs two
  workers' threads. ``N`` is at most the number of cores.
* **Which targets together.** Targets that share what they load within one call
  (`Target.shares_runs` with a checkpoint: geometry and the pretrained targets load the same
  checkpoint and excerpts) go to one worker, in the order of `TARGETS`, so they reuse it as with
  ``--jobs 1``; every other target (ablation too: its runs are its own) is a work item of its own.
* **Longest first.** Items are handed out by decreasing expected time (`QUICK_SECONDS`, a
  quiet cold quick run; an unlisted target counts `_UNLISTED_SECONDS`), at most one per
  worker at a time: the classic longest-processing-time rule, so that no long target starts last
  while the other worker idles. The order changes which worker runs a target, never its numbers.
* **Same files.** Each worker runs `rankdyn._reproduce.run_targets` on its item into the same
  folder (``<target>.json`` and the figures, atomic writes); the parent then writes ``report.md``
  over every result in the order of `TARGETS`, so the folder holds the files of ``--jobs 1``.
* **Progress.** One bar over the targets; its label lists every running target.
* **Ctrl-C** ends the workers (they die with the parent: ``PR_SET_PDEATHSIG``), keeps the
  targets already written, and ``--resume`` completes the folder.
"""

from __future__ import annotations

import concurrent.futures as cf
import ctypes
import multiprocessing
import os
import signal
import time
from pathlib import Path

from .._run._interrupt import check_interrupt

__all__ = ["work_items", "split_cores", "run_parallel", "QUICK_SECONDS"]


#: Seconds per quick target in a cold run (`benchmarks/compile_cache.py`, two workers; measured:
#: benchmarks/HISTORY.md): only the order in which work items are handed out. The warm
#: run's long targets are the cold run's long ones, so the order suits both (with these times,
#: ordering by the warm ones instead gains nothing warm and loses 1.4 s of the cold makespan).
QUICK_SECONDS = {
    "masks-collapse": 5.0,
    "temperature": 3.8,
    "layernorm-orthogonal": 5.8,
    "depth-table": 4.4,
    "counterexample-2d": 8.5,
    "equilibria-ranks": 8.0,
    "positive-measure": 7.9,
    "ablation": 17.0,
    "geometry": 6.0,
    "undirected": 23.6,
    "pretrained-ablation": 6.9,
    "pretrained-temperature": 3.8,
    "flow-clustering": 15.8,
    "flow-metastability": 14.9,
    "flow-causal": 8.3,
    "flow-limit": 4.8,
    "bifurcation": 12.3,
    "lyapunov-rates": 15.0,
    "attention-sinks": 10.2,
}
_UNLISTED_SECONDS = 10.0


def _shared(spec) -> str | None:
    """What a target shares with others of one call: its checkpoint's name, or None."""
    return f"checkpoint {spec.default_checkpoint}" if spec.shares_runs and spec.needs_checkpoint else None


def work_items(names: list[str]) -> list[list[str]]:
    """The targets as work items, longest first: those that load the same checkpoint together (in
    the order of ``names``), every other target alone."""
    from ._registry import target

    groups: dict[str, list[str]] = {}
    for n in names:
        groups.setdefault(_shared(target(n)) or f"target {n}", []).append(n)
    items = list(groups.values())
    cost = lambda item: sum(QUICK_SECONDS.get(n, _UNLISTED_SECONDS) for n in item)  # noqa: E731
    return sorted(items, key=cost, reverse=True)  # stable: equal costs keep the order of names


def split_cores(num_workers: int, cores: list[int] | None = None) -> list[list[int]]:
    """The process's cores split into ``num_workers`` disjoint, near-equal, contiguous sets."""
    cores = sorted(os.sched_getaffinity(0)) if cores is None else list(cores)
    if not 1 <= num_workers <= len(cores):
        raise RuntimeError(f"{num_workers} workers for {len(cores)} cores")
    base, extra = divmod(len(cores), num_workers)
    out, start = [], 0
    for k in range(num_workers):
        size = base + (k < extra)
        out.append(cores[start : start + size])
        start += size
    return out


def _die_with_parent(parent: int) -> None:
    # Linux: the kernel sends SIGKILL to the worker when the parent dies (Ctrl-C exits it at
    # once with os._exit, kill -9 too), so no worker keeps computing for nobody. A parent that
    # died while this worker was still starting (importing) sent nothing: check, and leave.
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG = 1
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent:
        os._exit(1)


def _init_worker(parent: int, slots, core_sets, env: dict, x64: bool, compile_cache: str | None) -> None:
    """Pin this worker to its cores and configure JAX before it starts (one device)."""
    _die_with_parent(parent)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles Ctrl-C and ends the workers
    with slots.get_lock():  # take the next free set of cores
        cores = core_sets[slots.value]
        slots.value += 1
    os.sched_setaffinity(0, cores)
    os.environ.update(env | {"OMP_NUM_THREADS": str(len(cores)), "MKL_NUM_THREADS": str(len(cores))})
    os.environ.pop("NPROC", None)  # sized again for this worker's cores by use_cpu_devices
    from .._run._devices import use_cpu_devices

    use_cpu_devices(1)
    import jax

    if x64:
        jax.config.update("jax_enable_x64", True)
    if compile_cache:
        jax.config.update("jax_compilation_cache_dir", compile_cache)
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
        jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)
    try:
        import torch

        torch.set_num_threads(len(cores))
    except ImportError:
        pass


def _run_item(names, out: str, quick: bool, seed: int, checkpoint: str | None) -> dict:
    from . import run_targets

    ckpt = None
    if checkpoint is not None:
        from ..checkpoints import load_checkpoint

        ckpt = load_checkpoint(checkpoint)
    res = run_targets(names, out, quick=quick, seed=seed, progress=False, checkpoint=ckpt)
    return res["results"]


def run_parallel(
    names: list[str],
    out,
    *,
    jobs: int,
    quick: bool,
    seed: int,
    progress: bool,
    checkpoint=None,
    x64: bool = False,
    compile_cache: str | None = None,
) -> dict:
    """Run ``names`` in ``jobs`` worker processes; the same return value as `run_targets`.

    Arguments:
        names: resolved target names.
        out: the output folder.
        jobs: worker processes (at least 2, at most the cores; fewer are started when there are
            fewer work items).
        quick, seed: as `run_targets`.
        progress: one bar over the targets, labelled with the running ones.
        checkpoint: the ``--checkpoint`` path (each worker loads it), or None.
        x64: float64 end to end in the workers.
        compile_cache: the persistent compilation cache folder the workers use, or None.

    Returns:
        ``{"results", "runtime_s", "report", "failed"}`` as `run_targets` returns them; the results
        in the order of `TARGETS`.
    """
    from . import TARGETS, write_report

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    items = work_items(names)
    workers = min(jobs, len(items))
    core_sets = split_cores(workers)
    ctx = multiprocessing.get_context("spawn")
    slots = ctx.Value("i", 0)
    # Spawned workers start a fresh interpreter (a forked JAX is unsafe); each claims one core set.
    env = {k: os.environ[k] for k in ("XLA_FLAGS",) if k in os.environ}
    t_start = time.perf_counter()
    results: dict[str, dict] = {}
    bar = None
    if progress:
        from .._run._progress import progress_bar as tqdm

        bar = tqdm(total=len(names), desc=f"reproduce ({workers} workers)", unit="target")
    pool = cf.ProcessPoolExecutor(
        max_workers=workers,
        mp_context=ctx,
        initializer=_init_worker,
        initargs=(os.getpid(), slots, core_sets, env, x64, compile_cache),
    )
    started: dict[cf.Future, tuple[list[str], float]] = {}
    queue = list(items)
    shown = ""
    ckpt = None if checkpoint is None else str(checkpoint)
    try:
        while queue or started:
            while queue and len(started) < workers:  # one item per worker: "running" is exact
                item = queue.pop(0)
                fut = pool.submit(_run_item, item, str(out), quick, seed, ckpt)
                started[fut] = (item, time.time())
            label = "running: " + ", ".join(_running(out, started))
            if bar is not None and label != shown:  # redrawn only when the running set changes
                bar.set_postfix_str(label)
                shown = label
            done, _ = cf.wait(list(started), timeout=0.5, return_when=cf.FIRST_COMPLETED)
            # The workers ignore SIGINT: the parent's loop is where Ctrl-C and SIGTERM stop the run
            # (the finally below ends the workers); it used to wait for them to finish first.
            check_interrupt()
            for fut in done:
                item, _ = started.pop(fut)
                try:
                    results |= fut.result()
                except Exception as err:  # noqa: BLE001 - a worker that died: its targets are errors
                    results |= {n: _crashed(n, quick, seed, err) for n in item if n not in results}
                if bar is not None:
                    bar.update(len(item))
    finally:
        for p in list(getattr(pool, "_processes", {}).values()):  # Ctrl-C: end every worker now
            if p.is_alive() and (queue or started):
                p.kill()
        pool.shutdown(wait=True, cancel_futures=True)
        if bar is not None:
            bar.close()
    ordered = {n: results[n] for n in TARGETS if n in results}
    runtime = time.perf_counter() - t_start
    report = write_report(out, ordered, runtime_s=runtime, quick=quick, seed=seed)
    failed = [n for n, r in ordered.items() if r.get("verdict") == "error"]
    return {"results": ordered, "runtime_s": runtime, "report": report, "failed": failed}


def _running(out: Path, started: dict) -> list[str]:
    """The target each busy worker is on: the first of its item without a JSON written since."""
    names = []
    for item, t0 in started.values():
        for n in item:
            f = out / f"{n}.json"
            if not (f.exists() and f.stat().st_mtime >= t0):
                names.append(n)
                break
    return names


def _crashed(name: str, quick: bool, seed: int, err: BaseException) -> dict:
    return {
        "name": name,
        "claim": "",
        "setting": {"quick": quick, "seed": seed},
        "measured": {},
        "verdict": "error",
        "criterion": "the worker process running the target failed",
        "figures": [],
        "notes": f"{type(err).__name__}: {err}",
    }
