"""`simulate` against the hand-written JAX loop in one process, interleaved, CPU and wall seconds.

    PYTHONPATH=$PWD python benchmarks/simulate_vs_loop.py small --repeats 3 --chunks 128,1024

For a configuration of `speed/_configs.py` (mu-only metrics), the loop (`speed/_reference_jax.py`)
and ``simulate`` at each chunk run in turn, each repeat once per contender, so that load changes
hit all of them alike; the median wall and process CPU seconds and the CPU ratio to the loop are
printed with the load average and the CPU model. To compare two versions of rankdyn, run it with
each tree on ``PYTHONPATH``: the ratio to the loop, measured in the same process, is the figure.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("config", choices=("small", "bert", "long"))
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--chunks", default="", help="comma-separated chunks; empty: simulate's default")
    args = p.parse_args(argv)
    import jax
    from speed._configs import build, config
    from speed._hardware import device_name
    from speed._reference_jax import jax_inputs, make_jax_loop

    import rankdyn as rd

    cfg = config(args.config, False, "mu")
    layer, x0 = build(cfg)
    wq, wk, wv, mask, dqk = jax_inputs(layer)
    loop = make_jax_loop(cfg["layers"], cfg["per_layer"], dqk)
    runs = {"loop": lambda: loop(x0, wq, wk, wv, mask)}
    for c in [int(c) for c in args.chunks.split(",") if c] or [None]:
        runs[f"simulate chunk={c or 'default'}"] = lambda c=c: (
            rd.simulate(layer, x0, cfg["layers"], metrics="mu,eps_min", chunk=c).summary
        )
    for f in runs.values():
        jax.block_until_ready(f())  # compile (and tune the default chunk)
    times = {k: [] for k in runs}
    load0 = os.getloadavg()[0]
    for _ in range(args.repeats):
        for k, f in runs.items():
            t0, c0 = time.perf_counter(), _cpu()
            jax.block_until_ready(f())
            times[k].append((time.perf_counter() - t0, _cpu() - c0))
    print(f"{device_name()}; {cfg}; load average {load0:.2f} before, {os.getloadavg()[0]:.2f} after")
    base = statistics.median(c for _, c in times["loop"])
    for k, v in times.items():
        wall, cpu = statistics.median(w for w, _ in v), statistics.median(c for _, c in v)
        print(f"{k:28s} wall {wall:7.3f} s  cpu {cpu:7.3f} s  cpu / loop {cpu / base:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
