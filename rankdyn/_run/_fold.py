r"""Batch statistics folded one trajectory at a time, in batch order: the same bits whatever the
chunk size or the device count.

A chunk's depth scan returns every trajectory's recorded values and whether each one counts
(a real member, finite at that layer). They are folded into the running `BatchStats` one
trajectory after another, in the order of the batch, by Chan et al.'s merge
(`rankdyn._observe._stats.merge_stats`) with a one-member set, i.e. Welford's update

$$n' = n + 1,\quad \delta = v - \bar v,\quad \bar v' = \bar v + \delta\,\tfrac{1}{n'},\quad
M_2' = M_2 + \delta^2\,\tfrac{n}{n'},$$

(min and max as they come), by ONE compiled program of fixed shape: `GROUP` trajectories per
call, padding masked out (a masked member leaves the statistics bit for bit unchanged). The
statistics are therefore a function of the per-trajectory values and their order alone. The
earlier per-chunk two-pass statistics, merged chunk by chunk (and device by device), changed
in the last bits with the chunk size: a tuned chunk or another device count moved the means.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from .._observe._stats import BatchStats, chunk_stats, merge_stats

__all__ = ["GROUP", "fold_in_order"]

#: Trajectories folded per call of the one fold program (the batch is padded to a multiple).
GROUP = 256


def _empty(values: dict, ok) -> BatchStats:
    """Statistics of no member, shaped like one trajectory's records (``ok``: ``(records,)``)."""
    # Host arrays put on the device: no eager program to compile (issue 45: programs per simulate).
    full = lambda v, x: jax.device_put(np.full(v.shape[1:], x, v.dtype))  # noqa: E731
    zero = {k: full(v, 0) for k, v in values.items()}
    dtype = next(iter(values.values())).dtype
    return BatchStats(
        count=jax.device_put(np.zeros(ok.shape[1:], dtype)),
        mean=zero,
        m2=dict(zero),
        min={k: full(v, np.inf) for k, v in values.items()},
        max={k: full(v, -np.inf) for k, v in values.items()},
    )


@eqx.filter_jit
def _fold_group(acc: BatchStats, values: dict, ok) -> BatchStats:
    """Fold ``GROUP`` trajectories (``values``: name -> ``(GROUP, records, ...)``) in order."""

    def one(acc, item):
        v, o = item
        # The one-member statistics of each record: chunk_stats over a chunk of one.
        single = jax.vmap(chunk_stats)(jax.tree.map(lambda a: a[:, None], v), o[:, None])
        return merge_stats(acc, single), None

    acc, _ = lax.scan(one, acc, (values, ok))
    return acc


def fold_in_order(acc: BatchStats | None, values: dict, ok) -> BatchStats:
    """``acc`` with the trajectories of ``values`` (name -> ``(c, records, ...)``) folded in, in order.

    Arguments:
        acc: the running statistics, or None before the first trajectory.
        values: the chunk's recorded values, batch first.
        ok: ``(c, records)``: the member counts at that record (real, finite).
    """
    c = ok.shape[0]
    pad = (-c) % GROUP
    if pad:  # masked members: merge_stats keeps the other side exactly

        def grow(v):  # on the host (no eager program), or traced when simulate runs under jit/vmap
            if isinstance(v, jax.core.Tracer):
                return jnp.concatenate([v, jnp.zeros((pad,) + v.shape[1:], v.dtype)])
            return jax.device_put(np.concatenate([v, np.zeros((pad,) + v.shape[1:], v.dtype)]))

        values = {k: grow(v) for k, v in values.items()}
        ok = grow(ok)
    if acc is None:
        acc = _empty(values, ok)
    for start in range(0, c + pad, GROUP):
        part = slice(start, start + GROUP)
        acc = _fold_group(acc, {k: v[part] for k, v in values.items()}, ok[part])
    return acc
