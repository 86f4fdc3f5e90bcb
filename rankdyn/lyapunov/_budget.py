"""Memory of a Lyapunov run: the refusal before compute and the default chunk of trajectories."""

from __future__ import annotations

import jax

__all__ = ["check_tangent_memory", "default_chunk"]


def check_tangent_memory(num: int, chunk: int, m: int, k: int, itemsize: int, records: int) -> None:
    """Refuse, before compute, a run whose tangent vectors cannot fit (`rankdyn._run._memory`).

    One chunk holds its ``(m, k)`` tangent vectors about four times (the carry, the jvp's output,
    the QR's factors); the exponents and running records are kept per trajectory of the chunk.
    """
    from .._run._memory import MemoryEstimate, check_memory

    c = min(chunk, num)
    parts = {
        "tangent vectors of one chunk": 4 * c * m * k * itemsize,
        "exponents and running estimates": 2 * (num + c * records) * k * itemsize,
    }
    check_memory(
        MemoryEstimate(parts),
        what=f"a Lyapunov spectrum of k={k} in dimension {m} for {num} trajectories",
        fix="lower k, or pass a smaller chunk (trajectories advanced together).",
    )


def default_chunk(num: int, m: int, k: int, itemsize: int) -> int:
    """Trajectories per chunk: about 256 MiB of tangent vectors on CPU, the batch elsewhere."""
    if jax.default_backend() != "cpu":
        return num
    return max(1, min(num, (2**28) // max(1, 8 * m * k * itemsize)))
