"""The gradient of one fold location against `bifurcation_point`'s own re-solve (warm, float64).

The issue's budget: ``jax.grad`` of a fold's parameter costs at most 3x the wall time of the
re-solve itself. Both are compiled once (``jax.jit``) and then timed warm, interleaved, over
``--repeats`` calls each; the table gives the median and the minimum, and the ratio of medians.
Eager calls (as a user writes them, with the host-side checks) are reported too.

Cases, each re-solved at a theta away from where the fold was located (so Newton iterates):

- ``counterexample``: the paper's n = d = 2 causal family W_V = [[3/4, w], [0, 1]] (the
  ``bifurcation`` and ``design-fold`` targets), fold of family A in w, theta = a change of W_V;
- ``scores``: the same with W_Q, W_K switched on (0.2 x gaussian) and the temperature in theta;
- ``map``: x' = x + p + q x + c x^2 (m = 1), theta = (q, c).

    python benchmarks/bifurcation_gradient.py [--repeats 50] [--json out/bench_bifurcation_gradient.json]
"""

from __future__ import annotations

import argparse
import statistics
import time

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from rankdyn._run._io import provenance, write_json  # noqa: E402
from rankdyn.equilibria import bifurcation_point, continue_branch, find_equilibria  # noqa: E402
from rankdyn.layer import SelfAttentionLayer  # noqa: E402
from rankdyn.masks import causal_mask  # noqa: E402

P = 0.75


def counterexample(w, th):
    w_v = jnp.array([[P, 0.0], [0.0, 1.0]]) + w * jnp.array([[0.0, 1.0], [0.0, 0.0]]) + th["dv"]
    return SelfAttentionLayer(causal_mask(2), th["wq"], th["wk"], w_v, dqk=th["dqk"])


def family_a_start(w):
    """Token 1 at (0, 1), token 2 at the angle a with (P - 1) sin a - w cos a = 1 (theta = 0)."""
    a = np.linspace(-np.pi, np.pi, 200001)
    r = (P - 1) * np.sin(a) - w * np.cos(a) - 1
    i = np.flatnonzero(np.sign(r[1:]) != np.sign(r[:-1]))[0]
    return np.array([[0.0, 1.0], [np.cos(a[i]), np.sin(a[i])]])


def layer_case(scores: bool):
    g = np.random.default_rng(0).standard_normal((3, 2, 2))
    s = 0.2 if scores else 0.0
    th0 = {"dv": np.zeros((2, 2)), "wq": s * g[0], "wk": s * g[1], "dqk": 2.0}
    th0 = jax.tree.map(jnp.asarray, th0)
    fam = lambda w: counterexample(w, th0)  # noqa: E731
    x = np.asarray(find_equilibria(fam(1.3), jnp.asarray(family_a_start(1.3))[None]).x[0])
    br = continue_branch(fam, x, 1.3, 0.5, ds=0.05, throw=False)
    fold = next(b for b in br.bifurcations if b.kind == "fold")
    th = dict(th0, dv=jnp.asarray(0.03 * g[2]), dqk=jnp.asarray(2.2))
    return counterexample, fold, th


def quadratic(x, p, th):
    return x + p + th["q"] * x + th["c"] * x**2


def map_case():
    th0 = {"q": jnp.asarray(0.6), "c": jnp.asarray(1.0)}
    br = continue_branch(lambda x, p: quadratic(x, p, th0), np.array([0.7]), -0.91, 0.59, throw=False)
    fold = next(b for b in br.bifurcations if b.kind == "fold")
    return quadratic, fold, {"q": jnp.asarray(0.7), "c": jnp.asarray(1.3)}


def timed(fns: dict, repeats: int) -> dict:
    """Warm wall times (s) of each function, interleaved so that load changes hit all alike."""
    for fn in fns.values():
        jax.block_until_ready(fn())
    times = {k: [] for k in fns}
    for _ in range(repeats):
        for k, fn in fns.items():
            t0 = time.perf_counter()
            jax.block_until_ready(fn())
            times[k].append(time.perf_counter() - t0)
    return {k: {"median": statistics.median(v), "min": min(v)} for k, v in times.items()}


def run_case(name, f, fold, th, repeats):
    solve = jax.jit(lambda t: bifurcation_point(f, fold, t))
    grad = jax.jit(jax.grad(lambda t: bifurcation_point(f, fold, t)))
    t = timed(
        {
            "resolve": lambda: solve(th),
            "grad": lambda: grad(th),
            "resolve_eager": lambda: bifurcation_point(f, fold, th),
            "grad_eager": lambda: jax.grad(lambda u: bifurcation_point(f, fold, u))(th),
        },
        repeats,
    )
    ratio = t["grad"]["median"] / t["resolve"]["median"]
    ratio_eager = t["grad_eager"]["median"] / t["resolve_eager"]["median"]
    print(
        f"{name:15s} resolve {1e3 * t['resolve']['median']:8.3f} ms (min {1e3 * t['resolve']['min']:.3f})  "
        f"grad {1e3 * t['grad']['median']:8.3f} ms (min {1e3 * t['grad']['min']:.3f})  ratio {ratio:5.2f}   "
        f"eager: {1e3 * t['resolve_eager']['median']:.2f} / {1e3 * t['grad_eager']['median']:.2f} ms, "
        f"ratio {ratio_eager:.2f}"
    )
    return dict(times=t, ratio=ratio, ratio_eager=ratio_eager, fold=float(fold.param))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=50)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    out = {}
    for name, case in (
        ("map", map_case),
        ("counterexample", lambda: layer_case(False)),
        ("scores", lambda: layer_case(True)),
    ):
        out[name] = run_case(name, *case(), args.repeats)
    if args.json:
        write_json(args.json, dict(results=out, provenance=provenance()))


if __name__ == "__main__":
    main()
