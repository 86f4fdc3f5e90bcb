"""The sweep's parameters: names, defaults, types, allowed values and the checks of one value or cell.

Every key of ``[axes]`` and ``[fixed]`` is a parameter of `SWEEP_PARAMS`; each check names the key
(``[axes] n`` or ``[fixed] n``) so an error says where to fix the TOML file.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from .._errors import UsageError
from .._model._config import ModelConfig, ignored_fields
from .._model._masks import make_mask
from .._model._params import PARAMS, RUN_PARAMS, given, range_error, reads
from .._observe._names import CHEAP_METRICS
from .._run._plan import check_depth

__all__ = ["SWEEP_PARAMS", "STRUCTURAL", "CHEAP_METRICS", "KEY_ALIASES"]

#: The rows of `rankdyn._model._params` that are sweep keys, by key.
_ROWS = {p.key: p for p in PARAMS + RUN_PARAMS if p.key}

#: key -> (default, kind), generated from the parameter table. kind: the Python type a value
#: must have ("str", "int", "float", "bool", "float?" / "int?" = number or absent).
SWEEP_PARAMS: dict[str, tuple[Any, str]] = {k: (p.sweep_default, p.sweep_kind) for k, p in _ROWS.items()}

#: Other spellings of a key -> the key (``placement`` is the Python name of ``norm``).
KEY_ALIASES = {a: p.key for p in _ROWS.values() for a in p.key_aliases}

#: Parameters that change shapes or the program's structure: cells that differ in one of these
#: run in different compiled programs. Every other parameter is an array inside one program.
STRUCTURAL = tuple(k for k, p in _ROWS.items() if p.structural)

_CHOICES = {k: p.choices for k, p in _ROWS.items() if p.choices}
_FIXED_ONLY = ("save_every", "rank_tol")  # a grid over these would change the layer coordinate

_OBSERVE_KEYS = ("per_layer", "metrics", "final", "rate_start", "rate_stop")
_RUN_KEYS = ("chunk",)
_TOP_KEYS = ("name", "description", "axes", "fixed", "observe", "run")


class _Shown:
    """Names for a message about one value whose label is already written (``[axes] dqk = 0.0``)."""

    def __init__(self, where: str):
        self.where = where

    def show(self, field, value):
        return self.where


def _where(key: str, axes: Mapping) -> str:
    return f"[axes] {key}" if key in axes else f"[fixed] {key}"


def _check_type(key: str, value, kind: str, where: str):
    """Coerce ``value`` to the parameter's type or raise naming the key and value."""
    base = kind.rstrip("?")
    if base == "str":
        if not isinstance(value, str):
            raise UsageError(f"{where}: expected a string, got {value!r}.")
        if key in _CHOICES and value not in _CHOICES[key]:
            raise UsageError(f"{where}: unknown value {value!r}; expected one of {', '.join(_CHOICES[key])}.")
        return value
    if base == "bool":
        if not isinstance(value, bool):
            raise UsageError(f"{where}: expected true or false, got {value!r}.")
        return value
    if base == "int":
        if isinstance(value, bool) or not isinstance(value, int):
            raise UsageError(f"{where}: expected an integer, got {value!r}.")
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise UsageError(f"{where}: expected a number, got {value!r}.")
    value = float(value)
    if not math.isfinite(value):
        raise UsageError(f"{where}: expected a finite number, got {value!r}.")
    return value


def _check_scalar(key: str, v, where: str) -> None:
    """Range check of one parameter value (the table's rule; relations are checked per cell)."""
    p = _ROWS[key]
    msg = range_error(p, v, None, _Shown(where)) if p.kind in ("int", "real") else None
    if msg:
        raise UsageError(msg)


#: `rankdyn.ModelConfig` field -> sweep key, where they differ.
_FIELDS = {p.name: p.key for p in PARAMS if p.key and p.key != p.name}


def cell_config(p: dict, axes: Mapping) -> ModelConfig:
    """The cell's model as a validated `rankdyn.ModelConfig` (the rules `make_layer` and the CLI
    use); a message names the ``[axes]`` or ``[fixed]`` key. Parameters the cell's mask or
    families do not read (e.g. ``window`` under a complete mask on a window axis) are dropped:
    a key given in ``[fixed]`` that no cell reads is refused by `refuse_unread`."""
    fields = {f.name: p[f.key] for f in PARAMS if f.key}
    fields["num_layers"] = p["num_layers"] if p["per_layer_weights"] else None
    fields["output_projection"] = p["heads"] > 1
    for name in ignored_fields(fields):
        fields.pop(name, None)
    return ModelConfig.from_mapping(fields, where=lambda f: _where(_FIELDS.get(f, f), axes))


def refuse_unread(fixed_in: Mapping, cells, axes: Mapping = ()) -> None:
    """Refuse a ``[fixed]`` key (or an axis) that no grid cell reads, as the CLI and `make_layer`
    refuse it; an axis that some cells read and others not stays (those cells drop it).

    Arguments:
        fixed_in: the ``[fixed]`` table as written (canonical keys).
        cells: an iterable of every cell's parameters.
        axes: the ``[axes]`` table (canonical keys).
    """
    written = {k: (f"[fixed] {k} = {v!r}", v) for k, v in fixed_in.items()}
    written |= {k: (f"[axes] {k}", v[0]) for k, v in axes.items()}
    pending = {k: _ROWS[k] for k, (_, v) in written.items() if k in _ROWS and _ROWS[k].reads}
    pending = {k: r for k, r in pending.items() if k in axes or given(r, written[k][1])}
    for cell in cells:
        if not pending:
            return
        fields = {f.name: cell[f.key] for f in PARAMS if f.key}
        pending = {k: r for k, r in pending.items() if not reads(r, fields)}
    for k, r in pending.items():
        dep, allowed = r.reads
        dep_key = _ROWS_BY_NAME[dep].key
        raise UsageError(
            f"{written[k][0]} is ignored: no cell has {dep_key} "
            f"{' or '.join(map(repr, allowed))} (the only {dep_key} that reads it); drop it."
        )


_ROWS_BY_NAME = {p.name: p for p in PARAMS}


def _check_cell(p: dict, axes: Mapping) -> None:
    """Checks that involve several parameters of one grid cell (bad combinations): the model's
    through `cell_config`, the recording schedule here."""
    cell_config(p, axes)
    # The plan's rule (`rankdyn._run._plan.check_depth`), the keys named as the TOML writes them.
    check_depth(p["num_layers"], p["save_every"], lambda k, v: f"{_where(k, axes)} = {v!r}")


def cell_mask(p: dict) -> np.ndarray:
    """The boolean mask of one cell (NumPy; the masks module does not load JAX)."""
    return make_mask(
        p["mask"],
        p["n"],
        window=p["window"],
        dilation=p["dilation"],
        num_global=p["num_global"],
        p=p["mask_p"],
        seed=p["mask_seed"],
    )
