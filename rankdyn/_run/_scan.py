r"""The depth scan: every forward run of the layer map goes through here.

$X^{(t+1)} = F_t(X^{(t)})$ for $t = 0..T-1$ (eqs. 2-3), compiled as a ``lax.scan`` over blocks of
``save_every`` layers, with an inner ``lax.scan`` over the layers of a block. A chunk of
trajectories is advanced together (the unbatched layer is ``vmap``-ed inside the scan body);
after each block an *observer* maps every trajectory's state to its metrics and a *reducer*
folds them: into per-chunk `rankdyn._observe._stats.BatchStats` (streamed statistics, memory
independent of the batch) or into per-trajectory values as well. Theorem 1's $\epsilon$ (the
smallest attention weight on mask edges) is recorded as ``eps_min``: at a saved layer
$t > 0$ the minimum over the layers since the previous save; at $t = 0$ that of $A^{(0)}$.

`simulate` walks the batch in chunks (`run_batch`); the sweep vmaps `scan_depth` over its grid
cells. With several devices (``rankdyn._run._sharding``) every device runs a whole chunk, so a
compiled program processes the same ``chunk`` trajectories whatever the device count; the
batch statistics are folded from the per-trajectory values in batch order (`rankdyn._run._fold`),
so they do not depend on how the batch was cut either (docs/sweep.md, the bitwise contract).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
from jax import lax

from .._observe._stats import BatchStats
from ._fold import empty_stats, fold_members, scan_folding
from ._interrupt import check_interrupt
from ._sharding import BATCH_AXIS, map_sharded
from ._sizing import depth_piece

__all__ = ["ScanState", "DepthPlan", "scan_depth", "run_batch"]


def _finite(values: dict, ok) -> jax.Array:
    """Per trajectory: ``ok`` (the state is finite) and every recorded value is finite."""
    for v in values.values():
        ok = ok & jnp.all(jnp.isfinite(v).reshape(v.shape[0], -1), axis=1)
    return ok


def _canonical(a):
    """An inexact array in the dtype JAX computes in now (float64 -> float32 when x64 is off)."""
    return a.astype(jax.dtypes.canonicalize_dtype(a.dtype)) if eqx.is_inexact_array(a) else a


def _layer_keys(keys, t):
    return None if keys is None else jax.vmap(lambda k: jr.fold_in(k, t))(keys)


def _eps_start(layer, x):
    # The layer's own epsilon: on the blocked path there is no (n, n) matrix to take it from.
    return jax.vmap(lambda x1: layer.eps_min(x1, 0))(x)


class ScanState(NamedTuple):
    """The carry of the depth scan for a chunk of ``c`` trajectories (named fields, so callers
    and new flags never depend on an argument order).

    Attributes:
        x: token matrices ``(c, n, d)``.
        degenerate: ``(c,)`` True once a normalisation met a zero row.
        nonfinite: ``(c,)`` True once the state or a recorded value was NaN or infinite.
        valid: ``(c,)`` True for real members (False for the padding of a last chunk).
        keys: per-trajectory dropout keys ``(c, ...)``, or None without dropout.
    """

    x: jax.Array
    degenerate: jax.Array
    nonfinite: jax.Array
    valid: jax.Array
    keys: jax.Array | None = None

    @classmethod
    def start(cls, x, keys=None, valid=None) -> "ScanState":
        """A fresh chunk: no flags set, every member valid unless ``valid`` says otherwise."""
        flags = jnp.zeros(x.shape[0], bool)
        return cls(x, flags, flags, ~flags if valid is None else valid, keys)


class DepthPlan(NamedTuple):
    """What one compiled depth piece does (all static: each combination is one program)."""

    num_blocks: int
    save_every: int
    include_start: bool = False
    per_trajectory: bool = False
    save_states: bool = False
    eps: bool = True


def scan_depth(
    layer,
    observe,
    reduce,
    state: ScanState,
    block0,
    num_blocks: int,
    save_every: int,
    *,
    include_start: bool = False,
    save_states: bool = False,
    eps: bool = True,
    acc: BatchStats | None = None,
    keep_values: bool = False,
    gather_axis=None,
):
    r"""Advance a chunk ``state`` by ``num_blocks * save_every`` layers from block ``block0``.

    Layer $t$ is ``layer(x, t, key=fold_in(keys[i], t))`` for trajectory $i$ (keys only with
    dropout). After each block the observer's values (and ``eps_min``) are passed to
    ``reduce(values, ok)``, with ``ok`` = member is real (``state.valid``) and finite; only the
    reduced output is stacked over blocks, so memory does not grow with the chunk times depth
    unless the reducer keeps per-trajectory values. With ``include_start`` the state ``x``
    itself is recorded first (layer 0, with $\epsilon$ of $A^{(0)}$), before the scan: a
    ``lax.cond`` choosing between that record and a block inside the scan body kept XLA from
    fusing across it and copied the carry every block (measured ~10% of a mu-only run).

    With ``acc`` (`BatchStats` over this call's records) there is no reducer: the values are
    folded into ``acc`` in batch order inside the scan (`rankdyn._run._fold.scan_folding`), a
    group of records at a time, so memory is flat in depth; ``keep_values`` also returns them;
    ``gather_axis`` folds the members of every device of that mesh axis, in device order.

    Returns:
        ``(state, ys)``: the `ScanState` after the last layer, and per record the reducer's
        output (and the states if ``save_states``); with ``acc``, ``(state, (acc, (values, ok),
        states))``, the values and ``ok`` record first (None unless ``keep_values``).
    """
    keys, valid = state.keys, state.valid

    def one_layer(carry, t):
        x, bad = carry
        if keys is None:
            y, aux = jax.vmap(lambda x1: layer(x1, t))(x)
        else:
            y, aux = jax.vmap(lambda x1, k: layer(x1, t, key=k))(x, _layer_keys(keys, t))
        return (y, bad | aux.degenerate), aux.eps_min

    def record(t, x, bad, nonfinite, e):
        # The observer signature (t, x, args) of every recording entry point: the layer index of
        # the record, one trajectory's tokens, and the layer.
        values = dict(jax.vmap(observe, in_axes=(None, 0, None))(t, x, layer))
        if eps:
            values["eps_min"] = e
        # One pass over the tokens gives both flags: a row's max |x| is NaN or inf iff the row
        # is not finite (max propagates NaN), and 0 iff the token underflowed to zero.
        row_max = jnp.max(jnp.abs(x), axis=-1)
        x_ok = jnp.all(jnp.isfinite(row_max), axis=-1)
        zero = jnp.any(row_max == 0, axis=-1)
        ok = _finite(values, x_ok)
        # A zero token with finite states still counts: mu and the norms are defined there, and
        # only the metrics undefined at a zero row (its cosines) come out NaN, with the flag.
        counts = (ok | (zero & x_ok)) & valid
        ys = (values, counts) if acc is not None else reduce(values, counts)
        return bad | zero, nonfinite | ~(ok | (zero & x_ok)), ys

    def one_block(carry, b):
        x, bad, nonfinite = carry
        (x, bad), e = lax.scan(one_layer, (x, bad), b * save_every + jnp.arange(save_every))
        bad, nonfinite, ys = record((b + 1) * save_every, x, bad, nonfinite, jnp.min(e, axis=0))
        if acc is not None:
            return (x, bad, nonfinite), ys + ((x if save_states else None),)
        return (x, bad, nonfinite), ((ys, x) if save_states else ys)

    # Tokens and weights made while x64 was on stay float64 after it is switched off, but the
    # layer then computes in float32, and the scan's carry would change type (a TypeError): both
    # take the dtype JAX computes in now (float64 -> float32 without x64; unchanged otherwise).
    layer = jax.tree.map(_canonical, layer)
    x = _canonical(state.x)
    bad, nonfinite = state.degenerate, state.nonfinite
    if include_start:
        t0 = block0 * save_every
        bad, nonfinite, first = record(t0, x, bad, nonfinite, _eps_start(layer, x))
        if acc is None and save_states:
            first = (first, x)
    blocks = block0 + jnp.arange(num_blocks)
    if acc is not None:
        return _scan_folded(
            one_block, (x, bad, nonfinite), blocks, acc, state, first if include_start else None,
            keep_values=keep_values, gather_axis=gather_axis, save_states=save_states,
        )  # fmt: skip
    (x, bad, nonfinite), ys = lax.scan(one_block, (x, bad, nonfinite), blocks)
    if include_start:
        ys = jax.tree.map(lambda f, y: jnp.concatenate([f[None], y]), first, ys)
    return state._replace(x=x, degenerate=bad, nonfinite=nonfinite), ys


def _scan_folded(one_block, carry, blocks, acc, state, first, *, keep_values, gather_axis, save_states):
    """`scan_depth` with ``acc``: the start record (if any) and the blocks folded in order."""
    x0 = carry[0]
    if first is not None:
        v, o = first
        vg, og = (v, o) if gather_axis is None else lax.all_gather((v, o), gather_axis, tiled=True)
        head = fold_members(
            jax.tree.map(lambda t: t[:1], acc), jax.tree.map(lambda t: t[:, None], vg), og[:, None]
        )
        acc = jax.tree.map(lambda t: t[1:], acc)
        if blocks.shape[0] == 0:  # the start record alone (`run_batch`'s `_first`): no scan
            kept = jax.tree.map(lambda f: f[None], first) if keep_values else (None, None)
            out = (head, kept, x0[None] if save_states else None)
            return state._replace(x=x0, degenerate=carry[1], nonfinite=carry[2]), out
    (x, bad, nonfinite), acc, (kept, states) = scan_folding(
        one_block, carry, blocks, acc, keep=keep_values, gather_axis=gather_axis
    )
    if first is not None:
        cat = lambda f, y: jnp.concatenate([f[None], y])  # noqa: E731
        acc = jax.tree.map(lambda h, t: jnp.concatenate([h, t]), head, acc)
        kept = jax.tree.map(cat, first, kept) if keep_values else kept
        states = jnp.concatenate([x0[None], states]) if save_states else None
    return state._replace(x=x, degenerate=bad, nonfinite=nonfinite), (acc, kept, states)


class _ArraySource(eqx.Module):
    """Initial tokens given as an array ``(num, n, d)``; indices past the end repeat the last one."""

    x: jax.Array

    def sample(self, index):
        return jnp.take(self.x, index, axis=0, mode="clip")


def _source(x0):
    return x0 if hasattr(x0, "sample") else _ArraySource(x0)


def _chunk_program(layer, observe, state: ScanState, block0, plan: DepthPlan, mesh, acc):
    """One depth piece of a chunk, on one device, or of ``k`` chunks on the ``k`` devices of ``mesh``.

    Returns ``(state, values, ok, states, acc)``: ``acc`` with the piece's records of these
    trajectories folded in, in batch order; with ``plan.per_trajectory`` also every
    trajectory's values (name -> ``(c, records, ...)``) and whether each counts (``(c,
    records)``: real and finite), else None; the states ``(c, records, n, d)`` or None.
    """

    def local(model, state_):
        layer_, observe_, block0_, acc_ = model
        state_, (acc_, (values, ok), states) = scan_depth(
            layer_,
            observe_,
            None,
            state_,
            block0_,
            plan.num_blocks,
            plan.save_every,
            include_start=plan.include_start,
            save_states=plan.save_states,
            eps=plan.eps,
            acc=acc_,
            keep_values=plan.per_trajectory,
            gather_axis=None if mesh is None else BATCH_AXIS,
        )
        # Batch-first outputs, so that a device mesh concatenates them along its axis.
        first = lambda v: None if v is None else jnp.moveaxis(v, 0, 1)  # noqa: E731
        values = None if values is None else jax.tree.map(first, values)
        return (state_, values, first(ok), first(states)), acc_

    if mesh is None:
        out, acc = local((layer, observe, block0, acc), state)
    else:  # the statistics come back once (every device folded all members, in order)
        out, acc = map_sharded(local, mesh, (layer, observe, block0, acc), state, shared_out=True)
    return out + (acc,)


@eqx.filter_jit
def _first(layer, observe, source, drop_key, start, num, chunk: int, plan: DepthPlan, mesh, acc):
    """Draw a chunk's initial tokens and record layer 0, then run ``plan.num_blocks`` blocks
    (`run_batch`: none, its pieces run in `_advance`; the autotuner: a whole depth piece)."""
    index = start + jnp.arange(chunk)
    keys = None if drop_key is None else jax.vmap(lambda i: jr.fold_in(drop_key, i))(index)
    state = ScanState.start(source.sample(index), keys, valid=index < num)
    return _chunk_program(layer, observe, state, jnp.zeros((), start.dtype), plan, mesh, acc)


@eqx.filter_jit
def _advance(layer, observe, state: ScanState, block0, plan: DepthPlan, mesh, acc):
    """Continue a chunk by one depth piece (every piece of `run_batch`)."""
    return _chunk_program(layer, observe, state, block0, plan, mesh, acc)


def empty_acc(observe, layer, source, eps: bool, records: int) -> BatchStats:
    """Statistics of no trajectory over ``records`` records of ``observe`` (and ``eps_min``)."""
    return empty_stats(_record_shapes(observe, layer, source, eps), records)


#: (observe, source) signatures -> one record's shapes: tracing them again on every call would
#: be compile time a sweep of parameters pays per call (the arrays are built on the host).
_SHAPES: dict = {}


def _signature(tree):
    leaves, treedef = jax.tree.flatten(tree)
    return treedef, tuple((l.shape, l.dtype) if hasattr(l, "shape") else l for l in leaves)


def _record_shapes(observe, layer, source, eps: bool) -> dict:
    try:
        key = (_signature(observe), _signature(layer), _signature(source), eps, jax.config.jax_enable_x64)
        hash(key)
    except TypeError:  # an unhashable static field: trace every time
        key = None
    if key is not None and key in _SHAPES:
        return _SHAPES[key]
    x = jax.eval_shape(lambda s: _canonical(s.sample(jnp.zeros(1, int))), source)
    t = jax.ShapeDtypeStruct((), jnp.int32)
    shapes = dict(jax.eval_shape(jax.vmap(observe, in_axes=(None, 0, None)), t, x, layer))
    one = {k: jax.ShapeDtypeStruct(v.shape[1:], v.dtype) for k, v in shapes.items()}
    if eps:
        one["eps_min"] = jax.ShapeDtypeStruct((), x.dtype)
    if key is not None:
        _SHAPES[key] = one
    return one


@eqx.filter_jit
def _flag_counts(valid, nonfinite, degenerate):
    return jnp.sum(valid & nonfinite), jnp.sum(valid & degenerate)


def run_batch(
    layer,
    x0,
    num: int,
    num_layers: int,
    *,
    observe: Callable,
    save_every: int,
    chunk: int,
    drop_key=None,
    per_trajectory: bool = False,
    save_states: bool = False,
    eps: bool = True,
    mesh=None,
    progress: bool = False,
):
    """Run ``num`` trajectories from ``x0`` (an array ``(num, n, d)`` or a `rankdyn.TokenSampler`).

    The batch is walked in chunks of ``chunk`` trajectories (the last one padded and masked, so
    every chunk reuses one compiled program), ``k`` chunks at a time on the ``k`` devices of
    ``mesh``; each chunk's values are folded into the statistics in batch order as it finishes
    (`rankdyn._run._fold`). Each chunk's depth runs in compiled pieces (`depth_piece`: about 20
    with ``progress``, and on the CPU a few seconds of work each), with a check for Ctrl-C and
    SIGTERM between them.

    Returns:
        ``(stats, counts, per)``: `BatchStats` over ``(num_blocks + 1,)`` saved layers,
        ``(nonfinite, degenerate)`` counts, and a dict with the flags ``nonfinite`` and
        ``degenerate`` ``(num,)`` (always: a trajectory's status is read from them), ``values``
        (name -> ``(num, saved layers, ...)``) with ``per_trajectory`` and ``states``
        ``(num, saved layers, n, d)`` with ``save_states``.
    """
    source = _source(x0)
    # Each device runs a whole chunk of ``chunk`` trajectories: the program's shapes, hence its
    # numbers, do not depend on the device count (a chunk was split over the devices before).
    step = chunk * (1 if mesh is None else mesh.devices.size)
    num_blocks = num_layers // save_every
    cpu = (mesh.devices.flat[0] if mesh is not None else jax.devices()[0]).platform == "cpu"
    piece = depth_piece(layer, chunk, num_blocks, save_every, progress=progress, cpu=cpu)
    bar = None
    if progress:
        from ._progress import progress_bar as tqdm

        bar = tqdm(total=num * num_layers, desc="simulate", unit="traj-layer", unit_scale=True)
    nonfinite_count, degenerate_count = 0, 0
    per = {"values": [], "nonfinite": [], "degenerate": [], "states": []}
    num_arr = jax.device_put(np.asarray(num))  # a transfer, not an eager program to compile
    # The running statistics, one part per program: layer 0's record (`_first`, no layer), then
    # each depth piece (`_advance`, the same in every chunk): pieces of one length are one compiled
    # program (a first piece with the start record was another copy of the scan to compile).
    sizes = [min(piece, num_blocks - b) for b in range(0, num_blocks, piece)]
    accs = [empty_acc(observe, layer, source, eps, nb) for nb in [1, *sizes]]
    if mesh is not None:  # replicated, as every round returns them: else round 2 compiles again
        accs = jax.device_put(accs, jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec()))
    for start in range(0, num, step):
        plan = DepthPlan(0, save_every, True, per_trajectory, save_states, eps)
        args = (jax.device_put(np.asarray(start)), num_arr, step, plan, mesh, accs[0])
        state, values, _, states, accs[0] = _first(layer, observe, source, drop_key, *args)
        check_interrupt()  # after the first program's compile and between chunks
        value_parts, state_parts = [values], [states]
        b = 0
        for i, nb in enumerate(sizes, 1):
            plan = DepthPlan(nb, save_every, False, per_trajectory, save_states, eps)
            state, v, _, st, accs[i] = _advance(
                layer, observe, state, jax.device_put(np.asarray(b)), plan, mesh, accs[i]
            )
            check_interrupt()
            value_parts.append(v)
            state_parts.append(st)
            b += nb
            if bar is not None:
                bar.update(min(step, num - start) * nb * save_every)
        nf, dg = _flag_counts(state.valid, state.nonfinite, state.degenerate)
        # Python ints: an eager add of device scalars would be one more compiled program.
        host = lambda c: c if isinstance(c, jax.core.Tracer) else int(c)  # noqa: E731
        nonfinite_count, degenerate_count = nonfinite_count + host(nf), degenerate_count + host(dg)
        # Every trajectory's two flags, kept whatever else is (one boolean each): its status.
        per["nonfinite"].append(state.nonfinite)
        per["degenerate"].append(state.degenerate)
        if per_trajectory or save_states:
            per["values"].append(_join_values(value_parts) if per_trajectory else None)
            if save_states:
                per["states"].append(
                    jnp.concatenate(state_parts, axis=1) if len(state_parts) > 1 else state_parts[0]
                )
    acc = accs[0] if len(accs) == 1 else jax.tree.map(lambda *a: _host_concat(a, axis=0), *accs)
    if bar is not None:
        bar.close()
    return acc, (nonfinite_count, degenerate_count), _join_chunks(per, num)


def _join_values(parts):
    """Depth pieces ``(c, nb)`` -> ``(c, saved layers)`` per name."""
    if len(parts) == 1:
        return parts[0]
    return {k: _host_concat([p[k] for p in parts]) for k in parts[0]}


def _host_concat(parts, axis: int = 1):
    """Depth pieces joined along ``axis`` on the host (small per-layer records): an eager
    ``jnp.concatenate`` is one more compiled program per simulate call (a call compiles at most 6)."""
    if any(isinstance(p, jax.core.Tracer) or not p.is_fully_addressable for p in parts):  # traced or remote
        return jnp.concatenate(parts, axis=axis)
    return jax.device_put(np.concatenate([np.asarray(p) for p in parts], axis=axis))


def _join_flags(parts, num):
    """The chunks' per-trajectory flags joined and cut to ``num`` (on the host when concrete, so
    no eager program compiles; with ``jnp`` when traced or on remote devices)."""
    if any(isinstance(p, jax.core.Tracer) or not p.is_fully_addressable for p in parts):
        return jnp.concatenate(parts)[:num] if len(parts) > 1 else parts[0][:num]
    return np.concatenate([np.asarray(p) for p in parts])[:num]


def _join_chunks(per, num):
    cat = lambda xs: jnp.concatenate(xs)[:num] if len(xs) > 1 else xs[0][:num]  # noqa: E731
    out = {"nonfinite": _join_flags(per["nonfinite"], num), "degenerate": _join_flags(per["degenerate"], num)}
    if per["values"] and per["values"][0] is not None:
        out["values"] = {k: cat([v[k] for v in per["values"]]) for k in per["values"][0]}
    if per["states"]:
        out["states"] = cat(per["states"])
    return out
