r"""Batch statistics folded one trajectory at a time, in batch order: the same bits whatever the
chunk size or the device count.

Every trajectory's recorded values, and whether each one counts (a real member, finite at that
layer), are folded into the running `BatchStats` one trajectory after another, in the order of
the batch, by Chan et al.'s merge
(`rankdyn._observe._stats.merge_stats`) with a one-member set, i.e. Welford's update

$$n' = n + 1,\quad \delta = v - \bar v,\quad \bar v' = \bar v + \delta\,\tfrac{1}{n'},\quad
M_2' = M_2 + \delta^2\,\tfrac{n}{n'},$$

(min and max as they come); padding is masked out (a masked member leaves the statistics bit
for bit unchanged). The statistics are therefore a function of the per-trajectory values and
their order alone: the merge is elementwise, so neither how many records are folded together
nor in which program changes a bit. The earlier per-chunk two-pass statistics, merged chunk by
chunk (and device by device), changed in the last bits with the chunk size.

The depth scan folds inside itself (`scan_folding`): a group of records at a time, every
member of the chunk in order, so that it never holds more than one group's values and its
memory does not grow with depth (returning a chunk's values at every record and folding
afterwards takes 12x the memory at 10,000 layers). `fold_in_order` folds values already held, in
one compiled program of fixed shape (`GROUP` members per call).
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from .._observe._stats import BatchStats, chunk_stats, merge_stats

__all__ = ["GROUP", "fold_in_order", "empty_stats", "fold_members", "scan_folding", "group_records"]

#: Trajectories folded per call of the one fold program (the batch is padded to a multiple).
GROUP = 256


def empty_stats(shapes: dict, records: int) -> BatchStats:
    """Statistics of no member over ``records`` records; ``shapes``: name -> one trajectory's
    value at one record (anything with ``shape`` and ``dtype``)."""
    # Host arrays put on the device: no eager program to compile (a simulate call compiles only
    # its scan pieces, the flag counts and the summary); under jit they are constants.
    full = lambda v, c: jax.device_put(np.full((records,) + tuple(v.shape), c, v.dtype))  # noqa: E731
    zero = {k: full(v, 0) for k, v in shapes.items()}
    return BatchStats(
        count=jax.device_put(np.zeros((records,), next(iter(shapes.values())).dtype)),
        mean=zero,
        m2=dict(zero),
        min={k: full(v, np.inf) for k, v in shapes.items()},
        max={k: full(v, -np.inf) for k, v in shapes.items()},
    )


def _empty(values: dict, ok) -> BatchStats:
    """Statistics of no member, shaped like one trajectory's records (``ok``: ``(c, records)``)."""
    shapes = {k: jax.ShapeDtypeStruct(v.shape[2:], v.dtype) for k, v in values.items()}
    return empty_stats(shapes, ok.shape[1])


def fold_members(acc: BatchStats, values: dict, ok) -> BatchStats:
    """Fold members (``values``: name -> ``(m, records, ...)``, ``ok``: ``(m, records)``) in order."""

    def one(acc, item):
        v, o = item
        # The one-member statistics of each record: chunk_stats over a chunk of one.
        single = jax.vmap(chunk_stats)(jax.tree.map(lambda a: a[:, None], v), o[:, None])
        return merge_stats(acc, single), None

    acc, _ = lax.scan(one, acc, (values, ok))
    return acc


_fold_group = eqx.filter_jit(fold_members)

#: Bytes of recorded values the depth scan holds before folding them (one group of records of
#: a chunk): small on CPU, where it adds to the host's memory (XLA keeps several copies of a
#: group: 8 MiB grew the peak by ~65 MiB, 1 MiB by nothing measurable, n = d = 16, 1024
#: trajectories, 1000 layers); larger on accelerators, where the fold's sequential steps
#: (members x groups) are dear and the chunk is the whole batch.
FOLD_BYTES = {"cpu": 2**20}
FOLD_BYTES_ACCELERATOR = 2**28


def group_records(members: int, record_bytes: int, num_records: int) -> int:
    """Records per folded group: as many as fit `FOLD_BYTES` for ``members`` members, in groups
    of one length where a divisor of ``num_records`` allows (`even_piece`): a shorter last group
    is a second copy of the depth scan's body in the compiled program, whose compile added tens
    of MiB to the peak memory of a deep run."""
    budget = FOLD_BYTES.get(jax.default_backend(), FOLD_BYTES_ACCELERATOR)
    return even_piece(num_records, max(1, min(num_records, budget // max(1, members * record_bytes))))


def even_piece(total: int, longest: int) -> int:
    """The longest piece of at most ``longest`` items (and at least half of it) that divides
    ``total``; ``longest`` itself if none does (e.g. a prime ``total``: the last piece is shorter)."""
    if total < 1 or total % longest == 0:
        return longest
    return next((p for p in range(longest, (longest + 1) // 2 - 1, -1) if total % p == 0), longest)


def scan_folding(one_block, carry, blocks, acc: BatchStats, *, keep: bool, gather_axis=None):
    """``lax.scan(one_block, carry, blocks)``, each block's record folded into ``acc`` as it goes.

    ``one_block(carry, b)`` returns ``(carry, (values, ok, extra))``: the chunk's values
    (name -> ``(c, ...)``), ``ok`` ``(c,)`` and anything else to stack (the states, or None).
    The blocks are scanned in groups of `group_records` records; after each group its values
    are folded into ``acc`` (whose leading axis is ``blocks``'s) member by member, in batch
    order; with ``gather_axis`` the members of every device of that mesh axis first (device
    order is batch order), so the statistics are those of one device.

    Returns:
        ``(carry, acc, ys)``: ``ys`` = the stacked ``(values, ok)`` with ``keep`` (else
        ``(None, None)``) and the stacked ``extra``, all record first.
    """
    num = blocks.shape[0]
    if num == 0:  # nothing to fold, but the stacked outputs keep their (empty) shapes
        carry, (v, o, extra) = lax.scan(one_block, carry, blocks)
        return carry, acc, ((v, o) if keep else (None, None), extra)
    _, (v_shape, ok_shape, _) = jax.eval_shape(one_block, carry, blocks[0])
    members = ok_shape.shape[0] * (1 if gather_axis is None else lax.axis_size(gather_axis))
    per_record = sum(v.size * v.dtype.itemsize for v in jax.tree.leaves(v_shape)) + members
    g = group_records(members, per_record // max(1, ok_shape.shape[0]), num)

    def group(carry, xs):
        b, a = xs
        carry, (v, o, extra) = lax.scan(one_block, carry, b)
        vg, og = v, o
        if gather_axis is not None:
            vg, og = lax.all_gather((v, o), gather_axis, axis=1, tiled=True)
        a = fold_members(a, jax.tree.map(lambda t: jnp.swapaxes(t, 0, 1), vg), og.T)
        return carry, (a, (v, o) if keep else (None, None), extra)

    full = num // g * g
    outs = []
    if full:
        split = lambda t: t[:full].reshape((num // g, g) + t.shape[1:])  # noqa: E731
        carry, out = lax.scan(group, carry, (split(blocks), jax.tree.map(split, acc)))
        outs.append(jax.tree.map(lambda t: t.reshape((full,) + t.shape[2:]), out))
    if full < num:  # the last, shorter group
        carry, out = group(carry, (blocks[full:], jax.tree.map(lambda t: t[full:], acc)))
        outs.append(out)
    if len(outs) == 1:
        a, kept, extra = outs[0]
    else:
        a, kept, extra = jax.tree.map(lambda *ts: jnp.concatenate(ts), *outs)
    return carry, a, (kept, extra)


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
