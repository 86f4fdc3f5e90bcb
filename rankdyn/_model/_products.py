r"""The matrix products of the attention layer, shaped for XLA:CPU (`rankdyn._model._layer`).

Each helper exists because a measured formulation was slower: a size-1 head axis under
``vmap`` (`_head_einsum`), and one GEMM's output copied apart for narrow widths (`_project`).
"""

from __future__ import annotations

import itertools

import jax.numpy as jnp

__all__: list[str] = []


def _head_einsum(spec: str, a, b, precision):
    """``jnp.einsum`` over a head axis ``h``; with one head the axis is dropped for the product.

    A size-1 head axis under ``vmap`` made XLA:CPU emit slow batched dots (measured 2x the time
    of the whole layer for n=32, d=64, 256 trajectories); plain 2-D products avoid that.
    """
    ins, out = spec.split("->")
    sa, sb = ins.split(",")
    h = a.shape[sa.index("h")] if "h" in sa else b.shape[sb.index("h")]
    if h != 1:
        return jnp.einsum(spec, a, b, precision=precision)
    drop = lambda v, s: v[0] if s.startswith("h") else v
    res = jnp.einsum(
        f"{sa.replace('h', '')},{sb.replace('h', '')}->{out.replace('h', '')}",
        drop(a, sa),
        drop(b, sb),
        precision=precision,
    )
    return res[None]


#: Contraction widths from which the projections of `_project` share one GEMM.
_CONCAT_MIN_D = 256


def _project(x, weights, precision):
    r"""$x W_i + b_i$ for each ``(W_i, b_i)`` (heads first; ``b_i`` None for no bias).

    For a wide contraction (``d >= _CONCAT_MIN_D``, e.g. BERT's 768) one GEMM against the
    concatenated weights runs closer to the peak than narrow ones; for a narrow one (n=32, d=64)
    copying that GEMM's column blocks apart cost two passes over the tokens per layer (~10% of
    the run), so each product is its own GEMM there.
    """
    if len(weights) == 1 or x.shape[-1] < _CONCAT_MIN_D:
        return [_add_bias(_head_einsum("nd,hdk->hnk", x, w, precision), b) for w, b in weights]
    proj = _head_einsum("nd,hdk->hnk", x, jnp.concatenate([w for w, _ in weights], axis=-1), precision)
    cuts = list(itertools.accumulate(w.shape[-1] for w, _ in weights))[:-1]
    return [_add_bias(p, b) for p, (_, b) in zip(jnp.split(proj, cuts, axis=-1), weights)]


def _add_bias(v, b):
    """``v`` ``(heads, n, k)`` plus a per-head bias ``(heads, k)`` (None: no bias)."""
    return v if b is None else v + b[:, None, :]


def _fold_qk(n: int, d: int, dk: int) -> bool:
    r"""Whether folding $W_Q W_K^\top$ into one ``(d, d)`` matrix saves FLOPs per token matrix.

    Separate projections cost $4 n d d_k + 2 n^2 d_k$, the folded form $2 n d^2 + 2 n^2 d$
    (e.g. folded for n=32, d=d_k=64; not for BERT's d=768, d_k=64).
    """
    return 2 * n * d * d + 2 * n * n * d < 4 * n * d * dk + 2 * n * n * dk


def _merge_heads(heads, w, precision):
    """Per-head outputs ``(h, n, d_v)`` -> the sub-block's output: the one head itself without
    $W_O$, else the heads concatenated and projected by $W_O$ (plus $b_O$)."""
    if w.w_o is None:
        return heads[0]
    n = heads.shape[1]
    out = jnp.matmul(jnp.moveaxis(heads, 0, 1).reshape(n, -1), w.w_o, precision=precision)
    return out if w.b_o is None else out + w.b_o[None, :]
