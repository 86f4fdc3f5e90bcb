"""Memory of a Lyapunov run: the refusal before compute and the default chunk of trajectories."""

from __future__ import annotations

import jax

__all__ = ["check_tangent_memory", "default_chunk"]


def check_tangent_memory(
    num: int, chunk: int, m: int, k: int, itemsize: int, records: int, devices=None, *, extra=None, fix=None
) -> None:
    """Refuse, before compute, a run whose tangent vectors cannot fit (`rankdyn._run._memory`).

    One chunk holds its ``(m, k)`` tangent vectors about four times (the carry, the jvp's output,
    the QR's factors); the exponents and running records are kept per trajectory of the chunk.
    With ``devices``, one whole chunk per device is in flight at once (CPU devices share the
    host's memory, so they are counted together). ``extra``: more parts (name -> bytes), e.g.
    the starting tokens, for a caller that checks before it draws them; ``fix`` replaces the
    advice (a command names its flags).
    """
    from .._run._memory import MemoryEstimate, check_memory
    from .._run._sharding import resolve_mesh

    mesh = resolve_mesh(devices)
    group = 1 if mesh is None else mesh.devices.size
    c = min(chunk, num)
    tangent = (
        "tangent vectors of one chunk"
        if group == 1
        else f"tangent vectors of {group} chunks (one per device)"
    )
    parts = {
        tangent: 4 * group * c * m * k * itemsize,
        "exponents and running estimates": 2 * (num + group * c * records) * k * itemsize,
    } | dict(extra or {})
    check_memory(
        MemoryEstimate(parts),
        what=f"a Lyapunov spectrum of k={k} in dimension {m} for {num} trajectories",
        fix=fix or "lower k, or pass a smaller chunk (trajectories advanced together).",
    )


def default_chunk(num: int, m: int, k: int, itemsize: int, devices=None) -> int:
    """Trajectories per chunk: about 256 MiB of tangent vectors on CPU, the batch elsewhere;
    with ``devices`` (a device count, a list or a mesh), at most ``ceil(num / devices)``, so that
    every device gets a chunk (a device runs whole chunks). The default thus depends on the
    device count; an explicit ``chunk=`` gives the same bits on any device count."""
    from .._run._sharding import resolve_mesh

    chunk = (
        num if jax.default_backend() != "cpu" else max(1, min(num, (2**28) // max(1, 8 * m * k * itemsize)))
    )
    mesh = resolve_mesh(devices)
    if mesh is not None:
        chunk = min(chunk, -(-num // mesh.devices.size))
    return max(1, chunk)
