r"""The validated model configuration: what defines one layer map and its inputs, checked once.

`ModelConfig` is the one place where the rules about a model live (sizes, families, the
parameters each mask or family uses, ranges of the temperature, dropout rates and seeds) and
where their error messages are written. Every entry point becomes one:

- `rankdyn.make_layer(key, n=..., ...)` builds one from its arguments (messages name the argument);
- the CLI builds one from the model flags (`rankdyn.commands._checks.model_config`; messages name
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
from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import ArrayLike

from ._init import X0_NAMES
from ._layer import PLACEMENTS
from ._masks import MASK_NAMES
from ._norms import LN_NAMES, AbstractNorm
from ._weights import QK_NAMES, VALUE_NAMES

__all__ = ["ModelConfig", "Names", "SEED_MAX", "MASKS_WITH_WINDOW", "ignored_fields", "check_seed"]

#: Largest seed. Without float64 mode JAX keeps 32 bits of an integer seed, so 2**32 would give
#: the same key as 0 (and Python ints beyond 64 bits raise an OverflowError): one range for all.
SEED_MAX = 2**32 - 1

#: Masks that read ``window`` (half-width, look-back, or number of dilated hops).
MASKS_WITH_WINDOW = ("window", "window-uni", "dilated", "global")
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


_INT = (
    "n",
    "d",
    "window",
    "dilation",
    "num_global",
    "mask_seed",
    "jordan_k",
    "num_layers",
    "heads",
    "mlp_ratio",
    "seed",
)
_REAL = ("dqk", "ln_radius", "w", "value_std", "qk_std", "mask_p", "attn_dropout", "hidden_dropout")
_BOOL = ("output_projection", "skip", "mlp")
_OPTIONAL = ("dqk", "ln_radius", "jordan_k", "value_std", "qk_std", "num_layers", "dtype")
_CHOICES = {"placement": PLACEMENTS, "value": VALUE_NAMES, "qk": QK_NAMES, "x0": X0_NAMES}
_WHAT = {
    "placement": "norm placement",
    "value": "value family",
    "qk": "query/key family",
    "x0": "initial condition",
}


@dataclasses.dataclass(frozen=True, kw_only=True, eq=False)
class ModelConfig:
    r"""One validated model: the layer $F(X) = \mathrm{LN}(A(X) X W_V)$ (eqs. 1-3) and its inputs.

    Arguments (all keyword-only; ``n`` and ``d`` are required):
        n, d: number of tokens and features (positive integers).
        mask: a name of `MASK_NAMES` or a boolean ``(n, n)`` array (self-loops required).
        window: half-width (``window``, ``global``), look-back (``window-uni``) or number of
            hops (``dilated``); default 1. A value other than 1 with a mask that ignores it
            (``complete``, ``causal``, ``random``, an array) is refused: it would do nothing.
        dilation, num_global, mask_p, mask_seed: the ``dilated``, ``global`` and ``random`` masks.
        dqk: temperature $d_{QK}$ in $\exp(\langle W_Q x_i, W_K x_j\rangle / \sqrt{d_{QK}})$
            (eq. 1); default the key width ``d // heads``; finite and > 0.
        placement: ``none`` (eq. 2), ``post`` (eq. 3) or ``pre``.
        ln: ``sphere`` (the paper's $x / \|x\|$), ``rms``, ``layernorm`` or an `AbstractNorm`;
            ``ln_radius`` (sphere only) scales it.
        value, w, jordan_k, value_std: the $W_V$ family and its parameters (``w``: superdiagonal
            of ``bidiagonal``/``jordan``; ``jordan_k``: Jordan block size in [1, d], jordan only;
            ``value_std``: ``gaussian``/``scaled`` only).
        qk, qk_std: the $W_Q, W_K$ family (``zero``: uniform attention); ``qk_std`` gaussian only.
        num_layers: independent weights for each of this many layers (None: shared weights).
        heads, output_projection: attention heads (dividing ``d``; more than one needs ``W_O``).
        skip, mlp, mlp_ratio: residual connection and MLP block of the practical ablations.
        attn_dropout, hidden_dropout: dropout rates in [0, 1) on the attention probabilities and
            on the block outputs.
        x0: initial token family (`X0_NAMES`); seed: PRNG seed in [0, `SEED_MAX`].
        dtype: floating dtype of the weights (None: JAX's default float).

    Raises:
        ValueError: naming the argument, what was expected, what was received, and the fix.
    """

    # Annotations say what is accepted; the checks in `_check` (not the annotations) give the
    # messages. Numbers may be traced arrays under jit (they are then not checked).
    n: int | np.integer
    d: int | np.integer
    mask: str | ArrayLike = "causal"
    window: int | np.integer = 1
    dilation: int | np.integer = 4
    num_global: int | np.integer = 1
    mask_p: float | int = 0.1
    mask_seed: int | np.integer = 0
    dqk: ArrayLike | None = None
    placement: str = "post"
    ln: str | AbstractNorm = "sphere"
    ln_radius: ArrayLike | None = None
    value: str = "orthogonal"
    w: ArrayLike = 2.0
    jordan_k: int | np.integer | None = None
    value_std: ArrayLike | None = None
    qk: str = "bert"
    qk_std: ArrayLike | None = None
    num_layers: int | np.integer | None = None
    heads: int | np.integer = 1
    output_projection: bool | np.bool_ = False
    skip: bool | np.bool_ = False
    mlp: bool | np.bool_ = False
    mlp_ratio: int | np.integer = 4
    attn_dropout: float | int = 0.0
    hidden_dropout: float | int = 0.0
    x0: str = "sphere"
    seed: int | np.integer = 0
    dtype: Any = None

    def __post_init__(self):
        _check(self.to_mapping(), Names.arguments())

    @classmethod
    def from_mapping(
        cls, values: Mapping[str, Any], where: "Names | str | Callable[[str], str]" = ""
    ) -> "ModelConfig":
        """Build from a mapping of field -> value; messages name each key through ``where``.

        ``where`` is a `Names`, a TOML table prefix (``"[fixed]"`` gives ``[fixed] window = 40``)
        or a callable ``field -> label`` (e.g. ``[axes] window`` or ``[fixed] window`` per key).
        Unknown keys are refused; `field_names` lists the known ones.
        """
        names = (
            where if isinstance(where, Names) else (Names.arguments() if where == "" else Names.keys(where))
        )
        unknown = [k for k in values if k not in cls.field_names()]
        if unknown:
            raise ValueError(
                f"unknown model parameter {names(unknown[0])}; expected one of "
                f"{', '.join(cls.field_names())}."
            )
        defaults = {
            f.name: f.default for f in dataclasses.fields(cls) if f.default is not dataclasses.MISSING
        }
        for req in ("n", "d"):
            if req not in values:
                raise ValueError(f"{names(req)} is required (a positive integer).")
        _check(defaults | dict(values), names)
        return cls(**values)

    @classmethod
    def field_names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in dataclasses.fields(cls))

    def to_mapping(self) -> dict[str, Any]:
        """Field -> value (arrays and norm objects as given)."""
        return {f: getattr(self, f) for f in self.field_names()}

    def replace(self, **changes) -> "ModelConfig":
        """A copy with ``changes`` applied and validated again."""
        return dataclasses.replace(self, **changes)

    @property
    def has_dropout(self) -> bool:
        return bool(self.attn_dropout > 0 or self.hidden_dropout > 0)

    def dropout_kwargs(self) -> dict[str, float]:
        """The dropout arguments of `SelfAttentionLayer` (the one place that maps the two rates)."""
        return {"attn_dropout": float(self.attn_dropout), "hidden_dropout": float(self.hidden_dropout)}


def ignored_fields(values: Mapping[str, Any]) -> tuple[str, ...]:
    """Fields that the chosen mask and families do not read (a sweep cell may drop them)."""
    out = []
    mask = values.get("mask", "causal")
    mask = mask if isinstance(mask, str) else None  # an array mask reads none of them
    if mask not in MASKS_WITH_WINDOW:
        out.append("window")
    if mask != "dilated":
        out.append("dilation")
    if mask != "global":
        out.append("num_global")
    if mask != "random":
        out += ["mask_p", "mask_seed"]
    ln = values.get("ln", "sphere")
    if not (isinstance(ln, str) and ln == "sphere"):
        out.append("ln_radius")
    if values.get("value", "orthogonal") != "jordan":
        out.append("jordan_k")
    if values.get("value", "orthogonal") not in ("gaussian", "scaled"):
        out.append("value_std")
    if values.get("qk", "bert") != "gaussian":
        out.append("qk_std")
    return tuple(out)


# ----------------------------------------------------------------------------- the rules


def check_seed(seed, field: str = "seed", name: Names | None = None) -> None:
    """Refuse a seed outside [0, `SEED_MAX`] (or not an integer), naming it through ``name``."""
    name = name or Names.arguments()
    if isinstance(seed, (bool, np.bool_)) or not isinstance(seed, (int, np.integer)):
        raise ValueError(f"{name(field)} must be an integer, got {seed!r}.")
    if not 0 <= seed <= SEED_MAX:
        raise ValueError(
            f"{name.show(field, seed)} is outside the PRNG's seed range [0, 2**32 - 1] (larger seeds "
            f"wrap around: 2**32 gives the same key as 0); choose a seed in that range."
        )


def _concrete(v):
    """A Python scalar for a concrete number (None for a traced value, which is not checked)."""
    if isinstance(v, jax.core.Tracer):
        return None
    if isinstance(v, (jax.Array, np.ndarray, np.generic)):
        if np.ndim(v) != 0:
            return v  # shape problems are reported by the caller
        return np.asarray(v).item()
    return v


def _check(v: Mapping[str, Any], name: Names) -> None:
    """Every rule of a model configuration; raises ValueError naming the input through ``name``."""
    show = name.show
    # --- types
    for f in _INT:
        x = v[f]
        if x is None and f in _OPTIONAL:
            continue
        if isinstance(x, (bool, np.bool_)) or not isinstance(x, (int, np.integer)):
            raise ValueError(f"{name(f)} must be an integer, got {x!r}.")
    for f in _BOOL:
        if not isinstance(v[f], (bool, np.bool_)):
            raise ValueError(f"{name(f)} must be true or false, got {v[f]!r}.")
    real = {}
    for f in _REAL:
        x = _concrete(v[f])
        if x is None:
            continue
        if isinstance(x, (bool, np.bool_)) or not isinstance(x, (int, float)):
            raise ValueError(f"{name(f)} must be a real number (a scalar), got {x!r}.")
        if not math.isfinite(x):
            raise ValueError(f"{show(f, x)} is not finite; give a finite number.")
        real[f] = float(x)
    for f, allowed in _CHOICES.items():
        if v[f] not in allowed:
            raise ValueError(f"unknown {_WHAT[f]} {show(f, v[f])}; expected one of {', '.join(allowed)}.")
    if not (isinstance(v["ln"], AbstractNorm) or v["ln"] in LN_NAMES):
        raise ValueError(
            f"unknown normalisation {show('ln', v['ln'])}; expected one of {', '.join(LN_NAMES)} "
            "or an AbstractNorm."
        )
    mask = v["mask"]
    mname = mask if isinstance(mask, str) else None  # comparisons below must not broadcast an array
    if isinstance(mask, str):
        if mask not in MASK_NAMES:
            raise ValueError(f"unknown mask {show('mask', mask)}; expected one of {', '.join(MASK_NAMES)}.")
    elif np.ndim(mask) != 2:
        raise ValueError(
            f"{name('mask')} must be a name ({', '.join(MASK_NAMES)}) or a boolean (n, n) array, "
            f"got {type(mask).__name__} of shape {np.shape(mask)}."
        )
    try:
        floating = v["dtype"] is None or jnp.issubdtype(jnp.dtype(v["dtype"]), jnp.floating)
    except TypeError:
        floating = False
    if not floating:
        raise ValueError(f"{name('dtype')} must be a floating dtype, got {v['dtype']!r}.")

    # --- sizes
    n, d = v["n"], v["d"]
    if n < 1:
        raise ValueError(f"{show('n', n)}: the number of tokens must be a positive integer.")
    if d < 1:
        raise ValueError(f"{show('d', d)}: the token dimension must be a positive integer.")
    if v["heads"] < 1 or d % v["heads"]:
        raise ValueError(
            f"{name('heads')} must divide {name('d')}: {show('d', d)} {show('heads', v['heads'])}; "
            f"choose heads among the divisors of d."
        )
    if v["heads"] > 1 and not v["output_projection"]:
        raise ValueError(
            f"{show('heads', v['heads'])} needs an output projection W_O: pass "
            f"{name('output_projection')}=True."
        )
    if v["num_layers"] is not None and v["num_layers"] < 1:
        raise ValueError(f"{show('num_layers', v['num_layers'])}: per-layer weights need at least one layer.")
    if v["mlp_ratio"] < 1:
        raise ValueError(f"{show('mlp_ratio', v['mlp_ratio'])}: the MLP width factor must be >= 1.")

    # --- the mask and the parameters it reads (docs/theory.md#masks-as-graphs)
    w_ = v["window"]
    if w_ < 0:
        raise ValueError(f"{show('window', w_)}: a window must be >= 0.")
    if not isinstance(mask, str):
        if np.shape(mask) != (n, n):
            raise ValueError(
                f"{name('mask')} has shape {np.shape(mask)} but {show('n', n)}; give an (n, n) mask."
            )
        if w_ != 1:
            raise ValueError(f"{show('window', w_)} is ignored by a mask given as an array; drop it.")
    elif mask not in MASKS_WITH_WINDOW and w_ != 1:
        raise ValueError(
            f"{show('window', w_)} is ignored by {show('mask', mask)}; drop it "
            f"(only {', '.join(MASKS_WITH_WINDOW)} read a window)."
        )
    elif mask in _WIDTH_MASKS and w_ >= n:
        raise ValueError(
            f"{show('window', w_)} is not smaller than {show('n', n)} (mask {mask!r}): "
            f"a window must be narrower than the sequence."
        )
    if v["dilation"] < 1:
        raise ValueError(f"{show('dilation', v['dilation'])}: the dilation must be >= 1.")
    if mname == "dilated" and w_ * v["dilation"] > n - 1:
        raise ValueError(
            f"{show('window', w_)} dilated hops of {v['dilation']} tokens reach {w_ * v['dilation']} tokens away, "
            f"beyond the last of {show('n', n)} tokens; use {name('window')} <= {(n - 1) // v['dilation']}."
        )
    if mname == "global" and not 0 <= v["num_global"] <= n:
        raise ValueError(f"{show('num_global', v['num_global'])} must be in [0, n = {n}].")
    if "mask_p" in real and not 0 <= real["mask_p"] <= 1:
        raise ValueError(f"{show('mask_p', real['mask_p'])}: an edge probability must be in [0, 1].")
    for f in ("mask_seed", "seed"):
        check_seed(v[f], f, name)

    # --- families and their parameters
    for f, what in (
        ("dqk", "the temperature d_QK"),
        ("ln_radius", "the sphere radius"),
        ("value_std", "a standard deviation"),
        ("qk_std", "a standard deviation"),
    ):
        if f in real and not real[f] > 0:
            raise ValueError(f"{show(f, real[f])}: {what} must be > 0.")
    k = v["jordan_k"]
    if k is not None:
        if v["value"] != "jordan":
            raise ValueError(
                f"{show('jordan_k', k)} is ignored by {show('value', v['value'])}; drop it or use "
                f"{show('value', 'jordan')}."
            )
        if k < 1:
            raise ValueError(f"{show('jordan_k', k)}: the Jordan block size must be in [1, d = {d}].")
        if k > d:
            raise ValueError(
                f"{show('jordan_k', k)}: a Jordan block larger than {show('d', d)} does not fit in W_V; "
                f"the Jordan block size must be in [1, d = {d}]."
            )
    for f, used, users in (
        ("ln_radius", isinstance(v["ln"], str) and v["ln"] == "sphere", "ln sphere"),
        ("value_std", v["value"] in ("gaussian", "scaled"), "value gaussian or scaled"),
        ("qk_std", v["qk"] == "gaussian", "qk gaussian"),
    ):
        if v[f] is not None and not used:
            raise ValueError(f"{name(f)} is ignored here (only {users} reads it); drop it.")

    # --- dropout
    for f in ("attn_dropout", "hidden_dropout"):
        if f in real and not 0 <= real[f] < 1:
            raise ValueError(f"{show(f, real[f])}: a dropout rate must be in [0, 1) (0: off).")
