"""Equilibria solved per second: rankdyn's batched solver vs `scipy.optimize.root` in a loop.

The model is the paper's construction (SPEC §5.2): n = d = 6, causal mask, W_Q = W_K = 0
(uniform causal attention), bidiagonal W_V = I + w S with w = 7, post-LN on the unit sphere.
Both solvers start from the same random sphere starts and a start counts as solved when
||F(X) - X||_F < 1e-10 (float64), recomputed with the same NumPy residual for both.

- rankdyn: `rankdyn.find_equilibria` (Gauss-Newton + SVD pseudo-inverse, vmapped over all
  starts, one compiled program). Reported: the warm run time (compile reported separately).
- scipy: `scipy.optimize.root(fun, x0, method=M, tol=1e-14)` with a NumPy residual, in a
  Python loop over the starts: what a user would otherwise write.

    python benchmarks/equilibria_speed.py --starts 1024 --json out/bench_equilibria.json
"""

from __future__ import annotations

import argparse
import time

import jax

jax.config.update("jax_enable_x64", True)

import jax.random as jr  # noqa: E402
import numpy as np  # noqa: E402
import scipy.optimize as so  # noqa: E402

import rankdyn as rd  # noqa: E402
from rankdyn._io import provenance, write_json  # noqa: E402

TOL = 1e-10


def numpy_map(n: int, d: int, w: float):
    wv = np.eye(d) + w * np.eye(d, k=1)
    a = np.tril(np.ones((n, n)))
    a /= a.sum(1, keepdims=True)

    def residual(v):
        x = v.reshape(n, d)
        y = a @ x @ wv
        return (y / np.linalg.norm(y, axis=1, keepdims=True) - x).ravel()

    return residual


def run_rankdyn(x0, n, d, w, max_steps):
    layer = rd.uniform_causal_layer(n, d, rd.bidiagonal(d, w))
    t = time.perf_counter()
    jax.block_until_ready(rd.find_equilibria(layer, x0[:8], max_steps=max_steps))  # other shape: warm caches
    sol = jax.block_until_ready(rd.find_equilibria(layer, x0, max_steps=max_steps))
    first = time.perf_counter() - t
    t = time.perf_counter()
    sol = jax.block_until_ready(rd.find_equilibria(layer, x0, max_steps=max_steps))
    warm = time.perf_counter() - t
    return np.asarray(sol.x), warm, first


def run_scipy(x0, n, d, w, method):
    fun = numpy_map(n, d, w)
    xs = np.empty_like(x0)
    t = time.perf_counter()
    for i, x in enumerate(x0):
        xs[i] = so.root(fun, x.ravel(), method=method, tol=1e-14).x.reshape(n, d)
    return xs, time.perf_counter() - t


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--starts", type=int, default=1024)
    p.add_argument("--n", type=int, default=6)
    p.add_argument("--w", type=float, default=7.0)
    p.add_argument("--max-steps", type=int, default=100)
    p.add_argument("--scipy-methods", default="hybr", help="comma-separated scipy.optimize.root methods")
    p.add_argument("--scipy-starts", type=int, default=None, help="run scipy on only this many of the starts")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", default=None, help="write the results here")
    args = p.parse_args(argv)
    n = d = args.n
    x0 = np.asarray(rd.initial_tokens(jr.PRNGKey(args.seed), "sphere", n, d, batch=args.starts))
    fun = numpy_map(n, d, args.w)

    def solved(xs):
        r = np.array([np.linalg.norm(fun(x.ravel())) for x in xs])
        return int(np.sum(np.isfinite(r) & (r < TOL)))

    rows = []
    xs, warm, first = run_rankdyn(x0, n, d, args.w, args.max_steps)
    k = solved(xs)
    rows.append({"solver": f"rankdyn find_equilibria (gn, {args.max_steps} steps)", "starts": args.starts,
                 "converged": k, "seconds": warm, "first_call_s": first, "solved_per_s": k / warm,
                 "starts_per_s": args.starts / warm})
    m = args.scipy_starts or args.starts
    for method in args.scipy_methods.split(","):
        xs, sec = run_scipy(x0[:m], n, d, args.w, method)
        k = solved(xs)
        rows.append({"solver": f"scipy.optimize.root ({method}) loop", "starts": m, "converged": k,
                     "seconds": sec, "solved_per_s": k / sec, "starts_per_s": m / sec})
    base = rows[0]["solved_per_s"]
    for r in rows[1:]:
        r["speedup_solved"] = base / r["solved_per_s"] if r["solved_per_s"] > 0 else float("inf")
        r["speedup_starts"] = rows[0]["starts_per_s"] / r["starts_per_s"]
    print(f"n = d = {n}, w = {args.w}, tolerance ||F(X) - X||_F < {TOL:g}, float64")
    print(f"{'solver':48s} {'starts':>6s} {'conv':>6s} {'sec':>8s} {'solved/s':>10s} {'speedup':>9s}")
    for r in rows:
        sp = f"{r.get('speedup_solved', 1.0):9.1f}"
        print(f"{r['solver']:48s} {r['starts']:6d} {r['converged']:6d} {r['seconds']:8.2f} "
              f"{r['solved_per_s']:10.2f} {sp}")
    if args.json:
        write_json(args.json, {"config": vars(args), "tolerance": TOL, "rows": rows, "provenance": provenance()})


if __name__ == "__main__":
    main()
