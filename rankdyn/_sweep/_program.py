r"""The compiled program of one group of sweep cells, on the depth scan of `rankdyn._run._scan`.

Each grid cell is an ensemble of ``batch`` trajectories $X^{(t+1)} = F_t(X^{(t)})$ (eqs. 2-3).
The cells of a chunk have equal shapes: their layers are stacked along a leading axis and run
by ONE compiled program, ``vmap`` over cells, the scan core over depth with the per-layer batch
statistics streamed (`rankdyn._observe._stats`), and the final metrics kept per sample.

The bitwise contract (``docs/sweep.md#the-bitwise-contract``): a chunk is never split. Every
chunk of a group runs that group's one program, on the whole padded chunk, on ONE device; with
several devices, whole chunks run side by side, one per device. So the arithmetic of a cell
(its shapes, hence XLA's vectorisation and summation order) is fixed by the configuration
alone, whatever the device count, the resume point or the task split.
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
from .._run._scan import ScanState, scan_depth
from ._params import cell_mask
from ._schema import SweepConfig

__all__ = ["compute_chunk", "launch_chunk", "chunk_arrays"]


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
    """Layer, initial tokens and per-trajectory dropout keys of one cell."""
    arr = lambda v: None if v is None else jnp.asarray(v, dtype=float)  # noqa: E731
    layer, x0, keys = _build(
        jr.key(p["seed"]),
        {name: arr(p[param(name).key]) for name in _TRACED},
        tuple((k, p[k]) for k in _STATIC_BUILD),
    )
    layer = eqx.tree_at(lambda l: l.mask, layer, jnp.asarray(cell_mask(p)))
    return layer, x0, keys


def _program_impl(
    layers,
    x0s,
    keys,
    num_layers: int,
    save_every: int,
    per_layer: tuple,
    final: tuple,
    rank_tol: float,
):
    r"""One chunk of a group: ``vmap`` over cells (stacked layers) of the depth scan.

    For one cell: `rankdyn._run._scan.scan_depth` over blocks of ``save_every`` layers, streaming
    the batch statistics of the ``per_layer`` metrics and of Theorem 1's $\epsilon$
    (``eps_min``) at layers $0, k, \dots, T$; the ``final`` metrics of every sample's
    $X^{(T)}$; whether a normalisation met a zero row; whether the trajectory became non-finite.
    """
    observe = MetricObserver(per_layer, rank_tol)
    observe_final = MetricObserver(final, rank_tol)

    def one_cell(layer, x0c, keys_c):
        state = ScanState.start(x0c, keys_c if layer.dropout > 0 else None)
        state, stats = scan_depth(
            layer,
            observe,
            chunk_stats,
            state,
            jnp.zeros((), int),
            num_layers // save_every,
            save_every,
            include_start=True,
        )
        xf, bad, nonfinite = state.x, state.degenerate, state.nonfinite
        final = jax.vmap(observe_final, in_axes=(None, 0, None))(num_layers, xf, layer)
        return stats, final, bad, nonfinite

    return eqx.filter_vmap(one_cell)(layers, x0s, keys)


#: The jitted program; a module attribute so a test can wrap `_program_impl` with
#: ``eqx.debug.assert_max_traces`` and prove that a group compiles once.
_jit_program = eqx.filter_jit(_program_impl)


def _stack(trees):
    return jax.tree.map(lambda *xs: jnp.stack(xs), *trees)


def launch_chunk(cfg: SweepConfig, group: dict, cells: tuple[int, ...], size: int, device=None):
    """Start one chunk (padded to ``size`` cells) on ``device`` (default: JAX's default device).

    Returns at once (JAX dispatches asynchronously), so chunks launched on several devices run
    side by side; `chunk_arrays` waits for one and reads its numbers. The program and its shapes
    do not depend on the device: the same numbers on any of them.
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
    outputs = _jit_program(
        *inputs, group["num_layers"], group["save_every"], cfg.per_layer, cfg.final, group["rank_tol"]
    )
    index = 0 if device is None else jax.local_devices().index(device)
    return cells, index, outputs


def chunk_arrays(launched) -> dict[str, np.ndarray]:
    """Wait for a chunk started by `launch_chunk` and return its per-cell NumPy arrays."""
    cells, device, (stats, finals, bad, nonfinite) = launched
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
    return chunk_arrays(launch_chunk(cfg, group, cells, size))
