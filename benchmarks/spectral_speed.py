"""Singular values for the collapse metrics: jnp.linalg.svd against rankdyn._observe._spectral, in one run.

    PYTHONPATH=$PWD python benchmarks/spectral_speed.py [--json OUT] [--quick] [--no-bisection]

1. Per-matrix cost (float32, vmapped, jitted; best of several repeats, process CPU time and
   wall time) of ``jnp.linalg.svd(compute_uv=False)``, ``_spectral.singular_values`` with
   ``method="lapack"`` (exact power-of-two rescaling, then LAPACK SVD) and ``method="bisection"``
   (vectorised bidiagonalisation + bisection in jax.numpy), at 32x64 (batch 1024), 16x16
   (batch 1024) and 128x768 (batch 16; bisection skipped there: its compile grows with k).
2. A whole ``rankdyn.simulate`` of the small configuration (n 32, d 64, 128 layers, 1024
   trajectories, causal, post-LN, orthogonal W_V, BERT-uniform W_Q/W_K, float32) with
   ``observe=`` mu only, with the v0.1 default metrics (unscaled direction metrics +
   ``jnp.linalg.svd``, rebuilt here) and with today's default metrics; the ratios to mu-only
   are the figure of merit (target: default <= 1.5x mu-only).

Timings on a shared machine are noisy: only ratios measured side by side in this run count.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import jax
import jax.numpy as jnp
import jax.random as jr

import rankdyn as rd
from rankdyn._observe import _metrics as M
from rankdyn._observe._spectral import singular_values


def best_of(fn, args, repeats):
    """(best process-CPU seconds, best wall seconds) of ``fn(*args)`` after one warm-up call."""
    jax.block_until_ready(fn(*args))
    cpu, wall = float("inf"), float("inf")
    for _ in range(repeats):
        c0, w0 = time.process_time(), time.perf_counter()
        jax.block_until_ready(fn(*args))
        cpu, wall = min(cpu, time.process_time() - c0), min(wall, time.perf_counter() - w0)
    return cpu, wall


def per_matrix(shapes, repeats, bisection):
    rows = []
    for n, d, batch in shapes:
        x = jr.normal(jr.PRNGKey(0), (batch, n, d), jnp.float32)
        cands = {
            "jnp.linalg.svd": lambda a: jnp.linalg.svd(a, compute_uv=False),
            "spectral lapack": lambda a: singular_values(a, method="lapack"),
        }
        if bisection and min(n, d) <= 32:
            cands["spectral bisection"] = lambda a: singular_values(a, method="bisection")
        base = None
        for name, f in cands.items():
            fn = jax.jit(jax.vmap(f))
            cpu, wall = best_of(fn, (x,), repeats)
            base = cpu if base is None else base
            rows.append(
                {
                    "shape": f"{n}x{d}",
                    "batch": batch,
                    "method": name,
                    "cpu_us": 1e6 * cpu / batch,
                    "wall_us": 1e6 * wall / batch,
                    "speedup_cpu": base / cpu,
                }
            )
            print(
                f"{n:4d}x{d:<4d} batch {batch:5d}  {name:20s} {rows[-1]['cpu_us']:9.2f} us CPU "
                f"{rows[-1]['wall_us']:9.2f} us wall  x{rows[-1]['speedup_cpu']:.2f}",
                flush=True,
            )
    return rows


def v01_metrics(x, rank_tol):
    """The v0.1 default metrics: direction metrics on the raw x and jnp.linalg.svd."""
    s = jnp.linalg.svd(x, compute_uv=False)
    nrm = M.row_norms(x)
    return {
        "mu": M.mu(x),
        "mu_rel": M.mu_relative(x),
        "mu_normalized": M.mu_normalized(x),
        "row_norm_mean": jnp.mean(nrm),
        "row_norm_min": jnp.min(nrm),
        "min_cos": M.min_cosine(x),
        "mean_abs_cos": M.mean_abs_cosine(x),
        "sigma_max": s[0],
        "sigma_min": s[-1],
        "sigma_ratio": s[1] / jnp.where(s[0] > 0, s[0], 1.0),
        "stable_rank": jnp.sum(s**2) / jnp.where(s[0] > 0, s[0] ** 2, 1.0),
        "num_rank": M.numerical_rank(s, rank_tol),
        "eff_rank": M.effective_rank(s),
    }


def whole_run(layers, batch, repeats):
    k1, k2 = jr.split(jr.PRNGKey(0))
    layer = rd.make_layer(
        k1, n=32, d=64, mask="causal", placement="post", value="orthogonal", qk="bert", dtype=jnp.float32
    )
    x0 = rd.initial_tokens(k2, "sphere", 32, 64, batch=batch, dtype=jnp.float32)
    observers = {
        "mu only": jax.tree_util.Partial(lambda x: {"mu": rd.mu(x)}),
        "direction metrics only": jax.tree_util.Partial(M.direction_metrics),
        "v0.1 default metrics": jax.tree_util.Partial(v01_metrics, rank_tol=jnp.asarray(1e-6)),
        "default metrics": None,
    }
    run = lambda o: rd.simulate(layer, x0, layers, observe=o).summary
    times = {name: [float("inf"), float("inf")] for name in observers}
    for name, o in observers.items():  # compile every program first
        jax.block_until_ready(run(o))
    for _ in range(repeats):  # interleaved, so that load changes hit all alike
        for name, o in observers.items():
            c0, w0 = time.process_time(), time.perf_counter()
            jax.block_until_ready(run(o))
            t = times[name]
            t[0], t[1] = min(t[0], time.process_time() - c0), min(t[1], time.perf_counter() - w0)
    mu_cpu, mu_wall = times["mu only"]
    rows = []
    for name, (cpu, wall) in times.items():
        rows.append(
            {
                "observe": name,
                "cpu_s": cpu,
                "wall_s": wall,
                "cpu_ratio": cpu / mu_cpu,
                "wall_ratio": wall / mu_wall,
            }
        )
        print(
            f"simulate {layers} layers x {batch}: {name:24s} {cpu:7.2f} s CPU {wall:7.2f} s wall  "
            f"{cpu / mu_cpu:5.2f}x / {wall / mu_wall:5.2f}x mu-only",
            flush=True,
        )
    return rows


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--json", help="write the figures to this JSON file")
    p.add_argument("--quick", action="store_true", help="small batches and 16 layers (a smoke test)")
    p.add_argument("--no-bisection", action="store_true", help="skip the slowly compiling bisection method")
    a = p.parse_args(argv)
    print(
        f"jax {jax.__version__}, {jax.devices()[0].platform}, {os.cpu_count()} cores, load {os.getloadavg()}"
    )
    if a.quick:
        shapes, layers, batch, repeats = [(32, 64, 128), (16, 16, 128), (128, 768, 4)], 16, 128, 2
    else:
        shapes, layers, batch, repeats = [(32, 64, 1024), (16, 16, 1024), (128, 768, 16)], 128, 1024, 3
    out = {
        "per_matrix": per_matrix(shapes, repeats, not a.no_bisection),
        "simulate": whole_run(layers, batch, repeats),
        "load_after": os.getloadavg(),
    }
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
