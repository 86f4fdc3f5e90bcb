"""Cold and warm time of every reproduce target, each alone in its own process, as a user meets it.

    python benchmarks/reproduce_times.py [--targets quick|extended|all|NAME ...] [--out DIR]
                                         [--json OUT] [--md OUT] [--full]

For each target, ``rankdyn reproduce TARGET --quick --jobs 1`` runs twice in a fresh subprocess:
first **cold**, with ``--compile-cache`` pointing at an empty folder made for that target (no
compiled program to load), then **warm**, with the same folder (every program loaded from it).
Each run records its wall seconds and its CPU seconds (user + system of the child and its
children, from ``resource.getrusage(RUSAGE_CHILDREN)`` deltas: they hold on a loaded machine,
the wall seconds do not), its exit status, and the 1-minute load average before and after it.
The CPU model and the core count head the report. Only the JAX compilation cache is cold: the
checkpoints (``rankdyn checkpoints --get``) and the Python bytecode are already on disk, as they
are for a user's second target.

The JSON (``--json``, default ``out/reproduce_times.json``) is rewritten after every run, so an
interrupted run keeps what it measured; the markdown table (``--md``, default
``out/reproduce_times.md``) is what benchmarks/README.md quotes. ``--full`` times the full sizes
instead of ``--quick`` (hours on a 2-core CPU).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _targets(spec: list[str]) -> list[tuple[str, bool]]:
    """(name, extended) for each requested target, in the registry's order."""
    sys.path.insert(0, str(ROOT))
    from rankdyn._reproduce._registry import REGISTRY

    names = {t.name: t.extended for t in REGISTRY}
    if spec in (["quick"], ["extended"], ["all"]):
        want = {"quick": (False,), "extended": (True,), "all": (False, True)}[spec[0]]
        return [(t.name, t.extended) for t in REGISTRY if t.extended in want]
    unknown = [s for s in spec if s not in names]
    if unknown:
        raise SystemExit(f"error: unknown target(s) {unknown}; known: {sorted(names)}")
    return [(s, names[s]) for s in spec]


def _cpu_model() -> str:
    """The CPU's name as every speed figure records it (`rankdyn/_run/_io.cpu_model`; no JAX)."""
    sys.path.insert(0, str(ROOT))
    from rankdyn._run._io import cpu_model

    return cpu_model()


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def run_once(name: str, cache: Path, out: Path, quick: bool) -> dict:
    """One ``rankdyn reproduce NAME`` in a subprocess: wall, CPU, exit status and load around it."""
    cmd = [sys.executable, "-m", "rankdyn", "reproduce", name, "--jobs", "1", "--no-progress"]
    cmd += ["--compile-cache", str(cache), "--out", str(out)] + (["--quick"] if quick else [])
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    load0 = os.getloadavg()[0]
    c0, w0 = _children_cpu(), time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    wall, cpu = time.perf_counter() - w0, _children_cpu() - c0
    row = {"wall_s": round(wall, 1), "cpu_s": round(cpu, 1), "rc": proc.returncode}
    row.update(load_before=round(load0, 2), load_after=round(os.getloadavg()[0], 2))
    row["started_utc"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - wall))
    if proc.returncode:
        row["stderr_tail"] = proc.stderr[-2000:]
    return row


def markdown(report: dict) -> str:
    """The table benchmarks/README.md quotes: one row per target, cold and warm."""
    lines = [
        f"CPU: {report['cpu']} ({report['cores']} cores); `{report['command']}`; "
        f"{'quick' if report['quick'] else 'full'} sizes, `--jobs 1`, one target per process.",
        "",
        "| target | tier | cold wall s | cold CPU s | warm wall s | warm CPU s "
        "| load 1-min (cold, warm: before/after) |",
        "|---|---|---:|---:|---:|---:|---|",
    ]
    for r in report["targets"]:
        c, w = r.get("cold", {}), r.get("warm", {})

        def cell(run, key):
            if not run:
                return "not run"
            return f"{run[key]}" + ("" if run["rc"] == 0 else f" (exit {run['rc']})")

        def load(run):
            return f"{run['load_before']}/{run['load_after']}" if run else "-"

        lines.append(
            f"| {r['target']} | {'extended' if r['extended'] else 'quick'} | {cell(c, 'wall_s')} | "
            f"{cell(c, 'cpu_s')} | {cell(w, 'wall_s')} | {cell(w, 'cpu_s')} | {load(c)}, {load(w)} |"
        )
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--targets", nargs="+", default=["all"], help="quick, extended, all or names")
    p.add_argument(
        "--out", type=Path, default=None, help="folder for the runs' outputs (default: a temp dir)"
    )
    p.add_argument("--json", type=Path, default=ROOT / "out" / "reproduce_times.json")
    p.add_argument("--md", type=Path, default=ROOT / "out" / "reproduce_times.md")
    p.add_argument("--full", action="store_true", help="full sizes instead of --quick")
    a = p.parse_args(argv)
    todo = _targets(a.targets)
    work = a.out or Path(tempfile.mkdtemp(prefix="reproduce_times_"))
    report = {
        "cpu": _cpu_model(),
        "cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "quick": not a.full,
        "command": "rankdyn reproduce TARGET --jobs 1 --compile-cache DIR" + ("" if a.full else " --quick"),
        "python": platform.python_version(),
        "targets": [],
    }
    a.json.parent.mkdir(parents=True, exist_ok=True)
    a.md.parent.mkdir(parents=True, exist_ok=True)
    for name, extended in todo:
        cache = work / "cache" / name
        cache.mkdir(parents=True, exist_ok=True)
        row = {"target": name, "extended": extended}
        report["targets"].append(row)
        for kind in ("cold", "warm"):
            row[kind] = run_once(name, cache, work / kind, quick=not a.full)
            print(
                f"{name:24s} {kind}: {row[kind]['wall_s']:7.1f} s wall, {row[kind]['cpu_s']:7.1f} CPU s, "
                f"exit {row[kind]['rc']}, load {row[kind]['load_before']} -> {row[kind]['load_after']}",
                flush=True,
            )
            a.json.write_text(json.dumps(report, indent=1) + "\n")
            a.md.write_text(markdown(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
