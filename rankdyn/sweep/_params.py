"""The sweep's parameters: names, defaults, types, allowed values and the checks of one value or cell.

Every key of ``[axes]`` and ``[fixed]`` is a parameter of `SWEEP_PARAMS`; each check names the key
(``[axes] n`` or ``[fixed] n``) so an error says where to fix the TOML file.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from .._config import ModelConfig, ignored_fields
from .._init import X0_NAMES
from .._layer import PLACEMENTS
from .._masks import MASK_NAMES, make_mask
from .._norms import LN_NAMES
from .._weights import QK_NAMES, VALUE_NAMES

__all__ = ["SWEEP_PARAMS", "STRUCTURAL", "CHEAP_METRICS"]

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
    # dropout (rates on attention weights and on block outputs; 0: off)
    "attn_dropout": (0.0, "float"),
    "hidden_dropout": (0.0, "float"),
    # recording
    "save_every": (1, "int"),
    "rank_tol": (1e-6, "float"),
}

#: Parameters that change shapes or the program's structure: cells that differ in one of these
#: run in different compiled programs. Every other parameter is an array inside one program.
STRUCTURAL = (
    "n",
    "d",
    "layers",
    "batch",
    "norm",
    "ln",
    "heads",
    "per_layer_weights",
    "skip",
    "mlp",
    "attn_dropout",
    "hidden_dropout",
    "save_every",
    "rank_tol",
)

_CHOICES = {
    "mask": MASK_NAMES,
    "norm": PLACEMENTS,
    "ln": LN_NAMES,
    "value": VALUE_NAMES,
    "qk": QK_NAMES,
    "x0": X0_NAMES,
}
_FIXED_ONLY = ("save_every", "rank_tol")  # a grid over these would change the layer coordinate

#: Metrics recorded at every saved layer by default: no SVD (the expensive part on CPU).
CHEAP_METRICS = ("mu", "mu_rel", "mu_normalized", "row_norm_mean", "row_norm_min", "min_cos", "mean_abs_cos")
_OBSERVE_KEYS = ("per_layer", "metrics", "final", "rate_start", "rate_stop")
_RUN_KEYS = ("chunk_trajectories",)
_TOP_KEYS = ("name", "description", "axes", "fixed", "observe", "run")


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
    if key in ("attn_dropout", "hidden_dropout") and not 0 <= v < 1:
        raise ValueError(f"{where}: a dropout rate must be in [0, 1), got {v!r}.")
    if key == "mask_p" and not 0 <= v <= 1:
        raise ValueError(f"{where}: an edge probability must be in [0, 1], got {v!r}.")


#: Sweep keys whose `rankdyn.ModelConfig` field has another name.
_FIELD_KEYS = {"placement": "norm", "num_layers": "layers"}


def cell_config(p: dict, axes: Mapping) -> ModelConfig:
    """The cell's model as a validated `rankdyn.ModelConfig` (the rules `make_layer` and the CLI
    use); a message names the ``[axes]`` or ``[fixed]`` key. Parameters the cell's mask or
    families do not read (e.g. ``window`` under a complete mask on a window axis) are dropped."""
    fields = dict(
        mask=p["mask"],
        window=p["window"],
        dilation=p["dilation"],
        num_global=p["num_global"],
        mask_p=p["mask_p"],
        mask_seed=p["mask_seed"],
        n=p["n"],
        d=p["d"],
        dqk=p["dqk"],
        placement=p["norm"],
        ln=p["ln"],
        ln_radius=p["ln_radius"],
        value=p["value"],
        w=p["w"],
        jordan_k=p["jordan_k"],
        value_std=p["value_std"],
        qk=p["qk"],
        qk_std=p["qk_std"],
        num_layers=p["layers"] if p["per_layer_weights"] else None,
        heads=p["heads"],
        output_projection=p["heads"] > 1,
        skip=p["skip"],
        mlp=p["mlp"],
        attn_dropout=p["attn_dropout"],
        hidden_dropout=p["hidden_dropout"],
        x0=p["x0"],
        seed=p["seed"],
    )
    for name in ignored_fields(fields):
        fields.pop(name)
    return ModelConfig.from_mapping(fields, where=lambda f: _where(_FIELD_KEYS.get(f, f), axes))


def _check_cell(p: dict, axes: Mapping) -> None:
    """Checks that involve several parameters of one grid cell (bad combinations): the model's
    through `cell_config`, the recording schedule here."""
    cell_config(p, axes)
    if p["layers"] % p["save_every"]:
        raise ValueError(
            f"{_where('layers', axes)} = {p['layers']} is not a multiple of [fixed] save_every = {p['save_every']}."
        )


def cell_mask(p: dict) -> np.ndarray:
    """The boolean mask of one cell (NumPy; no JAX compute)."""
    return make_mask(
        p["mask"],
        p["n"],
        window=p["window"],
        dilation=p["dilation"],
        num_global=p["num_global"],
        p=p["mask_p"],
        seed=p["mask_seed"],
    )
