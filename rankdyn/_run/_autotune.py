r"""The chunk size of `simulate` on CPU, chosen by measurement and remembered per machine.

How many trajectories to advance together is a cache question (a chunk's token matrices are
read and written ~10 times per layer) whose best answer depends on the CPU, the shape and the
observer: on the 2-core Intel dev box, n = 16, d = 32 ran fastest at 64 trajectories (128 KiB
of tokens) but n = 32, d = 64 at 128-256 (1-2 MiB), and 4x too large a chunk cost 1.2-1.6x
(process CPU time, `benchmarks/chunk_speed.py`). So, like XLA's autotuning, the first
sizeable run of a shape (>= 1e11 model FLOPs) times a few candidates around the cache-sized rule
(`rankdyn._run._sizing.auto_chunk`): one chunk each, over a few layers, best of three rounds (the
candidates in turn within each round), and keeps the fastest per trajectory. The choice is
stored in ``$RANKDYN_CACHE_DIR/chunks.json`` (default ``~/.cache/rankdyn``) keyed by CPU model,
core count, shape, dtype, layer variant and observer, so later runs and processes reuse it.
``RANKDYN_CHUNK_TUNING=0`` turns it off (the rule only), and from `RULE_MIN_TOKENS` tokens the
rule alone decides (long context: no compile per candidate).

The tuner may choose only among chunks that give identical numbers (the bitwise contract,
``docs/sweep.md``). The batch statistics are folded in batch order whatever the chunk
(`rankdyn._run._fold`), but a program of another width may compute a trajectory with another
vectorisation, hence another rounding, and whether it does depends on the CPU (it did on an AMD
EPYC, not on the Intel development machine). So every candidate's timed run starts from the
same trajectories over the same layers, and a candidate is eligible only if its recorded values,
flags and final states of the trajectories it shares with the rule's chunk are those of the
rule's chunk to the last bit; the fastest eligible one is kept (the rule's chunk always is).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from ._io import cache_root, cpu_model
from ._scan import DepthPlan, _first, _source, empty_acc
from ._sizing import auto_chunk, layer_flops

__all__ = ["tuned_chunk", "candidates"]

#: Tune only runs of at least this many model FLOPs (1-2 s on a 2-core CPU): tuning costs one
#: compile per candidate (a few seconds, once per machine and shape), which smaller runs, such
#: as the tests' and most of ``rankdyn reproduce --quick``'s, would not win back.
TUNE_MIN_FLOPS = 1e11
#: From this many tokens the chunk is the rule's, never timed: one trajectory's tokens already fill
#: the cache the candidates are sized by (the rule gives a chunk of 1-8 there), and every candidate
#: would compile the whole long-context program again (about 50 programs at n = 2048).
RULE_MIN_TOKENS = 1024
#: Model FLOPs of one timed candidate run (tens of ms), enough to rise above timer noise.
_TIMED_FLOPS = 2e9
_memory: dict[str, int] = {}
#: Part of the cache key: raised when the compiled layer or scan changes enough that choices
#: measured with the previous program may no longer be the fastest (2: no cond, split GEMMs;
#: 3: candidates timed in turn, after choices measured one candidate after another on a drifting host;
#: 4: only candidates with the rule's numbers, the statistics folded in batch order).
_PROGRAM_VERSION = 4


def _cache_file() -> Path:
    return cache_root() / "chunks.json"


def candidates(default: int, num: int) -> list[int]:
    """The sizes timed: 1/16, 1/4, 1/2, 1 and 2 times the cache-sized rule, within ``[1, num]``
    (1/16: at n = 16, d = 32 the best chunk was 64 trajectories where the rule gives 1024)."""
    return sorted(
        {max(1, min(num, c)) for c in (default // 16, default // 4, default // 2, default, 2 * default)}
    )


def _key(layer, observe, x0, save_every: int, eps: bool) -> str:
    obs = f"{type(observe).__name__}:{','.join(getattr(observe, 'names', ()))}"
    variant = f"{layer.placement},skip={layer.skip},mlp={layer.weights.mlp is not None}"
    shape = f"n={layer.num_tokens},d={layer.dim},heads={layer.num_heads},{jnp.dtype(x0.dtype).name}"
    return (
        f"{cpu_model()}|{os.cpu_count()}|{shape}|{variant}|{obs}|k={save_every},eps={eps}|v{_PROGRAM_VERSION}"
    )


def _chunk_run(layer, observe, source, drop_key, chunk: int, num: int, plan: DepthPlan):
    """A compiled, warmed-up run of one chunk over ``plan``'s blocks, its trajectory-layers, and
    the warm-up's outputs (compared across candidates by `_same_numbers`)."""
    acc = empty_acc(observe, layer, source, plan.eps, plan.num_blocks + 1)
    args = (layer, observe, source, drop_key, jnp.asarray(0), jnp.asarray(num), chunk, plan, None, acc)
    out = jax.block_until_ready(_first(*args))  # compile and warm up
    return (lambda: jax.block_until_ready(_first(*args))), chunk * plan.num_blocks * plan.save_every, out


def _same_numbers(out, ref, m: int) -> bool:
    """Whether two `_first` outputs agree to the last bit on their first ``m`` trajectories: the
    recorded values and flags at every saved layer, and the final states and flags."""
    (state, values, ok, *_), (rstate, rvalues, rok, *_) = out, ref
    pairs = [(state.x, rstate.x), (state.nonfinite, rstate.nonfinite), (state.degenerate, rstate.degenerate)]
    pairs += [(ok, rok)] + [(values[k], rvalues[k]) for k in rvalues]
    return all(np.asarray(a)[:m].tobytes() == np.asarray(b)[:m].tobytes() for a, b in pairs)


def _time_chunks(runs: dict, rounds: int = 3) -> dict:
    """Best-of-``rounds`` wall seconds per trajectory-layer of each candidate, the candidates
    timed in turn within each round, so that a drift of the machine's speed (measured 2x within
    minutes on a shared host) hits every candidate alike instead of the last ones."""
    best = dict.fromkeys(runs, float("inf"))
    for _ in range(rounds):
        for c, (run, _) in runs.items():
            t0 = time.perf_counter()
            run()
            best[c] = min(best[c], time.perf_counter() - t0)
    return {c: best[c] / units for c, (_, units) in runs.items()}


def tuned_chunk(
    layer, observe, x0, num: int, num_layers: int, *, save_every: int, eps: bool, drop_key=None, force=False
) -> int:
    """Trajectories per chunk for a single-device CPU run: measured once per machine and shape.

    Arguments:
        layer, observe, x0, num, num_layers, save_every, eps, drop_key: as `rankdyn._run._scan.run_batch`
            gets them (``x0`` flat ``(num, n, d)`` or a `TokenSampler`).
        force: tune even a run below `TUNE_MIN_FLOPS` (tests).

    Returns:
        The chunk: the cached or newly measured best candidate among those that compute the
        rule's numbers, or the rule's size when tuning is off, the batch fits the smallest
        candidate, or the run is too small to pay for it.
    """
    default = auto_chunk(num, layer.num_tokens, layer.dim, jnp.dtype(x0.dtype).itemsize, "cpu")
    cands = candidates(default, num)
    work = layer_flops(layer)
    small = num * num_layers * work < TUNE_MIN_FLOPS
    rule = os.environ.get("RANKDYN_CHUNK_TUNING", "1") == "0" or layer.num_tokens >= RULE_MIN_TOKENS
    if rule or len(cands) < 2 or (small and not force):
        return default
    key = _key(layer, observe, x0, save_every, eps)
    path = _cache_file()
    if key not in _memory:
        try:
            _memory.update(json.loads(path.read_text()))
        except (OSError, ValueError):
            pass  # no cache yet, or an unreadable one: measure again
    if key in _memory and not force:
        return max(1, min(num, int(_memory[key])))
    source = _source(x0)
    # The same layers for every candidate (sized for the largest), so their numbers can be compared.
    blocks = max(1, min(64, round(_TIMED_FLOPS / (max(cands) * save_every * work))))
    # Per-trajectory values, so that the candidates' numbers can be compared (the statistics are
    # folded inside the scan in both modes: the timed work is the same).
    plan = DepthPlan(blocks, save_every, True, True, False, eps)
    runs = {c: _chunk_run(layer, observe, source, drop_key, c, num, plan) for c in cands}
    ref = runs[default][2]
    same = {c: run for c, run in runs.items() if _same_numbers(run[2], ref, min(c, default))}
    cost = _time_chunks({c: run[:2] for c, run in same.items()})
    best = min(cost, key=cost.get)
    _memory[key] = best
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(_memory, indent=1, sort_keys=True))
        tmp.replace(path)  # atomic, so concurrent processes never read half a file
    except OSError:
        pass  # a read-only home: the choice still holds for this process
    return best
