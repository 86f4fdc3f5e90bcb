r"""The one table of the model's parameters: every other declaration is generated from it.

Each `Param` row says a parameter's name (the `ModelConfig` field and the `make_layer`
argument), its kind, default, the range rule of one value and its message, the help text, the
CLI flag, the TOML key, whether it changes the compiled program (``structural``) and which other
parameter decides whether it is read (``reads``: an option that would be ignored is refused,
never ignored, in the API, on the CLI and in TOML alike). Generated from `PARAMS`:

- `rankdyn.ModelConfig` (`rankdyn._model._config`): fields, defaults, checks and messages;
- `rankdyn.make_layer` (`rankdyn._model._build`): keyword arguments and their docs;
- the model flags of ``rankdyn simulate`` / ``equilibria`` (`rankdyn._commands.simulate.add_model_flags`);
- the sweep keys, their types and the checks of one value (`rankdyn.sweep.SWEEP_PARAMS`).

Adding a parameter is one row here plus the code that uses it (usually `rankdyn._model._build`).
The relations between several parameters (a window narrower than ``n``, heads dividing ``d``)
are the rules of `rankdyn._model._config`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from .._observe._tolerances import RANK_TOL
from ._names import (
    ATTENTION_MODES,
    LN_NAMES,
    MASK_NAMES,
    PLACEMENTS,
    QK_NAMES,
    VALUE_NAMES,
    X0_NAMES,
    default_dqk,
)

__all__ = [
    "Param",
    "PARAMS",
    "RUN_PARAMS",
    "RENAMED",
    "renamed_hint",
    "MASKS_WITH_WINDOW",
    "SEED_MAX",
    "default_dqk",
    "param",
    "reads",
    "given",
    "range_error",
]

#: Largest seed. Without float64 mode JAX keeps 32 bits of an integer seed, so 2**32 would give
#: the same key as 0 (and Python ints beyond 64 bits raise an OverflowError): one range for all.
SEED_MAX = 2**32 - 1

#: Masks that read ``window`` (half-width, look-back, or number of dilated hops).
MASKS_WITH_WINDOW = ("window", "window-uni", "dilated", "global")

#: A range rule: ``(value, all values or None, names) -> message suffix or None``. With ``None``
#: for the values (a sweep axis value checked alone) only the single-value part runs.
Rule = Callable[[Any, "Mapping[str, Any] | None", Any], "str | None"]


@dataclasses.dataclass(frozen=True)
class Param:
    """One parameter: see the module docstring.

    Attributes:
        name: `ModelConfig` field and `make_layer` argument.
        kind: ``int``, ``real``, ``bool``, ``choice`` (one of ``choices``), ``mask`` (a name or an
            array), ``ln`` (a name or an `AbstractNorm`) or ``dtype``.
        default: the API default (`dataclasses.MISSING`: required). ``None`` for an optional
            parameter; a parameter read only sometimes has ``None`` ("unset") and a ``fallback``,
            so that any value given where it is not read can be refused.
        help: one line for ``--help`` and the docs.
        rule: the range rule of one value (`Rule`).
        choices: allowed names for ``choice`` / ``mask`` / ``ln``.
        what: what a value is, for "unknown <what>" messages.
        fallback: the value used when unset and read (e.g. ``w`` 2.0).
        tool_default: the CLI's and the sweep's default where the API has none (``n``, ``d``).
        flag: the CLI flag (None: not a CLI flag).
        key: the TOML key of ``[axes]`` / ``[fixed]`` (None: not a sweep key); ``key_aliases``.
        structural: changes the compiled program (cells differing in it are compiled apart).
        api: an argument of `make_layer` (``x0`` and ``seed`` are inputs, not layer arguments).
        reads: ``(parameter, values)``: read only when that parameter has one of the values.
    """

    name: str
    kind: str
    default: Any
    help: str
    rule: Rule | None = None
    choices: tuple = ()
    what: str = ""
    fallback: Any = None
    tool_default: Any = None
    flag: str | None = None
    key: str | None = None
    key_aliases: tuple[str, ...] = ()
    structural: bool = False
    api: bool = True
    reads: tuple[str, tuple] | None = None

    @property
    def optional(self) -> bool:
        return self.default is None

    @property
    def sweep_default(self):
        """The value a sweep records when the key is absent (fixed: saved sweeps' config hashes
        depend on it)."""
        if self.tool_default is not None:
            return self.tool_default
        return self.fallback if self.default is None and self.fallback is not None else self.default

    @property
    def sweep_kind(self) -> str:
        """The type of a TOML value: ``str``, ``int``, ``float``, ``bool``, with ``?`` if optional."""
        base = {"int": "int", "real": "float", "bool": "bool"}.get(self.kind, "str")
        return base + ("?" if self.default is None and self.fallback is None else "")


# ----------------------------------------------------------------------------- range rules


def _at_least(low: int, text: str) -> Rule:
    return lambda x, v, name: None if x >= low else text


def _positive(text: str) -> Rule:
    return lambda x, v, name: None if x > 0 else f"must be > 0 ({text})"


def _in_unit(text: str, closed: bool) -> Rule:
    return lambda x, v, name: None if (0 <= x <= 1 if closed else 0 <= x < 1) else text


def _seed_rule(x, v, name):
    if 0 <= x <= SEED_MAX:
        return None
    return (
        "is outside the PRNG's seed range [0, 2**32 - 1] (larger seeds wrap around: 2**32 gives the "
        "same key as 0); choose a seed in that range"
    )


def _jordan_rule(k, v, name):
    d = None if v is None else v["d"]
    if k < 1:
        return f"the Jordan block size must be in [1, d = {d}]" if d else "a Jordan block needs size >= 1"
    if d is not None and k > d:
        return (
            f"a Jordan block larger than {name.show('d', d)} does not fit in W_V; the Jordan block size "
            f"must be in [1, d = {d}]"
        )
    return None


_DROPOUT = "a dropout rate must be in [0, 1) (0: off)"


def _alpha_rule(x, v, name):
    return None if 0 < x <= 1 else "nGPT's step alpha must be in (0, 1]"


#: Placements that apply the normalisation (they read ``ln``).
_NORMED = tuple(p for p in PLACEMENTS if p != "none")

# ----------------------------------------------------------------------------- the table

PARAMS: tuple[Param, ...] = (
    # --- sizes
    Param("n", "int", dataclasses.MISSING, "number of tokens",
          _at_least(1, "the number of tokens must be a positive integer"), tool_default=32, flag="--n",
          key="n", structural=True),
    Param("d", "int", dataclasses.MISSING, "token dimension",
          _at_least(1, "the token dimension must be a positive integer"), tool_default=64, flag="--d",
          key="d", structural=True),
    # --- the mask (docs/theory.md#masks-as-graphs)
    Param("mask", "mask", "causal", "attention mask graph", choices=MASK_NAMES, what="mask", flag="--mask",
          key="mask"),
    Param("window", "int", 1,
          "window half-width (window, global), look-back (window-uni) or dilated hops (dilated); "
          "other masks refuse a value other than 1",
          _at_least(0, "a window must be >= 0"), flag="--window", key="window",
          reads=("mask", MASKS_WITH_WINDOW)),
    Param("dilation", "int", 4, "tokens per hop of the dilated mask",
          _at_least(1, "the dilation must be >= 1"), key="dilation", reads=("mask", ("dilated",))),
    Param("num_global", "int", 1, "global tokens of the global mask", _at_least(0, "must be >= 0"),
          key="num_global", reads=("mask", ("global",))),
    Param("mask_p", "real", 0.1, "edge probability of the random mask",
          _in_unit("an edge probability must be in [0, 1]", True), key="mask_p", reads=("mask", ("random",))),
    Param("mask_seed", "int", 0, "seed of the random mask", _seed_rule, key="mask_seed",
          reads=("mask", ("random",))),
    Param("mask_degree", "int", None,
          "keys per token of a sparse random mask, drawn uniformly (instead of the edge probability "
          "mask_p: a random mask at any n)", _at_least(1, "a token needs at least one other key"),
          flag="--mask-degree", key="mask_degree", reads=("mask", ("random",))),
    # --- attention (eq. 1)
    Param("dqk", "real", None, "temperature d_QK, finite and > 0 (default: the key width d // heads)",
          _positive("the temperature d_QK"), flag="--dqk", key="dqk"),
    Param("qk", "choice", "bert", "query/key family (zero: uniform attention)", choices=QK_NAMES,
          what="query/key family", flag="--qk", key="qk"),
    Param("qk_std", "real", None, "standard deviation of the gaussian query/key family",
          _positive("a standard deviation"), key="qk_std", reads=("qk", ("gaussian",))),
    Param("attention", "choice", "auto",
          "attention path: dense (the n x n softmax), blocked (online softmax over the key blocks the "
          "mask touches, never n x n) or auto (blocked from 2048 tokens when the layer allows it)",
          choices=ATTENTION_MODES, what="attention path", flag="--attention", key="attention",
          structural=True),
    Param("heads", "int", 1, "attention heads (dividing d; >1 adds W_O)",
          _at_least(1, "must be a positive integer"), flag="--heads", key="heads", structural=True),
    Param("output_projection", "bool", False,
          "add the output projection W_O (BERT-uniform); on the CLI and in sweeps: heads > 1"),
    # --- normalisation (eqs. 2-3)
    Param("placement", "choice", "post",
          "normalisation placement: none (eq. 2), post (eq. 3), pre, peri (x + N(F(N(x)))), mix "
          "(post for layers t < mix_layers, pre after), ngpt (N(x + alpha (N(F(N(x))) - N(x))), sphere "
          "norm, one scalar alpha) or lns (x + F(N(x) / sqrt(t + 1))); the residual is --skip: Post-, "
          "Pre- and Mix-LN as published are post, pre and mix with --skip",
          choices=PLACEMENTS, what="norm placement", flag="--placement", key="placement",
          structural=True),
    Param("ln", "ln", None,
          "normalisation variant (sphere: the paper's x / ||x||), or in Python an AbstractNorm",
          choices=LN_NAMES, what="normalisation", fallback="sphere", flag="--ln", key="ln", structural=True,
          reads=("placement", _NORMED)),
    Param("ln_radius", "real", None, "radius of the sphere normalisation (default 1)",
          _positive("the sphere radius"), key="ln_radius", reads=("ln", ("sphere",))),
    Param("mix_layers", "int", None,
          "Mix-LN: the first mix_layers layers (t < mix_layers) post-LN, the rest pre-LN; in [0, layers]",
          _at_least(0, "the number of post-LN layers of Mix-LN must be in [0, layers]"),
          flag="--mix-layers", key="mix_layers", structural=True, reads=("placement", ("mix",))),
    Param("ngpt_alpha", "real", None, "nGPT's step alpha in (0, 1] (one scalar for every dimension)",
          _alpha_rule, flag="--ngpt-alpha", key="ngpt_alpha", reads=("placement", ("ngpt",))),
    Param("qk_norm", "bool", False,
          "QK-norm: RMS-normalise queries and keys per head, no gain (|q| = sqrt(d_qk)); dqk stays "
          "the temperature", flag="--qk-norm", key="qk_norm", structural=True),
    # --- the value matrix W_V
    Param("value", "choice", "orthogonal",
          "value matrix family (gaussian: i.i.d. N(0, 1/d) entries, std 1/sqrt(d); scaled: gaussian "
          "rescaled to spectral norm 1)", choices=VALUE_NAMES, what="value family",
          flag="--value", key="value"),
    Param("w", "real", None, "superdiagonal weight of bidiagonal/jordan W_V", fallback=2.0, flag="--w",
          key="w", reads=("value", ("bidiagonal", "jordan"))),
    Param("jordan_k", "int", None, "Jordan block size in [1, d] (default: d)", _jordan_rule,
          flag="--jordan-k", key="jordan_k", reads=("value", ("jordan",))),
    Param("value_std", "real", None, "standard deviation of the gaussian/scaled value families",
          _positive("a standard deviation"), key="value_std", reads=("value", ("gaussian", "scaled"))),
    # --- depth and the practical block (Fig. 2/6 ablations)
    Param("num_layers", "int", None,
          "independent weights for each of this many layers (None: shared); on the CLI "
          "--per-layer-weights with --num-layers",
          _at_least(1, "per-layer weights need at least one layer")),
    Param("skip", "bool", False, "residual connection X + SA(X) (implied by peri, ngpt and lns)",
          flag="--skip", key="skip", structural=True),
    Param("mlp", "bool", False, "add an MLP block", flag="--mlp", key="mlp", structural=True),
    Param("mlp_ratio", "int", None, "MLP width factor (hidden width mlp_ratio * d)",
          _at_least(1, "the MLP width factor must be >= 1"), fallback=4, reads=("mlp", (True,))),
    Param("attn_dropout", "real", 0.0, "dropout on the attention probabilities (BERT's 0.1 in train mode)",
          _in_unit(_DROPOUT, False), flag="--attn-dropout", key="attn_dropout", structural=True),
    Param("hidden_dropout", "real", 0.0, "dropout on the block outputs, before the skip and the norm",
          _in_unit(_DROPOUT, False), flag="--hidden-dropout", key="hidden_dropout", structural=True),
    # --- inputs (not layer arguments)
    Param("x0", "choice", "sphere", "initial tokens", choices=X0_NAMES, what="initial condition", flag="--x0",
          key="x0", api=False),
    Param("seed", "int", 0, "PRNG seed for weights and inputs, in [0, 2**32 - 1]", _seed_rule, flag="--seed",
          key="seed", api=False),
    Param("dtype", "dtype", None, "floating dtype of the weights (None: JAX's default float)"),
)  # fmt: skip

#: Parameters of a run that are not part of the model (the sweep's; the CLI has them as flags of
#: its commands). ``num_layers`` (the depth) and ``per_layer_weights`` give the model's ``num_layers``
#: (the number of independent weight sets: the depth with per-layer weights, None when shared).
RUN_PARAMS: tuple[Param, ...] = (
    Param("num_layers", "int", 64, "depth T", _at_least(1, "must be a positive integer"), key="num_layers",
          structural=True),
    Param("batch", "int", 256, "number of trajectories", _at_least(1, "must be a positive integer"),
          key="batch", structural=True),
    Param("per_layer_weights", "bool", False, "draw new weights for every layer", key="per_layer_weights",
          structural=True),
    Param("save_every", "int", 1, "record metrics every k layers", _at_least(1, "must be a positive integer"),
          key="save_every", structural=True),
    Param("rank_tol", "real", RANK_TOL, "relative tolerance of the numerical rank", _positive("a tolerance"),
          key="rank_tol", structural=True),
)  # fmt: skip

#: Old names of parameters (sweep keys, and as ``--old-name`` CLI flags): refused, naming the new
#: name, so a script written for an earlier version fails at its first line instead of running
#: with a default in place of the value it meant.
RENAMED = {"layers": "num_layers", "norm": "placement"}


def renamed_hint(name: str) -> str:
    """`` ('OLD' is now 'NEW')`` when ``name`` is an old name in `RENAMED`, else ''."""
    return f" ({name!r} is now {RENAMED[name]!r})" if name in RENAMED else ""


# ``num_layers`` names one quantity in both tables (the depth; the model holds that many weight sets
# only with per-layer weights): the model's row, which `make_layer` validates, is the one looked up.
_BY_NAME = {p.name: p for p in RUN_PARAMS} | {p.name: p for p in PARAMS}


def param(name: str) -> Param:
    """The row of ``name``."""
    return _BY_NAME[name]


def reads(p: Param, values: Mapping[str, Any]) -> bool:
    """Whether the model of ``values`` reads ``p`` (`Param.reads`)."""
    if p.reads is None:
        return True
    dep, allowed = p.reads
    v = values.get(dep, param(dep).default)
    if v is None:
        v = param(dep).fallback
    if isinstance(v, (bool, np.bool_)):
        return bool(v) in allowed
    # An array mask or a norm object reads none of the name-keyed parameters.
    return isinstance(v, str) and v in allowed


def given(p: Param, value) -> bool:
    """Whether ``value`` was set by the user (it differs from the default; None is unset)."""
    if value is None:
        return False
    if p.default is None or p.default is dataclasses.MISSING:
        return True
    try:
        return bool(value != p.default)
    except (TypeError, ValueError):
        return True


def range_error(p: Param, x, values: Mapping[str, Any] | None, name) -> str | None:
    """The message of ``p``'s range rule for ``x`` (None when it holds), naming it through ``name``."""
    if p.rule is None or x is None:
        return None
    if isinstance(x, float) and not math.isfinite(x):
        return None  # reported as "not finite" by the type checks
    msg = p.rule(x, values, name)
    if msg is None:
        return None
    return f"{name.show(p.name, x)}{' ' if msg.startswith('is ') else ': '}{msg}."
