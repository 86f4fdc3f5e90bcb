"""The programs one ``rankdyn simulate`` call compiles, with the CPU seconds of each backend compile.

    PYTHONPATH=TREE python benchmarks/compile_programs.py [simulate flags ...]

Runs ``rankdyn simulate FLAGS --out TMP --no-progress`` in this process (default flags: the issue's
reference size with the default metrics; 0.4 spells the depth ``--layers``), with
``jax_log_compiles`` on, and prints per compiled program its name, the wall seconds XLA reports
and the process CPU seconds between the end of its lowering and the end of its backend compile
(``jax.monitoring`` events), then the number of programs, the sum of their backend CPU seconds and
the process's CPU seconds. CPU seconds, unlike wall seconds, hardly move with the load of a shared
machine; the number of programs does not move at all. Run it with the compilation cache off (the
default of ``rankdyn simulate`` outside ``reproduce``) and ``PYTHONPATH`` naming the tree to measure.
"""

from __future__ import annotations

import logging
import os
import re
import sys
import tempfile
import time

import jax

REFERENCE = (
    "--mask causal --n 32 --d 64 --num-layers 128 --batch 1024 --placement post --value orthogonal "
    "--qk bert --x0 sphere"
)
_EVENTS = ("jaxpr_trace_duration", "jaxpr_to_mlir_module_duration", "backend_compile_duration")


def main(argv: list[str]) -> None:
    marks, names = [], []

    def listen(name, duration, **_):
        event = name.rsplit("/", 1)[-1]
        if event in _EVENTS:
            marks.append((event, time.process_time()))

    class Names(logging.Handler):
        def emit(self, record):
            m = re.search(r"Finished XLA compilation of (\S+) in ([\d.e-]+) sec", record.getMessage())
            if m:
                names.append((m.group(1), float(m.group(2))))

    jax.monitoring.register_event_duration_secs_listener(listen)
    jax.config.update("jax_log_compiles", True)
    logging.getLogger("jax").addHandler(Names())
    logging.getLogger("jax").setLevel(logging.WARNING)
    from rankdyn.cli import main as cli_main

    args = argv or REFERENCE.split()
    c0, w0 = time.process_time(), time.perf_counter()
    rc = cli_main(["simulate", *args, "--out", tempfile.mkdtemp(), "--no-progress"])
    cpu, wall = time.process_time() - c0, time.perf_counter() - w0
    backend = [
        b - a
        for (ea, a), (eb, b) in zip(marks, marks[1:])
        if ea == "jaxpr_to_mlir_module_duration" and eb == "backend_compile_duration"
    ]
    out = sys.stdout
    for (name, seconds), c in zip(names, backend):
        print(f"  {name:40s} wall {seconds:7.3f}  cpu {c:6.3f}", file=out)
    print(
        f"rc {rc}  programs {len(names)}  backend compile CPU s {sum(backend):.2f}  process CPU s "
        f"{cpu:.2f}  wall s {wall:.2f}  load {os.getloadavg()[0]:.2f}",
        file=out,
    )


if __name__ == "__main__":
    main(sys.argv[1:])
