r"""The validated model configuration: what defines one layer map and its inputs, checked once.

`ModelConfig` is the one place where the rules about a model live (sizes, families, the
parameters each mask or family uses, ranges of the temperature, dropout rates and seeds) and
where their error messages are written. Every entry point becomes one:

- `rankdyn.make_layer(key, n=..., ...)` builds one from its arguments (messages name the argument);
- the CLI builds one from the model flags (`rankdyn._commands._checks.model_config`; messages name
  the flag, e.g. ``--window``);
- a TOML sweep can build one per grid cell with `ModelConfig.from_mapping(values, where="[fixed]")`
  (messages name the key, e.g. ``[fixed] window = 40``).

A rule is checked only on concrete values: under ``jit``/``vmap`` a traced temperature or
weight passes through (the layer reports bad values as status flags there).

The model itself is the paper's masked attention + normalisation map (eqs. 1-3, see
`docs/theory.md#the-model`); the masks are described in `docs/theory.md#masks-as-graphs`.
"""

from __future__ import annotations

import dataclasses
import math
import sys
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from .._errors import UsageError
from ._params import MASKS_WITH_WINDOW, PARAMS, SEED_MAX, default_dqk, given, param, range_error, reads

__all__ = ["ModelConfig", "Names", "SEED_MAX", "MASKS_WITH_WINDOW", "ignored_fields", "check_seed"]

#: Masks for which ``window`` is a width that must stay below the number of tokens.
_WIDTH_MASKS = ("window", "window-uni", "global")


class Names:
    """How messages name an input: ``label(field)`` and the separator before its value.

    ``Names.arguments()`` gives ``window=40`` (Python), ``Names.flags({...})`` gives
    ``--window 40`` (CLI), ``Names.keys("[fixed]")`` gives ``[fixed] window = 40`` (TOML).
    """

    def __init__(self, label: Callable[[str], str], sep: str):
        self.label, self.sep = label, sep

    def __call__(self, field: str) -> str:
        return self.label(field)

    def show(self, field: str, value) -> str:
        """``label`` and value as the user wrote them: ``--mask causal``, ``mask='causal'``."""
        text = repr(value) if isinstance(value, str) and self.sep != " " else str(value)
        return f"{self.label(field)}{self.sep}{text}"

    @classmethod
    def arguments(cls, renames: Mapping[str, str] | None = None) -> "Names":
        renames = dict(renames or {})
        return cls(lambda f: renames.get(f, f), "=")

    @classmethod
    def flags(cls, flags: Mapping[str, str] | None = None) -> "Names":
        flags = dict(flags or {})
        return cls(lambda f: flags.get(f, "--" + f.replace("_", "-")), " ")

    @classmethod
    def keys(cls, where: str | Callable[[str], str]) -> "Names":
        label = where if callable(where) else (lambda f: f"{where} {f}")
        return cls(label, " = ")


def _field(p):
    """A dataclass field of a `Param` row (annotations say what is accepted; `_check` gives the
    messages, and numbers may be traced arrays under jit, which are then not checked)."""
    if p.default is dataclasses.MISSING:
        return (p.name, Any)
    return (p.name, Any, dataclasses.field(default=p.default))


def _arguments_doc() -> str:
    lines = []
    for p in PARAMS:
        default = "required" if p.default is dataclasses.MISSING else f"default {p.default!r}"
        if p.fallback is not None:
            default = f"default {p.fallback!r} where read"
        extra = f" Read only with {p.reads[0]} {' / '.join(map(str, p.reads[1]))}." if p.reads else ""
        lines.append(f"        {p.name}: {p.help} ({default}).{extra}")
    return "\n".join(lines)


class _ModelConfigMethods:
    """The methods of `ModelConfig` (its fields are generated from `rankdyn._model._params.PARAMS`)."""

    def __post_init__(self):
        _check(self.to_mapping(), Names.arguments())

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any], where: "Names | str | Callable[[str], str]" = ""):
        """Build from a mapping of field -> value; messages name each key through ``where``.

        ``where`` is a `Names`, a TOML table prefix (``"[fixed]"`` gives ``[fixed] window = 40``)
        or a callable ``field -> label`` (e.g. ``[axes] window`` or ``[fixed] window`` per key).
        Unknown keys are refused; `field_names` lists the known ones.

        Raises:
            UsageError: naming the key, what was expected, what was received and the fix.
        """
        names = (
            where if isinstance(where, Names) else (Names.arguments() if where == "" else Names.keys(where))
        )
        unknown = [k for k in values if k not in cls.field_names()]
        if unknown:
            raise UsageError(
                f"unknown model parameter {names(unknown[0])}; expected one of "
                f"{', '.join(cls.field_names())}."
            )
        for req in ("n", "d"):
            if req not in values:
                raise UsageError(f"{names(req)} is required (a positive integer).")
        _check(_DEFAULTS | dict(values), names)
        return cls(**values)

    @classmethod
    def field_names(cls) -> tuple[str, ...]:
        return tuple(p.name for p in PARAMS)

    def to_mapping(self) -> dict[str, Any]:
        """Field -> value as given (arrays and norm objects as given; unset parameters None)."""
        return {f: getattr(self, f) for f in self.field_names()}

    def resolved(self) -> dict[str, Any]:
        """Field -> the value the model uses: unset parameters that are read get their fallback
        (``w`` 2.0, ``ln`` sphere, ``mlp_ratio`` 4) and ``dqk`` the key width."""
        v = self.to_mapping()
        for p in PARAMS:
            if v[p.name] is None and p.fallback is not None:
                v[p.name] = p.fallback
        if v["dqk"] is None:
            v["dqk"] = default_dqk(v["d"], v["heads"])
        return v

    def replace(self, **changes):
        """A copy with ``changes`` applied and validated again."""
        return dataclasses.replace(self, **changes)

    @property
    def has_dropout(self) -> bool:
        return bool(self.attn_dropout > 0 or self.hidden_dropout > 0)

    def dropout_kwargs(self) -> dict[str, float]:
        """The dropout arguments of `SelfAttentionLayer` (the one place that maps the two rates)."""
        return {"attn_dropout": float(self.attn_dropout), "hidden_dropout": float(self.hidden_dropout)}


ModelConfig = dataclasses.make_dataclass(
    "ModelConfig",
    [_field(p) for p in PARAMS],
    bases=(_ModelConfigMethods,),
    frozen=True,
    kw_only=True,
    eq=False,
)
ModelConfig.__module__ = __name__
ModelConfig.__doc__ = (
    r"""One validated model: the layer $F(X) = \mathrm{LN}(A(X) X W_V)$ (eqs. 1-3) and its inputs.

    Generated from `rankdyn._model._params.PARAMS` (one row per field). A parameter that the chosen mask
    or family does not read is refused when given (it would do nothing).

    Arguments (all keyword-only; ``n`` and ``d`` are required):
"""
    + _arguments_doc()
    + """

    Raises:
        UsageError: (a ValueError) naming the argument, what was expected, what was received,
            and the fix.
    """
)
_DEFAULTS = {p.name: p.default for p in PARAMS if p.default is not dataclasses.MISSING}


def ignored_fields(values: Mapping[str, Any]) -> tuple[str, ...]:
    """Fields that the chosen mask and families do not read (a sweep cell may drop them)."""
    return tuple(p.name for p in PARAMS if not reads(p, values))


# ----------------------------------------------------------------------------- the rules


def check_seed(seed, field: str = "seed", name: Names | None = None) -> None:
    """Refuse a seed outside [0, `SEED_MAX`] (or not an integer), naming it through ``name``."""
    name = name or Names.arguments()
    if isinstance(seed, (bool, np.bool_)) or not isinstance(seed, (int, np.integer)):
        raise UsageError(f"{name(field)} must be an integer, got {seed!r}.")
    msg = range_error(param("seed"), seed, None, _Renamed(name, field))
    if msg:
        raise UsageError(msg)


class _Renamed:
    """``name`` showing the seed row under another field (``mask_seed``, a command's flag)."""

    def __init__(self, name, field):
        self.name, self.field = name, field

    def show(self, _, value):
        return self.name.show(self.field, value)


def _concrete(v):
    """A Python scalar for a concrete number (None for a traced value, which is not checked)."""
    # JAX is not imported here (the CLI checks its flags before JAX loads): a value can only be a
    # JAX array or tracer once JAX is loaded.
    jax = sys.modules.get("jax")
    if jax is not None and isinstance(v, jax.core.Tracer):
        return None
    if isinstance(v, (np.ndarray, np.generic)) or (jax is not None and isinstance(v, jax.Array)):
        if np.ndim(v) != 0:
            return v  # shape problems are reported by the caller
        return np.asarray(v).item()
    return v


def _is_norm(x) -> bool:
    """``x`` is an `AbstractNorm` (imported only for a value that is not a name: it loads JAX)."""
    from ._norms import AbstractNorm

    return isinstance(x, AbstractNorm)


def _is_floating(x) -> bool:
    """``x`` names a floating dtype (NumPy's first; JAX's, e.g. bfloat16, only past NumPy's)."""
    try:
        return bool(np.issubdtype(np.dtype(x), np.floating))
    except TypeError:
        import jax.numpy as jnp

        return bool(jnp.issubdtype(jnp.dtype(x), jnp.floating))


def _check_types(v: Mapping[str, Any], name: Names) -> dict[str, float]:
    """The kind of every row (`rankdyn._model._params.Param.kind`); returns the concrete real values."""
    show, real = name.show, {}
    for p in PARAMS:
        x = v[p.name]
        if x is None and p.optional:
            continue
        if p.kind == "int" and (isinstance(x, (bool, np.bool_)) or not isinstance(x, (int, np.integer))):
            raise UsageError(f"{name(p.name)} must be an integer, got {x!r}.")
        if p.kind == "bool" and not isinstance(x, (bool, np.bool_)):
            raise UsageError(f"{name(p.name)} must be true or false, got {x!r}.")
        if p.kind == "real":
            x = _concrete(x)
            if x is None:
                continue
            if isinstance(x, (bool, np.bool_)) or not isinstance(x, (int, float)):
                raise UsageError(f"{name(p.name)} must be a real number (a scalar), got {x!r}.")
            if not math.isfinite(x):
                raise UsageError(f"{show(p.name, x)} is not finite; give a finite number.")
            real[p.name] = float(x)
        if p.kind == "choice" and x not in p.choices:
            raise UsageError(f"unknown {p.what} {show(p.name, x)}; expected one of {', '.join(p.choices)}.")
        if p.kind == "ln" and not (x in p.choices or _is_norm(x)):
            raise UsageError(
                f"unknown {p.what} {show(p.name, x)}; expected one of {', '.join(p.choices)} or an "
                "AbstractNorm."
            )
        if p.kind == "mask" and isinstance(x, str) and x not in p.choices:
            raise UsageError(f"unknown {p.what} {show(p.name, x)}; expected one of {', '.join(p.choices)}.")
        if p.kind == "mask" and not isinstance(x, str) and np.ndim(x) != 2:
            raise UsageError(
                f"{name(p.name)} must be a name ({', '.join(p.choices)}) or a boolean (n, n) array, "
                f"got {type(x).__name__} of shape {np.shape(x)}."
            )
        if p.kind == "dtype":
            try:
                floating = x is None or _is_floating(x)
            except TypeError:
                floating = False
            if not floating:
                raise UsageError(f"{name(p.name)} must be a floating dtype, got {x!r}.")
    return real


def _ignored(p, v: Mapping[str, Any], name: Names) -> str:
    """The message refusing ``p``, given although the model does not read it."""
    dep, allowed = p.reads
    x = v[p.name]
    shown = name.show(p.name, x) if isinstance(x, (str, int, float, np.generic)) else name(p.name)
    if not isinstance(v[dep], (str, bool, np.bool_)) and v[dep] is not None:
        return f"{shown} is ignored by a {dep} given as an object or array; drop it."
    users = " or ".join(name.show(dep, a) for a in allowed)
    return f"{shown} is ignored by {name.show(dep, v[dep])}; drop it (only {users} reads it)."


def _check(v: Mapping[str, Any], name: Names) -> None:
    """Every rule of a model configuration; raises UsageError naming the input through ``name``."""
    show = name.show
    real = _check_types(v, name)
    # --- one value at a time: the range rules of the table
    for p in PARAMS:
        x = real.get(p.name, v[p.name]) if p.kind == "real" else v[p.name]
        if p.kind in ("int", "real") and (p.kind == "int" or p.name in real):
            msg = range_error(p, x, v, name)
            if msg:
                raise UsageError(msg)
    # --- parameters that the chosen mask or family would ignore: refused, never ignored
    for p in PARAMS:
        if p.reads is not None and given(p, v[p.name]) and not reads(p, v):
            raise UsageError(_ignored(p, v, name))

    # --- relations between parameters
    n, d, heads = v["n"], v["d"], v["heads"]
    if d % heads:
        raise UsageError(
            f"{name('heads')} must divide {name('d')}: {show('d', d)} {show('heads', heads)}; "
            f"choose heads among the divisors of d."
        )
    if heads > 1 and not v["output_projection"]:
        raise UsageError(
            f"{show('heads', heads)} needs an output projection W_O: pass {name('output_projection')}=True."
        )
    if v["attention"] == "blocked" and v["attn_dropout"] > 0:
        raise UsageError(
            f"{show('attention', 'blocked')} cannot carry {name('attn_dropout')} (attention dropout "
            f"needs the n x n attention matrix): use {show('attention', 'dense')}, or drop the dropout."
        )
    if v["mask_degree"] is not None and (given(param("mask_p"), v["mask_p"]) or v["mask_degree"] >= n):
        raise UsageError(
            f"{show('mask_degree', v['mask_degree'])} draws that many keys per token: it must be below "
            f"{show('n', n)} and replaces {name('mask_p')}; give one of the two."
        )
    _check_scheme(v, name)
    mask, w_ = v["mask"], v["window"]
    if not isinstance(mask, str):
        if np.shape(mask) != (n, n):
            raise UsageError(
                f"{name('mask')} has shape {np.shape(mask)} but {show('n', n)}; give an (n, n) mask."
            )
        return
    check_mask_size(mask, n, w_, v["dilation"], v["num_global"], name)


def _check_scheme(v: Mapping[str, Any], name: Names) -> None:
    """The relations of the placement schemes: what Mix-LN, nGPT and QK-norm need."""
    show, placement = name.show, v["placement"]
    if placement == "mix":
        if v["mix_layers"] is None:
            raise UsageError(
                f"{show('placement', 'mix')} needs {name('mix_layers')}: the number of post-LN layers "
                "before the pre-LN ones, in [0, layers]."
            )
        if v["num_layers"] is not None and v["mix_layers"] > v["num_layers"]:
            raise UsageError(
                f"{show('mix_layers', v['mix_layers'])} is outside [0, {v['num_layers']}]: the stack has "
                f"{v['num_layers']} layers; choose at most that many post-LN layers."
            )
    if placement == "ngpt":
        if v["ngpt_alpha"] is None:
            raise UsageError(f"{show('placement', 'ngpt')} needs {name('ngpt_alpha')}, its step in (0, 1].")
        ln = v["ln"]
        if (isinstance(ln, str) and ln != "sphere") or (
            ln is not None and not isinstance(ln, str) and not _is_sphere(ln)
        ):
            shown = show("ln", ln) if isinstance(ln, str) else f"{name('ln')} {type(ln).__name__}"
            raise UsageError(
                f"{shown} with {show('placement', 'ngpt')}: nGPT keeps every token on the unit sphere, "
                f"so its norm is the sphere norm; use {show('ln', 'sphere')} (or leave it unset)."
            )
    if v["qk_norm"] is True and v["qk"] == "zero":
        raise UsageError(
            f"{name('qk_norm')} with {show('qk', 'zero')}: the queries and keys are zero and have no "
            "direction to normalise; drop one of them."
        )


def _is_sphere(x) -> bool:
    from ._norms import SphereNorm

    return isinstance(x, SphereNorm)


def check_mask_size(mask: str, n: int, window: int, dilation: int, num_global: int, name: Names) -> None:
    """The relations of a named mask to the number of tokens (one check for every path).

    The random-model path (`ModelConfig`) and the checkpoint path of ``rankdyn simulate`` both
    call it, so a window wider than the sequence is refused on each.

    Raises:
        UsageError: a window not narrower than ``n``, dilated hops past the last token, or more
            global tokens than tokens.
    """
    show, w_, v = name.show, window, {"dilation": dilation, "num_global": num_global}
    if mask in _WIDTH_MASKS and w_ >= n:
        raise UsageError(
            f"{show('window', w_)} is not smaller than {show('n', n)} (mask {mask!r}): "
            f"a window must be narrower than the sequence."
        )
    if mask == "dilated" and w_ * v["dilation"] > n - 1:
        raise UsageError(
            f"{show('window', w_)} dilated hops of {v['dilation']} tokens reach "
            f"{w_ * v['dilation']} tokens away, beyond the last of {show('n', n)} tokens; use "
            f"{name('window')} <= {(n - 1) // v['dilation']}."
        )
    if mask == "global" and v["num_global"] > n:
        raise UsageError(f"{show('num_global', v['num_global'])} must be in [0, n = {n}].")
