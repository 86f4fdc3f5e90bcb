"""Build a layer from names, as the CLI and experiments do (docs/theory.md#the-model).

`make_layer` is the one place that turns a configuration (mask name, value family, ...) into a
`SelfAttentionLayer`; every array it draws comes from the explicit ``key``, so the same config
and seed give the same layer.
"""

from __future__ import annotations


import jax
import jax.numpy as jnp
import jax.random as jr
from jaxtyping import ArrayLike, PRNGKeyArray

from ._layer import PLACEMENTS, MLPWeights, SelfAttentionLayer, _check_rate
from ._masks import make_mask, mask_from_adjacency
from ._norms import AbstractNorm, make_norm
from ._weights import QK_NAMES, VALUE_NAMES, bert_uniform, query_key_matrices, value_matrix

__all__ = ["make_layer"]


def make_layer(
    key: PRNGKeyArray,
    *,
    n: int,
    d: int,
    mask: str | ArrayLike = "causal",
    window: int = 1,
    dqk: ArrayLike | None = None,
    norm: str = "post",
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
) -> "SelfAttentionLayer":
    """A `SelfAttentionLayer` from named families.

    Arguments:
        key: PRNG key for every random weight.
        n, d: number of tokens and features.
        mask: a name of `rankdyn.MASK_NAMES` (with ``window``) or a boolean ``(n, n)`` array.
        dqk: temperature $d_{QK}$ (default: the key width, ``d // heads``).
        norm: placement ``none`` / ``post`` / ``pre``.
        ln: ``sphere`` (paper), ``rms``, ``layernorm`` or an `AbstractNorm`; ``ln_radius`` sets
            the sphere radius (e.g. ``sqrt(d)``).
        value: a family of `rankdyn.VALUE_NAMES` (``w``, ``jordan_k``, ``value_std`` parametrise it).
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
        ValueError: for unknown names or inconsistent sizes.
    """
    if dropout is not None:
        dropout = _check_rate("dropout", dropout)
        if attn_dropout or hidden_dropout:
            raise ValueError(
                f"dropout={dropout} sets both rates; got also attn_dropout={attn_dropout}, "
                f"hidden_dropout={hidden_dropout}. Pass either dropout or the two separate rates."
            )
        attn_dropout = hidden_dropout = dropout
    if norm not in PLACEMENTS:
        raise ValueError(f"unknown norm placement {norm!r}; expected one of {', '.join(PLACEMENTS)}.")
    if value not in VALUE_NAMES:
        raise ValueError(f"unknown value family {value!r}; expected one of {', '.join(VALUE_NAMES)}.")
    if qk not in QK_NAMES:
        raise ValueError(f"unknown query/key family {qk!r}; expected one of {', '.join(QK_NAMES)}.")
    if heads < 1 or d % heads:
        raise ValueError(f"heads must divide d: d={d}, heads={heads}.")
    if heads > 1 and not output_projection:
        raise ValueError("several heads need an output projection: pass output_projection=True.")
    if isinstance(mask, str):
        if mask in ("window", "window-uni", "global") and window >= n:
            raise ValueError(f"window={window} must be smaller than n={n}.")
        m = make_mask(mask, n, window=window)
    else:
        m = mask_from_adjacency(mask)
        if m.shape != (n, n):
            raise ValueError(f"mask shape {m.shape} does not match n={n}.")
    if dqk is not None and not isinstance(dqk, jax.core.Tracer) and not float(dqk) > 0:
        raise ValueError(f"the temperature dqk must be > 0, got {dqk}.")
    dt = jnp.zeros((), dtype if dtype is not None else float).dtype
    dh = d // heads
    normaliser = ln if isinstance(ln, AbstractNorm) else make_norm(ln, d, radius=ln_radius)

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
                value_matrix(kv, value, d, w=w, k=jordan_k, std=value_std, dtype=dt).reshape(d, heads, dh), 1, 0
            )
        w_o = bert_uniform(ko, (d, d), dt) if output_projection else None
        mw = None
        if mlp:
            k1, k2 = jr.split(km)
            f = mlp_ratio * d
            mw = MLPWeights(bert_uniform(k1, (d, f), dt), jnp.zeros(f, dt), bert_uniform(k2, (f, d), dt), jnp.zeros(d, dt))
        return w_q, w_k, w_v, w_o, mw

    if num_layers is None:
        w_q, w_k, w_v, w_o, mw = draw(key)
    else:
        w_q, w_k, w_v, w_o, mw = jax.vmap(draw)(jr.split(key, num_layers))
    return SelfAttentionLayer(
        m, w_q, w_k, w_v, dqk=float(dh) if dqk is None else dqk, norm=normaliser, placement=norm,
        w_o=w_o, mlp=mw, skip=skip, attn_dropout=attn_dropout, hidden_dropout=hidden_dropout,
    )


