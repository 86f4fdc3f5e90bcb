r"""Position information inside attention: rotary embeddings (Llama) and MPNet's relative bias.

Both act on the attention logits only, never on the tokens' values (docs/theory.md#modern-blocks):

- **Rotary** (Su et al., RoFormer; HF's ``rotate_half`` convention): feature pairs $(j, j + d_h/2)$
  of query and key at position $p$ turn by the angle $p\,\theta^{-2j/d_h}$,
  $q \mapsto q \odot \cos + \mathrm{rot}(q) \odot \sin$ with $\mathrm{rot}(q) = (-q_{2}, q_{1})$ for the
  halves $q = (q_1, q_2)$, so that $\langle R_p q, R_m k\rangle$ depends on $p - m$ only.
- **Relative bias** (MPNet, after T5): $R_{ij} \mathrel{+}= B_h[\mathrm{bucket}(j - i)]$, one learned
  scalar per head and bucket, shared by every layer.
"""

from __future__ import annotations

import math

import equinox as eqx
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from .._errors import UsageError

__all__ = ["Rotary", "rotary", "relative_bias", "relative_buckets", "check_positions"]


class Rotary(eqx.Module):
    r"""Rotary embeddings of ``n`` positions: the tables $\cos, \sin$ of shape ``(n, d_h)``.

    Calling it rotates per-head queries or keys ``(heads, n, d_h)`` (see the module docstring).
    """

    cos: Float[Array, "n dk"]
    sin: Float[Array, "n dk"]

    def __call__(self, q: Float[Array, "heads n dk"]) -> Float[Array, "heads n dk"]:
        half = q.shape[-1] // 2
        rot = jnp.concatenate([-q[..., half:], q[..., :half]], axis=-1)
        return q * self.cos[None].astype(q.dtype) + rot * self.sin[None].astype(q.dtype)


def rotary(n: int, head_dim: int, theta: float, dtype) -> Rotary:
    r"""The `Rotary` tables for positions $0..n-1$, base ``theta`` (``rope_theta``), in ``dtype``.

    The angles $p\,\theta^{-2j/d_h}$ are formed in ``dtype`` as HF and llama.cpp form them
    (inverse frequencies and product in float32 for a float32 run), so a float32 run rotates by
    the angles the model was run with; a float64 run uses float64 angles.

    Raises:
        ValueError: for an odd ``head_dim`` or ``theta <= 0``.
    """
    if head_dim % 2 or not theta > 0:
        raise UsageError(f"rotary embeddings need an even head width and theta > 0, got {head_dim}, {theta}.")
    dt = np.dtype(dtype)
    inv = (
        1.0 / (theta ** (np.arange(0, head_dim, 2, dtype=np.int64).astype(dt) / dt.type(head_dim)))
    ).astype(dt)
    ang = np.arange(n, dtype=np.int64).astype(dt)[:, None] * inv[None, :]
    ang = np.concatenate([ang, ang], axis=-1)
    # cos / sin evaluated in float64 and rounded once: the correctly rounded table of these angles.
    return Rotary(
        jnp.asarray(np.cos(ang.astype(np.float64)).astype(dt)),
        jnp.asarray(np.sin(ang.astype(np.float64)).astype(dt)),
    )


def relative_buckets(n: int, num_buckets: int = 32, max_distance: int = 128) -> np.ndarray:
    r"""MPNet's bucket of each relative position $j - i$, int ``(n, n)`` (T5's bidirectional rule).

    Half the buckets for each sign; distances below a quarter of ``num_buckets`` exact, larger
    ones log-spaced up to ``max_distance`` (float32 logarithms, as the model computes them).
    """
    rel = np.arange(n)[None, :] - np.arange(n)[:, None]
    half = num_buckets // 2
    out = (-rel < 0).astype(np.int64) * half
    dist = np.abs(rel)
    exact = half // 2
    # Distances below `exact` take the exact branch; max(dist, 1) keeps log(0) out of the other.
    large = exact + (
        np.log(np.maximum(dist, 1).astype(np.float32) / np.float32(exact))
        / np.float32(math.log(max_distance / exact))
        * np.float32(half - exact)
    ).astype(np.int64)
    large = np.minimum(np.where(dist < exact, 0, large), half - 1)
    return out + np.where(dist < exact, dist, large)


def relative_bias(table: np.ndarray, n: int, max_distance: int = 128) -> np.ndarray:
    """The logit bias ``(heads, n, n)`` from a ``(num_buckets, heads)`` table (MPNet's
    ``relative_attention_bias.weight``)."""
    buckets = relative_buckets(n, table.shape[0], max_distance)
    return np.moveaxis(table[buckets], -1, 0)


def check_positions(rotary: Rotary | None, logit_bias, n: int, heads: int, dk: int):
    """``(rotary, logit_bias)`` checked against a layer of ``n`` tokens, ``heads`` heads of width ``dk``.

    Raises:
        ValueError: for tables of another shape.
    """
    if rotary is not None and rotary.cos.shape != (n, dk):
        raise UsageError(f"rotary tables must have shape {(n, dk)} (n, d_qk), got {rotary.cos.shape}.")
    if logit_bias is not None:
        logit_bias = jnp.asarray(logit_bias)
        if logit_bias.shape != (heads, n, n):
            raise UsageError(f"logit_bias must have shape {(heads, n, n)}, got {logit_bias.shape}.")
    return rotary, logit_bias
