"""Float32 GEMM GFLOP/s of XLA:CPU at the shapes of the speed benchmark, under the current XLA_FLAGS.

    python benchmarks/xla_gemm_flags.py                      # XLA's default dot emitter
    XLA_FLAGS=--xla_cpu_experimental_xnn_fusion_type=dot python benchmarks/xla_gemm_flags.py

Shapes: 4096^3 (the peak of `simulate_speed.py`), bert's projection (8 x 128 token rows,
768 -> 2304), small's projection of one 256-trajectory chunk (8192 token rows, 64 -> 128) and
small's two batched n x n products (256 trajectories of 32 x 64). Best of 5 calls after a
warm-up; prints one line.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from speed._repeat import repeat  # noqa: E402


def best(f, *args, reps: int = 5) -> float:
    """Best wall seconds of ``reps`` calls of ``f(*args)`` after a warm-up (compile) call."""
    f(*args).block_until_ready()
    return repeat(lambda: f(*args).block_until_ready(), reps)["wall_min_s"]


def main() -> None:
    r = np.random.default_rng(0)
    hi = jax.lax.Precision.HIGHEST
    out = {}
    for name, (m, k, n) in {
        "4096^3": (4096, 4096, 4096),
        "bert_proj": (1024, 768, 2304),
        "small_proj": (8192, 64, 128),
    }.items():
        a = jnp.asarray(r.standard_normal((m, k)), jnp.float32)
        b = jnp.asarray(r.standard_normal((k, n)), jnp.float32)
        out[name] = 2 * m * k * n / best(jax.jit(lambda a, b: jnp.dot(a, b, precision=hi)), a, b) / 1e9
    x = jnp.asarray(r.standard_normal((256, 32, 64)), jnp.float32)
    a = jnp.asarray(r.standard_normal((256, 32, 32)), jnp.float32)
    fl = 2 * 256 * 32 * 32 * 64
    out["small_qk"] = fl / best(jax.jit(lambda x: jnp.einsum("bnd,bmd->bnm", x, x, precision=hi)), x) / 1e9
    av = jax.jit(lambda a, x: jnp.einsum("bnm,bmd->bnd", a, x, precision=hi))
    out["small_av"] = fl / best(av, a, x) / 1e9
    print(os.environ.get("XLA_FLAGS", ""), {k: round(v, 1) for k, v in out.items()})


if __name__ == "__main__":
    main()
