"""Build a layer from names, as the CLI and experiments do (`docs/theory.md#the-model`).

`make_layer` is the one place that turns a configuration (mask name, value family, ...) into a
`SelfAttentionLayer`; every array it draws comes from the explicit ``key``, so the same config
and seed give the same layer.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import jax.random as jr
from jaxtyping import ArrayLike, PRNGKeyArray

from ._config import ModelConfig, Names
from ._layer import MLPWeights, SelfAttentionLayer
from ._masks import make_mask, mask_from_adjacency
from ._norms import AbstractNorm, make_norm
from ._weights import bert_uniform, query_key_matrices, value_matrix

__all__ = ["make_layer", "build_layer"]


def make_layer(
    key: PRNGKeyArray,
    *,
    n: int,
    d: int,
    mask: str | ArrayLike = "causal",
    window: int = 1,
    dqk: ArrayLike | None = None,
    placement: str = "post",
    ln: str | AbstractNorm = "sphere",
    ln_radius: float | None = None,
    value: str = "orthogonal",
    w: ArrayLike = 2.0,
    jordan_k: int | None = None,
    value_std: ArrayLike | None = None,
    qk: str = "bert",
    qk_std: ArrayLike | None = None,
    num_layers: int | None = None,
    heads: int = 1,
    output_projection: bool = False,
    skip: bool = False,
    mlp: bool = False,
    mlp_ratio: int = 4,
    attn_dropout: float = 0.0,
    hidden_dropout: float = 0.0,
    dropout: float | None = None,
    dtype=None,
    norm: str | None = None,
) -> "SelfAttentionLayer":
    """A `SelfAttentionLayer` from named families.

    The arguments become a `rankdyn._config.ModelConfig` (every rule and its message lives
    there), then `build_layer` draws the weights.

    Arguments:
        key: PRNG key for every random weight.
        n, d: number of tokens and features.
        mask: a name of `rankdyn.masks.MASK_NAMES` (with ``window``) or a boolean ``(n, n)`` array.
        window: half-width / look-back / dilated hops of the masks that read it (default 1; any
            other value with ``complete``, ``causal``, ``random`` or an array is refused).
        dqk: temperature $d_{QK}$ (default: the key width, ``d // heads``).
        placement: where the normalisation sits: ``none`` (eq. 2), ``post`` (eq. 3) or ``pre``.
        ln: ``sphere`` (paper), ``rms``, ``layernorm`` or an `AbstractNorm`; ``ln_radius`` sets
            the sphere radius (e.g. ``sqrt(d)``).
        value: a family of `rankdyn.weights.VALUE_NAMES` (``w``, ``jordan_k``, ``value_std`` parametrise it).
        qk: ``bert``, ``gaussian`` (``qk_std``) or ``zero`` (uniform attention).
        num_layers: draw independent weights for each of this many layers (None: shared).
        heads: attention heads; with more than one, ``output_projection`` must be True and the head
            width is ``d // heads``.
        output_projection: add ``W_O`` (BERT-uniform).
        skip, mlp: the practical-block switches of the Fig. 2/6 ablations.
        attn_dropout: dropout on the attention probabilities (BERT's 0.1 in train mode).
        hidden_dropout: dropout on the block outputs before the skip and the norm.
        dropout: shorthand that sets both rates (as the CLI's ``--dropout``); do not combine it
            with ``attn_dropout`` / ``hidden_dropout``.

    Raises:
        ValueError: for unknown names, inconsistent sizes, non-finite or out-of-range values and
            parameters that the chosen mask or family ignores; the message names the argument.
    """
    if norm is not None:
        # Renamed in 0.2 ("placement" everywhere for none/post/pre); refused rather than guessed,
        # since `norm` names the normaliser elsewhere (SelfAttentionLayer(norm=...)).
        raise ValueError(
            f"make_layer(norm={norm!r}): the argument is now called placement; pass "
            f"placement={norm!r} (none/post/pre). The normalisation variant is ln=."
        )
    where = _ARGUMENTS
    if dropout is not None:
        if attn_dropout or hidden_dropout:
            raise ValueError(
                f"dropout={dropout} sets both rates; got also attn_dropout={attn_dropout}, "
                f"hidden_dropout={hidden_dropout}. Pass either dropout or the two separate rates."
            )
        attn_dropout = hidden_dropout = dropout
        where = _ARGUMENTS_SHORTHAND  # messages name the argument the user passed
    config = ModelConfig.from_mapping(
        dict(
            n=n,
            d=d,
            mask=mask,
            window=window,
            dqk=dqk,
            placement=placement,
            ln=ln,
            ln_radius=ln_radius,
            value=value,
            w=w,
            jordan_k=jordan_k,
            value_std=value_std,
            qk=qk,
            qk_std=qk_std,
            num_layers=num_layers,
            heads=heads,
            output_projection=output_projection,
            skip=skip,
            mlp=mlp,
            mlp_ratio=mlp_ratio,
            attn_dropout=attn_dropout,
            hidden_dropout=hidden_dropout,
            dtype=dtype,
        ),
        where=where,
    )
    return build_layer(key, config)


#: make_layer's argument names where they differ from the configuration's fields.
_ARGUMENTS = Names.arguments({})
_ARGUMENTS_SHORTHAND = Names.arguments({"attn_dropout": "dropout", "hidden_dropout": "dropout"})


def build_layer(key: PRNGKeyArray, config: ModelConfig) -> "SelfAttentionLayer":
    """The layer of a validated `ModelConfig`, its random weights drawn from ``key``."""
    c = config
    if isinstance(c.mask, str):
        m = make_mask(
            c.mask,
            c.n,
            window=c.window,
            dilation=c.dilation,
            num_global=c.num_global,
            p=c.mask_p,
            seed=c.mask_seed,
        )
    else:
        m = mask_from_adjacency(c.mask)
    dt = jnp.zeros((), c.dtype if c.dtype is not None else float).dtype
    d, heads, value, qk = c.d, c.heads, c.value, c.qk
    dh = d // heads
    normaliser = c.ln if isinstance(c.ln, AbstractNorm) else make_norm(c.ln, d, radius=c.ln_radius)
    w, jordan_k, value_std, qk_std, mlp_ratio = c.w, c.jordan_k, c.value_std, c.qk_std, c.mlp_ratio

    def draw(k):
        kq, kv, ko, km = jr.split(k, 4)
        qks = [query_key_matrices(kk, qk, d, dh, std=qk_std, dtype=dt) for kk in jr.split(kq, heads)]
        w_q = jnp.stack([q for q, _ in qks])
        w_k = jnp.stack([k_ for _, k_ in qks])
        if heads == 1:
            w_v = value_matrix(kv, value, d, w=w, k=jordan_k, std=value_std, dtype=dt)[None]
        else:
            # Per-head values are d x d/h slices of one d x d draw of the family.
            w_v = jnp.moveaxis(
                value_matrix(kv, value, d, w=w, k=jordan_k, std=value_std, dtype=dt).reshape(d, heads, dh),
                1,
                0,
            )
        w_o = bert_uniform(ko, (d, d), dt) if c.output_projection else None
        mw = None
        if c.mlp:
            k1, k2 = jr.split(km)
            f = mlp_ratio * d
            mw = MLPWeights(
                bert_uniform(k1, (d, f), dt), jnp.zeros(f, dt), bert_uniform(k2, (f, d), dt), jnp.zeros(d, dt)
            )
        return w_q, w_k, w_v, w_o, mw

    if c.num_layers is None:
        w_q, w_k, w_v, w_o, mw = draw(key)
    else:
        w_q, w_k, w_v, w_o, mw = jax.vmap(draw)(jr.split(key, c.num_layers))
    return SelfAttentionLayer(
        m,
        w_q,
        w_k,
        w_v,
        dqk=float(dh) if c.dqk is None else c.dqk,
        norm=normaliser,
        placement=c.placement,
        w_o=w_o,
        mlp=mw,
        skip=c.skip,
        **c.dropout_kwargs(),
    )
