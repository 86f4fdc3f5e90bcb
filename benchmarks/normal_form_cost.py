"""What the normal-form coefficients add to a continuation's time.

`continue_branch` computes the coefficient and criticality of every located bifurcation
(rankdyn/_equilibria/_normal_forms.py). This script runs the same continuation with them and with
the computation replaced by a no-op (``unittest.mock.patch`` of the one call in
rankdyn/_equilibria/_bifurcations.py), alternated, and prints the CPU seconds of the process
(``time.process_time``: less sensitive than wall time to other jobs on a shared machine) and the
wall seconds of each, warm (after one run of each variant), and the one-time cost of the first
call (the normal-form program's compile) separately.

Cases: a 2-D map through a period doubling (x' = -(1 + p) x + x y / 2 + 0.3 x^3, y' = y / 2 + x^2),
the causal n = d = 2 layer with W_V = diag(a, 1) through its pitchfork at a = 2, and the
``bifurcation`` target's w-branch of family A through its fold (W_V = [[3/4, w], [0, 1]]).

    PYTHONPATH=$PWD python benchmarks/normal_form_cost.py [--repeats 3] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from unittest import mock

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from rankdyn._equilibria import _bifurcations  # noqa: E402
from rankdyn._theory._constructions import uniform_causal_layer  # noqa: E402
from rankdyn.equilibria import continue_branch  # noqa: E402


def pd_map(z, p):
    return jnp.stack([-(1 + p) * z[0] + 0.5 * z[0] * z[1] + 0.3 * z[0] ** 3, 0.5 * z[1] + z[0] ** 2])


def pitchfork_layer(a):
    return uniform_causal_layer(2, 2, jnp.array([[a, 0.0], [0.0, 1.0]]))


def fold_layer(w):
    return uniform_causal_layer(2, 2, jnp.array([[0.75, w], [0.0, 1.0]]))


def _start_a(w, p=0.75):
    r2 = w**2 + (1 - p) ** 2
    foot = -np.array([w, 1 - p]) / r2
    x2 = foot + np.sqrt(1 - 1 / r2) * np.array([1 - p, -w]) / np.sqrt(r2)
    return np.array([[0.0, 1.0], x2])


CASES = {
    "map period doubling": lambda: continue_branch(pd_map, np.zeros(2), -0.3, 0.3, ds=0.05),
    "layer pitchfork": lambda: continue_branch(
        pitchfork_layer, np.array([[0.0, 1.0], [0.0, 1.0]]), 1.5, 2.5, ds=0.1
    ),
    "layer fold": lambda: continue_branch(
        fold_layer, _start_a(1.3), 1.3, 0.5, ds=0.05, max_steps=12, throw=False
    ),
}


def _timed(fn, with_nf: bool):
    ctx = mock.patch.object(_bifurcations, "normal_form", lambda *a, **k: (float("nan"), ""))
    c0, w0 = time.process_time(), time.perf_counter()
    if with_nf:
        br = fn()
    else:
        with ctx:
            br = fn()
    return time.process_time() - c0, time.perf_counter() - w0, br


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    print(f"load average before: {os.getloadavg()[0]:.2f}; jax {jax.__version__}")
    rows = {}
    for name, fn in CASES.items():
        first_without = _timed(fn, False)[0]
        first_with, _, br = _timed(fn, True)
        crit = [(b.kind, b.criticality) for b in br.bifurcations]
        cpu = {True: [], False: []}
        wall = {True: [], False: []}
        for _ in range(args.repeats):
            for flag in (False, True):
                c, w, _ = _timed(fn, flag)
                cpu[flag].append(c)
                wall[flag].append(w)
        med = {k: statistics.median(v) for k, v in cpu.items()}
        medw = {k: statistics.median(v) for k, v in wall.items()}
        rows[name] = dict(
            cpu_without=med[False],
            cpu_with=med[True],
            added=med[True] / med[False] - 1,
            wall_without=medw[False],
            wall_with=medw[True],
            first_call_compile_cpu=max(0.0, first_with - med[True]),
            first_call_without_cpu=first_without,
            bifurcations=crit,
        )
        r = rows[name]
        print(
            f"{name:22s} warm CPU {r['cpu_without']:.3f} s -> {r['cpu_with']:.3f} s "
            f"({100 * r['added']:+.1f}%), "
            f"wall {r['wall_without']:.3f} -> {r['wall_with']:.3f} s; normal-form compile once "
            f"{r['first_call_compile_cpu']:.2f} s CPU; {crit}"
        )
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
