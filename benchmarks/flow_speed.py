"""rankdyn's flow against the peers' NumPy explicit-Euler loop, and adaptive vs fixed step.

1. **Against NumPy.** The peers integrate the SA flow (Q = K = V = I, complete mask) with explicit
   Euler and renormalisation, one trajectory at a time:
   ``x <- x + dt * P_x(A(x) x); x <- x / |x|`` at dt = 0.1. rankdyn runs the same scheme
   (``solver="euler", dt=0.1``: Diffrax Euler projected after every step) on the whole batch at
   once. Both to the same T from the same starts; the ratio of warm wall times is from one run
   (compilation reported separately), and the final states are compared.
2. **Adaptive vs fixed step at equal accuracy.** Against a Tsit5 reference at rtol 1e-11, the
   error at T and the warm time of Tsit5 at several tolerances and of RK4 / Euler at several
   steps; for each adaptive run, the fastest fixed-step run at least as accurate.

Load and CPU model are recorded with the numbers: do not publish figures measured under load.

    python benchmarks/flow_speed.py            # 1000 trajectories, n = 32, d = 3, T = 10
    python benchmarks/flow_speed.py --small    # smoke test (seconds)
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import jax

jax.config.update("jax_enable_x64", True)

import numpy as np  # noqa: E402

from rankdyn._run._io import cpu_model  # noqa: E402
from rankdyn.flow import FlowField, solve_flow  # noqa: E402
from rankdyn.masks import complete_mask  # noqa: E402


def numpy_euler(x, beta, t1, dt):
    """The peers' loop: one trajectory, explicit Euler, renormalise after every step."""
    for _ in range(int(round(t1 / dt))):
        s = beta * x @ x.T
        a = np.exp(s - s.max(axis=1, keepdims=True))
        a /= a.sum(axis=1, keepdims=True)
        y = a @ x
        x = x + dt * (y - np.sum(x * y, axis=1, keepdims=True) * x)
        x = x / np.linalg.norm(x, axis=1, keepdims=True)
    return x


def timed(fn):
    """(result, warm wall seconds, warm CPU seconds, first-call seconds)."""
    t0 = time.perf_counter()
    fn()
    first = time.perf_counter() - t0
    t0, c0 = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - t0, time.process_time() - c0, first


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--small", action="store_true", help="smoke mode: 20 trajectories, n = 8, T = 2")
    p.add_argument("--batch", type=int, default=1000)
    p.add_argument("--n", type=int, default=32)
    p.add_argument("--d", type=int, default=3)
    p.add_argument("--beta", type=float, default=1.0)
    p.add_argument("--time", type=float, default=10.0)
    p.add_argument(
        "--numpy-trajectories", type=int, default=None, help="time NumPy on this many, scale to --batch"
    )
    p.add_argument("--json", type=Path, default=Path("benchmarks/results/flow_speed.json"))
    a = p.parse_args(argv)
    if a.small:
        a.batch, a.n, a.time = 20, 8, 2.0
    dt = 0.1
    rng = np.random.default_rng(0)
    x0 = rng.normal(size=(a.batch, a.n, a.d))
    x0 /= np.linalg.norm(x0, axis=-1, keepdims=True)
    field = FlowField(complete_mask(a.n), a.d, "sa")
    saves = 2  # t = 0 and T: the NumPy loop records only the final state too
    report = {
        "config": vars(a) | {"json": str(a.json), "dt": dt},
        "cpu_model": cpu_model(),
        "cores": os.cpu_count(),
        "loadavg_before": list(os.getloadavg()),
        "jax": jax.__version__,
    }
    print(report["cpu_model"], "load", report["loadavg_before"], flush=True)

    # 1. rankdyn Euler (batched) vs the NumPy loop (one trajectory at a time).
    run = lambda: solve_flow(
        field, x0, a.time, beta=a.beta, saves=saves, solver="euler", dt=dt, save_states=True
    )
    sol, wall, cpu, first = timed(run)
    k = a.numpy_trajectories or a.batch
    t0, c0 = time.perf_counter(), time.process_time()
    ref = np.stack([numpy_euler(x0[i], a.beta, a.time, dt) for i in range(k)])
    np_wall, np_cpu = (time.perf_counter() - t0) * a.batch / k, (time.process_time() - c0) * a.batch / k
    agree = float(np.max(np.abs(np.asarray(sol.states[:k, -1]) - ref)))
    report["euler_vs_numpy"] = {
        "rankdyn_wall_s": wall,
        "rankdyn_cpu_s": cpu,
        "rankdyn_first_call_s": first,
        "numpy_wall_s": np_wall,
        "numpy_cpu_s": np_cpu,
        "numpy_trajectories_timed": k,
        "speedup_wall": np_wall / wall,
        "speedup_cpu": np_cpu / cpu,
        "max_abs_difference_final_state": agree,
        "target_speedup": 20.0,
    }
    print(json.dumps(report["euler_vs_numpy"], indent=1), flush=True)

    # 2. Adaptive vs fixed step at equal accuracy (error at T against a tight Tsit5 reference).
    xr = x0[: min(a.batch, 200)]
    tight = dict(saves=2, rtol=1e-11, atol=1e-13, save_states=True)
    exact = np.asarray(solve_flow(field, xr, a.time, beta=a.beta, **tight).states[:, -1])
    rows = []
    configs = [("tsit5", dict(rtol=r, atol=r * 1e-2)) for r in (1e-4, 1e-6, 1e-8)]
    configs += [("rk4", dict(dt=h)) for h in (0.2, 0.1, 0.05, 0.025)] + [
        ("euler", dict(dt=h)) for h in (0.1, 0.01)
    ]
    for solver, kw in configs:
        f = lambda s=solver, kw=kw: solve_flow(
            field, xr, a.time, beta=a.beta, saves=2, solver=s, save_states=True, **kw
        )
        out, w, c, _ = timed(f)
        err = float(np.max(np.abs(np.asarray(out.states[:, -1]) - exact)))
        rows.append(dict(solver=solver, **kw, error=err, wall_s=w, cpu_s=c, steps=int(out.num_steps)))
        print(rows[-1], flush=True)
    for r in rows:
        if r["solver"] == "tsit5":
            fixed = [q for q in rows if q["solver"] != "tsit5" and q["error"] <= r["error"]]
            best = min(fixed, key=lambda q: q["wall_s"]) if fixed else None
            r["fastest_fixed_at_least_as_accurate"] = best and {
                k: best[k] for k in ("solver", "dt", "wall_s")
            }
    report["adaptive_vs_fixed"] = {"trajectories": int(xr.shape[0]), "rows": rows}
    report["loadavg_after"] = list(os.getloadavg())
    a.json.parent.mkdir(parents=True, exist_ok=True)
    a.json.write_text(json.dumps(report, indent=1) + "\n")
    print("wrote", a.json, "load after", report["loadavg_after"])


if __name__ == "__main__":
    main()
