r"""The state space of sphere-normalised tokens, $(\mathbb S^{d-1})^n$: orthonormal tangent bases.

One construction serves every linearisation on the product of spheres (the layer map's multipliers
in `rankdyn.equilibria`, its continuation, and the flow's equilibria in `rankdyn._flow`), so that a
tangent-space matrix means the same coordinates wherever it is computed.
"""

from __future__ import annotations

import jax.numpy as jnp
from jaxtyping import Array, Float

__all__ = ["token_bases", "tangent_basis"]


def token_bases(x: Float[Array, "n d"]) -> Float[Array, "n d dm1"]:
    r"""Per token an orthonormal ``(d, d-1)`` basis of the complement of ``x_i`` (Householder).

    $H = I - 2 v v^\top / v^\top v$ with $v = u + \sigma e_1$, $u = x_i/\|x_i\|$,
    $\sigma = \mathrm{sign}(u_1)$ (never 0, so $\|v\|^2 = 2 + 2|u_1| \ge 2$): $H e_1 = -\sigma u$, so
    the other columns of $H$ span $u^\perp$. A reflection is orthogonal to rounding and needs no
    eigen- or singular-value solver (whose basis of a repeated singular value is arbitrary).
    """
    n, d = x.shape
    nrm = jnp.linalg.norm(x, axis=-1, keepdims=True)
    u = x / jnp.where(nrm > 0, nrm, 1.0)
    sigma = jnp.where(u[:, 0] >= 0, 1.0, -1.0).astype(x.dtype)
    v = u.at[:, 0].add(sigma)
    h = (
        jnp.eye(d, dtype=x.dtype)[None]
        - 2.0 * v[:, :, None] * v[:, None, :] / jnp.sum(v * v, -1)[:, None, None]
    )
    return h[:, :, 1:]


def tangent_basis(x: Float[Array, "n d"]) -> Float[Array, "nd nt"]:
    r"""Orthonormal basis of the tangent space of $(\mathbb S^{d-1})^n$ at ``x``.

    Returns:
        ``B`` of shape ``(n*d, n*(d-1))`` (block diagonal; rows index ``x.reshape(-1)``) with
        $B^\top B = I$ and $B^\top \mathrm{vec}(e_i x_i^\top) = 0$ for every token $i$, the blocks
        being `token_bases`. Tokens need not have unit norm (the basis is that of their directions).
    """
    n, d = x.shape
    u = token_bases(x)
    return jnp.einsum("ij,iab->iajb", jnp.eye(n, dtype=x.dtype), u).reshape(n * d, n * (d - 1))
