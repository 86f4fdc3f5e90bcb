"""Peak RSS of `rankdyn.simulate` (streamed statistics, TokenSampler inputs) against depth and batch.

Each run is a fresh subprocess that reports its own peak RSS (``getrusage(RUSAGE_SELF)``) as
it exits. Ratios only (the machine is shared): 10,000 layers against 128 layers (batch
1024) and 262,144 trajectories against 4,096 (64 layers), n = d = 16.

    python benchmarks/scan_memory.py [--metrics all|mu,eps_min]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

CHILD = """
import sys, jax, rankdyn as rd
layers, batch, metrics = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
k = jax.random.PRNGKey(0)
layer = rd.make_layer(k, n=16, d=16, mask="causal")
tr = rd.simulate(layer, rd.TokenSampler(k, "sphere", 16, 16, batch), layers, metrics=metrics)
jax.block_until_ready(tr.summary)
import resource
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
"""


def peak_rss_mib(layers: int, batch: int, metrics: str) -> float:
    """Peak RSS (MiB) of one fresh child process running the case."""
    res = subprocess.run(
        [sys.executable, "-c", CHILD, str(layers), str(batch), metrics],
        check=True,
        capture_output=True,
        text=True,
    )
    return int(res.stdout.split()[-1]) / 1024


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--metrics", default="all")
    args = p.parse_args()
    out = {}
    out["layers_128"] = peak_rss_mib(128, 1024, args.metrics)
    out["layers_10000"] = peak_rss_mib(10000, 1024, args.metrics)
    out["depth_ratio"] = out["layers_10000"] / out["layers_128"]
    print(json.dumps(out), flush=True)
    b4 = peak_rss_mib(64, 4096, args.metrics)
    b262 = peak_rss_mib(64, 262144, args.metrics)
    out |= {"batch_4096": b4, "batch_262144": b262, "batch_ratio": b262 / b4}
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
