"""The sweep's labelled dataset (xarray), built from the chunk files of a run folder."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

from .._errors import UsageError
from .._observe._tolerances import fit_floor
from .._run._io import to_jsonable
from .._theory._rates import fit_rate
from ._chunks import _chunk_path, _load_chunk
from ._params import cell_mask
from ._plan import sweep_plan
from ._schema import SweepConfig

__all__ = ["assemble_sweep", "NETCDF_ENGINE"]

#: xarray engine for ``sweep.nc``: the netCDF4 library (HDF5-based netCDF-4 files, readable by
#: every netCDF tool). h5netcdf would write the same format but needs h5py, which we do not require.
NETCDF_ENGINE = "netcdf4"


def _coord(vals: tuple) -> np.ndarray:
    if all(isinstance(v, bool) for v in vals):
        return np.asarray([int(v) for v in vals], dtype=np.int64)  # netCDF has no boolean type
    if all(isinstance(v, str) for v in vals):
        return np.asarray(vals, dtype=object)
    return np.asarray(vals)


def assemble_sweep(cfg: SweepConfig, out: str | os.PathLike):
    """Build the labelled dataset from the chunk files in ``out/chunks`` (all must exist).

    Variables (``A...`` = the sweep axes, in config order):
        ``<metric>`` for every per-layer metric and ``eps_min``: dims ``(A..., layer, stat)``,
            ``stat`` = (mean, std) over the finite trajectories of a cell.
        ``final_<metric>``: dims ``(A..., sample)``, the last layer's value of every sample.
        ``mu_rate``: ``(A...)``, `rankdyn.theory.fit_rate` of the mean mu curve (per-layer factor);
            NaN where that curve is NaN at a layer of the fit window (all trajectories non-finite).
        ``nonfinite``, ``degenerate``: ``(A...)`` counts of such trajectories.
        ``radius``, ``strongly_connected``, ``quasi_strongly_connected``, ``num_centers``:
            the mask graph (``docs/theory.md#masks-as-graphs``), over only the sweep axes that
            change the mask (``mask``, ``n``, ``window``, ...; no dims when none does).
    The per-layer and final values are stored in the run's dtype.
    Cells with fewer layers (or samples) than the largest are padded with NaN.
    Attributes: ``config`` (TOML text), ``config_hash``, ``normalized_config`` (JSON),
    ``versions`` (JSON), ``provenance`` (JSON: device, time of the first run), ``devices_per_chunk``
    (JSON: over how many devices each chunk's samples were split: 1 since chunks are never split,
    more in folders of rankdyn 0.4 and older), ``dtype``, ``name``, ``description``.
    """
    import xarray as xr

    out = Path(out)
    plan = sweep_plan(cfg)
    shape, dims = cfg.shape, tuple(cfg.axes)
    ncell = cfg.num_cells
    max_layers = max(g["num_layers"] for g, _ in plan.groups)
    save_every = cfg.fixed["save_every"]
    layer_coord = np.arange(0, max_layers + 1, save_every)
    max_batch = max(g["batch"] for g, _ in plan.groups)
    names = tuple(cfg.per_layer) + ("eps_min",)
    # Stored in the run's dtype: a float32 sweep's values are float32 numbers.
    dtype = _dtype_of(cfg, out)
    series = {k: np.full((ncell, len(layer_coord), 2), np.nan, dtype) for k in names}
    finals = {k: np.full((ncell, max_batch), np.nan, dtype) for k in cfg.final}
    counts = {k: np.zeros(ncell, np.int64) for k in ("nonfinite", "degenerate")}
    devices_per_chunk = []
    for i, (_, chunk_cells) in enumerate(plan.chunks):
        data = _load_chunk(_chunk_path(out, i), cfg, chunk_cells)
        if data is None:
            raise UsageError(
                f"chunk {i} of the sweep in {str(out)!r} is missing; run with --resume to complete it."
            )
        cells = data["cells"]
        devices_per_chunk.append(int(data["num_devices"]))
        for k in names:
            v = data[f"series/{k}"]
            series[k][cells, : v.shape[1]] = v
        for k in cfg.final:
            v = data[f"final/{k}"]
            finals[k][cells, : v.shape[1]] = v
        for k in counts:
            counts[k][cells] = data[k]
    graph = {
        k: np.zeros(ncell, t)
        for k, t in (
            ("radius", np.float64),
            ("strongly_connected", np.int8),
            ("quasi_strongly_connected", np.int8),
            ("num_centers", np.int64),
        )
    }
    from .._model._graph import graph_info  # loads JAX: not on the --assemble folder checks

    rate = np.full(ncell, np.nan)
    info_cache = {}
    for flat, idx in enumerate(cfg.indices()):
        p = cfg.cell(idx)
        mk = (p["mask"], p["n"], p["window"], p["dilation"], p["num_global"], p["mask_p"], p["mask_seed"])
        if mk not in info_cache:
            info_cache[mk] = graph_info(cell_mask(p))
        info = info_cache[mk]
        graph["radius"][flat] = np.nan if info.radius is None else info.radius
        graph["strongly_connected"][flat] = info.strongly_connected
        graph["quasi_strongly_connected"][flat] = info.quasi_strongly_connected
        graph["num_centers"][flat] = info.num_centers
        mean_mu = series["mu"][flat, :, 0]
        # Leave out the round-off floor: points below `fit_floor` (1000 machine epsilons) of mu at layer 0.
        floor = fit_floor(_dtype_of(cfg, out), mean_mu[0] if np.isfinite(mean_mu[0]) else 0.0)
        rate[flat] = fit_rate(layer_coord, mean_mu, start=cfg.rate_start, stop=cfg.rate_stop, floor=floor)
        stop = max_layers if cfg.rate_stop is None else cfg.rate_stop
        window = (layer_coord >= cfg.rate_start) & (layer_coord <= stop)
        if not np.all(np.isfinite(mean_mu[window & (layer_coord <= p["num_layers"])])):
            rate[flat] = np.nan  # every trajectory non-finite at some layer of the window: no rate

    coords = {k: _coord(v) for k, v in cfg.axes.items()}
    coords |= {
        "layer": layer_coord,
        "stat": np.asarray(["mean", "std"], dtype=object),
        "sample": np.arange(max_batch),
    }
    variables = {}
    for k, v in series.items():
        variables[k] = (dims + ("layer", "stat"), v.reshape(shape + v.shape[1:]))
    for k, v in finals.items():
        variables[f"final_{k}"] = (dims + ("sample",), v.reshape(shape + v.shape[1:]))
    variables["mu_rate"] = (dims, rate.reshape(shape))
    for k, v in counts.items():
        variables[k] = (dims, v.reshape(shape))
    # The mask's graph quantities vary only along the axes that change the mask.
    mask_axes = tuple(a for a in dims if a in _MASK_KEYS)
    for k, v in graph.items():
        v = v.reshape(shape)
        for axis in reversed(range(len(dims))):
            if dims[axis] not in _MASK_KEYS:
                v = np.take(v, 0, axis=axis)
        variables[k] = (mask_axes, v)
    manifest = json.loads((out / "manifest.json").read_text())
    attrs = {
        "name": cfg.name,
        "description": cfg.description,
        "config": cfg.text,
        "config_hash": cfg.hash,
        "normalized_config": json.dumps(to_jsonable(cfg.normalized()), sort_keys=True),
        "dtype": manifest["dtype"],
        "provenance": json.dumps(manifest["provenance"], sort_keys=True),
        "devices_per_chunk": json.dumps(devices_per_chunk),
        "versions": json.dumps(manifest["versions"], sort_keys=True),
        "per_layer_metrics": ",".join(names),
        "final_metrics": ",".join(cfg.final),
        "stat_note": (
            "mean and std over the trajectories of each cell finite at that layer (non-finite ones are "
            "counted in nonfinite)"
        ),
    }
    ds = xr.Dataset(variables, coords=coords, attrs=attrs)
    ds["mu_rate"].attrs["long_name"] = "fitted per-layer collapse factor exp(slope of log mean mu)"
    ds["radius"].attrs["long_name"] = (
        "radius r of the mask graph (``docs/theory.md#masks-as-graphs``); NaN if not quasi-strongly connected"
    )
    return ds


#: The cell parameters that decide the mask (`cell_mask`), hence its graph quantities.
_MASK_KEYS = ("mask", "n", "window", "dilation", "num_global", "mask_p", "mask_seed")


def _dtype_of(cfg: SweepConfig, out: Path):
    return np.dtype(json.loads((out / "manifest.json").read_text())["dtype"])
