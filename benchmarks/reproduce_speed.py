"""Where `rankdyn reproduce --quick` spends its time: per target, wall, process CPU, and the JAX part.

    python benchmarks/reproduce_speed.py [--targets all] [--full] [--compile-cache DIR] [--out DIR]
                                         [--json OUT]

Runs the targets in one process and in the order of `rankdyn._reproduce.TARGETS`, exactly as
``rankdyn reproduce --quick --jobs 1`` does (one shared cache, so a later target reuses what
an earlier one computed), with the command's XLA flags (``--quick``: its optimisation level,
`rankdyn._commands.reproduce.QUICK_XLA_FLAG`, unless ``XLA_FLAGS`` sets one) and, with
``--compile-cache DIR``, its persistent compilation cache (none by default: a cold run). Each
target's ``run`` is wrapped in `rankdyn._run._io.CompileTimer`, and ``jax.monitoring`` events
split its JAX part: seconds tracing to jaxprs and lowering to StableHLO (never cached: a warm run
pays them again), seconds in XLA (a compile, or a load from the cache), the distinct programs and
how many of them XLA compiled (not found in the cache). CPU seconds are the process's (every
thread), so they hold on a loaded machine; wall seconds and the split (wall seconds of events) do
not. The load average before and after is recorded next to the figures.
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

#: jax.monitoring duration events -> column; and the event of a program found in the cache.
_SPLIT = {
    "/jax/core/compile/jaxpr_trace_duration": "trace_s",
    "/jax/core/compile/jaxpr_to_mlir_module_duration": "lower_s",
    "/jax/core/compile/backend_compile_duration": "xla_s",
}
_HIT = "/jax/compilation_cache/cache_hits"
_split: dict = {}


def _listen_split():
    import jax

    def on_duration(name, duration, **_):
        if name in _SPLIT:
            _split[_SPLIT[name]] = _split.get(_SPLIT[name], 0.0) + duration

    def on_event(name, **_):
        if name == _HIT:
            _split["hits"] = _split.get("hits", 0) + 1

    jax.monitoring.register_event_duration_secs_listener(on_duration)
    jax.monitoring.register_event_listener(on_event)


def _timed(run, name, rows, json_path=None):
    from rankdyn._run._io import CompileTimer

    @functools.wraps(run)
    def wrapper(*a, **kw):
        c0 = time.process_time()
        _split.clear()
        with CompileTimer() as ct:
            try:
                return run(*a, **kw)
            finally:
                rows[name] = {
                    "cpu_s": time.process_time() - c0,
                    "compile_s": ct.compile_s,
                    "compiles": ct.compiles,
                    **{k: round(_split.get(k, 0.0), 3) for k in _SPLIT.values()},
                    "compiled": ct.compiles - _split.get("hits", 0),
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
    p.add_argument(
        "--compile-cache",
        type=Path,
        default=None,
        metavar="DIR",
        help="use (and fill) this persistent compilation cache, as rankdyn reproduce does (default: none)",
    )
    args = p.parse_args(argv)
    from rankdyn._commands.reproduce import QUICK_XLA_FLAG

    flags = os.environ.get("XLA_FLAGS", "")
    if not args.full and "xla_backend_optimization_level" not in flags:  # the command's --quick flags
        os.environ["XLA_FLAGS"] = f"{flags} {QUICK_XLA_FLAG}".strip()
    import jax

    if args.compile_cache is not None:  # as `rankdyn reproduce` sets it: every program cached
        args.compile_cache.mkdir(parents=True, exist_ok=True)
        jax.config.update("jax_compilation_cache_dir", str(args.compile_cache))
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
        jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)
    _listen_split()
    from rankdyn import _reproduce as experiments

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
        "xla_flags": os.environ.get("XLA_FLAGS", ""),
        "compile_cache": None if args.compile_cache is None else str(args.compile_cache),
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
    print(
        "| target | wall s | CPU s | trace s | lower s | XLA s | programs | compiled | verdict |\n"
        "|---|---:|---:|---:|---:|---:|---:|---:|---|"
    )
    for n, r in report["targets"].items():
        print(
            f"| {n} | {r['wall_s']:.1f} | {r.get('cpu_s', 0):.1f} | {r.get('trace_s', 0):.1f} "
            f"| {r.get('lower_s', 0):.1f} | {r.get('xla_s', 0):.1f} | {r.get('compiles', 0)} "
            f"| {r.get('compiled', 0)} | {r['verdict']} |"
        )
    print(f"| total | {report['total_wall_s']:.1f} | {report['total_cpu_s']:.1f} | | | | | | |")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
