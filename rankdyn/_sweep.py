r"""Declarative parameter sweeps: a TOML grid -> one labelled dataset, resumable on disk.

A sweep is the Cartesian product of the values in ``[axes]`` with the parameters in ``[fixed]``
(SPEC §6-7: masks x temperatures x normalisations x value families x sizes x seeds). Each grid
cell is an ensemble of ``batch`` trajectories $X^{(t+1)} = F_t(X^{(t)})$ (eqs. 2-3).

Cells are grouped by the parameters that change shapes or program structure (`STRUCTURAL`:
``n``, ``d``, ``layers``, ``batch``, norm placement, LN variant, ...). Inside a group every
other parameter (temperature ``dqk``, ``w``, value and query/key families, masks of equal ``n``,
seeds, initial conditions) only changes arrays: the cells' layers are stacked along a leading
axis and run by ONE compiled program, ``vmap`` over cells and over samples, ``lax.scan`` over
depth. Groups are cut into chunks of equal size (the last one padded by repeating a cell, so
the group compiles once); each chunk is written atomically to ``DIR/chunks/`` as soon as it is
done, so an interrupted sweep loses at most the chunk in flight and ``resume=True`` computes
only what is missing. The final dataset is assembled from the chunk files alone, so a resumed
sweep gives the same ``DIR/sweep.nc`` as an uninterrupted one.
"""

from __future__ import annotations

import hashlib
import importlib.util
import itertools
import json
import math
import os
import tempfile
import time
import warnings
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
from jax import lax

from ._build import make_layer
from ._graph import graph_info
from ._init import X0_NAMES, initial_tokens
from ._io import CompileTimer, provenance, to_jsonable, write_json
from ._layer import PLACEMENTS
from ._masks import MASK_NAMES, make_mask
from ._metrics import (
    METRIC_NAMES,
    collapse_metrics,
    mean_abs_cosine,
    min_cosine,
    mu,
    mu_normalized,
    mu_relative,
    row_norms,
)
from ._norms import LN_NAMES
from ._rates import fit_rate
from ._weights import QK_NAMES, VALUE_NAMES

__all__ = [
    "SweepConfig",
    "SweepPlan",
    "load_sweep_config",
    "parse_sweep_config",
    "sweep_plan",
    "run_sweep",
    "assemble_sweep",
    "SWEEP_PARAMS",
    "STRUCTURAL",
]

# ----------------------------------------------------------------------------- parameters

# name -> (default, kind). kind: the Python type a value must have ("str", "int", "float",
# "bool", "float?" / "int?" = number or absent).
SWEEP_PARAMS: dict[str, tuple[Any, str]] = {
    # model (arguments of `rankdyn.make_layer`)
    "mask": ("causal", "str"),
    "window": (1, "int"),
    "dilation": (4, "int"),
    "num_global": (1, "int"),
    "mask_p": (0.1, "float"),
    "mask_seed": (0, "int"),
    "n": (32, "int"),
    "d": (64, "int"),
    "dqk": (None, "float?"),
    "norm": ("post", "str"),
    "ln": ("sphere", "str"),
    "ln_radius": (None, "float?"),
    "value": ("orthogonal", "str"),
    "w": (2.0, "float"),
    "jordan_k": (None, "int?"),
    "value_std": (None, "float?"),
    "qk": ("bert", "str"),
    "qk_std": (None, "float?"),
    "heads": (1, "int"),
    "per_layer_weights": (False, "bool"),
    "skip": (False, "bool"),
    "mlp": (False, "bool"),
    # ensemble
    "layers": (64, "int"),
    "batch": (256, "int"),
    "x0": ("sphere", "str"),
    "seed": (0, "int"),
    # recording
    "save_every": (1, "int"),
    "rank_tol": (1e-6, "float"),
}

#: Parameters that change shapes or the program's structure: cells that differ in one of these
#: run in different compiled programs. Every other parameter is an array inside one program.
STRUCTURAL = (
    "n", "d", "layers", "batch", "norm", "ln", "heads", "per_layer_weights", "skip", "mlp",
    "save_every", "rank_tol",
)

_CHOICES = {
    "mask": MASK_NAMES, "norm": PLACEMENTS, "ln": LN_NAMES, "value": VALUE_NAMES, "qk": QK_NAMES,
    "x0": X0_NAMES,
}
_FIXED_ONLY = ("save_every", "rank_tol")  # a grid over these would change the layer coordinate

#: Metrics recorded at every saved layer by default: no SVD (the expensive part on CPU).
CHEAP_METRICS = ("mu", "mu_rel", "mu_normalized", "row_norm_mean", "row_norm_min", "min_cos", "mean_abs_cos")
_SPECTRAL = ("sigma_max", "sigma_min", "sigma_ratio", "stable_rank", "num_rank", "eff_rank")
_OBSERVE_KEYS = ("per_layer", "final", "rate_start", "rate_stop")
_RUN_KEYS = ("chunk_trajectories",)
_TOP_KEYS = ("name", "description", "axes", "fixed", "observe", "run")

#: xarray engine for ``sweep.nc``: the netCDF4 library (HDF5-based netCDF-4 files, readable by
#: every netCDF tool). h5netcdf would write the same format but needs h5py, which we do not require.
NETCDF_ENGINE = "netcdf4"

#: Environment variable: seconds to sleep after each chunk is written. Only for tests and demos
#: of interruption (it makes "kill after the first chunk" deterministic); never needed otherwise.
PAUSE_ENV = "RANKDYN_SWEEP_PAUSE_S"


def _where(key: str, axes: Mapping) -> str:
    return f"[axes] {key}" if key in axes else f"[fixed] {key}"


def _check_type(key: str, value, kind: str, where: str):
    """Coerce ``value`` to the parameter's type or raise naming the key and value."""
    base = kind.rstrip("?")
    if base == "str":
        if not isinstance(value, str):
            raise ValueError(f"{where}: expected a string, got {value!r}.")
        if key in _CHOICES and value not in _CHOICES[key]:
            raise ValueError(f"{where}: unknown value {value!r}; expected one of {', '.join(_CHOICES[key])}.")
        return value
    if base == "bool":
        if not isinstance(value, bool):
            raise ValueError(f"{where}: expected true or false, got {value!r}.")
        return value
    if base == "int":
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"{where}: expected an integer, got {value!r}.")
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{where}: expected a number, got {value!r}.")
    value = float(value)
    if not math.isfinite(value):
        raise ValueError(f"{where}: expected a finite number, got {value!r}.")
    return value


def _check_scalar(key: str, v, where: str) -> None:
    """Range checks of one parameter value."""
    positive = ("n", "d", "heads", "layers", "batch", "save_every", "dilation")
    if key in positive and v < 1:
        raise ValueError(f"{where}: must be a positive integer, got {v!r}.")
    if key in ("window", "num_global", "seed", "mask_seed") and v < 0:
        raise ValueError(f"{where}: must be >= 0, got {v!r}.")
    if key in ("dqk", "ln_radius", "rank_tol", "value_std", "qk_std") and v is not None and not v > 0:
        raise ValueError(f"{where}: must be > 0, got {v!r}.")
    if key == "jordan_k" and v is not None and v < 1:
        raise ValueError(f"{where}: a Jordan block needs size >= 1, got {v!r}.")
    if key == "mask_p" and not 0 <= v <= 1:
        raise ValueError(f"{where}: an edge probability must be in [0, 1], got {v!r}.")


def _check_cell(p: dict, axes: Mapping) -> None:
    """Checks that involve several parameters of one grid cell (bad combinations)."""
    n, d = p["n"], p["d"]
    if p["mask"] in ("window", "window-uni", "global") and p["window"] >= n:
        raise ValueError(
            f"{_where('window', axes)} = {p['window']} is not smaller than {_where('n', axes)} = {n} "
            f"(mask {p['mask']!r}): a window must be narrower than the sequence."
        )
    if p["mask"] == "global" and p["num_global"] > n:
        raise ValueError(f"{_where('num_global', axes)} = {p['num_global']} exceeds n = {n}.")
    if p["value"] == "jordan" and p["jordan_k"] is not None and p["jordan_k"] > d:
        raise ValueError(
            f"{_where('jordan_k', axes)} = {p['jordan_k']}: a Jordan block larger than "
            f"{_where('d', axes)} = {d} does not fit in W_V."
        )
    if d % p["heads"]:
        raise ValueError(f"{_where('heads', axes)} = {p['heads']} does not divide {_where('d', axes)} = {d}.")
    if p["layers"] % p["save_every"]:
        raise ValueError(
            f"{_where('layers', axes)} = {p['layers']} is not a multiple of [fixed] save_every = {p['save_every']}."
        )


# ----------------------------------------------------------------------------- config


@dataclass(frozen=True)
class SweepConfig:
    """A validated sweep: ordered axes, fixed parameters, what to record and how to chunk.

    Attributes:
        axes: axis name -> tuple of values (the grid; order = dimension order of the dataset).
        fixed: every other parameter of `SWEEP_PARAMS`, defaults filled in.
        per_layer: metrics recorded at every saved layer (plus ``eps_min``, always).
        final: metrics of the last layer, kept per sample (spectral ones cost an SVD).
        rate_start, rate_stop: depth window of the fitted collapse rate (`rankdyn.fit_rate`).
        chunk_trajectories: at most this many trajectories per chunk file.
        name, description: free text.
        text: the TOML text the config was read from (stored with the results).
    """

    axes: dict[str, tuple]
    fixed: dict[str, Any]
    per_layer: tuple[str, ...] = CHEAP_METRICS
    final: tuple[str, ...] = METRIC_NAMES
    rate_start: int = 0
    rate_stop: int | None = None
    chunk_trajectories: int = 4096
    name: str = "sweep"
    description: str = ""
    text: str = field(default="", compare=False)

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(len(v) for v in self.axes.values())

    @property
    def num_cells(self) -> int:
        return math.prod(self.shape)

    def cell(self, index: tuple[int, ...]) -> dict[str, Any]:
        """All parameters of the grid cell at multi-index ``index`` (dqk default filled in)."""
        p = dict(self.fixed)
        for (k, vals), i in zip(self.axes.items(), index):
            p[k] = vals[i]
        if p["dqk"] is None:
            p["dqk"] = float(p["d"] // p["heads"])
        return p

    def indices(self) -> Iterator[tuple[int, ...]]:
        """Multi-indices of all cells in row-major (C) order."""
        return itertools.product(*(range(s) for s in self.shape))

    def normalized(self) -> dict:
        """A canonical JSON-able description: two configs with equal hashes give equal results."""
        return {
            "axes": [[k, list(v)] for k, v in self.axes.items()],
            "fixed": dict(sorted(self.fixed.items())),
            "per_layer": list(self.per_layer),
            "final": list(self.final),
            "rate_start": self.rate_start,
            "rate_stop": self.rate_stop,
            "chunk_trajectories": self.chunk_trajectories,
        }

    @property
    def hash(self) -> str:
        """SHA-256 of the normalised config (names and comments of the TOML do not count)."""
        blob = json.dumps(self.normalized(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _string_list(key, value, allowed):
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"[observe] {key}: expected a list of metric names, got {value!r}.")
    bad = [v for v in value if v not in allowed]
    if bad:
        raise ValueError(f"[observe] {key}: unknown metric {bad[0]!r}; expected names from {', '.join(allowed)}.")
    if len(set(value)) != len(value):
        raise ValueError(f"[observe] {key}: duplicate metric names in {value!r}.")
    return tuple(value)


def parse_sweep_config(data: Mapping, text: str = "") -> SweepConfig:
    """Validate a parsed TOML mapping and return a `SweepConfig`; nothing is computed.

    Raises:
        ValueError: naming the offending key and value for unknown tables, axis or parameter
            names, empty axes, duplicate axis values, wrong types, out-of-range values, and
            incompatible combinations (a window not narrower than n, a Jordan block larger
            than d, heads not dividing d, ...).
    """
    unknown = [k for k in data if k not in _TOP_KEYS]
    if unknown:
        raise ValueError(f"unknown top-level key or table {unknown[0]!r}; expected {', '.join(_TOP_KEYS)}.")
    axes_in = data.get("axes", {})
    fixed_in = data.get("fixed", {})
    for tab, val in (("axes", axes_in), ("fixed", fixed_in), ("observe", data.get("observe", {})),
                     ("run", data.get("run", {}))):
        if not isinstance(val, Mapping):
            raise ValueError(f"[{tab}] must be a table, got {val!r}.")
    axes: dict[str, tuple] = {}
    for k, vals in axes_in.items():
        if k not in SWEEP_PARAMS:
            raise ValueError(f"unknown axis {k!r} in [axes]; known parameters: {', '.join(SWEEP_PARAMS)}.")
        if k in _FIXED_ONLY:
            raise ValueError(f"[axes] {k}: cannot be an axis (it changes the layer coordinate); put it in [fixed].")
        if not isinstance(vals, list):
            raise ValueError(f"[axes] {k}: an axis is a list of values, got {vals!r} (use [fixed] for one value).")
        if len(vals) == 0:
            raise ValueError(f"[axes] {k}: empty axis; give at least one value.")
        kind = SWEEP_PARAMS[k][1]
        clean = []
        for v in vals:
            v = _check_type(k, v, kind, f"[axes] {k} value {v!r}")
            _check_scalar(k, v, f"[axes] {k} = {v!r}")
            clean.append(v)
        if len(set(clean)) != len(clean):
            raise ValueError(f"[axes] {k}: duplicate values in {vals!r}; coordinates must be unique.")
        axes[k] = tuple(clean)
    fixed: dict[str, Any] = {}
    for k, v in fixed_in.items():
        if k not in SWEEP_PARAMS:
            raise ValueError(f"unknown parameter {k!r} in [fixed]; known parameters: {', '.join(SWEEP_PARAMS)}.")
        if k in axes:
            raise ValueError(f"{k!r} is both an axis and a fixed parameter; keep one.")
        if isinstance(v, list):
            raise ValueError(f"[fixed] {k}: a fixed parameter is one value, got the list {v!r}; move it to [axes].")
        v = _check_type(k, v, SWEEP_PARAMS[k][1], f"[fixed] {k} = {v!r}")
        _check_scalar(k, v, f"[fixed] {k} = {v!r}")
        fixed[k] = v
    for k, (default, _) in SWEEP_PARAMS.items():
        if k not in axes and k not in fixed:
            fixed[k] = default

    obs = dict(data.get("observe", {}))
    bad = [k for k in obs if k not in _OBSERVE_KEYS]
    if bad:
        raise ValueError(f"unknown key {bad[0]!r} in [observe]; expected {', '.join(_OBSERVE_KEYS)}.")
    per_layer = _string_list("per_layer", obs.get("per_layer", list(CHEAP_METRICS)), METRIC_NAMES)
    if "mu" not in per_layer:
        raise ValueError("[observe] per_layer must include 'mu' (the collapse rate is fitted on it).")
    final = _string_list("final", obs.get("final", list(METRIC_NAMES)), METRIC_NAMES)
    rate_start = obs.get("rate_start", 0)
    rate_stop = obs.get("rate_stop", None)
    for key, v in (("rate_start", rate_start), ("rate_stop", rate_stop)):
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 0):
            raise ValueError(f"[observe] {key}: expected a non-negative integer, got {v!r}.")
    run = dict(data.get("run", {}))
    bad = [k for k in run if k not in _RUN_KEYS]
    if bad:
        raise ValueError(f"unknown key {bad[0]!r} in [run]; expected {', '.join(_RUN_KEYS)}.")
    chunk = run.get("chunk_trajectories", 4096)
    if isinstance(chunk, bool) or not isinstance(chunk, int) or chunk < 1:
        raise ValueError(f"[run] chunk_trajectories: expected a positive integer, got {chunk!r}.")
    for key in ("name", "description"):
        if key in data and not isinstance(data[key], str):
            raise ValueError(f"{key}: expected a string, got {data[key]!r}.")

    cfg = SweepConfig(
        axes=axes, fixed=fixed, per_layer=per_layer, final=final, rate_start=rate_start,
        rate_stop=rate_stop, chunk_trajectories=chunk, name=data.get("name", "sweep"),
        description=data.get("description", ""), text=text,
    )
    _validate_cells(cfg)
    return cfg


def _validate_cells(cfg: SweepConfig) -> None:
    """Check every combination of values, and build each distinct mask (NumPy; no JAX compute)."""
    keys = ("mask", "n", "window", "dilation", "num_global", "mask_p", "mask_seed")
    seen = set()
    for idx in cfg.indices():
        p = cfg.cell(idx)
        _check_cell(p, cfg.axes)
        mk = tuple(p[k] for k in keys)
        if mk not in seen:
            seen.add(mk)
            try:
                _mask(p)
            except ValueError as err:
                where = ", ".join(f"{_where(k, cfg.axes)}={p[k]!r}" for k in ("mask", "n", "window"))
                raise ValueError(f"{where}: {err}") from None


def load_sweep_config(path_or_text: str | os.PathLike) -> SweepConfig:
    """Read and validate a sweep TOML file (or TOML text containing a newline).

    Raises:
        ValueError: on TOML syntax errors and on every check of `parse_sweep_config`.
    """
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10: the same parser as the `tomli` package
        import tomli as tomllib

    if isinstance(path_or_text, str) and "\n" in path_or_text:
        text = path_or_text
    else:
        path = Path(path_or_text)
        if not path.is_file():
            raise ValueError(f"sweep config {str(path)!r} does not exist.")
        text = path.read_text()
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise ValueError(f"invalid TOML in the sweep config: {err}") from None
    return parse_sweep_config(data, text=text)


# ----------------------------------------------------------------------------- plan


@dataclass(frozen=True)
class SweepPlan:
    """How a sweep is computed: groups of cells sharing one compiled program, cut into chunks.

    Attributes:
        groups: per group, the structural parameter values and the flat cell indices.
        chunks: per chunk, ``(group, flat cell indices)``; chunks of a group have equal size
            (``chunk_cells[group]``) after padding, so a group compiles once.
    """

    groups: tuple[tuple[dict, tuple[int, ...]], ...]
    chunks: tuple[tuple[int, tuple[int, ...]], ...]
    chunk_cells: tuple[int, ...]


def sweep_plan(cfg: SweepConfig) -> SweepPlan:
    """Group the cells by `STRUCTURAL` parameters and cut each group into equal chunks."""
    groups: dict[tuple, list[int]] = {}
    structs: dict[tuple, dict] = {}
    for flat, idx in enumerate(cfg.indices()):
        p = cfg.cell(idx)
        key = tuple(p[k] for k in STRUCTURAL)
        groups.setdefault(key, []).append(flat)
        structs[key] = {k: p[k] for k in STRUCTURAL}
    out_groups, chunks, sizes = [], [], []
    for gi, (key, cells) in enumerate(groups.items()):
        out_groups.append((structs[key], tuple(cells)))
        per = max(1, cfg.chunk_trajectories // structs[key]["batch"])
        num = math.ceil(len(cells) / per)
        size = math.ceil(len(cells) / num)  # balanced chunks: at most num - 1 padded cells in all
        sizes.append(size)
        for c in range(num):
            chunks.append((gi, tuple(cells[c * size:(c + 1) * size])))
    return SweepPlan(tuple(out_groups), tuple(chunks), tuple(sizes))


# ----------------------------------------------------------------------------- compute


def _mask(p: dict) -> np.ndarray:
    return make_mask(p["mask"], p["n"], window=p["window"], dilation=p["dilation"],
                     num_global=p["num_global"], p=p["mask_p"], seed=p["mask_seed"])


@eqx.filter_jit
def _build(key, dqk, w, ln_radius, value_std, qk_std, p_static: tuple):
    """Layer (with a placeholder mask) and x0 of one cell, compiled: eager construction would
    dispatch (and on first use compile) dozens of small ops per cell. Numbers that vary between
    cells are traced arrays, so cells differing only in them share this compiled builder."""
    p = dict(p_static)
    k_layer, k_x0, _ = jr.split(key, 3)
    layer = make_layer(
        k_layer, n=p["n"], d=p["d"], mask="complete", dqk=dqk, norm=p["norm"], ln=p["ln"],
        ln_radius=ln_radius, value=p["value"], w=w, jordan_k=p["jordan_k"], value_std=value_std,
        qk=p["qk"], qk_std=qk_std, num_layers=p["layers"] if p["per_layer_weights"] else None,
        heads=p["heads"], output_projection=p["heads"] > 1, skip=p["skip"], mlp=p["mlp"],
    )
    x0 = initial_tokens(k_x0, p["x0"], p["n"], p["d"], batch=p["batch"])
    return layer, x0


_STATIC_BUILD = ("n", "d", "norm", "ln", "value", "jordan_k", "qk", "layers", "per_layer_weights",
                 "heads", "skip", "mlp", "x0", "batch")


def _cell_inputs(p: dict):
    """Layer and initial tokens of one cell; the seed gives (layer key, x0 key) as `rankdyn simulate`."""
    arr = lambda v: None if v is None else jnp.asarray(v, dtype=float)
    layer, x0 = _build(
        jr.PRNGKey(p["seed"]), arr(p["dqk"]), arr(p["w"]), arr(p["ln_radius"]), arr(p["value_std"]),
        arr(p["qk_std"]), tuple((k, p[k]) for k in _STATIC_BUILD),
    )
    layer = eqx.tree_at(lambda l: l.mask, layer, jnp.asarray(_mask(p)))
    return layer, x0


def _observe(names: tuple[str, ...], rank_tol: float):
    """``x -> {name: scalar}`` for ``names``; the SVD is only traced when a spectral name is asked."""
    cheap = {
        "mu": mu,
        "mu_rel": mu_relative,
        "mu_normalized": mu_normalized,
        "row_norm_mean": lambda x: jnp.mean(row_norms(x)),
        "row_norm_min": lambda x: jnp.min(row_norms(x)),
        "min_cos": min_cosine,
        "mean_abs_cos": mean_abs_cosine,
    }
    if any(k in _SPECTRAL for k in names):
        return lambda x: {k: v for k, v in collapse_metrics(x, rank_tol).items() if k in names}
    return lambda x: {k: cheap[k](x) for k in names}


def _program_impl(layers, x0s, num_layers: int, save_every: int, per_layer: tuple, final: tuple, rank_tol: float):
    r"""The compiled program of one group: ``vmap`` over cells (stacked layers) and samples.

    For one trajectory: ``lax.scan`` over blocks of ``save_every`` layers of
    $X \mapsto F_t(X)$, recording ``per_layer`` metrics after each block and the minimum
    attention weight on mask edges (Theorem 1's $\epsilon$); the ``final`` metrics of
    $X^{(T)}$; whether a normalisation met a zero row; whether the state stayed finite.
    """
    observe = _observe(per_layer, rank_tol)
    observe_final = _observe(final, rank_tol)
    num_blocks = num_layers // save_every

    def one_cell(layer, x0c):
        def one_traj(x0):
            def one_layer(carry, t):
                x, bad = carry
                y, aux = layer(x, t)
                return (y, bad | aux.degenerate), aux.eps_min

            def one_block(carry, b):
                (x, bad), eps = lax.scan(one_layer, carry, b * save_every + jnp.arange(save_every))
                return (x, bad), (observe(x), jnp.min(eps), eps[0])

            (x, bad), (obs, eps_block, eps_first) = lax.scan(
                one_block, (x0, jnp.array(False)), jnp.arange(num_blocks)
            )
            first = observe(x0)
            # Saved layers 0, k, 2k, ..., T: layer 0 gets the eps of A^(0) (as `simulate`).
            series = {k: jnp.concatenate([first[k][None], obs[k]]) for k in per_layer}
            series["eps_min"] = jnp.concatenate([eps_first[:1], eps_block])
            return series, observe_final(x), bad, jnp.all(jnp.isfinite(x))

        return jax.vmap(one_traj)(x0c)

    return eqx.filter_vmap(one_cell)(layers, x0s)


#: The jitted program; a module attribute so a test can wrap `_program_impl` with
#: ``eqx.debug.assert_max_traces`` and prove that a group compiles once.
_jit_program = eqx.filter_jit(_program_impl)


def _stack(trees):
    return jax.tree.map(lambda *xs: jnp.stack(xs), *trees)


def _shard_samples(x0s):
    """With several devices, split the sample axis of ``(cells, batch, n, d)`` across them.

    Uses the batch mesh of ``rankdyn._sharding`` (the performance issue's sharding) when that
    module is present, else an equivalent one-axis ``jax.sharding`` mesh. Samples are
    independent, so the results equal those of one device. Batches that the device count does
    not divide stay on one device.
    """
    devices = jax.devices()
    if len(devices) < 2 or x0s.shape[1] % len(devices):
        return x0s
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    if importlib.util.find_spec("rankdyn._sharding") is not None:
        from ._sharding import BATCH_AXIS, batch_mesh

        mesh, axis = batch_mesh(), BATCH_AXIS
    else:
        mesh, axis = Mesh(np.asarray(devices), ("batch",)), "batch"
    return jax.device_put(x0s, NamedSharding(mesh, PartitionSpec(None, axis)))


def _compute_chunk(cfg: SweepConfig, group: dict, cells: tuple[int, ...], size: int) -> dict[str, np.ndarray]:
    """Run one chunk (padded to ``size`` cells) and reduce to per-cell arrays."""
    shape = cfg.shape
    params = [cfg.cell(tuple(int(i) for i in np.unravel_index(c, shape)) if shape else ()) for c in cells]
    built = [_cell_inputs(p) for p in params]
    built += [built[-1]] * (size - len(built))  # padding: same shapes, so no new compile
    layers = _stack([b[0] for b in built])
    x0s = _shard_samples(jnp.stack([b[1] for b in built]))
    series, finals, bad, finite = _jit_program(
        layers, x0s, group["layers"], group["save_every"], cfg.per_layer, cfg.final, group["rank_tol"]
    )
    m = len(cells)
    ok = np.asarray(finite)[:m]
    out = {"cells": np.asarray(cells, dtype=np.int64),
           "num_devices": np.asarray(len(x0s.sharding.device_set), dtype=np.int64),
           "nonfinite": (~ok).sum(axis=1).astype(np.int64),
           "degenerate": np.asarray(bad)[:m].sum(axis=1).astype(np.int64)}
    for k, v in series.items():
        v = np.asarray(v, dtype=np.float64)[:m]  # (cells, batch, saved layers)
        v = np.where(ok[:, :, None], v, np.nan)  # non-finite trajectories are excluded (as summary())
        with warnings.catch_warnings():  # all-NaN cells (every trajectory non-finite) give NaN
            warnings.simplefilter("ignore", RuntimeWarning)
            out[f"series/{k}"] = np.stack([np.nanmean(v, axis=1), np.nanstd(v, axis=1)], axis=-1)
    for k, v in finals.items():
        out[f"final/{k}"] = np.asarray(v, dtype=np.float64)[:m]
    return out


# ----------------------------------------------------------------------------- storage


def _atomic_savez(path: Path, arrays: dict[str, np.ndarray]) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            np.savez(f, **arrays)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


def _atomic_write_text(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)


def _chunk_path(out: Path, i: int) -> Path:
    return out / "chunks" / f"chunk_{i:05d}.npz"


def _dtype_name() -> str:
    return "float64" if jax.config.jax_enable_x64 else "float32"


def _prepare_dir(cfg: SweepConfig, out: Path, plan: SweepPlan, resume: bool) -> None:
    """Create DIR or check that it belongs to this very sweep; refuse to mix results."""
    manifest = out / "manifest.json"
    if manifest.exists():
        old = json.loads(manifest.read_text())
        if old.get("config_hash") != cfg.hash:
            raise ValueError(
                f"{str(out)!r} holds a sweep with a different configuration (hash {old.get('config_hash')} "
                f"vs {cfg.hash} now; the old config is in {str(out / 'config.toml')!r}). Refusing to mix "
                "results: choose another --out or delete that folder."
            )
        if old.get("dtype") != _dtype_name():
            raise ValueError(
                f"{str(out)!r} was computed in {old.get('dtype')} but this run uses {_dtype_name()}; "
                "resume with the same --x64 setting or choose another --out."
            )
        if not resume:
            raise ValueError(
                f"{str(out)!r} already holds this sweep; pass --resume (resume=True) to complete it, "
                "or choose another --out."
            )
        if not (out / "config.toml").exists():
            _write_config_text(cfg, out)
        return
    if out.exists() and any(p.name != "chunks" or any(p.iterdir()) for p in out.iterdir()):
        raise ValueError(f"{str(out)!r} exists, is not empty and holds no sweep manifest; choose another --out.")
    (out / "chunks").mkdir(parents=True, exist_ok=True)
    # The manifest first: a sweep killed right after it resumes; one killed before it left an
    # folder that is empty but for chunks/, which the check above accepts as new.
    write_json(manifest, {
        "config_hash": cfg.hash,
        "dtype": _dtype_name(),
        "num_cells": cfg.num_cells,
        "num_chunks": len(plan.chunks),
        "chunks": [{"file": _chunk_path(out, i).name, "group": g, "cells": list(c)} for i, (g, c) in enumerate(plan.chunks)],
        "normalized_config": cfg.normalized(),
        "provenance": provenance(),
        "versions": _versions(),
    })
    _write_config_text(cfg, out)


def _write_config_text(cfg: SweepConfig, out: Path) -> None:
    _atomic_write_text(out / "config.toml", cfg.text or json.dumps(cfg.normalized(), indent=1))


def _versions() -> dict[str, str]:
    """Versions of the packages that shape the numbers and the file."""
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for pkg in ("rankdyn", "jax", "jaxlib", "equinox", "numpy", "xarray", "netCDF4"):
        try:
            out[pkg] = version(pkg)
        except PackageNotFoundError:
            out[pkg] = "not installed"
    return out


def _load_chunk(path: Path, cfg: SweepConfig) -> dict[str, np.ndarray] | None:
    try:
        with np.load(path, allow_pickle=False) as z:
            data = {k: z[k] for k in z.files}
    except (OSError, ValueError):
        return None  # unreadable (should not happen with atomic writes): recompute
    if str(data.get("config_hash", "")) != cfg.hash:
        return None
    return data


def run_sweep(
    cfg: SweepConfig,
    out: str | os.PathLike,
    *,
    resume: bool = False,
    progress: bool = True,
):
    """Run (or complete) a sweep into folder ``out`` and return the dataset.

    Writes ``out/config.toml`` and ``out/manifest.json`` (config hash, chunk list, versions),
    one ``out/chunks/chunk_NNNNN.npz`` per chunk (atomic: temp file + rename) and finally
    ``out/sweep.nc`` (netCDF4 via h5netcdf), assembled from the chunk files only.

    Arguments:
        cfg: a `SweepConfig` (`load_sweep_config`).
        out: output folder; must be new/empty, or hold this same sweep with ``resume=True``.
        resume: compute only the chunks missing in ``out``.
        progress: a tqdm bar over all trajectories of the sweep, with ETA.

    Returns:
        The `xarray.Dataset` (see `assemble_sweep`).

    Raises:
        ValueError: if ``out`` holds a different sweep (other config hash or dtype), or holds
            this sweep and ``resume`` is False.
    """
    out = Path(out)
    plan = sweep_plan(cfg)
    _prepare_dir(cfg, out, plan, resume)
    todo = [i for i in range(len(plan.chunks)) if _load_chunk(_chunk_path(out, i), cfg) is None]
    for stale in (out / "chunks").glob(".*.tmp"):  # left by a killed writer
        stale.unlink(missing_ok=True)
    batch = [plan.groups[g][0]["batch"] for g, _ in plan.chunks]
    total = sum(len(c) * batch[i] for i, (_, c) in enumerate(plan.chunks))
    done = total - sum(len(plan.chunks[i][1]) * batch[i] for i in todo)
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=total, initial=done, desc=f"sweep {cfg.name}", unit="traj", smoothing=0.1)
    pause = float(os.environ.get(PAUSE_ENV, "0") or 0)
    timing = {"compile_s": 0.0, "total_s": 0.0, "chunks_computed": len(todo)}
    t0 = time.perf_counter()
    with CompileTimer() as timer:
        for i in todo:
            g, cells = plan.chunks[i]
            arrays = _compute_chunk(cfg, plan.groups[g][0], cells, plan.chunk_cells[g])
            arrays["config_hash"] = np.asarray(cfg.hash)
            _atomic_savez(_chunk_path(out, i), arrays)
            if bar is not None:
                bar.update(len(cells) * batch[i])
            if pause > 0:
                time.sleep(pause)
    if bar is not None:
        bar.close()
    timing["compile_s"] = timer.compile_s
    timing["total_s"] = time.perf_counter() - t0
    ds = assemble_sweep(cfg, out)
    tmp = out / ".sweep.nc.tmp"
    ds.to_netcdf(tmp, engine=NETCDF_ENGINE)
    os.replace(tmp, out / "sweep.nc")
    write_json(out / "timing.json", timing)
    return ds


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
        ``mu_rate``: ``(A...)``, `rankdyn.fit_rate` of the mean mu curve (per-layer factor).
        ``nonfinite``, ``degenerate``: ``(A...)`` counts of such trajectories.
        ``radius``, ``strongly_connected``, ``quasi_strongly_connected``, ``num_centers``:
            ``(A...)``, the mask graph of each cell (SPEC §3).
    Cells with fewer layers (or samples) than the largest are padded with NaN.
    Attributes: ``config`` (TOML text), ``config_hash``, ``normalized_config`` (JSON),
    ``versions`` (JSON), ``provenance`` (JSON: device, time of the first run), ``devices_per_chunk``
    (JSON: over how many devices each chunk's samples were sharded), ``dtype``, ``name``, ``description``.
    """
    import xarray as xr

    out = Path(out)
    plan = sweep_plan(cfg)
    shape, dims = cfg.shape, tuple(cfg.axes)
    ncell = cfg.num_cells
    max_layers = max(g["layers"] for g, _ in plan.groups)
    save_every = cfg.fixed["save_every"]
    layer_coord = np.arange(0, max_layers + 1, save_every)
    max_batch = max(g["batch"] for g, _ in plan.groups)
    names = tuple(cfg.per_layer) + ("eps_min",)
    series = {k: np.full((ncell, len(layer_coord), 2), np.nan) for k in names}
    finals = {k: np.full((ncell, max_batch), np.nan) for k in cfg.final}
    counts = {k: np.zeros(ncell, np.int64) for k in ("nonfinite", "degenerate")}
    devices_per_chunk = []
    for i in range(len(plan.chunks)):
        data = _load_chunk(_chunk_path(out, i), cfg)
        if data is None:
            raise ValueError(f"chunk {i} of the sweep in {str(out)!r} is missing; run with --resume to complete it.")
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
    graph = {k: np.zeros(ncell, t) for k, t in (("radius", np.float64), ("strongly_connected", np.int8),
                                                  ("quasi_strongly_connected", np.int8), ("num_centers", np.int64))}
    rate = np.full(ncell, np.nan)
    info_cache = {}
    for flat, idx in enumerate(cfg.indices()):
        p = cfg.cell(idx)
        mk = (p["mask"], p["n"], p["window"], p["dilation"], p["num_global"], p["mask_p"], p["mask_seed"])
        if mk not in info_cache:
            info_cache[mk] = graph_info(_mask(p))
        info = info_cache[mk]
        graph["radius"][flat] = np.nan if info.radius is None else info.radius
        graph["strongly_connected"][flat] = info.strongly_connected
        graph["quasi_strongly_connected"][flat] = info.quasi_strongly_connected
        graph["num_centers"][flat] = info.num_centers
        mean_mu = series["mu"][flat, :, 0]
        # Leave out the round-off floor: points below 100 machine epsilons of mu at layer 0.
        floor = 1e2 * np.finfo(_dtype_of(cfg, out)).eps * (mean_mu[0] if np.isfinite(mean_mu[0]) else 0.0)
        rate[flat] = fit_rate(layer_coord, mean_mu, start=cfg.rate_start, stop=cfg.rate_stop, floor=floor)

    coords = {k: _coord(v) for k, v in cfg.axes.items()}
    coords |= {"layer": layer_coord, "stat": np.asarray(["mean", "std"], dtype=object),
               "sample": np.arange(max_batch)}
    variables = {}
    for k, v in series.items():
        variables[k] = (dims + ("layer", "stat"), v.reshape(shape + v.shape[1:]))
    for k, v in finals.items():
        variables[f"final_{k}"] = (dims + ("sample",), v.reshape(shape + v.shape[1:]))
    variables["mu_rate"] = (dims, rate.reshape(shape))
    for k, v in (counts | graph).items():
        variables[k] = (dims, v.reshape(shape))
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
        "stat_note": "mean and std over the finite trajectories of each cell (non-finite ones are counted in nonfinite)",
    }
    ds = xr.Dataset(variables, coords=coords, attrs=attrs)
    ds["mu_rate"].attrs["long_name"] = "fitted per-layer collapse factor exp(slope of log mean mu)"
    ds["radius"].attrs["long_name"] = "radius r of the mask graph (SPEC §3); NaN if not quasi-strongly connected"
    return ds


def _dtype_of(cfg: SweepConfig, out: Path):
    return np.dtype(json.loads((out / "manifest.json").read_text())["dtype"])
