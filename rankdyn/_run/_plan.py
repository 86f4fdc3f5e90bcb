"""The plan of a depth-scan run: every option checked and every size resolved once, without JAX.

`SimulatePlan` holds what `rankdyn.simulate`, ``rankdyn simulate`` (random model or checkpoint)
and a sweep's chunk decide before anything is computed: the depth and ``save_every``, ``rank_tol``,
the chunk, the metrics kept, the attention path the layer takes (dense or blocked) with its
block size, and from these the memory estimate (`SimulatePlan.memory`, one function, so the
command line, the sweep planner and the library cannot disagree). Its checks run in
``__post_init__`` (the pattern of Diffrax's ``SaveAt.__check_init__``) and raise a
`rankdyn.UsageError` that names the flag (``--num-layers 5``) when the plan is built by the command
line (``flags=True``) and the argument (``num_layers=5``) otherwise.

This module imports no JAX: the command line builds the plan and refuses from it before JAX
loads. The attention path and the block size are resolved on first use (`resolve_attention`
and `choose_block_size` of `rankdyn._model._blocked`, the functions the layer itself calls),
and `SimulatePlan.memory` reads `rankdyn._run._sizing`; both load JAX then. What the machine has
free (`rankdyn._run._memory.check_memory`) is asked by the caller, not by the plan.
"""

from __future__ import annotations

import dataclasses
import functools
import numbers
from collections.abc import Callable
from typing import Any

from .._arguments import Naming, check_count, show
from .._errors import UsageError
from .._observe._tolerances import RANK_TOL
from ._memory import MemoryEstimate

__all__ = ["SimulatePlan", "check_chunk", "check_depth", "check_rank_tol"]

#: What a plan passed to `rankdyn.simulate` must agree on with the run (`SimulatePlan.differs`).
_RUN_FIELDS = (
    *("n", "d", "heads", "dv", "batch", "num_layers", "save_every", "rank_tol", "chunk", "itemsize"),
    *("metrics", "per_trajectory", "save_states", "attention_path", "block"),
)
#: Trajectory i's key and tokens come from ``fold_in(key, i)`` with a 32-bit i.
MAX_BATCH = 2**31


def _arg(name: str, flags: Naming) -> str:
    if callable(flags):
        return flags(name, "...")
    return f"--{name.replace('_', '-')}" if flags else name


def _integer(v) -> bool:
    return isinstance(v, numbers.Integral) and not isinstance(v, bool)


def check_depth(num_layers, save_every, flags: Naming = False) -> None:
    """The depth ``T >= 0`` and the save interval ``k >= 1``, with ``k`` dividing ``T`` (layers
    ``0, k, ..., T`` are recorded)."""
    check_count(num_layers, "num_layers", minimum=0, flags=flags)
    check_count(save_every, "save_every", flags=flags)
    if num_layers % save_every:
        raise UsageError(
            f"{show('num_layers', num_layers, flags)} is not a multiple of "
            f"{show('save_every', save_every, flags)}; choose a save interval that is a divisor of the depth."
        )


def check_rank_tol(rank_tol, flags: Naming = False) -> float:
    """``rank_tol`` in (0, 1): relative to the largest singular value, 1 or more counts none and
    NaN fails every comparison."""
    ok = isinstance(rank_tol, numbers.Real) and not isinstance(rank_tol, bool)
    if not ok or not 0 < float(rank_tol) < 1:
        raise UsageError(
            f"{show('rank_tol', rank_tol, flags)}: expected a finite number > 0 and < 1 (a tolerance "
            f"relative to the largest singular value); e.g. {show('rank_tol', 1e-6, flags)}."
        )
    return float(rank_tol)


def check_chunk(chunk, flags: Naming = False, what: str = "trajectories") -> int | None:
    """``chunk`` as None (the default) or a positive int."""
    if chunk is not None and (not _integer(chunk) or chunk < 1):
        raise UsageError(
            f"{_arg('chunk', flags)} must be a positive number of {what}, got {chunk!r}; "
            f"e.g. {show('chunk', 64, flags)}."
        )
    return None if chunk is None else int(chunk)


@dataclasses.dataclass(frozen=True)
class SimulatePlan:
    """One depth-scan run of `rankdyn.simulate`, its options checked and its sizes resolved once,
    without JAX. Build it with `for_layer` (a built layer), `from_config` (a `rankdyn.ModelConfig`,
    before any layer exists) or the constructor; a bad value raises `rankdyn.UsageError`.

    Attributes:
        n, d, heads: tokens, model width and heads; ``dv`` the value width per head
            (default ``d // heads``).
        batch: trajectories; num_layers: depth T; save_every: k (layers 0, k, ..., T are saved).
        rank_tol: relative tolerance of the numerical rank; chunk: trajectories per compiled
            program (None: the default, cache-sized on CPU, or the one the autotuner measures).
        itemsize: bytes per number (4 float32, 8 float64); metrics: the names recorded (None:
            all); per_trajectory, save_states: what is kept beyond the batch statistics.
        attention: the path asked for (``dense``, ``blocked``, ``auto``) or the one a built layer
            takes; attn_dropout, logit_bias: the features the blocked path refuses (for
            ``auto``); mask: a zero-argument callable returning the mask's `MaskStructure`
            (called only when the path is blocked and ``block_size`` is None); block_size: the
            block of the blocked path if known (a built layer's), else chosen for the mask as the
            layer chooses it.
        weights_bytes: the weights' memory, a part of the estimate when > 0.
        flags: messages name command-line flags (``--save-every 2``) rather than arguments
            (``save_every=2``).

    Example:
        ``plan = SimulatePlan.for_layer(layer, batch=1024, itemsize=4, num_layers=64)``, then
        ``plan.memory().total`` (bytes) and ``simulate(layer, x0, 64, plan=plan)``.
    """

    # Any: the values are checked in __post_init__ (a UsageError naming them), not by annotation.
    n: int
    d: int
    batch: Any
    num_layers: Any
    save_every: Any = 1
    heads: int = 1
    dv: int | None = None
    rank_tol: Any = RANK_TOL
    chunk: Any = None
    itemsize: int = 4
    metrics: tuple[str, ...] | None = None
    per_trajectory: bool = False
    save_states: bool = False
    attention: str = "dense"
    attn_dropout: float = 0.0
    logit_bias: bool = False
    mask: Callable | None = dataclasses.field(default=None, compare=False, repr=False)
    block_size: Any = None
    weights_bytes: int = 0
    flags: bool = False

    def __post_init__(self):
        f = self.flags
        check_count(self.batch, "batch", flags=f)
        check_depth(self.num_layers, self.save_every, f)
        check_rank_tol(self.rank_tol, f)
        check_chunk(self.chunk, f)
        if self.block_size is not None:
            check_count(self.block_size, "block_size", flags=f)

    # ------------------------------------------------------------------ constructors
    @classmethod
    def for_layer(cls, layer, *, batch: int, itemsize: int, **options) -> "SimulatePlan":
        """The plan of a run of a built `SelfAttentionLayer` (its path and block as taken)."""
        w_v = layer.weights.w_v
        return cls(
            n=layer.num_tokens,
            d=layer.dim,
            heads=layer.num_heads,
            dv=int(w_v.shape[-1]),
            batch=batch,
            itemsize=itemsize,
            attention=layer.attention_path,
            block_size=layer.block_size,
            **options,
        )

    @classmethod
    def from_config(cls, config, *, itemsize: int, flags: bool = True, **options) -> "SimulatePlan":
        """The plan of a random model's run from its validated `ModelConfig` (no layer built):
        the path `build_layer` will take for its mask, and its weights (``num_layers`` copies with
        per-layer weights; W_Q, W_K, W_V, W_O and the MLP's two matrices, ``d x d`` each)."""
        from .._model._mask_structure import as_structure, make_mask_structure

        c = config
        if isinstance(c.mask, str):
            mask = functools.partial(
                make_mask_structure, c.mask, c.n, window=c.window, dilation=c.dilation,
                num_global=c.num_global, p=c.mask_p, seed=c.mask_seed, degree=c.mask_degree,
            )  # fmt: skip
        else:
            mask = functools.partial(as_structure, c.mask)
        matrices = 4 + (2 * c.resolved()["mlp_ratio"] if c.mlp else 0)
        return cls(
            n=c.n,
            d=c.d,
            heads=c.heads,
            itemsize=itemsize,
            attention=c.attention,
            attn_dropout=c.attn_dropout,
            mask=mask,
            weights_bytes=(c.num_layers or 1) * matrices * c.d * c.d * itemsize,
            flags=flags,
            **options,
        )

    # ------------------------------------------------------------------ resolved once
    @property
    def num_saved(self) -> int:
        """Saved layers ``0, k, ..., T``: ``T / k + 1``."""
        return self.num_layers // self.save_every + 1

    @functools.cached_property
    def attention_path(self) -> str:
        """``"dense"`` or ``"blocked"``: `resolve_attention` (``auto`` blocks from 2048 tokens)."""
        from .._model._blocked import resolve_attention

        return resolve_attention(
            self.attention, self.n, attn_dropout=self.attn_dropout, fixed_attention=False,
            logit_bias=self.logit_bias,
        )  # fmt: skip

    @functools.cached_property
    def block(self) -> int:
        """The block of the blocked path: ``block_size`` when given, else `choose_block_size` of
        the mask (as the layer chooses it); `BLOCK_SIZE` on the dense path (unused there)."""
        from .._model._blocked import BLOCK_SIZE, choose_block_size

        if self.block_size is not None:
            return self.block_size
        if self.attention_path != "blocked" or self.mask is None:
            return BLOCK_SIZE
        return choose_block_size(self.mask())

    def resolved_chunk(self, backend: str = "cpu", chunk: int | None = None) -> int:
        """Trajectories per compiled program: ``chunk`` (e.g. the autotuner's), else the plan's,
        else `auto_chunk` for ``backend``; at most the batch."""
        from ._sizing import auto_chunk

        c = chunk or self.chunk or auto_chunk(self.batch, self.n, self.d, self.itemsize, backend)
        return min(int(c), self.batch)

    def memory(self, backend: str = "cpu", chunk: int | None = None) -> MemoryEstimate:
        """The run's peak memory per part (`rankdyn._run._sizing.estimate_parts` for the path's
        attention, `score_entries`), plus ``"weights"`` when ``weights_bytes`` is set.

        Arguments:
            backend: the JAX backend (``jax.default_backend()``), for the default chunk.
            chunk: the chunk the run takes, when its caller chose it (the autotuner).
        """
        from .._model._blocked import score_entries
        from ._sizing import estimate_parts

        dv = self.d // self.heads if self.dv is None else self.dv
        parts = estimate_parts(
            num=self.batch,
            chunk=self.resolved_chunk(backend, chunk),
            n=self.n,
            d=self.d,
            heads=self.heads,
            itemsize=self.itemsize,
            num_saved=self.num_saved,
            num_metrics=len(self.metrics) if self.metrics is not None else _all_metrics(),
            per_trajectory=self.per_trajectory,
            save_states=self.save_states,
            score_entries=score_entries(self.attention_path, self.n, dv, self.block),
            metric_names=self.metrics,
        )
        if self.weights_bytes:
            parts["weights"] = int(self.weights_bytes)
        return MemoryEstimate(parts)

    def check_indices(self) -> None:
        """Refuse a batch beyond the 2^31 trajectory indices (trajectory i's key and tokens come
        from ``fold_in(key, i)`` with a 32-bit i). Apart from ``__post_init__``: the command line
        says first that such a batch does not fit in memory, when it does not."""
        if self.batch >= MAX_BATCH:
            raise UsageError(
                f"{show('batch', self.batch, self.flags)} is beyond the 2^31 trajectory indices of one "
                f"run; split it into runs with different {'--seed values' if self.flags else 'keys'}."
            )

    def differs(self, other: "SimulatePlan") -> str | None:
        """The first field (or resolved path and block) where ``other`` describes another run."""
        for name in _RUN_FIELDS:
            a, b = getattr(self, name), getattr(other, name)
            if name == "dv":
                a, b = (p.d // p.heads if p.dv is None else p.dv for p in (self, other))
            if a != b:
                return f"{name} {a!r} against {b!r}"
        return None


def _all_metrics() -> int:
    from .._observe._names import parse_metrics

    return len(parse_metrics(None))
