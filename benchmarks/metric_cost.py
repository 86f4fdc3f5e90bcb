"""The cost of each metric family per (n, d) matrix, for the long-context default of ``--metrics``.

    PYTHONPATH=$PWD python benchmarks/metric_cost.py [--json OUT] [--quick]

Times, per matrix (float32, one (n, d) matrix per call, jitted; best of a few repeats after one
warm-up; process CPU seconds beside wall seconds), the four families ``rankdyn simulate`` records:

- ``mu``: mu, mu_rel, mu_normalized, row_norm_mean, row_norm_min (O(n d), no (n, n) work);
- ``cosines``: min_cos and mean_abs_cos (the (n, n) cosine matrix, by row blocks from n = 2048:
  O(n^2 d) flops);
- ``spectral``: the singular values behind sigma_*, stable_rank, num_rank, eff_rank (an SVD,
  O(n d min(n, d)));
- ``all``: `rankdyn._observe._metrics.collapse_metrics`, every metric of one matrix together.

at n = 1024 and 8192, d = 64 and 576 (``--quick``: n = 64 and 256, d = 16, a smoke run).
``eps_min`` is left out: it reads the attention weights the layer computes anyway.

Timings on a shared machine are noisy: run it quiet (load below 1.5) and say the CPU and load with
the table. Only ratios measured side by side in one run count.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import jax
import jax.numpy as jnp
import jax.random as jr

from rankdyn._observe import _metrics as M
from rankdyn._observe._spectral import singular_values


def best_of(fn, x, repeats: int) -> tuple[float, float]:
    """(best process-CPU seconds, best wall seconds) of ``fn(x)`` after one warm-up call."""
    jax.block_until_ready(fn(x))
    cpu, wall = float("inf"), float("inf")
    for _ in range(repeats):
        c0, w0 = time.process_time(), time.perf_counter()
        jax.block_until_ready(fn(x))
        cpu, wall = min(cpu, time.process_time() - c0), min(wall, time.perf_counter() - w0)
    return cpu, wall


FAMILIES = {
    "mu": lambda x: (M.mu(x), M.mu_relative(x), M.mu_normalized(x), M.row_norms(x)),
    "cosines": lambda x: (M.min_cosine(x), M.mean_abs_cosine(x)),
    "spectral": lambda x: singular_values(x, method="lapack"),
    "all": lambda x: M.collapse_metrics(x),
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", default=None, help="write the rows here")
    ap.add_argument("--quick", action="store_true", help="n 64 and 256, d 16: a smoke run")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    shapes = [(64, 16), (256, 16)] if args.quick else [(n, d) for n in (1024, 8192) for d in (64, 576)]
    rows = []
    for n, d in shapes:
        x = jr.normal(jr.key(0), (n, d), jnp.float32)
        for name, f in FAMILIES.items():
            cpu, wall = best_of(jax.jit(f), x, args.repeats)
            rows.append({"n": n, "d": d, "family": name, "cpu_s": cpu, "wall_s": wall})
            print(
                f"n={n:5d} d={d:3d} {name:9s} cpu {cpu * 1e3:10.2f} ms  wall {wall * 1e3:10.2f} ms",
                flush=True,
            )
    meta = {"load": os.getloadavg(), "cpus": os.cpu_count(), "backend": jax.default_backend()}
    print(f"load {meta['load'][0]:.2f}, {meta['cpus']} CPUs, backend {meta['backend']}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"meta": meta, "rows": rows}, fh, indent=1)


if __name__ == "__main__":
    main()
