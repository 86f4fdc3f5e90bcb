"""Build a layer from names, as the CLI and experiments do (`docs/theory.md#the-model`).

`make_layer` is the one place that turns a configuration (mask name, value family, ...) into a
`SelfAttentionLayer`; every array it draws comes from the explicit ``key``, so the same config
and seed give the same layer.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
from typing import NamedTuple

import jax
import jax.numpy as jnp
import jax.random as jr
from jaxtyping import PRNGKeyArray

from .._errors import UsageError
from ._config import ModelConfig, Names
from ._layer import MLPWeights, SelfAttentionLayer
from ._mask_structure import make_mask_structure
from ._masks import mask_from_adjacency
from ._norms import AbstractNorm, make_norm
from ._params import PARAMS
from ._weights import bert_uniform, query_key_matrices, value_matrix

__all__ = ["make_layer", "build_layer"]

#: make_layer's keyword arguments: the rows of `rankdyn._model._params.PARAMS` that are layer arguments.
_API = tuple(p for p in PARAMS if p.api)


def make_layer(key: PRNGKeyArray, **kwargs) -> "SelfAttentionLayer":
    # The docstring and the signature are generated from the parameter table (below).
    if kwargs.get("norm") is not None:
        # Refused rather than guessed: `norm` names the normaliser object elsewhere
        # (SelfAttentionLayer(norm=...)), while the placement of none/post/pre is `placement`.
        norm = kwargs["norm"]
        raise UsageError(
            f"make_layer(norm={norm!r}): the placement is placement=; pass "
            f"placement={norm!r} (none/post/pre). The normalisation variant is ln=."
        )
    kwargs.pop("norm", None)
    dropout = kwargs.pop("dropout", None)
    known = {p.name for p in _API}
    unknown = [k for k in kwargs if k not in known]
    if unknown:
        raise UsageError(
            f"make_layer() got an unexpected keyword argument {unknown[0]!r}; expected one of "
            f"{', '.join(sorted(known | {'dropout'}))}."
        )
    where = _ARGUMENTS
    if dropout is not None:
        attn, hidden = kwargs.get("attn_dropout", 0.0), kwargs.get("hidden_dropout", 0.0)
        if attn or hidden:
            raise UsageError(
                f"dropout={dropout} sets both rates; got also attn_dropout={attn}, "
                f"hidden_dropout={hidden}. Pass either dropout or the two separate rates."
            )
        kwargs.update(attn_dropout=dropout, hidden_dropout=dropout)
        where = _ARGUMENTS_SHORTHAND  # messages name the argument the user passed
    config = ModelConfig.from_mapping(kwargs, where=where)
    check_key(key, "make_layer")
    return build_layer(key, config)


def check_key(key, where: str) -> None:
    """``key`` is a ``jax.random.key`` or a legacy ``PRNGKey`` (uint32 ``(2,)``): an int or None
    failed deep in JAX ("invalid PRNG key data") naming no argument."""
    import jax
    import jax.numpy as jnp

    dtype = getattr(key, "dtype", None)
    if isinstance(key, jax.core.Tracer) or (dtype is not None and jnp.issubdtype(dtype, jax.dtypes.prng_key)):
        return
    if dtype == jnp.uint32 and getattr(key, "shape", None) == (2,):
        return
    raise UsageError(
        f"{where}(): key must be a PRNG key, got {key!r}; pass e.g. jax.random.key(0) (or "
        "jax.random.PRNGKey(0))."
    )


def _make_layer_doc() -> str:
    args = "\n".join(
        f"        {p.name}: {p.help}"
        + (
            ""
            if p.default is dataclasses.MISSING
            else f" (default {p.fallback if p.fallback is not None else p.default!r})"
        )
        + (
            f"; read only with {p.reads[0]} {' / '.join(map(str, p.reads[1]))}, refused otherwise"
            if p.reads
            else ""
        )
        + "."
        for p in _API
    )
    return f"""A `SelfAttentionLayer` from named families (`docs/theory.md#the-model`).

    The arguments become a `rankdyn.ModelConfig` (every rule and its message lives there; the
    arguments are the rows of `rankdyn._model._params.PARAMS`), then `build_layer` draws the weights
    from ``key``: the same arguments and key give the same layer.

    Arguments:
        key: PRNG key for every random weight.
{args}
        dropout: shorthand that sets both dropout rates (as the CLI's ``--dropout``); do not
            combine it with ``attn_dropout`` / ``hidden_dropout``.

    Returns:
        The `SelfAttentionLayer`.

    Raises:
        UsageError: (a ValueError) for unknown names, inconsistent sizes, non-finite or
            out-of-range values and parameters that the chosen mask or family ignores; the
            message names the argument.
        TypeError: for an unknown argument.
    """


make_layer.__doc__ = _make_layer_doc()
make_layer.__signature__ = inspect.Signature(
    [inspect.Parameter("key", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    + [
        inspect.Parameter(
            p.name,
            inspect.Parameter.KEYWORD_ONLY,
            default=inspect.Parameter.empty if p.default is dataclasses.MISSING else p.default,
        )
        for p in _API
    ]
    + [inspect.Parameter("dropout", inspect.Parameter.KEYWORD_ONLY, default=None)]
)

#: make_layer's argument names where they differ from the configuration's fields.
_ARGUMENTS = Names.arguments({})
_ARGUMENTS_SHORTHAND = Names.arguments({"attn_dropout": "dropout", "hidden_dropout": "dropout"})


def build_layer(key: PRNGKeyArray, config: ModelConfig) -> "SelfAttentionLayer":
    """The layer of a validated `ModelConfig`, its random weights drawn from ``key``."""
    c = config
    if isinstance(c.mask, str):
        # The structure (no n x n array); the dense path turns it into make_mask's array.
        m = make_mask_structure(
            c.mask,
            c.n,
            window=c.window,
            dilation=c.dilation,
            num_global=c.num_global,
            p=c.mask_p,
            seed=c.mask_seed,
            degree=c.mask_degree,
        )
    else:
        m = mask_from_adjacency(c.mask)
    dt = jax.dtypes.canonicalize_dtype(c.dtype if c.dtype is not None else float)
    r = c.resolved()  # unset parameters that the model reads get their fallback (w 2.0, ...)
    normaliser = r["ln"] if isinstance(r["ln"], AbstractNorm) else make_norm(r["ln"], c.d, radius=c.ln_radius)
    spec = _DrawSpec(
        qk=c.qk,
        value=c.value,
        d=c.d,
        heads=c.heads,
        dtype=str(dt),
        jordan_k=c.jordan_k,
        output_projection=bool(c.output_projection),
        mlp_width=r["mlp_ratio"] * c.d if c.mlp else None,
        num_layers=c.num_layers,
    )
    w_q, w_k, w_v, w_o, mw = _draw_weights(spec, key, r["w"], c.value_std, c.qk_std)
    return SelfAttentionLayer(
        m,
        w_q,
        w_k,
        w_v,
        dqk=r["dqk"],
        norm=normaliser,
        placement=c.placement,
        w_o=w_o,
        mlp=mw,
        skip=c.skip,
        attention=c.attention,
        mix_layers=c.mix_layers,
        ngpt_alpha=c.ngpt_alpha,
        qk_norm=c.qk_norm,
        **c.dropout_kwargs(),
    )


class _DrawSpec(NamedTuple):
    """What shapes the weight draw (static: each distinct spec is one compiled program, reused by
    every later `build_layer` call with the same spec)."""

    qk: str
    value: str
    d: int
    heads: int
    dtype: str
    jordan_k: int | None
    output_projection: bool
    mlp_width: int | None  # hidden width of the MLP, None without one
    num_layers: int | None  # a per-layer stack, or None for one shared layer


@functools.partial(jax.jit, static_argnums=0)
def _draw_weights(spec: _DrawSpec, key, w, value_std, qk_std):
    """Every random weight of a layer, ``(w_q, w_k, w_v, w_o, mlp)``, as one compiled program.

    Drawn op by op (eagerly), the same weights cost about twenty small programs, each compiled once
    per process (2-3 s of a ``simulate`` call that its recorded compile time did not count).
    The bits are the same: `jax.random` draws the same numbers under ``jit``, QR and the spectral
    norm are the same XLA calls, and optimization barriers in `gaussian` and `spectral_normalized`
    stop the fusions that rounded differently; `tests/test_build_draws.py` compares the weights
    with the family functions called one by one.
    """
    dt, d, heads = spec.dtype, spec.d, spec.heads
    dh = d // heads

    def draw(k):
        kq, kv, ko, km = jr.split(k, 4)
        qks = [query_key_matrices(kk, spec.qk, d, dh, std=qk_std, dtype=dt) for kk in jr.split(kq, heads)]
        w_q = jnp.stack([q for q, _ in qks])
        w_k = jnp.stack([k_ for _, k_ in qks])
        w_v = value_matrix(kv, spec.value, d, w=w, k=spec.jordan_k, std=value_std, dtype=dt)
        # Per-head values are d x d/h slices of one d x d draw of the family.
        w_v = w_v[None] if heads == 1 else jnp.moveaxis(w_v.reshape(d, heads, dh), 1, 0)
        w_o = bert_uniform(ko, (d, d), dt) if spec.output_projection else None
        mw = None
        if spec.mlp_width is not None:
            k1, k2 = jr.split(km)
            f = spec.mlp_width
            mw = MLPWeights(
                bert_uniform(k1, (d, f), dt), jnp.zeros(f, dt), bert_uniform(k2, (f, d), dt), jnp.zeros(d, dt)
            )
        return w_q, w_k, w_v, w_o, mw

    if spec.num_layers is None:
        return draw(key)
    return jax.vmap(draw)(jr.split(key, spec.num_layers))
