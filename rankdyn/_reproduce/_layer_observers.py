r"""Per-layer observation functions passed to `rankdyn.simulate(..., observe=...)`.

Each has the observer signature ``(t, x, args) -> dict`` (layer index, one trajectory's tokens,
the layer) and reads the tokens only.

They are module-level functions (or built once per configuration): simulate's compilation
cache is keyed on the function object, so a fresh lambda per call would recompile.
"""

from __future__ import annotations

import jax.numpy as jnp
from jax import lax

from .._observe._metrics import collapse_metrics, direction_metrics, mu

__all__ = [
    "cheap_observe",
    "full_observe",
    "sigma_ratio",
    "observe_sigma_ratio",
    "zero_rows",
    "observe_zero_rows",
]


def cheap_observe(t, x, args):
    """SVD-free per-layer metrics: mu (eq. 4), mu/||X||_F, mu(LN(X)), row norms, cosines."""
    return direction_metrics(x)


def full_observe(rank_tol):
    """All of `rankdyn.collapse_metrics` (with SVD) at relative rank tolerance ``rank_tol``."""
    return lambda t, x, args: collapse_metrics(x, rank_tol)


def sigma_ratio(x):
    r"""$\sigma_2/\sigma_1$ of one token matrix: 0 at rank one (rank >= 2 iff > 1e-2,
    docs/theory.md#metrics)."""
    s = jnp.linalg.svd(x, compute_uv=False)
    return s[1] / jnp.where(s[0] > 0, s[0], 1.0)


def observe_sigma_ratio(t, x, args):
    return {"ratio": sigma_ratio(x)}


def zero_rows(x):
    r"""Boolean ``(n,)``: rows of (numerically) zero norm, relative to the largest row.

    Dropout creates exact zero rows (a token whose every attention weight was dropped), and a
    norm maps a zero row to zero, so a threshold of 16 ulps of the largest row separates them
    from tokens that are merely small.
    """
    nrm = jnp.linalg.norm(x, axis=-1)
    return nrm <= 16 * jnp.finfo(x.dtype).eps * jnp.max(nrm)


def observe_zero_rows(t, x, args):
    r"""mu (eq. 4) and its split into zero and nonzero rows, for the dropout mechanism.

    - ``mu``, ``mu_rel``: as in `rankdyn.metrics.direction_metrics`;
    - ``zero_rows``: number of zero rows; ``first_zero``: 1 if token 0's row is zero;
    - ``mu_rel_nonzero``: $\mu/\|X\|_F$ over the nonzero rows only (0 iff they are all equal),
      which separates "the live tokens collapsed" from "zero rows keep mu up";
    - ``min_cos_nonzero``: the smallest pairwise cosine among nonzero rows (Corollary 1's $\phi$).
    """
    z = zero_rows(x)
    live = (~z).astype(x.dtype)[:, None]
    count = jnp.maximum(jnp.sum(live), 1.0)
    mean = jnp.sum(live * x, axis=0) / count
    dev = jnp.sqrt(jnp.sum(live * (x - mean[None, :]) ** 2))
    fro = jnp.sqrt(jnp.sum(live * x**2))
    m = mu(x)
    total = jnp.linalg.norm(x)
    return {
        "mu": m,
        "mu_rel": m / jnp.where(total > 0, total, 1.0),
        "zero_rows": jnp.sum(z).astype(x.dtype),
        "first_zero": z[0].astype(x.dtype),
        "mu_rel_nonzero": dev / jnp.where(fro > 0, fro, 1.0),
        "min_cos_nonzero": _min_cos_live(x, z),
    }


def _min_cos_live(x, z):
    """Smallest pairwise cosine among nonzero rows (zero rows excluded, not counted as 0)."""
    nrm = jnp.linalg.norm(x, axis=-1)
    u = x / jnp.where(z, 1.0, nrm)[:, None]
    c = jnp.matmul(u, u.T, precision=lax.Precision.HIGHEST)
    pair = ~z[:, None] & ~z[None, :]
    return jnp.min(jnp.where(pair, c, jnp.inf))
