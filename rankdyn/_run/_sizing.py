"""How big a chunk of trajectories is, and what the depth scan needs in memory.

`auto_chunk` is the default chunk (cache-sized on CPU, the whole batch on accelerators);
`estimate_parts` the rough peak of a run per part, which `rankdyn._run._memory` compares with the
machine before anything is computed.
"""

from __future__ import annotations

import math

from .._observe._metrics import COS_BLOCK, COS_BLOCKED_MIN
from ._fold import even_piece, group_records

__all__ = ["auto_chunk", "depth_piece", "estimate_parts", "layer_flops", "metric_entries"]

#: The metrics that reduce the (n, n) cosine matrix (`rankdyn._observe._metrics._cosine_reductions`).
_COSINE_METRICS = ("min_cos", "mean_abs_cos")


#: On CPU, trajectories per chunk are chosen so that one chunk's token matrices take about this
#: many bytes: a chunk's working set then stays in a core's cache across the ~10 passes of a
#: layer, which measured 1.3x (CPU time) to 3x (wall, busy machine) faster than one batch of
#: 4096 (n=32, d=64). A chunk keeps at least _CHUNK_ROWS token rows so that the projections stay
#: wide GEMMs (n=128, d=768: chunks below 32 trajectories were slower).
_CHUNK_BYTES = 2**21
_CHUNK_ROWS = 4096


def auto_chunk(num: int, n: int, d: int, itemsize: int, backend: str) -> int:
    """Default trajectories per chunk: cache-sized on CPU, the whole batch on accelerators."""
    if backend != "cpu":
        return max(num, 1)
    per_cache = _CHUNK_BYTES // (n * d * itemsize)
    return max(1, min(num, max(per_cache, -(-_CHUNK_ROWS // n))))


def metric_entries(n: int, names=None) -> int:
    """Numbers per trajectory the metrics of ``names`` (None: all) hold at once, beyond the tokens.

    The cosine metrics reduce the cosine matrix whole below `COS_BLOCKED_MIN` tokens and by
    row blocks of `COS_BLOCK` above; three such arrays (the cosines, their absolute values, the
    masked select) are counted, as for the scores. At n = 65536, d = 8, float32, XLA's
    ``memory_analysis`` of `collapse_metrics` reports 140 MB of temporaries, 2.1 blocks
    (``tests/test_memory_paths.py`` checks the bound). The singular values need a copy of the
    ``(n, d)`` tokens and their QR (`rankdyn._observe._spectral`, no ``(n, n)`` array), inside
    the ten token-sized buffers already counted.
    """
    if names is not None and not any(m in _COSINE_METRICS for m in names):
        return 0
    return 3 * (n * n if n < COS_BLOCKED_MIN else COS_BLOCK * n)


def estimate_parts(
    *,
    num: int,
    chunk: int,
    n: int,
    d: int,
    heads: int,
    itemsize: int,
    num_saved: int,
    num_metrics: int,
    per_trajectory: bool,
    save_states: bool,
    score_entries: int | None = None,
    metric_names=None,
) -> dict[str, int]:
    """A rough upper estimate of a run's peak memory in bytes, per part (for `rankdyn._run._memory`).

    One chunk's layer needs about seven token-sized buffers and two score-sized ones per head
    (scores and softmax; the mask select is fused). Measured on the CPU (peak RSS above that of
    1/8 of the chunk, `tests/test_memory_estimates.py`): 6.4 token-sized buffers per trajectory
    at n = 64, d = 1024, and 1.8 score-sized ones besides them at n = 512, d = 64 (10 and 3 were
    1.8x high). Saved outputs are per layer and metric, times the batch
    when per-trajectory values or states are kept (twice: the chunks and their concatenation),
    and five running statistics per layer and metric (twice: a piece's and the result), plus one
    group of a chunk's values, folded inside the scan (`rankdyn._run._fold.group_records`).
    The metrics' own arrays (`metric_entries` of ``metric_names``, None for all) are not live
    at the same time as the scores: the larger of the two is counted.
    """
    # score_entries: the attention's numbers per head (n * n dense; `_model._blocked.score_entries`).
    scores = n * n if score_entries is None else score_entries
    work = chunk * (7 * n * d + max(2 * heads * scores, metric_entries(n, metric_names))) * itemsize
    if per_trajectory or save_states:
        per = num_metrics + 1 + (n * d if save_states else 0)
        out = 2 * num * num_saved * per * itemsize
    else:
        group = min(num_saved, group_records(chunk, (num_metrics + 1) * itemsize + 1, num_saved))
        out = (2 * 5 * num_saved + 3 * group * chunk) * (num_metrics + 1) * itemsize
    return {"working set of one chunk": int(work), "per-layer metrics": int(out)}


def layer_flops(layer) -> int:
    r"""Model FLOPs of one layer on one token matrix: projections $4ndd_k + 2ndd_v$, $QK^\top$, $AV$
    over the computed scores ($n^2$ dense; the touched blocks' $B^2$ each on the blocked path)."""
    w = layer.weights
    n, d, dk, dv, h = layer.num_tokens, layer.dim, w.w_q.shape[-1], w.w_v.shape[-1], layer.num_heads
    scores = n * n
    if layer.attention_path == "blocked":
        b = min(layer.block_size, n)
        scores = layer.mask.block_pairs(b)[0].size * b * b
    return h * (2 * n * d * (2 * dk + dv) + 2 * scores * (dk + dv))


#: Seconds of compiled work between two checks for Ctrl-C and SIGTERM on the CPU (`depth_piece`).
PIECE_SECONDS = 2.0
#: The FLOP rate that turns a layer's model FLOPs into seconds on one CPU device: a floor of
#: XLA:CPU's speed on the layer's small batched products (about 23 GFLOP/s measured on the 2-core
#: reference machine), so that pieces come out shorter than `PIECE_SECONDS` rather than longer.
CPU_FLOPS = 1e10
#: Depth pieces with a progress bar (its ticks).
PROGRESS_PIECES = 20


def depth_piece(layer, chunk: int, num_blocks: int, save_every: int, *, progress: bool, cpu: bool) -> int:
    """Saved layers per compiled depth piece of a chunk: about `PROGRESS_PIECES` pieces with a
    progress bar, and on the CPU at most about `PIECE_SECONDS` of work each (estimated from
    `layer_flops` at `CPU_FLOPS`), so that a signal is seen within seconds whatever the depth.

    Pieces run the same layers in the same order, and the tests find the same bits cut and
    whole; one case is known to differ in the last bits (float64 with dropout and a window
    mask: ``min_cos``, ``mu_normalized`` and ``mean_abs_cos`` up to 6e-17), not yet explained.
    Each distinct piece length is one more compiled program, so a run estimated under
    `PIECE_SECONDS` stays whole, and a cut depth takes pieces of one length where a divisor of it
    lies within a factor 2 of the longest piece allowed (`even_piece`): a shorter last piece
    would be one more program, whose compile adds tens of MiB to the peak memory of a deep run.
    """
    blocks = max(num_blocks, 1)
    pieces = PROGRESS_PIECES if progress else 1
    if cpu:
        seconds = layer_flops(layer) * chunk * save_every * blocks / CPU_FLOPS
        pieces = max(pieces, min(blocks, math.ceil(seconds / PIECE_SECONDS)))
    return even_piece(blocks, max(1, math.ceil(blocks / pieces)))
