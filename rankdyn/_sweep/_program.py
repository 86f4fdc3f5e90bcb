r"""The compiled program of one group of sweep cells, on the depth scan of `rankdyn._run._scan`.

Each grid cell is an ensemble of ``batch`` trajectories $X^{(t+1)} = F_t(X^{(t)})$ (eqs. 2-3).
The cells of a chunk have equal shapes: their layers are stacked along a leading axis and run
by one compiled program per depth piece, ``vmap`` over cells, the scan core over depth with the
per-layer batch statistics streamed (`rankdyn._observe._stats`), and the final metrics kept per
sample.

The bitwise contract (``docs/sweep.md#the-bitwise-contract``): a chunk is never split. Every
chunk of a group runs that group's programs, on the whole padded chunk, on ONE device; with
several devices, whole chunks run side by side, one per device. So the arithmetic of a cell
(its shapes, hence XLA's vectorisation and summation order) is fixed by the configuration
alone, whatever the device count, the resume point or the task split. Its depth runs in the
pieces of `rankdyn simulate` (`ChunkRun`: a few seconds of estimated CPU work each, with a check
for signals between two), which change no number either.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np

from .._model._build import make_layer
from .._model._config import ignored_fields
from .._model._params import PARAMS, param
from .._model._tokens import initial_tokens
from .._observe._metric_observer import MetricObserver
from .._observe._stats import chunk_stats
from .._run._interrupt import check_interrupt
from .._run._scan import ScanState, scan_depth
from .._run._sizing import depth_piece
from ._params import cell_mask
from ._schema import SweepConfig

__all__ = ["ChunkRun", "compute_chunk", "launch_chunk", "run_pieces", "chunk_arrays"]


#: Layer arguments of a cell, from the parameter table: the real numbers are traced (cells that
#: differ only in them share one compiled builder), the rest is static. The mask's parameters
#: build the mask outside (`cell_mask`).
_LAYER_ROWS = tuple(
    p for p in PARAMS if p.key and p.api and p.name != "mask" and (p.reads or ("",))[0] != "mask"
)
_TRACED = tuple(p.name for p in _LAYER_ROWS if p.kind == "real" and not p.structural)
_STATIC_BUILD = tuple(p.key for p in _LAYER_ROWS if p.name not in _TRACED) + (
    "num_layers",
    "per_layer_weights",
    "x0",
    "batch",
)


@eqx.filter_jit
def _build(key, traced: dict, p_static: tuple):
    """Layer (with a placeholder mask), x0 and dropout key of one cell, compiled: eager
    construction would dispatch (and on first use compile) dozens of small ops per cell. Numbers
    that vary between cells are traced arrays, so such cells share this compiled builder."""
    p = dict(p_static)
    k_layer, k_x0, k_drop = jr.split(key, 3)  # as `rankdyn simulate --seed`
    kwargs = {r.name: traced[r.name] if r.name in traced else p[r.key] for r in _LAYER_ROWS}
    for name in ignored_fields(kwargs):  # a cell's ignored parameters are not given to the layer
        kwargs.pop(name, None)
    layer = make_layer(
        k_layer,
        mask="complete",
        num_layers=p["num_layers"] if p["per_layer_weights"] else None,
        output_projection=p["heads"] > 1,
        **kwargs,
    )
    x0 = initial_tokens(k_x0, p["x0"], p["n"], p["d"], batch=p["batch"])
    keys = jax.vmap(lambda i: jr.fold_in(k_drop, i))(jnp.arange(p["batch"]))  # as `rankdyn.simulate`
    return layer, x0, keys


def _cell_inputs(p: dict):
    """Layer, initial tokens and per-trajectory dropout keys of one cell, and its layer on the
    complete mask (as built, before the cell's mask is set)."""
    arr = lambda v: None if v is None else jnp.asarray(v, dtype=float)  # noqa: E731
    layer, x0, keys = _build(
        jr.key(p["seed"]),
        {name: arr(p[param(name).key]) for name in _TRACED},
        tuple((k, p[k]) for k in _STATIC_BUILD),
    )
    return eqx.tree_at(lambda l: l.mask, layer, jnp.asarray(cell_mask(p))), x0, keys, layer


def _program_impl(
    layers,
    start,
    block0,
    num_layers: int,
    save_every: int,
    per_layer: tuple,
    final: tuple,
    rank_tol: float,
    piece: tuple[int, bool, bool],
):
    r"""One depth piece of a chunk of a group: ``vmap`` over cells (stacked layers) of the depth scan.

    For one cell: `rankdyn._run._scan.scan_depth` over ``piece = (num_blocks, first, last)``
    blocks of ``save_every`` layers from block ``block0``, streaming the batch statistics of the
    ``per_layer`` metrics and of Theorem 1's $\epsilon$ (``eps_min``) at its saved layers (layer
    0 too in the ``first`` piece, which starts from ``start = (x0s, keys)``; the others continue
    the `ScanState` ``start``, and ``block0`` is None in the first). The ``last`` piece also gives
    the ``final`` metrics of every sample's $X^{(T)}$ (`_finish`); the others return the state.
    A chunk that is one piece (``first`` and ``last``) is one program, as before the pieces.
    """
    observe = MetricObserver(per_layer, rank_tol)
    num_blocks, first, last = piece

    def one_cell(layer, start_c):
        if first:
            x0c, keys_c = start_c
            state = ScanState.start(x0c, keys_c if layer.dropout > 0 else None)
        else:
            state = start_c
        b0 = jnp.zeros((), int) if first else block0
        state, stats = scan_depth(
            layer, observe, chunk_stats, state, b0, num_blocks, save_every, include_start=first
        )
        return (stats, *_finish(layer, state, num_layers, final, rank_tol)) if last else (state, stats)

    return eqx.filter_vmap(one_cell)(layers, start)


def _finish(layer, state: ScanState, num_layers: int, final: tuple, rank_tol: float):
    """One cell's ``final`` metrics of every sample's last state, and its two flags."""
    xf = jax.vmap(MetricObserver(final, rank_tol), in_axes=(None, 0, None))(num_layers, state.x, layer)
    return xf, state.degenerate, state.nonfinite


#: The jitted programs; module attributes so a test can wrap `_program_impl` with
#: ``eqx.debug.assert_max_traces`` and prove that a group compiles once.
_jit_program = eqx.filter_jit(_program_impl)
_jit_finish = eqx.filter_jit(eqx.filter_vmap(_finish))


def _stack(trees):
    return jax.tree.map(lambda *xs: jnp.stack(xs), *trees)


class ChunkRun:
    """One chunk in flight: its depth pieces (`rankdyn._run._sizing.depth_piece`, the pieces of
    `rankdyn simulate`: a few seconds of work each on the CPU), dispatched one at a time.

    `launch_chunk` dispatches the first piece; `run_pieces` the others, with a check for Ctrl-C
    and SIGTERM between two; `chunk_arrays` reads the numbers. A chunk that is cut runs three
    programs (the first piece, which records layer 0 too; the next pieces, of one length where
    `even_piece` finds one, else a fourth for the shorter last; the final metrics), else one
    (`_program_impl` whole), and the cut changes no number: the
    same layers in the same order, and per saved layer the same statistics
    (``tests/test_sweep.py`` compares them bit for bit).
    """

    def __init__(self, cells, device_index, inputs, piece: int, run_args: tuple, num_blocks: int):
        self.cells, self.device = cells, device_index
        self._layers, self._args = inputs[0], run_args
        self._sizes = [min(piece, num_blocks - b) for b in range(0, max(num_blocks, 1), piece)]
        self._stats, self._next, self._block = [], 0, 0
        self._carry = (inputs[1], inputs[2])
        self.outputs = None
        self.advance()

    @property
    def done(self) -> bool:
        """Every piece (and the final metrics) dispatched."""
        return self._next == len(self._sizes)

    def advance(self) -> None:
        """Dispatch the next piece (asynchronously), and the final metrics after the last one."""
        if self.done:
            return
        nb, first = self._sizes[self._next], self._next == 0
        last = self._next == len(self._sizes) - 1
        whole = first and last
        block0 = None if first else np.asarray(self._block)
        out = _jit_program(self._layers, self._carry, block0, *self._args, (nb, first, whole))
        self._next, self._block = self._next + 1, self._block + nb
        if whole:
            self.outputs = out
            return
        self._carry, stats = out
        self._stats.append(stats)
        if last:  # the final metrics of the state after the last layer: a small program
            num_layers, _, _, final, rank_tol = self._args
            finals = _jit_finish(self._layers, self._carry, num_layers, final, rank_tol)
            self.outputs = (self._stats, *finals)

    def wait(self) -> None:
        """Until the piece dispatched last has finished."""
        jax.block_until_ready(self._carry if self.outputs is None else self.outputs)


def run_pieces(runs: list[ChunkRun]) -> None:
    """Run the chunks of ``runs`` (one per device, side by side) to their last piece, waiting for
    every chunk's piece and checking for Ctrl-C and SIGTERM before the next; a signal raises
    `rankdyn._run._interrupt.Interrupted` and the chunks in flight are dropped (none is saved)."""
    while True:
        for run in runs:
            run.wait()
        if all(run.done for run in runs):
            return
        check_interrupt()  # between depth pieces (CLI signals only)
        for run in runs:
            run.advance()


def launch_chunk(cfg: SweepConfig, group: dict, cells: tuple[int, ...], size: int, device=None) -> ChunkRun:
    """Start one chunk (padded to ``size`` cells) on ``device`` (default: JAX's default device).

    Returns at once (JAX dispatches asynchronously) with its first depth piece dispatched, so
    chunks launched on several devices run side by side; `run_pieces` runs the others and
    `chunk_arrays` reads the numbers. The programs and their shapes do not depend on the
    device: the same numbers on any of them.
    """
    shape = cfg.shape
    params = [cfg.cell(tuple(int(i) for i in np.unravel_index(c, shape)) if shape else ()) for c in cells]
    built = [_cell_inputs(p) for p in params]
    built += [built[-1]] * (size - len(built))  # padding: same shapes, so no new compile
    inputs = (
        _stack([b[0] for b in built]),
        jnp.stack([b[1] for b in built]),
        jnp.stack([b[2] for b in built]),
    )
    if device is not None:
        inputs = jax.device_put(inputs, device)
    num_blocks = group["num_layers"] // group["save_every"]
    cpu = (device or jax.devices()[0]).platform == "cpu"
    # Sized on the complete mask's layer (the most work), over every trajectory of the chunk.
    piece = depth_piece(
        built[0][3], size * group["batch"], num_blocks, group["save_every"], progress=False, cpu=cpu
    )
    run_args = (group["num_layers"], group["save_every"], cfg.per_layer, cfg.final, group["rank_tol"])
    index = 0 if device is None else jax.local_devices().index(device)
    return ChunkRun(cells, index, inputs, piece, run_args, num_blocks)


def chunk_arrays(run: ChunkRun) -> dict[str, np.ndarray]:
    """Wait for a chunk run to its end by `run_pieces` and return its per-cell NumPy arrays."""
    stats, finals, bad, nonfinite = run.outputs
    if isinstance(stats, list):  # the pieces' statistics, record axis after the cells'
        stats = jax.tree.map(lambda *p: np.concatenate([np.asarray(a) for a in p], axis=1), *stats)
    cells, device = run.cells, run.device
    m = len(cells)
    count = np.asarray(stats.count, dtype=np.float64)[:m]  # (cells, saved layers)
    out = {
        "cells": np.asarray(cells, dtype=np.int64),
        "num_devices": np.asarray(1, dtype=np.int64),  # a chunk is never split (module docstring)
        "device": np.asarray(device, dtype=np.int64),
        "nonfinite": np.asarray(nonfinite)[:m].sum(axis=1).astype(np.int64),
        "degenerate": np.asarray(bad)[:m].sum(axis=1).astype(np.int64),
    }
    empty = count == 0  # every trajectory non-finite at that layer: NaN statistics
    for k in stats.mean:
        mean = np.asarray(stats.mean[k], dtype=np.float64)[:m]
        std = np.sqrt(np.asarray(stats.m2[k], dtype=np.float64)[:m] / np.where(empty, 1.0, count))
        out[f"series/{k}"] = np.stack([np.where(empty, np.nan, mean), np.where(empty, np.nan, std)], axis=-1)
    for k, v in finals.items():
        out[f"final/{k}"] = np.asarray(v, dtype=np.float64)[:m]
    return out


def compute_chunk(cfg: SweepConfig, group: dict, cells: tuple[int, ...], size: int) -> dict[str, np.ndarray]:
    """Run one chunk (padded to ``size`` cells) on the default device; its per-cell NumPy arrays."""
    run = launch_chunk(cfg, group, cells, size)
    run_pieces([run])
    return chunk_arrays(run)
