r"""Initial token matrices $X^{(0)}$ (`docs/theory.md#experiments`).

All samplers take an explicit ``key`` and return ``(n, d)``, or ``(batch, n, d)`` when
``batch`` is given. Trajectory ``i`` of a batch is drawn from ``fold_in(key, i)``: its tokens do
not depend on the batch size, and a chunk of trajectories can be drawn without the others
(`TokenSampler`), so a run of millions of trajectories never holds the whole batch.
"""

from __future__ import annotations

import math

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
from jaxtyping import Array, Float, Int, PRNGKeyArray

from .._errors import UsageError
from ._names import X0_NAMES as X0_NAMES

__all__ = ["initial_tokens", "TokenSampler", "X0_NAMES"]


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
    raise UsageError(f"unknown initial condition {kind!r}; expected one of {', '.join(X0_NAMES)}.")


def _batch_shape(batch) -> tuple[int, ...]:
    """``batch`` as a tuple of positive ints; an empty or negative batch has no statistics to report."""
    shape = tuple(batch) if isinstance(batch, (tuple, list)) else (batch,)
    if not all(isinstance(b, (int, np.integer)) and not isinstance(b, bool) and b >= 1 for b in shape):
        raise UsageError(
            "batch must be a positive integer, a tuple of positive integers or None (one sample), got "
            f"{batch!r}; "
            "e.g. batch=256."
        )
    return tuple(int(b) for b in shape)


def _check(kind, n, d, batch):
    if kind not in X0_NAMES:
        raise UsageError(f"unknown initial condition {kind!r}; expected one of {', '.join(X0_NAMES)}.")
    if n < 1 or d < 1:
        raise UsageError(f"need n >= 1 tokens and d >= 1 features, got n={n}, d={d}.")
    if batch is not None:
        _batch_shape(batch)


class TokenSampler(eqx.Module):
    """Initial tokens of ``batch`` trajectories, drawn a chunk at a time (never all at once).

    ``TokenSampler(key, kind, n, d, batch).sample(jnp.arange(batch))`` equals
    ``initial_tokens(key, kind, n, d, batch=batch)``; `rankdyn.simulate` accepts a sampler in
    place of ``x0`` and draws each chunk inside the compiled program.

    Attributes:
        key: the PRNG key; trajectory ``i`` uses ``fold_in(key, i)``.
        kind: one of `X0_NAMES` (see `initial_tokens`).
        num_tokens, dim: n and d.
        batch: number of trajectories.
        common_weight: for ``bert``, the weight of the shared direction.
    """

    key: PRNGKeyArray
    common_weight: Float[Array, ""]
    kind: str = eqx.field(static=True)
    num_tokens: int = eqx.field(static=True)
    dim: int = eqx.field(static=True)
    batch: int = eqx.field(static=True)
    dtype: jnp.dtype = eqx.field(static=True)

    def __init__(self, key, kind: str, n: int, d: int, batch: int, *, dtype=None, common_weight: float = 1.0):
        _check(kind, n, d, batch)
        if isinstance(batch, (tuple, list)):
            raise UsageError(f"a TokenSampler has one batch axis: pass an integer batch, got {batch!r}.")
        self.key = key
        self.kind, self.num_tokens, self.dim, self.batch = kind, n, d, int(batch)
        self.dtype = jnp.zeros((), dtype if dtype is not None else float).dtype
        self.common_weight = jnp.asarray(common_weight, self.dtype)

    def sample(self, index: Int[Array, " c"]) -> Float[Array, "c n d"]:
        """Tokens of the trajectories ``index`` (any indices; ``>= batch`` gives valid extra draws)."""
        one = lambda i: _one(
            jr.fold_in(self.key, i),
            self.kind,
            self.num_tokens,
            self.dim,
            self.dtype,  # noqa: E731
            self.common_weight,
        )
        return jax.vmap(one)(index)


def initial_tokens(
    key: PRNGKeyArray,
    kind: str,
    n: int,
    d: int,
    batch: int | tuple[int, ...] | None = None,
    *,
    dtype=None,
    common_weight: float = 1.0,
) -> Float[Array, "*batch n d"]:
    """Sample initial tokens.

    Arguments:
        kind: ``gaussian`` (i.i.d. N(0, 1)), ``sphere`` (uniform on S^{d-1}), ``nonneg`` (uniform on
            the positive orthant of the sphere, so all cosines are >= 0), ``bert`` (centred
            LayerNorm of Gaussian embeddings sharing a common direction; token norm sqrt(d)).
        batch: number of independent samples (or a tuple of batch axes), or None for one ``(n, d)``.
            Sample ``i`` (row-major over the batch axes) is drawn from ``fold_in(key, i)``.
        common_weight: for ``bert``, the weight of the shared direction (cosines ~ w^2/(1+w^2)).

    Raises:
        ValueError: for an unknown ``kind``, n or d below 1, or a batch that is not positive.
    """
    _check(kind, n, d, batch)
    dtype = jnp.zeros((), dtype if dtype is not None else float).dtype
    if batch is None:
        return _one(key, kind, n, d, dtype, common_weight)
    shape = _batch_shape(batch)
    xs = TokenSampler(key, kind, n, d, math.prod(shape), dtype=dtype, common_weight=common_weight).sample(
        jnp.arange(math.prod(shape))
    )
    return xs.reshape(shape + (n, d))
