"""`rankdyn reproduce --quick` cold (empty compilation cache) and warm, and whether the numbers agree.

    python benchmarks/compile_cache.py [--targets all|T1,T2] [--jobs N] [--cache DIR] [--json OUT]

Runs ``rankdyn reproduce TARGETS --quick --no-progress --compile-cache CACHE`` twice, each in a
fresh process exactly as a user would: first with an empty cache (cold: every program compiled
and stored), then again with the cache it left (warm). Times each whole command (wall and the
child's CPU seconds) and each target's ``runtime_s``, and compares every target's JSON
``measured``, ``checks`` and ``verdict`` between the two runs, floats bit for bit (NaN equal to
NaN; keys that hold clock readings, ``*_s``, ``seconds``, ``runtime``, are skipped). Exit 1 when
any differs. The load average and the CPU model are recorded: on a loaded
machine wall times measure the queue for a core, so the CPU seconds are the fairer ratio.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rankdyn._run._io import cpu_model


def _run(targets: list[str], cache: Path, out: Path, jobs: str | None) -> dict:
    cmd = [sys.executable, "-m", "rankdyn", "reproduce", *targets, "--quick", "--no-progress"]
    cmd += ["--compile-cache", str(cache), "--out", str(out)] + ([] if jobs is None else ["--jobs", jobs])
    env = {k: v for k, v in os.environ.items() if k != "RANKDYN_NO_COMPILE_CACHE"}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    load = os.getloadavg()[0]
    t0 = time.perf_counter()
    res = subprocess.run(cmd, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if res.returncode not in (0, 1):  # 1: a target's verdict failed, which the comparison still covers
        sys.exit(f"{' '.join(cmd)} exited {res.returncode}:\n{res.stderr[-3000:]}")
    per_target = {}
    for f in sorted(out.glob("*.json")):
        data = json.loads(f.read_text())
        if isinstance(data, dict) and "verdict" in data:
            per_target[f.stem] = data
    return {
        "command": " ".join(cmd),
        "wall_s": wall,
        "cpu_s": (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime),
        "load_before": load,
        "load_after": os.getloadavg()[0],
        "targets": per_target,
    }


#: Keys that hold clock readings, not results (as in the lead's comparison of reproduce folders).
CLOCK_WORDS = ("runtime", "cpu_s", "wall", "elapsed", "seconds", "compile_s", "run_s", "time_s")


def is_clock(key) -> bool:
    k = str(key).lower()
    return k.endswith("_s") or any(w in k for w in CLOCK_WORDS)


def _diff(a, b, path: str, out: list[str]) -> None:
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b), key=str):
            if is_clock(k):
                continue
            if k not in a or k not in b:
                out.append(f"{path}.{k}: only in the {'warm' if k in b else 'cold'} run")
            else:
                _diff(a[k], b[k], f"{path}.{k}", out)
    elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b)):
            _diff(x, y, f"{path}[{i}]", out)
    elif isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return
    elif type(a) is not type(b) or a != b:
        out.append(f"{path}: {a!r} (cold) != {b!r} (warm)")


def compare(cold: dict, warm: dict) -> list[str]:
    """Every difference in ``measured``, ``checks`` and ``verdict`` between two runs' targets."""
    out: list[str] = []
    if set(cold) != set(warm):
        out.append(f"targets differ: {sorted(cold)} vs {sorted(warm)}")
    for name in sorted(set(cold) & set(warm)):
        for key in ("measured", "checks", "verdict"):
            _diff(cold[name].get(key), warm[name].get(key), f"{name}.{key}", out)
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--targets", default="all", help="comma-separated target names, or all")
    p.add_argument("--cache", type=Path, default=None, help="cache folder (must be empty or absent)")
    p.add_argument(
        "--jobs", default=None, help="passed to rankdyn reproduce (default: its own, one per core)"
    )
    p.add_argument("--json", type=Path, default=None, help="write the report here")
    args = p.parse_args(argv)
    targets = args.targets.split(",")
    work = Path(tempfile.mkdtemp(prefix="rankdyn-compile-cache-"))
    cache = args.cache or work / "cache"
    if cache.exists() and any(cache.iterdir()):
        sys.exit(f"--cache {cache} is not empty: the cold run needs an empty cache")
    try:
        cold = _run(targets, cache, work / "cold", args.jobs)
        entries = sum(1 for _ in cache.iterdir()) if cache.exists() else 0
        warm = _run(targets, cache, work / "warm", args.jobs)
        diffs = compare(cold["targets"], warm["targets"])
    finally:
        if args.cache is None:
            shutil.rmtree(work, ignore_errors=True)
    report = {
        "command": "python benchmarks/compile_cache.py "
        + " ".join(argv if argv is not None else sys.argv[1:]),
        "cpu": cpu_model(),  # the library's one definition (rankdyn._run._io)
        "cores": os.cpu_count(),
        "cache_entries": entries,
        "cold": {k: v for k, v in cold.items() if k != "targets"},
        "warm": {k: v for k, v in warm.items() if k != "targets"},
        "per_target_s": {
            n: [cold["targets"][n].get("runtime_s"), warm["targets"].get(n, {}).get("runtime_s")]
            for n in cold["targets"]
        },
        "differences": diffs,
    }
    print(f"{report['cpu']}, {report['cores']} cores; {entries} cache entries after the cold run")
    print("| run | wall s | CPU s | load before/after |\n|---|---:|---:|---|")
    for k in ("cold", "warm"):
        r = report[k]
        print(
            f"| {k} | {r['wall_s']:.1f} | {r['cpu_s']:.1f} | {r['load_before']:.1f}/{r['load_after']:.1f} |"
        )
    print(
        f"warm/cold: {cold['wall_s'] / warm['wall_s']:.2f}x faster in wall time, "
        f"{cold['cpu_s'] / max(warm['cpu_s'], 1e-9):.2f}x in CPU time"
    )
    print("| target | cold s | warm s |\n|---|---:|---:|")
    for n, (c, w) in report["per_target_s"].items():
        print(f"| {n} | {c:.1f} | {w:.1f} |" if c is not None and w is not None else f"| {n} | {c} | {w} |")
    print(
        "measured/checks/verdict: identical in every target"
        if not diffs
        else f"{len(diffs)} difference(s):\n  " + "\n  ".join(diffs[:40])
    )
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=1))
    return 1 if diffs else 0


if __name__ == "__main__":
    raise SystemExit(main())
