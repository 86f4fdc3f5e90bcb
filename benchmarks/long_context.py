"""Long context (issue 45, item 6): the blocked attention path against PyTorch and the matmul peak.

Run side by side in one process (quiet machine; the load and the CPU model are printed):

    python benchmarks/long_context.py                 # the issue's sizes
    python benchmarks/long_context.py --causal-n 1024 --window-n 16384   # a shorter run

1. Causal: n tokens, d = 64, one head, post-LN, mu only, ``--num-layers`` layers and ``--batch``
   trajectories, through `rankdyn.simulate` on the path ``auto`` picks and on the dense path
   (best of 3 calls after the one that compiles), against an eager PyTorch loop of the same layer
   with ``scaled_dot_product_attention(is_causal=True)``, and against the float32 matmul peak
   measured here (``jnp.matmul`` of 2048 x 2048, best of 5), counting the causal edges only:
   ``2 n d (3 d) + 4 d n (n + 1) / 2`` FLOPs per layer and trajectory.
2. Window +-64 on the blocked path at ``--window-n`` tokens against 4096 tokens: seconds per token
   and layer (the cost follows the edges, not n^2, if the ratio is near 1).

Prints one JSON object at the end (the figures recorded in benchmarks/README.md).
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
from rankdyn._run._io import cpu_model

#: Timed runs per figure, the best kept (single runs on a shared VM varied by 1.4x).
REPEATS = 3


def _load() -> str:
    return " ".join(open("/proc/loadavg").read().split()[:3]) if os.path.exists("/proc/loadavg") else "?"


def matmul_peak(size: int = 2048, repeats: int = 5) -> float:
    """Float32 GFLOP/s of one large matmul (best of ``repeats``)."""
    a = jr.normal(jr.PRNGKey(0), (size, size), jnp.float32)
    f = jax.jit(lambda x: x @ x)
    f(a).block_until_ready()
    best = min(_timed(lambda: f(a).block_until_ready()) for _ in range(repeats))
    return 2 * size**3 / best / 1e9


def _timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def rankdyn_run(n: int, d: int, layers: int, batch: int, mask: str, attention: str, window: int = 1):
    """Best of `REPEATS` `simulate` calls after the first (which compiles), the first, and the path."""
    kw = dict(window=window) if mask == "window" else {}
    layer = rd.make_layer(jr.PRNGKey(0), n=n, d=d, mask=mask, attention=attention, **kw)
    x0 = rd.TokenSampler(jr.PRNGKey(1), "sphere", n, d, batch)
    run = lambda: jax.block_until_ready(rd.simulate(layer, x0, layers, metrics="mu").summary.mean)  # noqa: E731
    compile_and_run = _timed(run)
    return min(_timed(run) for _ in range(REPEATS)), compile_and_run, layer.attention_path


def torch_run(n: int, d: int, layers: int, batch: int) -> float | None:
    """Best of `REPEATS` runs of an eager PyTorch loop of the same post-LN layer (fused causal SDPA),
    float32, after a warm-up run."""
    try:
        import torch
        import torch.nn.functional as F
    except ImportError:
        return None
    torch.manual_seed(0)
    wq, wk, wv = (torch.randn(d, d) / d**0.5 for _ in range(3))
    x = torch.randn(batch, n, d)
    x = x / x.norm(dim=-1, keepdim=True)

    def loop(x):
        with torch.no_grad():
            for _ in range(layers):
                y = F.scaled_dot_product_attention(x @ wq, x @ wk, x @ wv, is_causal=True, scale=d**-0.5)
                x = y / y.norm(dim=-1, keepdim=True)
        return x

    loop(x)  # warm-up
    return min(_timed(lambda: loop(x)) for _ in range(REPEATS))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--causal-n", type=int, default=4096)
    p.add_argument("--d", type=int, default=64)
    p.add_argument("--num-layers", type=int, default=16)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--window-n", type=int, default=65536)
    p.add_argument("--window-layers", type=int, default=4)
    p.add_argument("--skip-dense", action="store_true", help="skip the dense causal run")
    p.add_argument("--skip-causal", action="store_true", help="only the window comparison")
    a = p.parse_args()
    out = {"cpu": cpu_model(), "cores": os.cpu_count(), "load_before": _load(), "jax": jax.__version__}
    print("cpu", out["cpu"], "load", out["load_before"], flush=True)

    peak = matmul_peak()
    n, d, L, B = a.causal_n, a.d, a.num_layers, a.batch
    flops = L * B * (2 * n * d * 3 * d + 4 * d * n * (n + 1) / 2)
    out["peak_gflops"] = peak
    causal = {}
    for attention in () if a.skip_causal else ("auto",) + (() if a.skip_dense else ("dense",)):
        secs, first, path = rankdyn_run(n, d, L, B, "causal", attention)
        frac = flops / secs / 1e9 / peak
        causal[attention] = dict(path=path, seconds=secs, first_call_seconds=first, fraction_of_peak=frac)
        print("causal", attention, path, f"{secs:.2f} s", f"{frac:.0%} of peak", flush=True)
    t = None if a.skip_causal else torch_run(n, d, L, B)
    out["causal"] = {"n": n, "d": d, "layers": L, "batch": B, "torch_seconds": t, **causal}
    if t is not None:
        for v in causal.values():
            v["speedup_vs_torch"] = t / v["seconds"]
        speedups = {k: f"{v['speedup_vs_torch']:.2f}x" for k, v in causal.items()}
        print("torch sdpa", f"{t:.2f} s", speedups, flush=True)

    window = {}
    for nn in (4096, a.window_n):
        secs, first, path = rankdyn_run(nn, d, a.window_layers, 1, "window", "blocked", window=64)
        per = secs / (nn * a.window_layers)
        window[nn] = {"seconds": secs, "first_call_seconds": first, "per_token_layer": per}
        print("window +-64", nn, f"{secs:.2f} s", f"{per * 1e6:.2f} us/token/layer", flush=True)
    ratio = window[a.window_n]["per_token_layer"] / window[4096]["per_token_layer"]
    out["window"] = {"layers": a.window_layers, **{str(k): v for k, v in window.items()}, "ratio": ratio}
    out["load_after"] = _load()
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
