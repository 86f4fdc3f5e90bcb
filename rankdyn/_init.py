r"""Initial token matrices $X^{(0)}$ (`docs/theory.md#experiments`).

All samplers take an explicit ``key`` and return ``(n, d)``, or ``(batch, n, d)`` when
``batch`` is given.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
from jaxtyping import Array, Float, PRNGKeyArray

__all__ = ["initial_tokens", "X0_NAMES"]

X0_NAMES = ("gaussian", "sphere", "nonneg", "bert")


def _unit_rows(x):
    return x / jnp.linalg.norm(x, axis=-1, keepdims=True)


def _one(key, kind, n, d, dtype, common_weight):
    if kind == "gaussian":
        return jr.normal(key, (n, d), dtype)
    if kind == "sphere":
        # Uniform on the sphere; full rank almost surely when n <= d (condition (*), Theorem 2).
        return _unit_rows(jr.normal(key, (n, d), dtype))
    if kind == "nonneg":
        # Positive orthant of the sphere: every pairwise cosine is >= 0 (Corollary 1's phi >= 0).
        return _unit_rows(jnp.abs(jr.normal(key, (n, d), dtype)))
    if kind == "bert":
        # BERT-like: embeddings share a common direction (type/position parts), then centred LN:
        # each token is centred over features and scaled to norm sqrt(d).
        k1, k2 = jr.split(key)
        e = common_weight * jr.normal(k1, (1, d), dtype) + jr.normal(k2, (n, d), dtype)
        e = e - jnp.mean(e, axis=-1, keepdims=True)
        return jnp.sqrt(jnp.asarray(d, dtype)) * _unit_rows(e)
    raise ValueError(f"unknown initial condition {kind!r}; expected one of {', '.join(X0_NAMES)}.")


def _batch_shape(batch) -> tuple[int, ...]:
    """``batch`` as a tuple of positive ints; an empty or negative batch has no statistics to report."""
    shape = tuple(batch) if isinstance(batch, (tuple, list)) else (batch,)
    if not all(
        isinstance(b, (int, np.integer)) and not isinstance(b, bool) and b >= 1 for b in shape
    ):
        raise ValueError(
            f"batch must be a positive integer, a tuple of positive integers or None (one sample), got {batch!r}; "
            "e.g. batch=256."
        )
    return tuple(int(b) for b in shape)


def initial_tokens(
    key: PRNGKeyArray, kind: str, n: int, d: int, batch: int | tuple[int, ...] | None = None, *, dtype=None,
    common_weight: float = 1.0,
) -> Float[Array, "*batch n d"]:
    """Sample initial tokens.

    Arguments:
        kind: ``gaussian`` (i.i.d. N(0, 1)), ``sphere`` (uniform on S^{d-1}), ``nonneg`` (uniform on
            the positive orthant of the sphere, so all cosines are >= 0), ``bert`` (centred
            LayerNorm of Gaussian embeddings sharing a common direction; token norm sqrt(d)).
        batch: number of independent samples (or a tuple of batch axes), or None for one ``(n, d)``.
        common_weight: for ``bert``, the weight of the shared direction (cosines ~ w^2/(1+w^2)).

    Raises:
        ValueError: for an unknown ``kind``, ``n`` or ``d`` below 1, or a ``batch`` that is not a
            positive integer (or a tuple of them).
    """
    if kind not in X0_NAMES:
        raise ValueError(f"unknown initial condition {kind!r}; expected one of {', '.join(X0_NAMES)}.")
    if n < 1 or d < 1:
        raise ValueError(f"need n >= 1 tokens and d >= 1 features, got n={n}, d={d}.")
    dtype = jnp.zeros((), dtype if dtype is not None else float).dtype
    if batch is None:
        return _one(key, kind, n, d, dtype, common_weight)
    shape = _batch_shape(batch)
    keys = jr.split(key, math.prod(shape))
    xs = jax.vmap(lambda k: _one(k, kind, n, d, dtype, common_weight))(keys)
    return xs.reshape(shape + (n, d))
