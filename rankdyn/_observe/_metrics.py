r"""Rank-collapse measures of one token matrix ``X`` of shape ``(n, d)`` (`docs/theory.md#metrics`).

The paper's measure is eq. (4), $\mu(X) = \|X - \mathbf 1 \gamma_X\|_F$ with the mean token
$\gamma_X = \mathbf 1^\top X / n$. It is not scale-invariant: without LN, $\mu \to 0$ can be
pure norm shrinkage. The scale-free companions (``mu_rel``, ``mu_normalized``, cosines,
singular-value ratios) separate norm decay from directional collapse, as the reviewers asked.

All reductions use ``Precision.HIGHEST``: on GPUs float32 matmuls default to TF32, which would
put a floor near 1e-3 on the very quantities measured here.

A token that is exactly zero has no direction: ``mu_normalized``, ``min_cos`` and
``mean_abs_cos`` are NaN for a matrix with a zero row (never 0), and a NaN matrix has NaN ranks.

`collapse_metrics` and `direction_metrics` are safe against under- and overflow: they work on
$X / 2^e$ with $2^e$ the power of two nearest above $\max_{ij}|X_{ij}|$ (an exact scaling)
and scale the absolute quantities back, so tokens of norm $10^{-20}$ in float32 (whose squares
underflow) give the same scale-free metrics as tokens of norm 1. The singular values come from
`rankdyn._observe._spectral.singular_values`, which has a tested accuracy contract.
"""

from __future__ import annotations

import jax.numpy as jnp
from jax import lax
from jaxtyping import Array, ArrayLike, Float

from ._names import METRIC_NAMES as METRIC_NAMES
from ._spectral import _pow2_scale, singular_values as _accurate_singular_values
from ._tolerances import RANK_TOL

__all__ = [
    "mu",
    "mu_relative",
    "mu_normalized",
    "row_norms",
    "cosine_matrix",
    "min_cosine",
    "mean_abs_cosine",
    "singular_values",
    "numerical_rank",
    "stable_rank",
    "effective_rank",
    "collapse_metrics",
    "direction_metrics",
    "METRIC_NAMES",
]

_HI = lax.Precision.HIGHEST


def mu(x: Float[Array, "n d"]) -> Float[Array, ""]:
    r"""$\mu(X) = \|X - \mathbf 1 \gamma_X\|_F$, eq. (4): distance to the nearest all-equal matrix."""
    return jnp.linalg.norm(x - jnp.mean(x, axis=0, keepdims=True))


def row_norms(x: Float[Array, "n d"]) -> Float[Array, " n"]:
    return jnp.linalg.norm(x, axis=-1)


def _unit_rows(x):
    nrm = row_norms(x)
    return x / jnp.where(nrm > 0, nrm, 1.0)[:, None]


def mu_relative(x: Float[Array, "n d"]) -> Float[Array, ""]:
    r"""$\mu(X) / \|X\|_F$: scale-free; 0 iff all tokens are equal (1 for zero-mean tokens)."""
    fro = jnp.linalg.norm(x)
    return mu(x) / jnp.where(fro > 0, fro, 1.0)


def mu_normalized(x: Float[Array, "n d"]) -> Float[Array, ""]:
    r"""$\mu(\mathrm{LN}(X))$: $\mu$ after scaling every token to unit norm (pure direction)."""
    return mu(_unit_rows(x))


def cosine_matrix(x: Float[Array, "n d"]) -> Float[Array, "n n"]:
    """Pairwise cosine similarities of the tokens (zero rows give cosine 0)."""
    u = _unit_rows(x)
    return jnp.matmul(u, u.T, precision=_HI)


#: From this many tokens the cosine metrics reduce the cosine matrix by row blocks of
#: `COS_BLOCK` (long context: an (n, n) matrix is 17 GB at n = 65536), never forming it whole.
COS_BLOCKED_MIN = 2048
COS_BLOCK = 256


def _cosine_reductions(x):
    """``(min_ij cos, sum_ij |cos|, trace |cos|)`` of the cosine matrix, by row blocks when large."""
    n = x.shape[0]
    if n < COS_BLOCKED_MIN:
        c = cosine_matrix(x)
        a = jnp.abs(c)
        return jnp.min(c), jnp.sum(a), jnp.trace(a)
    u = _unit_rows(x)
    nb = -(-n // COS_BLOCK)
    rows = jnp.pad(u, ((0, nb * COS_BLOCK - n), (0, 0))).reshape(nb, COS_BLOCK, -1)

    def block(args):
        i, r = args
        c = jnp.matmul(r, u.T, precision=_HI)  # (block, n)
        idx = i * COS_BLOCK + jnp.arange(COS_BLOCK)
        valid = (idx < n)[:, None]
        own = jnp.take_along_axis(c, jnp.minimum(idx, n - 1)[:, None], axis=1)  # cos(X_i, X_i)
        diag = jnp.sum(jnp.where(valid, jnp.abs(own), 0.0))
        return jnp.min(jnp.where(valid, c, jnp.inf)), jnp.sum(jnp.where(valid, jnp.abs(c), 0.0)), diag

    lo, total, diag = lax.map(block, (jnp.arange(nb), rows))
    return jnp.min(lo), jnp.sum(total), jnp.sum(diag)


def min_cosine(x: Float[Array, "n d"]) -> Float[Array, ""]:
    r"""$\phi = \min_{i,j} \cos(X_i, X_j)$, the smallest token cosine.

    Corollary 1 needs $\phi^{(0)} \ge 0$ (`docs/theory.md#metrics`).
    """
    return _cosine_reductions(x)[0]


def mean_abs_cosine(x: Float[Array, "n d"]) -> Float[Array, ""]:
    r"""$\frac{1}{n(n-1)} \sum_{i \ne j} |\cos(X_i, X_j)|$ ("anisotropy", Fig. 4); diagonal excluded."""
    n = x.shape[0]
    _, total, diag = _cosine_reductions(x)
    return (total - diag) / float(max(n * (n - 1), 1))  # a Python int overflows int32 at n = 65536


def singular_values(x: Float[Array, "n d"]) -> Float[Array, " k"]:
    """All singular values, descending, ``k = min(n, d)`` (`jnp.linalg.svd`: differentiable).

    The metrics use `rankdyn._observe._spectral.singular_values` (not differentiable, faster on batches
    of small matrices, with a stated accuracy contract); this one stays for objectives that are
    differentiated, such as the W_V search.
    """
    return jnp.linalg.svd(x, compute_uv=False)


def numerical_rank(s: Float[Array, " k"], tol: ArrayLike = RANK_TOL) -> Float[Array, ""]:
    r"""Number of singular values above ``tol * sigma_max`` (relative tolerance); 0 for a zero matrix,
    NaN for a NaN one."""
    rank = jnp.sum(s > tol * s[0]).astype(s.dtype)
    return jnp.where(jnp.isnan(s[0]), jnp.nan, rank)  # a NaN matrix has no rank (not 0)


def stable_rank(s: Float[Array, " k"]) -> Float[Array, ""]:
    r"""$\mathrm{SRank}(X) = \|X\|_F^2 / \|X\|_2^2 = \sum_i (\sigma_i / \sigma_1)^2$ (App. F.2).

    Computed from the ratios, so it is defined (in $[1, k]$) whenever $\sigma_1 > 0$, even when
    $\sigma_1^2$ underflows; 0 for a zero matrix (rank 0).
    """
    r = s / jnp.where(s[0] > 0, s[0], 1.0)
    return jnp.sum(r * r)


def effective_rank(s: Float[Array, " k"]) -> Float[Array, ""]:
    r"""Roy & Vetterli effective rank $\exp(H(p))$, $p_i = \sigma_i / \sum_j \sigma_j$.

    0 for a zero matrix.
    """
    total = jnp.sum(s)
    p = s / jnp.where(total > 0, total, 1.0)
    erank = jnp.exp(-jnp.sum(jnp.where(p > 0, p * jnp.log(jnp.where(p > 0, p, 1.0)), 0.0)))
    # A zero matrix has rank 0 by every other measure here; exp(H) of no mass would say 1.
    return jnp.where(total > 0, erank, jnp.where(jnp.isnan(total), jnp.nan, jnp.zeros((), s.dtype)))


def _scaled(x):
    """``(x / 2^e, 2^e)`` with ``max |x / 2^e|`` in [1/2, 1): exact, and no square under/overflows."""
    scale = _pow2_scale(x)
    return x / scale, scale


def _direction(xs, scale):
    nrm = row_norms(xs)
    # A zero token (underflow, dropout, a degenerate LN) has no direction: its cosines and its
    # unit row are undefined. NaN, not 0, so that the value is never read as a result; the depth
    # scan flags such trajectories (``degenerate``) and leaves them out of the statistics.
    undefined = jnp.any(nrm == 0)
    nan = lambda v: jnp.where(undefined, jnp.nan, v)  # noqa: E731
    return {
        "mu": mu(xs) * scale,
        "mu_rel": mu_relative(xs),
        "mu_normalized": nan(mu_normalized(xs)),
        "row_norm_mean": jnp.mean(nrm) * scale,
        "row_norm_min": jnp.min(nrm) * scale,
        "min_cos": nan(min_cosine(xs)),
        "mean_abs_cos": nan(mean_abs_cosine(xs)),
    }


def direction_metrics(x: Float[Array, "n d"]) -> dict[str, Float[Array, ""]]:
    """The SVD-free metrics of `METRIC_NAMES` (mu, its scale-free forms, row norms, cosines).

    Cheap enough to record at every layer of large batches. Computed on the exactly rescaled
    ``x`` (see the module docstring), so tiny or huge tokens give defined, scale-free values.
    """
    return _direction(*_scaled(x))


def collapse_metrics(x: Float[Array, "n d"], rank_tol: ArrayLike = RANK_TOL) -> dict[str, Float[Array, ""]]:
    r"""Every metric of `METRIC_NAMES` for one token matrix, as a dict of scalars.

    The spectral ones come from all singular values $\sigma_1 \ge \dots \ge \sigma_k$ of $X$
    (`rankdyn._observe._spectral.singular_values`, error at most $8 k \epsilon \sigma_1$):
    ``sigma_max`` $= \sigma_1$, ``sigma_min`` $= \sigma_k$, ``sigma_ratio`` $= \sigma_2/\sigma_1$,
    ``stable_rank`` $= \sum_i \sigma_i^2/\sigma_1^2$, ``num_rank`` $= \#\{\sigma_i >$ ``rank_tol``
    $\sigma_1\}$ and ``eff_rank`` (Roy-Vetterli). A zero matrix gives 0 for all of them; the
    ratios are defined whenever $X \ne 0$, however small its entries.
    """
    xs, scale = _scaled(x)
    s = _accurate_singular_values(xs)
    ratio = s[1] / jnp.where(s[0] > 0, s[0], 1.0) if s.shape[0] > 1 else jnp.zeros((), x.dtype)
    return {
        **_direction(xs, scale),
        "sigma_max": s[0] * scale,
        "sigma_min": s[-1] * scale,
        "sigma_ratio": ratio,
        "stable_rank": stable_rank(s),
        "num_rank": numerical_rank(s, rank_tol),
        "eff_rank": effective_rank(s),
    }
