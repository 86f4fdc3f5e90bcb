r"""Rank-collapse measures of one token matrix ``X`` of shape ``(n, d)`` (SPEC §2).

The paper's measure is eq. (4), $\mu(X) = \|X - \mathbf 1 \gamma_X\|_F$ with the mean token
$\gamma_X = \mathbf 1^\top X / n$. It is not scale-invariant: without LN, $\mu \to 0$ can be
pure norm shrinkage. The scale-free companions (``mu_rel``, ``mu_normalized``, cosines,
singular-value ratios) separate norm decay from directional collapse, as the reviewers asked.

All reductions use ``Precision.HIGHEST``: on GPUs float32 matmuls default to TF32, which would
put a floor near 1e-3 on the very quantities measured here.
"""

from __future__ import annotations

import jax.numpy as jnp
from jax import lax
from jaxtyping import Array, ArrayLike, Float

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

#: Metrics saved per layer by `rankdyn.simulate` (and written to ``metrics.json``).
METRIC_NAMES = (
    "mu", "mu_rel", "mu_normalized", "row_norm_mean", "row_norm_min", "min_cos", "mean_abs_cos",
    "sigma_max", "sigma_min", "sigma_ratio", "stable_rank", "num_rank", "eff_rank",
)


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


def min_cosine(x: Float[Array, "n d"]) -> Float[Array, ""]:
    r"""$\phi = \min_{i,j} \cos(X_i, X_j)$ (SPEC §2.2; Corollary 1 needs $\phi^{(0)} \ge 0$)."""
    return jnp.min(cosine_matrix(x))


def mean_abs_cosine(x: Float[Array, "n d"]) -> Float[Array, ""]:
    r"""$\frac{1}{n(n-1)} \sum_{i \ne j} |\cos(X_i, X_j)|$ ("anisotropy", Fig. 4); diagonal excluded."""
    n = x.shape[0]
    c = jnp.abs(cosine_matrix(x))
    off = jnp.sum(c) - jnp.trace(c)
    return off / max(n * (n - 1), 1)


def singular_values(x: Float[Array, "n d"]) -> Float[Array, " k"]:
    """All singular values, descending, ``k = min(n, d)``."""
    return jnp.linalg.svd(x, compute_uv=False)


def numerical_rank(s: Float[Array, " k"], tol: ArrayLike = 1e-6) -> Float[Array, ""]:
    r"""Number of singular values above ``tol * sigma_max`` (relative tolerance, stated explicitly)."""
    return jnp.sum(s > tol * s[0]).astype(s.dtype)


def stable_rank(s: Float[Array, " k"]) -> Float[Array, ""]:
    r"""$\mathrm{SRank}(X) = \|X\|_F^2 / \|X\|_2^2$ (App. F.2)."""
    return jnp.sum(s**2) / jnp.where(s[0] > 0, s[0] ** 2, 1.0)


def effective_rank(s: Float[Array, " k"]) -> Float[Array, ""]:
    r"""Roy & Vetterli effective rank $\exp(H(p))$, $p_i = \sigma_i / \sum_j \sigma_j$."""
    p = s / jnp.where(jnp.sum(s) > 0, jnp.sum(s), 1.0)
    return jnp.exp(-jnp.sum(jnp.where(p > 0, p * jnp.log(jnp.where(p > 0, p, 1.0)), 0.0)))


def direction_metrics(x: Float[Array, "n d"]) -> dict[str, Float[Array, ""]]:
    """The SVD-free metrics of `METRIC_NAMES` (mu, its scale-free forms, row norms, cosines).

    Cheap enough to record at every layer of large batches; batched SVDs dominate the cost of
    `collapse_metrics` on CPUs.
    """
    nrm = row_norms(x)
    return {
        "mu": mu(x),
        "mu_rel": mu_relative(x),
        "mu_normalized": mu_normalized(x),
        "row_norm_mean": jnp.mean(nrm),
        "row_norm_min": jnp.min(nrm),
        "min_cos": min_cosine(x),
        "mean_abs_cos": mean_abs_cosine(x),
    }


def collapse_metrics(x: Float[Array, "n d"], rank_tol: ArrayLike = 1e-6) -> dict[str, Float[Array, ""]]:
    """Every metric of `METRIC_NAMES` for one token matrix, as a dict of scalars."""
    s = singular_values(x)
    return {
        **direction_metrics(x),
        "sigma_max": s[0],
        "sigma_min": s[-1],
        "sigma_ratio": s[1] / jnp.where(s[0] > 0, s[0], 1.0) if s.shape[0] > 1 else jnp.zeros((), x.dtype),
        "stable_rank": stable_rank(s),
        "num_rank": numerical_rank(s, rank_tol),
        "eff_rank": effective_rank(s),
    }
