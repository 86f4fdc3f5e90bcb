"""Where `rankdyn reproduce --quick` spends its time: per target, wall, process CPU and compile seconds.

    python benchmarks/reproduce_speed.py [--targets all] [--full] [--out DIR] [--json OUT]

Runs the targets in one process and in the order of `rankdyn.experiments.TARGETS`, exactly as
``rankdyn reproduce --quick --devices 1`` does (one shared cache, so a later target reuses what
an earlier one computed), and wraps each target's ``run`` in `rankdyn._run._io.CompileTimer`
(``jax.monitoring`` duration events: tracing, lowering and XLA compiles). CPU seconds are the
process's (every thread), so they hold on a loaded machine; wall seconds do not. The load
average before and after is recorded next to the figures.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
import tempfile
import time
from pathlib import Path


def _timed(run, name, rows, json_path=None):
    from rankdyn._run._io import CompileTimer

    @functools.wraps(run)
    def wrapper(*a, **kw):
        c0 = time.process_time()
        with CompileTimer() as ct:
            try:
                return run(*a, **kw)
            finally:
                rows[name] = {
                    "cpu_s": time.process_time() - c0,
                    "compile_s": ct.compile_s,
                    "compiles": ct.compiles,
                    "load_after": os.getloadavg()[0],
                }
                if json_path:  # after each target, so a run cut short keeps what it measured
                    json_path.parent.mkdir(parents=True, exist_ok=True)
                    json_path.write_text(json.dumps(rows, indent=1))

    return wrapper


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--targets", default="all", help="comma-separated target names, or all")
    p.add_argument("--full", action="store_true", help="full sizes instead of --quick")
    p.add_argument(
        "--out", type=Path, default=None, help="output folder of the targets (default: a temp dir)"
    )
    p.add_argument("--json", type=Path, default=None, help="write the per-target table here")
    args = p.parse_args(argv)
    from rankdyn import experiments

    names = experiments.resolve_targets(args.targets.split(","))
    rows: dict[str, dict] = {}
    # Every target runs through experiments.run_target: time each call by the target's name.
    untimed = experiments.run_target

    def timed(spec, *a, **kw):
        return _timed(untimed, spec.name, rows, args.json)(spec, *a, **kw)

    experiments.run_target = timed
    load0, c0 = os.getloadavg(), time.process_time()
    out = args.out or Path(tempfile.mkdtemp(prefix="rankdyn-reproduce-speed-"))
    res = experiments.run_targets(names, out, quick=not args.full, progress=False)
    report = {
        "command": "python benchmarks/reproduce_speed.py "
        + " ".join(argv if argv is not None else sys.argv[1:]),
        "loadavg_before": list(load0),
        "loadavg_after": list(os.getloadavg()),
        "total_wall_s": res["runtime_s"],
        "total_cpu_s": time.process_time() - c0,
        "failed": res["failed"],
        "targets": {
            n: rows.get(n, {}) | {"wall_s": r["runtime_s"], "verdict": r["verdict"]}
            for n, r in res["results"].items()
        },
    }
    print(f"load average before {load0[0]:.1f}, after {report['loadavg_after'][0]:.1f}")
    print("| target | wall s | CPU s | compile s | compiles | verdict |\n|---|---:|---:|---:|---:|---|")
    for n, r in report["targets"].items():
        print(
            f"| {n} | {r['wall_s']:.1f} | {r.get('cpu_s', 0):.1f} | {r.get('compile_s', 0):.1f} "
            f"| {r.get('compiles', 0)} | {r['verdict']} |"
        )
    print(f"| total | {report['total_wall_s']:.1f} | {report['total_cpu_s']:.1f} | | | |")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
