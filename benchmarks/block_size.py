"""Block sizes of the blocked path: time per touched score cell (behind `BLOCK_CELL_COST`).

    python benchmarks/block_size.py            # causal 4096 (batch 1, 8), window +-64 16384, complete 2048

For each case, ``rankdyn.simulate`` (mu only, d = 64, one head, post-LN, 16 layers; best of 3
calls after one that compiles) on the blocked path with blocks of 128, 256 and 512 tokens, and the
dense path for reference. Prints seconds, the touched cells (``pairs x b^2``), the time per cell relative
to 128-token blocks, and the size `choose_block_size` picks (the default): the rule is right for a
case when it picks the fastest size, or one within the run-to-run spread of it. Quiet machine;
the load and the CPU model are printed.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import jax
import jax.random as jr

import rankdyn as rd
from rankdyn._model._blocked import choose_block_size
from rankdyn._run._io import cpu_model

CASES = {  # name: (mask, n, batch, extra mask arguments)
    "causal-4096-b1": ("causal", 4096, 1, {}),
    "causal-4096-b8": ("causal", 4096, 8, {}),
    "window64-16384-b1": ("window", 16384, 1, {"window": 64}),
    "complete-2048-b1": ("complete", 2048, 1, {}),
}


def seconds(layer, n: int, batch: int, layers: int, repeats: int) -> float:
    """Best of ``repeats`` calls after a first one that compiles."""
    x0 = rd.TokenSampler(jr.PRNGKey(1), "sphere", n, 64, batch)
    run = lambda: jax.block_until_ready(rd.simulate(layer, x0, layers, metrics="mu").summary.mean)  # noqa: E731
    run()
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - t0)
    return best


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cases", default=",".join(CASES), help="comma-separated, from: " + ", ".join(CASES))
    p.add_argument("--num-layers", type=int, default=16)
    p.add_argument("--repeats", type=int, default=3, help="timed calls per size (the best is kept)")
    a = p.parse_args()
    cpu = cpu_model()
    out = {"cpu": cpu, "cores": os.cpu_count(), "load_before": os.getloadavg()}
    print("cpu", cpu, "load", out["load_before"], flush=True)
    for case in a.cases.split(","):
        mask, n, batch, kw = CASES[case]
        s = rd.masks.make_mask_structure(mask, n, **kw)
        row = {"default": choose_block_size(s)}
        for b in (128, 256, 512):
            layer = rd.make_layer(jr.PRNGKey(0), n=n, d=64, mask=s, attention="blocked")
            object.__setattr__(layer, "block_size", b)  # a static field: set on this fresh copy
            cells = s.block_pairs(b)[0].size * min(b, n) ** 2
            row[b] = {"seconds": seconds(layer, n, batch, a.num_layers, a.repeats), "cells": cells}
        dense = rd.make_layer(jr.PRNGKey(0), n=n, d=64, mask=s.dense(), attention="dense")
        row["dense_seconds"] = seconds(dense, n, batch, a.num_layers, a.repeats)
        per128 = row[128]["seconds"] / row[128]["cells"]
        for b in (128, 256, 512):
            row[b]["cost_per_cell_vs_128"] = row[b]["seconds"] / row[b]["cells"] / per128
        sizes = [
            f"| {b}: {row[b]['seconds']:.2f} s, {row[b]['cost_per_cell_vs_128']:.2f}/cell"
            for b in (128, 256, 512)
        ]
        print(case, "default", row["default"], "dense", f"{row['dense_seconds']:.2f} s", *sizes, flush=True)
        out[case] = row
    out["load_after"] = os.getloadavg()
    print(json.dumps(out, indent=1, default=str))


if __name__ == "__main__":
    main()
