"""A sweep's TOML file -> one validated, hashable `SweepConfig`; nothing is computed.

The grid is the Cartesian product of the values in ``[axes]`` with the parameters in ``[fixed]``
(masks x temperatures x normalisations x value families x sizes x seeds, ``docs/sweep.md``).
Every value and every combination is checked before compute, and each error names the key.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import os
import tomllib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._errors import UsageError
from .._model._params import default_dqk, renamed_hint
from .._observe._names import METRIC_NAMES, parse_metrics
from ._params import (
    _FIXED_ONLY,
    _OBSERVE_KEYS,
    _RUN_KEYS,
    _TOP_KEYS,
    CHEAP_METRICS,
    KEY_ALIASES,
    SWEEP_PARAMS,
    _check_cell,
    _check_scalar,
    _check_type,
    _where,
    cell_mask,
    refuse_unread,
)

__all__ = ["SweepConfig", "parse_sweep_config", "load_sweep_config", "MAX_CELLS"]

#: Grids above this many cells are refused unless the caller raises the limit (``--max-cells``):
#: a mistyped axis could otherwise spend minutes in planning before anything is said.
MAX_CELLS = 100_000


@dataclass(frozen=True)
class SweepConfig:
    """A validated sweep: ordered axes, fixed parameters, what to record and how to chunk.

    Attributes:
        axes: axis name -> tuple of values (the grid; order = dimension order of the dataset).
        fixed: every other parameter of `SWEEP_PARAMS`, defaults filled in.
        per_layer: metrics recorded at every saved layer (plus ``eps_min``, always).
        final: metrics of the last layer, kept per sample (spectral ones cost an SVD).
        rate_start, rate_stop: depth window of the fitted collapse rate (`rankdyn.theory.fit_rate`).
        chunk: at most this many trajectories per chunk file.
        name, description: free text.
        text: the TOML text the config was read from (stored with the results).
    """

    axes: dict[str, tuple]
    fixed: dict[str, Any]
    per_layer: tuple[str, ...] = CHEAP_METRICS
    final: tuple[str, ...] = METRIC_NAMES
    rate_start: int = 0
    rate_stop: int | None = None
    chunk: int = 4096
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
            p["dqk"] = default_dqk(p["d"], p["heads"])
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
            "chunk": self.chunk,
        }

    @property
    def hash(self) -> str:
        """SHA-256 of the normalised config (names and comments of the TOML do not count)."""
        blob = json.dumps(self.normalized(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _string_list(key, value, allowed):
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise UsageError(f"[observe] {key}: expected a list of metric names, got {value!r}.")
    bad = [v for v in value if v not in allowed]
    if bad:
        raise UsageError(
            f"[observe] {key}: unknown metric {bad[0]!r}; expected names from {', '.join(allowed)}."
        )
    if len(set(value)) != len(value):
        raise UsageError(f"[observe] {key}: duplicate metric names in {value!r}.")
    return tuple(value)


def parse_sweep_config(
    data: Mapping,
    text: str = "",
    *,
    max_cells: int = MAX_CELLS,
    announce: Callable[[int], None] | None = None,
) -> SweepConfig:
    """Validate a parsed TOML mapping and return a `SweepConfig`; nothing is computed.

    Arguments:
        data: the parsed TOML.
        text: the TOML text (stored with the results).
        max_cells: refuse grids with more cells (checking and planning them takes time).
        announce: called with the number of cells as soon as the axes are read.

    Raises:
        ValueError: naming the offending key and value for unknown tables, axis or parameter
            names, empty axes, duplicate axis values, wrong types, out-of-range values, and
            incompatible combinations (a window not narrower than n, a Jordan block larger
            than d, heads not dividing d, ...).
    """
    unknown = [k for k in data if k not in _TOP_KEYS]
    if unknown:
        raise UsageError(f"unknown top-level key or table {unknown[0]!r}; expected {', '.join(_TOP_KEYS)}.")
    axes_in = data.get("axes", {})
    fixed_in = data.get("fixed", {})
    for tab, val in (
        ("axes", axes_in),
        ("fixed", fixed_in),
        ("observe", data.get("observe", {})),
        ("run", data.get("run", {})),
    ):
        if not isinstance(val, Mapping):
            raise UsageError(f"[{tab}] must be a table, got {val!r}.")
    axes_in, fixed_in = _canonical(axes_in, "axes"), _canonical(fixed_in, "fixed")
    axes: dict[str, tuple] = {}
    for k, vals in axes_in.items():
        if k not in SWEEP_PARAMS:
            raise UsageError(
                f"unknown axis {k!r} in [axes]{renamed_hint(k)}; known parameters: {', '.join(SWEEP_PARAMS)}."
            )
        if k in _FIXED_ONLY:
            raise UsageError(
                f"[axes] {k}: cannot be an axis (it changes the layer coordinate); put it in [fixed]."
            )
        if not isinstance(vals, list):
            raise UsageError(
                f"[axes] {k}: an axis is a list of values, got {vals!r} (use [fixed] for one value)."
            )
        if len(vals) == 0:
            raise UsageError(f"[axes] {k}: empty axis; give at least one value.")
        kind = SWEEP_PARAMS[k][1]
        clean = []
        for v in vals:
            v = _check_type(k, v, kind, f"[axes] {k} value {v!r}")
            _check_scalar(k, v, f"[axes] {k} = {v!r}")
            clean.append(v)
        if len(set(clean)) != len(clean):
            raise UsageError(f"[axes] {k}: duplicate values in {vals!r}; coordinates must be unique.")
        axes[k] = tuple(clean)
    num_cells = math.prod(len(v) for v in axes.values())
    if announce is not None:
        announce(num_cells)
    if num_cells > max_cells:
        raise UsageError(
            f"the grid has {num_cells} cells ({' x '.join(f'{k}:{len(v)}' for k, v in axes.items())}), above "
            "the "
            f"limit of {max_cells}; shorten the [axes] or raise the limit (--max-cells {num_cells})."
        )
    fixed: dict[str, Any] = {}
    for k, v in fixed_in.items():
        if k not in SWEEP_PARAMS:
            raise UsageError(
                f"unknown parameter {k!r} in [fixed]{renamed_hint(k)}; known parameters: "
                f"{', '.join(SWEEP_PARAMS)}."
            )
        if k in axes:
            raise UsageError(f"{k!r} is both an axis and a fixed parameter; keep one.")
        if isinstance(v, list):
            raise UsageError(
                f"[fixed] {k}: a fixed parameter is one value, got the list {v!r}; move it to [axes]."
            )
        v = _check_type(k, v, SWEEP_PARAMS[k][1], f"[fixed] {k} = {v!r}")
        _check_scalar(k, v, f"[fixed] {k} = {v!r}")
        fixed[k] = v
    for k, (default, _) in SWEEP_PARAMS.items():
        if k not in axes and k not in fixed:
            fixed[k] = default

    obs = dict(data.get("observe", {}))
    bad = [k for k in obs if k not in _OBSERVE_KEYS]
    if bad:
        raise UsageError(f"unknown key {bad[0]!r} in [observe]; expected {', '.join(_OBSERVE_KEYS)}.")
    if "per_layer" in obs and "metrics" in obs:
        raise UsageError("[observe] has both per_layer and metrics (the same setting); keep one.")
    if "metrics" in obs:
        # The syntax of `rankdyn simulate --metrics`: "all", "mu,min_cos" or a list; eps_min is always
        # recorded.
        per_layer = tuple(
            k for k in parse_metrics(obs["metrics"], where="[observe] metrics") if k != "eps_min"
        )
    else:
        per_layer = _string_list("per_layer", obs.get("per_layer", list(CHEAP_METRICS)), METRIC_NAMES)
    if "mu" not in per_layer:
        raise UsageError("[observe] per_layer must include 'mu' (the collapse rate is fitted on it).")
    final = _string_list("final", obs.get("final", list(METRIC_NAMES)), METRIC_NAMES)
    rate_start = obs.get("rate_start", 0)
    rate_stop = obs.get("rate_stop", None)
    for key, v in (("rate_start", rate_start), ("rate_stop", rate_stop)):
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 0):
            raise UsageError(f"[observe] {key}: expected a non-negative integer, got {v!r}.")
    if rate_stop is not None and rate_stop <= rate_start:
        raise UsageError(f"[observe] rate_stop = {rate_stop} must be larger than rate_start = {rate_start}.")
    run = dict(data.get("run", {}))
    bad = [k for k in run if k not in _RUN_KEYS]
    if bad:
        raise UsageError(f"unknown key {bad[0]!r} in [run]; expected {', '.join(_RUN_KEYS)}.")
    chunk = run.get("chunk", 4096)
    if isinstance(chunk, bool) or not isinstance(chunk, int) or chunk < 1:
        raise UsageError(f"[run] chunk: expected a positive integer, got {chunk!r}.")
    for key in ("name", "description"):
        if key in data and not isinstance(data[key], str):
            raise UsageError(f"{key}: expected a string, got {data[key]!r}.")

    cfg = SweepConfig(
        axes=axes,
        fixed=fixed,
        per_layer=per_layer,
        final=final,
        rate_start=rate_start,
        rate_stop=rate_stop,
        chunk=chunk,
        name=data.get("name", "sweep"),
        description=data.get("description", ""),
        text=text,
    )
    _validate_cells(cfg)
    refuse_unread(fixed_in, (cfg.cell(i) for i in cfg.indices()), axes)
    return cfg


def _canonical(table, name: str):
    """``table`` with alias keys (``placement`` for ``norm``) under their key; both is an error."""
    if not isinstance(table, Mapping):
        return table  # reported below
    out = {}
    for k, v in table.items():
        key = KEY_ALIASES.get(k, k)
        if key in out:
            raise UsageError(f"[{name}] has both {key} and {k} (the same parameter); keep one.")
        out[key] = v
    return out


def _validate_cells(cfg: SweepConfig) -> None:
    """Check every combination of values, and build each distinct mask (NumPy; no JAX compute)."""
    keys = ("mask", "n", "window", "dilation", "num_global", "mask_p", "mask_seed")
    seen = set()
    for idx in cfg.indices():
        p = cfg.cell(idx)
        _check_cell(p, cfg.axes)
        if cfg.rate_start >= p["num_layers"]:
            raise UsageError(
                f"[observe] rate_start = {cfg.rate_start} is not below {_where('num_layers', cfg.axes)} = "
                f"{p['num_layers']}: "
                "the rate would be fitted on no layer; lower rate_start."
            )
        mk = tuple(p[k] for k in keys)
        if mk not in seen:
            seen.add(mk)
            try:
                cell_mask(p)
            except ValueError as err:
                where = ", ".join(f"{_where(k, cfg.axes)}={p[k]!r}" for k in ("mask", "n", "window"))
                raise UsageError(f"{where}: {err}") from None


def load_sweep_config(
    path_or_text: str | os.PathLike,
    *,
    max_cells: int = MAX_CELLS,
    announce: Callable[[int], None] | None = None,
) -> SweepConfig:
    """Read and validate a sweep TOML file (or TOML text containing a newline).

    Arguments:
        max_cells, announce: as in `parse_sweep_config`.

    Raises:
        ValueError: on TOML syntax errors and on every check of `parse_sweep_config`.
    """
    if isinstance(path_or_text, str) and "\n" in path_or_text:
        text = path_or_text
    else:
        path = Path(path_or_text)
        if not path.is_file():
            raise UsageError(f"sweep config {str(path)!r} does not exist.")
        text = path.read_text()
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise UsageError(f"invalid TOML in the sweep config: {err}") from None
    return parse_sweep_config(data, text=text, max_cells=max_cells, announce=announce)
