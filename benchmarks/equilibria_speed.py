"""Equilibria of the paper's system: the exact census, rankdyn's batched solver and `scipy.optimize.root`.

The model is the paper's construction (App. F.1): n = d = 6, causal mask, W_Q = W_K = 0
(uniform causal attention), bidiagonal W_V = I + w S with w = 7, post-LN on the unit sphere.
Both solvers start from the same random sphere starts and a start counts as solved when
||F(X) - X||_F < 1e-10 (float64), recomputed with the same NumPy residual for both.

- rankdyn: `rankdyn.find_equilibria` (Gauss-Newton + SVD pseudo-inverse, vmapped over all
  starts, one compiled program). Reported: the warm run time (compile reported separately).
- scipy: `scipy.optimize.root(fun, x0, method=M, tol=1e-14)` with a NumPy residual, in a
  Python loop over the starts: what a user would otherwise write (``hybr``, the default, and
  ``lm``). The speed-up column divides by the better of the scipy methods.
- census: `rankdyn.exact_equilibria` (every equilibrium, token-by-token polynomial roots) and
  the whole `rankdyn.equilibrium_census` (plus rank and stability of every class), warm.

Every row also reports its coverage: how many of the exact census's equilibria (counted with
both signs) its solutions hit, within 2e-2 max-abs (the random-start solvers' degenerate first
token is only ~1e-3 accurate).

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
from rankdyn._run._io import provenance, write_json  # noqa: E402

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


def run_rankdyn(x0, n, d, w, max_steps, retry_steps=None):
    """Warm wall time of one batched solve (optionally: retry the failures with more steps)."""
    layer = rd.theory.uniform_causal_layer(n, d, rd.weights.bidiagonal(d, w))

    def solve():
        sol = rd.find_equilibria(layer, x0, max_steps=max_steps, throw=False)
        xs = np.asarray(sol.x).copy()
        if retry_steps:
            # Host-side compaction: only the unconverged starts pay for the long solve. Pad the
            # subset to a power of two so that repeated runs reuse compiled programs.
            bad = np.nonzero(~np.asarray(sol.successful))[0]
            if bad.size:
                m = 1 << int(np.ceil(np.log2(bad.size)))
                idx = np.concatenate([bad, np.resize(bad, m - bad.size)])
                sol2 = rd.find_equilibria(layer, x0[idx], max_steps=retry_steps, throw=False)
                xs[bad] = np.asarray(sol2.x)[: bad.size]
        return xs

    t = time.perf_counter()
    solve()
    first = time.perf_counter() - t
    t = time.perf_counter()
    xs = solve()
    warm = time.perf_counter() - t
    return xs, warm, first


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
    p.add_argument("--max-steps", type=int, default=100, help="Gauss-Newton steps (library default)")
    p.add_argument("--short-steps", type=int, default=25, help="a short budget (most starts need < 25 steps)")
    p.add_argument("--scipy-methods", default="hybr,lm", help="comma-separated scipy.optimize.root methods")
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

    exact = rd.exact_equilibria(n, d, args.w).x

    def covered(xs):
        r = np.array([np.linalg.norm(fun(x.ravel())) for x in xs])
        ok = xs[np.isfinite(r) & (r < TOL)]
        if not len(ok):
            return 0
        dist = np.abs(exact[:, None] - ok[None]).max(axis=(2, 3))
        return int(np.sum(dist.min(axis=1) < 2e-2))

    rows = []
    layer = rd.theory.uniform_causal_layer(n, d, rd.weights.bidiagonal(d, args.w))
    for label, fn in (
        ("exact_equilibria (enumeration only)", lambda: rd.exact_equilibria(n, d, args.w).x),
        (
            "equilibrium_census (exact + rank + stability)",
            lambda: np.stack(
                [e.tokens for e in rd.equilibrium_census(layer, jr.PRNGKey(0), progress=False).equilibria]
            ),
        ),
    ):
        t = time.perf_counter()
        fn()
        first = time.perf_counter() - t
        t = time.perf_counter()
        xs = fn()
        warm = time.perf_counter() - t
        # The census lists classes modulo sign: count both signs for coverage.
        full = np.concatenate([xs, -xs]) if "census" in label else xs
        rows.append(
            {
                "solver": f"rankdyn {label}",
                "starts": 0,
                "converged": len(full),
                "seconds": warm,
                "first_call_s": first,
                "solved_per_s": len(full) / warm,
                "starts_per_s": None,
                "covered": covered(full),
            }
        )
    configs = [
        (args.max_steps, None, f"gn, max_steps={args.max_steps}"),
        (args.short_steps, None, f"gn, max_steps={args.short_steps}"),
        (args.short_steps, args.max_steps, f"gn, {args.short_steps} then failures {args.max_steps}"),
    ]
    for steps, retry, label in configs:
        xs, warm, first = run_rankdyn(x0, n, d, args.w, steps, retry)
        k = solved(xs)
        rows.append(
            {
                "solver": f"rankdyn find_equilibria ({label})",
                "starts": args.starts,
                "converged": k,
                "seconds": warm,
                "first_call_s": first,
                "solved_per_s": k / warm,
                "starts_per_s": args.starts / warm,
                "covered": covered(xs),
            }
        )
    m = args.scipy_starts or args.starts
    for method in args.scipy_methods.split(","):
        xs, sec = run_scipy(x0[:m], n, d, args.w, method)
        k = solved(xs)
        rows.append(
            {
                "solver": f"scipy.optimize.root ({method}) loop",
                "starts": m,
                "converged": k,
                "seconds": sec,
                "solved_per_s": k / sec,
                "starts_per_s": m / sec,
                "covered": covered(xs),
            }
        )
    # Speed-up of each rankdyn row over the best scipy method, in equilibria solved per second.
    scipy_rows = [r for r in rows if r["solver"].startswith("scipy")]
    best = max(scipy_rows, key=lambda r: r["solved_per_s"])
    for r in rows:
        r["speedup_vs_best_scipy"] = (
            r["solved_per_s"] / best["solved_per_s"] if best["solved_per_s"] > 0 else None
        )
    print(f"n = d = {n}, w = {args.w}, tolerance ||F(X) - X||_F < {TOL:g}, float64")
    print(f"exact census: {len(exact)} equilibria (both signs)")
    print(
        f"{'solver':56s} {'starts':>6s} {'conv':>6s} {'covered':>8s} {'sec':>8s} {'solved/s':>10s} "
        f"{'x best scipy':>12s}"
    )
    for r in rows:
        sp = f"{r['speedup_vs_best_scipy']:9.1f}" if r["speedup_vs_best_scipy"] is not None else "      inf"
        print(
            f"{r['solver']:56s} {r['starts']:6d} {r['converged']:6d} {r['covered']:8d} {r['seconds']:8.2f} "
            f"{r['solved_per_s']:10.2f} {sp}"
        )
    if args.json:
        write_json(
            args.json, {"config": vars(args), "tolerance": TOL, "rows": rows, "provenance": provenance()}
        )


if __name__ == "__main__":
    main()
