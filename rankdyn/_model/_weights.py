r"""Weight families for value, query and key matrices.

(docs/theory.md#the-model, docs/theory.md#constructions, docs/theory.md#experiments.)

Every random family takes an explicit ``key`` and returns a fresh array, so a sweep over
seeds is a ``jax.vmap`` over keys. The value families cover the theorems' hypotheses:
orthogonal $W_V$ (Theorem 2, Corollary 1), $\|W_V\|_2 \le 1$ (A3, Theorem 1), and the paper's
counterexamples $W_V = I + w S$ (full upper bidiagonal) or a size-$k$ Jordan block in the
bottom-right corner (App. F.1).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
from jax import lax
from jaxtyping import Array, ArrayLike, Float, PRNGKeyArray

from .._errors import UsageError
from ._names import QK_NAMES as QK_NAMES, VALUE_NAMES as VALUE_NAMES

__all__ = [
    "orthogonal",
    "gaussian",
    "bert_uniform",
    "spectral_normalized",
    "bidiagonal",
    "jordan_block",
    "value_matrix",
    "query_key_matrices",
    "VALUE_NAMES",
    "QK_NAMES",
]


def _dtype(dtype):
    return jnp.zeros((), dtype=dtype if dtype is not None else float).dtype


def orthogonal(key: PRNGKeyArray, d: int, dtype=None) -> Float[Array, "d d"]:
    """Haar-distributed orthogonal matrix: QR of a Gaussian with the sign of diag(R) fixed.

    Without the sign correction QR is not Haar (Mezzadri 2007).
    """
    g = jr.normal(key, (d, d), dtype=_dtype(dtype))
    q, r = jnp.linalg.qr(g)
    return q * jnp.sign(jnp.diagonal(r))[None, :]


def gaussian(key: PRNGKeyArray, shape, std: ArrayLike | None = None, dtype=None) -> Float[Array, "..."]:
    """I.i.d. Gaussian entries with standard deviation ``std`` (default ``1/sqrt(shape[0])``)."""
    shape = tuple(shape)
    std = 1.0 / jnp.sqrt(shape[0]) if std is None else std
    # The barrier keeps XLA from fusing the product into the normal draw inside a larger program
    # (it then rounds 1 in 4 entries differently): the same bits eagerly and under jit.
    return jnp.asarray(std, _dtype(dtype)) * lax.optimization_barrier(
        jr.normal(key, shape, dtype=_dtype(dtype))
    )


def bert_uniform(key: PRNGKeyArray, shape, dtype=None) -> Float[Array, "..."]:
    """U(-1/sqrt(fan_in), 1/sqrt(fan_in)) with fan_in = shape[0] (PyTorch ``nn.Linear`` default)."""
    shape = tuple(shape)
    bound = 1.0 / jnp.sqrt(jnp.asarray(shape[0], _dtype(dtype)))
    return jr.uniform(key, shape, dtype=_dtype(dtype), minval=-bound, maxval=bound)


def spectral_normalized(w: Float[Array, "d d"]) -> Float[Array, "d d"]:
    r"""``w / ||w||_2``: spectral norm exactly 1, the simulator-safe form of assumption A3."""
    # The barrier keeps XLA from folding the division into the producer of w inside a larger
    # program (as for `gaussian`): the same bits eagerly and under jit.
    w, norm = lax.optimization_barrier((w, jnp.linalg.norm(w, ord=2)))
    return w / norm


def bidiagonal(d: int, w: ArrayLike, dtype=None) -> Float[Array, "d d"]:
    r"""The paper's $W_V = I_d + w \sum_{m=1}^{d-1} e_m e_{m+1}^\top$ (App. F.1, Step 2).

    One matrix that carries equilibria of every rank $1..N$ when $w \ge N$ (docs/theory.md#constructions).
    """
    return jordan_block(d, d, w, dtype=dtype)


def jordan_block(d: int, k: int, w: ArrayLike, dtype=None) -> Float[Array, "d d"]:
    r"""Identity plus one upper Jordan block of size ``k`` (superdiagonal ``w``) in the bottom-right.

    ``k = 1`` is $I$, ``k = 2`` is $I + w e_{d-1} e_d^\top$, ``k = d`` is `bidiagonal`
    (docs/theory.md#constructions). ``w`` may be a traced array, so a sweep over it compiles once.

    Raises:
        ValueError: if ``k`` is not in ``[1, d]``.
    """
    if not 1 <= k <= d:
        raise UsageError(f"Jordan block size k must be in [1, d={d}], got {k}; use k <= d.")
    dt = _dtype(dtype)
    m = np.arange(d)
    # Superdiagonal entries (m, m+1) lying inside the trailing k x k block.
    sup = (m[:, None] + 1 == m[None, :]) & (m[:, None] >= d - k)
    if isinstance(w, jax.core.Tracer):
        return jnp.eye(d, dtype=dt) + jnp.asarray(w, dt) * jnp.asarray(sup, dt)
    # A concrete w: the same sum in NumPy (exact, entry by entry), one transfer instead of a
    # dozen eagerly compiled ops per size.
    return jnp.asarray(np.eye(d, dtype=dt) + np.asarray(w, dt) * sup.astype(dt))


def value_matrix(
    key: PRNGKeyArray,
    family: str,
    d: int,
    *,
    w: ArrayLike = 2.0,
    k: int | None = None,
    std: ArrayLike | None = None,
    dtype=None,
) -> Float[Array, "d d"]:
    """A value matrix ``W_V`` from a named family (`VALUE_NAMES`).

    Arguments:
        family: ``orthogonal`` (Haar), ``gaussian`` (std, default 1/sqrt(d)), ``bert``
            (U(+-1/sqrt d)), ``identity``, ``scaled`` (Gaussian rescaled to spectral norm 1, A3),
            ``bidiagonal`` (``I + w S``), ``jordan`` (size-``k`` Jordan block, default k = d).
        w: superdiagonal weight of ``bidiagonal``/``jordan``.
    """
    if family == "orthogonal":
        return orthogonal(key, d, dtype)
    if family == "gaussian":
        return gaussian(key, (d, d), std, dtype)
    if family == "bert":
        return bert_uniform(key, (d, d), dtype)
    if family == "identity":
        return jnp.eye(d, dtype=_dtype(dtype))
    if family == "scaled":
        return spectral_normalized(gaussian(key, (d, d), std, dtype))
    if family == "bidiagonal":
        return bidiagonal(d, w, dtype)
    if family == "jordan":
        return jordan_block(d, d if k is None else k, w, dtype)
    raise UsageError(f"unknown value family {family!r}; expected one of {', '.join(VALUE_NAMES)}.")


def query_key_matrices(
    key: PRNGKeyArray, family: str, d: int, dk: int, *, std: ArrayLike | None = None, dtype=None
) -> tuple[Float[Array, "d dk"], Float[Array, "d dk"]]:
    """``(W_Q, W_K)`` from ``bert`` (U(+-1/sqrt d)), ``gaussian`` or ``zero`` (uniform attention)."""
    kq, kk = jr.split(key)
    if family == "bert":
        return bert_uniform(kq, (d, dk), dtype), bert_uniform(kk, (d, dk), dtype)
    if family == "gaussian":
        return gaussian(kq, (d, dk), std, dtype), gaussian(kk, (d, dk), std, dtype)
    if family == "zero":
        z = jnp.zeros((d, dk), _dtype(dtype))
        return z, z
    raise UsageError(f"unknown query/key family {family!r}; expected one of {', '.join(QK_NAMES)}.")
