"""The machine: cores, names, clocks, versions, and the float32 matmul peak measured in the same run."""

from __future__ import annotations

import math
import os
import platform
import time

from rankdyn._run._io import cpu_model


def cores() -> int:
    """Cores this process may run on (the affinity mask, not the host's count)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


cpu_name = cpu_model  # the library's one definition (rankdyn._run._io)


def device_name() -> str:
    import jax

    dev = jax.devices()[0]
    if dev.platform == "cpu":
        return f"CPU: {cpu_name()} ({cores()} cores)"
    return f"{dev.platform.upper()}: {getattr(dev, 'device_kind', str(dev))} x{len(jax.devices())}"


class Clock:
    """Wall and process-CPU seconds of a block (CPU time sums every thread of the process)."""

    def __enter__(self):
        self.w0, self.c0 = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc):
        self.wall = time.perf_counter() - self.w0
        self.cpu = time.process_time() - self.c0
        return False


def _sync(torch, dev, t):
    if dev == "cuda":
        torch.cuda.synchronize()
    return t


def matmul_peak(size: int, repeats: int) -> dict:
    """Best-of-``repeats`` float32 GFLOP/s of a ``size``-square matmul, JAX (HIGHEST) and PyTorch.

    Both libraries use every core for one large matmul, so on the 2-core CPU this is the 2-core
    peak; the larger of the two is "peak". Per CPU-second figures (all threads summed) are
    robust to time-slicing by other jobs on a shared machine.
    """
    import jax
    import jax.numpy as jnp
    import jax.random as jr

    out = {"size": size, "cores": cores()}
    a = jr.normal(jr.PRNGKey(0), (size, size), jnp.float32)
    f = jax.jit(lambda a: jnp.matmul(a, a, precision=jax.lax.Precision.HIGHEST))
    f(a).block_until_ready()
    best, best_cpu = math.inf, math.inf
    for _ in range(repeats):
        with Clock() as c:
            f(a).block_until_ready()
        best, best_cpu = min(best, c.wall), min(best_cpu, c.cpu)
    out["jax_gflops"] = 2 * size**3 / best / 1e9
    out["jax_gflops_per_cpu_s"] = 2 * size**3 / best_cpu / 1e9
    try:
        import torch

        dev = "cuda" if torch.cuda.is_available() and jax.default_backend() == "gpu" else "cpu"
        ta = torch.randn(size, size, device=dev)
        _sync(torch, dev, ta @ ta)
        best = math.inf
        for _ in range(repeats):
            with Clock() as c:
                _sync(torch, dev, ta @ ta)
            best = min(best, c.wall)
        out["torch_gflops"] = 2 * size**3 / best / 1e9
    except ImportError:
        pass
    out["peak_gflops"] = max(out["jax_gflops"], out.get("torch_gflops", 0.0))
    return out


def versions() -> dict:
    import importlib

    v = {"python": platform.python_version()}
    for m in ("jax", "jaxlib", "rankdyn", "numpy", "equinox", "torch"):
        try:
            v[m] = importlib.import_module(m).__version__
        except (ImportError, AttributeError):
            pass
    return v
