"""The noisy flow (`solve_flow(..., noise=)`, fixed-step Heun) against a PyTorch loop of the same scheme.

Both integrate the Stratonovich SDE dx_i = P_{x_i}(softmax_j(beta <x_i, x_j>) x_j) dt + sigma P_{x_i} o dW_i
(SA, complete mask, Q = K = V = I) for ``--batch`` trajectories of ``--n`` tokens in d = ``--d``,
``--steps`` Heun steps of ``--dt``, in float64: two field evaluations (n x n attention) and two
diffusion evaluations per step, the same count in both. PyTorch draws its increments with
``torch.randn`` (JAX's come from the Brownian tree, a few extra normal draws per step); PyTorch runs
its dense attention per trajectory, rankdyn its row-blocked one (256 query rows) vmapped over the
batch. Times are warm (the JAX program compiled by a first call; its compile time is printed
separately), the best of ``--repeats``.

    python benchmarks/noisy_flow_speed.py [--n 4096 --d 3 --batch 8 --steps 10 --json out.json]
    /usr/bin/time -f %M python benchmarks/noisy_flow_speed.py --n 8192 --batch 1 --steps 4 \
        --repeats 1 --no-torch
"""

from __future__ import annotations

import argparse
import json
import os
import time


def _rankdyn(args):
    import jax

    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp
    import jax.random as jr
    import numpy as np

    from rankdyn.flow import DensityObserver, FlowField, solve_flow

    field = FlowField(np.ones((args.n, args.n), bool), args.d, "sa")
    x0 = jr.normal(jr.PRNGKey(0), (args.batch, args.n, args.d), jnp.float64)
    t1 = args.steps * args.dt
    obs = DensityObserver(degree=1)

    def run():
        sol = solve_flow(
            field,
            x0,
            t1,
            beta=args.beta,
            saves=2,
            noise=args.sigma,
            key=jr.PRNGKey(1),
            dt=args.dt,
            observe=obs,
        )
        jax.block_until_ready(sol.summary)
        return sol

    t = time.perf_counter()
    sol = run()
    first = time.perf_counter() - t
    best = min(_timed(run) for _ in range(args.repeats))
    return {"first_s": first, "warm_s": best, "num_steps": int(sol.num_steps), "drift": float(sol.drift)}


def _timed(f):
    t = time.perf_counter()
    f()
    return time.perf_counter() - t


def _torch(args):
    import torch

    torch.manual_seed(0)
    x0 = torch.randn(args.batch, args.n, args.d, dtype=torch.float64)
    x0 = x0 / x0.norm(dim=-1, keepdim=True)

    def proj(x, y):
        return y - (x * y).sum(-1, keepdim=True) / (x * x).sum(-1, keepdim=True) * x

    def field(x):
        w = torch.softmax(args.beta * (x @ x.T), dim=-1)
        return proj(x, w @ x)

    def run():
        out = []
        for b in range(args.batch):
            x = x0[b].clone()
            for _ in range(args.steps):
                dw = torch.randn(args.n, args.d, dtype=torch.float64) * args.dt**0.5
                f0, g0 = field(x), args.sigma * proj(x, dw)
                xt = x + f0 * args.dt + g0
                f1, g1 = field(xt), args.sigma * proj(xt, dw)
                x = x + 0.5 * (f0 + f1) * args.dt + 0.5 * (g0 + g1)
            out.append(x)
        return torch.stack(out)

    with torch.no_grad():
        best = min(_timed(run) for _ in range(args.repeats))
    return {"warm_s": best, "threads": torch.get_num_threads(), "version": torch.__version__}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=4096)
    p.add_argument("--d", type=int, default=3)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--dt", type=float, default=0.02)
    p.add_argument("--beta", type=float, default=1.0)
    p.add_argument("--sigma", type=float, default=0.5)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--no-torch", action="store_true", help="rankdyn only (e.g. under /usr/bin/time -f %%M)")
    p.add_argument("--json", default=None)
    args = p.parse_args()
    load0 = os.getloadavg()[0]
    rd = _rankdyn(args)
    th = None if args.no_torch else _torch(args)
    res = {
        "config": vars(args),
        "rankdyn": rd,
        "torch": th,
        "speedup": None if th is None else th["warm_s"] / rd["warm_s"],
        "load_before_after": [load0, os.getloadavg()[0]],
    }
    print(json.dumps(res, indent=1))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
