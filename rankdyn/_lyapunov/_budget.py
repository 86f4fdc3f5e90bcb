"""Memory of a Lyapunov run: the refusal before compute and the default chunk of trajectories."""

from __future__ import annotations

import jax

#: State-sized numbers per tangent column alive at once in the compiled step: the carry, the
#: jvp's output and its intermediates, the projection, CholeskyQR2's two passes and the
#: Householder branch's operand. With `SCORE_COPIES`, fitted to the peak RSS of
#: ``rankdyn lyapunov --k 128 --num-layers 4 --qr-every 1 --devices 1`` at (n, d) = (32, 32)
#: and (64, 16), chunks 512 and 256, less that at 1/8 the chunk (7.8 and 16.2 state-sized
#: numbers per column; the estimate had 4 and no scores, 3.5x low at n = 64).
TANGENT_COPIES = 5
#: Score-sized numbers (``heads n^2``) per tangent column: the tangent of the attention's logits
#: and of its softmax in the layer's jvp.
SCORE_COPIES = 3
#: Per-trajectory copies of the exponents (the per-chunk results, their concatenation, the
#: batch's reshaped result) and of the starting tokens (the draw, its flat copy, the copy put on
#: the spheres, the chunk being padded), from the same measurement at --n 4 --d 4 --batch 10^6.
EXPONENT_COPIES = 3
TOKEN_COPIES = 4

__all__ = [
    "check_tangent_memory",
    "tangent_memory",
    "check_clv_memory",
    "clv_memory",
    "default_chunk",
    "TANGENT_COPIES",
    "SCORE_COPIES",
    "EXPONENT_COPIES",
    "TOKEN_COPIES",
]


def tangent_memory(
    num: int,
    chunk: int,
    m: int,
    k: int,
    itemsize: int,
    records: int,
    devices=None,
    *,
    scores: int = 0,
    extra=None,
):
    r"""The `rankdyn._run._memory.MemoryEstimate` of a QR run: what `check_tangent_memory` checks.

    Each of a chunk's k tangent columns needs `TANGENT_COPIES` state-sized ($m$) and
    `SCORE_COPIES` score-sized (``scores``: heads $\times n^2$ for a layer, 0 for a map) numbers
    at once; the exponents (`EXPONENT_COPIES` per trajectory) and running records are kept.
    With ``devices``, one whole chunk per device is in flight at once (CPU devices share the
    host's memory, so they are counted together). ``extra``: more parts (name -> bytes), e.g.
    the starting tokens, for a caller that checks before it draws them.
    """
    from .._run._memory import MemoryEstimate
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
        tangent: group * c * k * (TANGENT_COPIES * m + SCORE_COPIES * scores) * itemsize,
        "exponents and running estimates": (EXPONENT_COPIES * num + 2 * group * c * records) * k * itemsize,
    } | dict(extra or {})
    return MemoryEstimate(parts)


def check_tangent_memory(
    num: int,
    chunk: int,
    m: int,
    k: int,
    itemsize: int,
    records: int,
    devices=None,
    *,
    scores: int = 0,
    extra=None,
    fix=None,
) -> None:
    """Refuse, before compute, a run whose tangent vectors cannot fit (`rankdyn._run._memory`):
    the estimate of `tangent_memory`; ``fix`` replaces the advice (a command names its flags)."""
    from .._run._memory import check_memory

    est = tangent_memory(num, chunk, m, k, itemsize, records, devices, scores=scores, extra=extra)
    check_memory(
        est,
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


def clv_memory(
    num: int,
    chunk: int,
    m: int,
    k: int,
    steps: int,
    backward: int,
    itemsize: int,
    state: int,
    scores: int = 0,
):
    r"""The `rankdyn._run._memory.MemoryEstimate` of covariant vectors (`rankdyn._lyapunov._clv`).

    Ginelli's algorithm stores, per trajectory of a chunk, $Q_t$ for the ``steps`` recorded steps
    and $R_t$ for those and the ``backward`` transient ($T m k + (T + T_b) k^2$ numbers); the
    result holds $V_t$ and the states of every trajectory ($T (m k + \text{state})$ each, twice
    while several chunks are joined); the chunk's working set is the spectrum's (``scores`` as
    `check_tangent_memory`).
    """
    from .._run._memory import MemoryEstimate

    c = min(chunk, num)
    joined = 1 if c >= num else 2
    parts = {
        "stored Q_t of one chunk": c * steps * m * k * itemsize,
        "stored R_t of one chunk": c * (steps + backward) * k * k * itemsize,
        "covariant vectors and states (the result)": joined * num * steps * (m * k + state) * itemsize,
        "tangent vectors of one chunk": c * k * (TANGENT_COPIES * m + SCORE_COPIES * scores) * itemsize,
    }
    return MemoryEstimate(parts)


def check_clv_memory(
    num: int,
    chunk: int,
    m: int,
    k: int,
    steps: int,
    backward: int,
    itemsize: int,
    state: int,
    scores: int = 0,
) -> None:
    """Refuse, before compute, covariant vectors that cannot fit (the estimate of `clv_memory`;
    measured within 1.2x of the peak RSS above a run of 1/8 the steps: tests/test_lyapunov_memory.py)."""
    from .._run._memory import check_memory

    check_memory(
        clv_memory(num, chunk, m, k, steps, backward, itemsize, state, scores),
        what=f"covariant Lyapunov vectors (k={k}, dimension {m}, {steps} recorded steps, {num} trajectories)",
        fix="record fewer steps (num_steps / num_layers), or lower k, the batch or the chunk.",
    )
