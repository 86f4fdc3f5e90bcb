r"""How a layer computes $A$: the attention strategies `DenseAttention` and `BlockedAttention`.

A `SelfAttentionLayer` holds one strategy (its ``path`` field) and calls it through methods, as
Diffrax calls its solver: `AbstractAttention.sub_block` gives the attention sub-block
$F(X) = [A_1 X W_V^{(1)}, \dots] W_O$ and Theorem 1's $\varepsilon$, `AbstractAttention.matrices`
the ``(heads, n, n)`` matrices $A$ of eq. (1), and `AbstractAttention.times` the product $A P$ with
a probe $P$ (attention sinks). The dense strategy forms the ``(n, n)`` scores (`dense_scores`,
`rankdyn._model._blocked.masked_softmax`); the blocked one walks the key blocks the mask touches
(`rankdyn._model._blocked`) and never does. The name of the path (``layer.attention_path``) is the
strategy's ``name``; `rankdyn._model._blocked.resolve_attention` picks it from the ``attention=``
argument.
"""

from __future__ import annotations

from typing import ClassVar

import equinox as eqx
import jax.numpy as jnp
import jax.random as jr
from jax import lax

from ._blocked import (
    blocked_attention_block,
    blocked_attention_times,
    masked_softmax,
    score_entries,
)
from ._norms import qk_normalise
from ._products import _add_bias, _fold_qk, _head_einsum, _merge_heads, _project

__all__ = [
    "AbstractAttention",
    "DenseAttention",
    "BlockedAttention",
    "ATTENTION_PATHS",
    "PRECISIONS",
    "dense_scores",
    "drop",
]


#: The matmul precisions by name (``precision=``): GPU float32 uses TF32 below "highest".
PRECISIONS = {"highest": lax.Precision.HIGHEST, "high": lax.Precision.HIGH, "default": lax.Precision.DEFAULT}


class AbstractAttention(eqx.Module):
    """How the layer computes its attention; the methods take the layer (its mask, temperature,
    rotary tables, QK-norm and fixed attention are its fields) and the weights of one depth."""

    #: The path's name, as ``layer.attention_path`` and `rankdyn._model._blocked.resolve_attention` spell it.
    name: ClassVar[str]

    def sub_block(self, layer, x_att, x_in, w, key, prec):
        r"""``(F(X), eps_min)``: the attention sub-block before hidden dropout, the skip and any norm.

        ``x_att`` gives the scores, ``x_in`` the values (pre-LN with ``attention_from_normalized=False``
        tells them apart); ``key`` the attention-dropout key (or None)."""
        raise NotImplementedError

    def matrices(self, layer, x, w):
        """The masked attention matrices ``(heads, n, n)`` of tokens ``x`` (eq. 1)."""
        raise NotImplementedError

    def eps_min(self, layer, x, w, prec):
        """Theorem 1's epsilon of the attention of ``x``: its smallest weight on the mask."""
        raise NotImplementedError

    def times(self, layer, x_att, w, probe, prec):
        """$A P$ per head, ``(heads, n, p)``, for a probe ``(n, p)``."""
        raise NotImplementedError

    def score_entries(self, n: int, dv: int) -> int:
        """Numbers per head and trajectory the attention keeps at once (`score_entries`)."""
        raise NotImplementedError


class DenseAttention(AbstractAttention):
    """The ``(n, n)`` masked softmax of eq. (1); the layer's mask is a boolean ``(n, n)`` array."""

    name: ClassVar[str] = "dense"

    def matrices(self, layer, x, w):
        if layer.fixed_attention is not None:
            return layer.fixed_attention[None].astype(x.dtype)
        return masked_softmax(dense_scores(layer, x, w), layer.mask)

    def eps_min(self, layer, x, w, prec):
        return jnp.min(jnp.where(layer.mask, self.matrices(layer, x, w), jnp.inf))

    def sub_block(self, layer, x_att, x_in, w, key, prec):
        xv = None
        if layer.fixed_attention is not None:
            a = self.matrices(layer, x_att, w)
        elif x_att is x_in:
            # Same tokens on both sides: one wide GEMM gives the query/key side and X W_V.
            scores, xv = dense_scores(layer, x_att, w, with_values=True)
            a = masked_softmax(scores, layer.mask)
        else:
            a = masked_softmax(dense_scores(layer, x_att, w), layer.mask)
        eps_min = jnp.min(jnp.where(layer.mask, a, jnp.inf))
        a = drop(a, key, layer.attn_dropout)
        # A X W_V for every head; heads are concatenated and projected by W_O if present.
        # A (X W_V) costs 2 n d d_v + 2 n^2 d_v FLOPs, never more than (A X) W_V for d_v <= d.
        if xv is None:
            xv = _add_bias(_head_einsum("md,hde->hme", x_in, w.w_v, prec), w.b_v)
        return _merge_heads(_head_einsum("hnm,hme->hne", a, xv, prec), w, prec), eps_min

    def times(self, layer, x_att, w, probe, prec):
        a = self.matrices(layer, x_att, w)
        return jnp.einsum("hnm,mp->hnp", a, probe.astype(x_att.dtype), precision=prec)

    def score_entries(self, n: int, dv: int) -> int:
        return score_entries("dense", n, dv)


class BlockedAttention(AbstractAttention):
    """The online softmax over the key blocks the mask touches (`rankdyn._model._blocked`); the
    layer's mask is a `MaskStructure`.

    Attributes:
        block_size: tokens per query and key block (static: it shapes the program).
    """

    block_size: int = eqx.field(static=True)
    name: ClassVar[str] = "blocked"

    def matrices(self, layer, x, w):
        # The (n, n) matrices on request (a measurement, not the layer map): the dense mask of the structure.
        return masked_softmax(dense_scores(layer, x, w), jnp.asarray(layer.mask.dense()))

    def sub_block(self, layer, x_att, x_in, w, key, prec):
        # No dropout on A here: `resolve_attention` refuses attention dropout on this path.
        return blocked_attention_block(layer, x_att, x_in, w, prec)

    def eps_min(self, layer, x, w, prec):
        return blocked_attention_block(layer, x, x, w, prec)[1]

    def times(self, layer, x_att, w, probe, prec):
        return blocked_attention_times(layer, x_att, w, probe, prec)

    def uniform_times(self, layer, probe, prec):
        """$U P$ per head for the uniform weights $U$ of each row over its neighbours (all scores 0)."""
        return blocked_attention_times(layer, None, None, probe, prec, uniform=True)

    def score_entries(self, n: int, dv: int) -> int:
        return score_entries("blocked", n, dv, self.block_size)


#: The attention paths by name (``attention_path``); "auto" resolves to one of them.
ATTENTION_PATHS = {"dense": DenseAttention, "blocked": BlockedAttention}


def dense_scores(layer, x, w, *, with_values: bool = False):
    r"""Scores $X W_Q (X W_K)^\top / \sqrt{d_{QK}}$ per head (and $X W_V$ if ``with_values``).

    Where it needs fewer FLOPs (`_fold_qk`), $W_Q W_K^\top / \sqrt{d_{QK}}$ is folded into one
    ``(d, d)`` matrix per head; it does not depend on the tokens, so under ``vmap`` it is
    computed once per layer for the whole batch. The products with ``x`` are `_project`-ed.
    """
    prec = PRECISIONS[layer.precision]
    d, dk = w.w_q.shape[-2], w.w_q.shape[-1]
    scale = (1.0 / jnp.sqrt(layer.dqk)).astype(x.dtype)
    # A query or key bias, a rotation by position or QK-norm adds terms the fold cannot hold.
    fold = _fold_qk(x.shape[0], d, dk) and w.b_q is None and w.b_k is None and layer.rotary is None
    fold = fold and not layer.qk_norm
    if fold:
        right = [(jnp.einsum("hdk,hek->hde", w.w_q, w.w_k, precision=prec) * scale, None)]
    else:
        right = [(w.w_q, w.b_q), (w.w_k, w.b_k)]
    parts = _project(x, right + ([(w.w_v, w.b_v)] if with_values else []), prec)
    if fold:
        scores = _head_einsum("hne,me->hnm", parts[0], x, prec)
    else:
        q, k = parts[0], parts[1]
        if layer.qk_norm:  # per head and token, right after the projections (and their biases)
            q, k = qk_normalise(q), qk_normalise(k)
        if layer.rotary is not None:
            q, k = layer.rotary(q), layer.rotary(k)
        scores = _head_einsum("hnk,hmk->hnm", q, k, prec) * scale
    if layer.logit_bias is not None:
        scores = scores + layer.logit_bias.astype(scores.dtype)
    xv = parts[-1] if with_values else None
    return (scores, xv) if with_values else scores


def drop(v, key, rate: float):
    """Inverted dropout: keep each entry with probability $1-p$ and scale it by $1/(1-p)$."""
    if rate == 0.0 or key is None:
        return v
    keep = jr.bernoulli(key, 1.0 - rate, v.shape)
    return jnp.where(keep, v / (1.0 - rate), 0.0)
