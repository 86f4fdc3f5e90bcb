r"""Linearisation of one layer map: Jacobians, matrix-free leading multipliers.

For the post-LN map $F(X) = \mathrm{LN}(A(X) X W_V)$ (eq. 3) the state space is
$(\mathbb S^{d-1})^n$; at a fixed point the multipliers are the eigenvalues of
$J_T = B^\top DF(X^*) B$ with $B$ an orthonormal basis of the tangent space
(`docs/theory.md#stability`; `tangent_basis` is the one basis of `rankdyn._model._sphere`, which the
flow's equilibria use too). Un-normalised and pre-LN maps use the full space.
"""

from __future__ import annotations

from typing import Literal

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
from jaxtyping import Array, Complex, Float, PRNGKeyArray

from .._errors import UsageError
from .._model._layer import SelfAttentionLayer
from .._model._placements import on_spheres
from .._model._sphere import tangent_basis, token_bases

__all__ = ["tangent_basis", "tangent_jacobian", "layer_jacobian", "leading_eigenvalues"]


def _layer_map(layer: SelfAttentionLayer, t):
    return lambda y: layer(y, t)[0]


def layer_jacobian(layer: SelfAttentionLayer, x: Float[Array, "n d"], t=0) -> Float[Array, "nd nd"]:
    r"""The full Jacobian $DF(X) \in \mathbb R^{nd\times nd}$ of ``X -> layer(X, t)[0]`` (row-major vec)."""
    return _jacobian(layer, x, t)


@eqx.filter_jit
def _jacobian(layer, x, t):
    n, d = x.shape
    with jax.default_matmul_precision("highest"):
        jac = jax.jacfwd(_layer_map(layer, t))(x)
    return jac.reshape(n * d, n * d)


def _use_tangent(layer: SelfAttentionLayer, space: str) -> bool:
    if space not in ("auto", "tangent", "full"):
        raise UsageError(f"space must be 'auto', 'tangent' or 'full', got {space!r}.")
    if space == "auto":
        return on_spheres(layer)
    return space == "tangent"


def tangent_jacobian(
    layer: SelfAttentionLayer,
    x: Float[Array, "n d"],
    t=0,
    *,
    space: Literal["auto", "tangent", "full"] = "auto",
) -> Float[Array, "m m"]:
    r"""Jacobian of $F(X) = $ ``layer(X, t)[0]`` restricted to the tangent space at ``x``.

    $J_T = B^\top DF(X) B$ with $B$ = `tangent_basis` ``(x)`` on both sides, computed by
    ``jax.jacfwd`` at ``Precision.HIGHEST``. At a fixed point its eigenvalues are the multipliers
    of the map on $(\mathbb S^{d-1})^n$. (Using the basis at ``x`` on the output side too keeps
    $J_T$ a similarity transform of the restricted differential; at a non-fixed point it is the
    differential followed by the orthogonal projection onto $T_X$.)

    Arguments:
        layer: a `SelfAttentionLayer`.
        x: the point ``(n, d)``.
        t: layer index (for per-layer weights).
        space: ``"auto"`` (tangent space for ``placement="post"``, full space otherwise, since
            un-normalised and pre-LN iterates do not live on the spheres), ``"tangent"`` or
            ``"full"``.

    Returns:
        ``(n*(d-1), n*(d-1))`` in the tangent space, or ``(n*d, n*d)`` in the full space.
    """
    if not _use_tangent(layer, space):
        return layer_jacobian(layer, x, t)
    return _tangent_jacobian(layer, x, t)


@eqx.filter_jit
def _tangent_jacobian(layer, x, t):
    jac = _jacobian(layer, x, t)
    b = tangent_basis(x)
    hi = jax.lax.Precision.HIGHEST
    return jnp.matmul(b.T, jnp.matmul(jac, b, precision=hi), precision=hi)


def _jvp_operator(layer, x, t, tangent: bool):
    """The matrix-free map v -> J v (in tangent coordinates when ``tangent``)."""
    f = _layer_map(layer, t)
    n, d = x.shape
    if not tangent:
        return lambda v: jax.jvp(f, (x,), (v.reshape(n, d),))[1].reshape(-1), n * d
    u = token_bases(x)  # (n, d, d-1): B applied per token, never formed densely

    def op(v):
        dx = jnp.einsum("nab,nb->na", u, v.reshape(n, d - 1))
        dy = jax.jvp(f, (x,), (dx,))[1]
        return jnp.einsum("nab,na->nb", u, dy).reshape(-1)

    return op, n * (d - 1)


def _arnoldi(op, v0, m: int):
    """``m`` Arnoldi steps with two passes of classical Gram-Schmidt (fixed shapes, ``fori_loop``).

    Returns ``(H (m+1, m), breakdown index)``; after a breakdown (invariant Krylov subspace) the
    remaining columns are zero and the caller uses the leading block only.
    """
    size = v0.shape[0]
    dt = v0.dtype
    hi = jax.lax.Precision.HIGHEST
    vs = jnp.zeros((m + 1, size), dt).at[0].set(v0 / jnp.linalg.norm(v0))
    h = jnp.zeros((m + 1, m), dt)
    eps = jnp.finfo(dt).eps

    def step(j, carry):
        vs, h, stop = carry
        wv = op(vs[j])
        scale = jnp.linalg.norm(wv)
        mask = (jnp.arange(m + 1) <= j).astype(dt)
        c1 = jnp.matmul(vs, wv, precision=hi) * mask
        wv = wv - jnp.matmul(c1, vs, precision=hi)
        c2 = jnp.matmul(vs, wv, precision=hi) * mask
        wv = wv - jnp.matmul(c2, vs, precision=hi)
        beta = jnp.linalg.norm(wv)
        broke = beta <= 1e3 * eps * jnp.maximum(scale, 1.0)
        live = jnp.logical_not(stop)
        col = (c1 + c2).at[j + 1].set(jnp.where(broke, 0.0, beta))
        h = h.at[:, j].set(jnp.where(live, col, 0.0))
        vnext = jnp.where(broke | stop, 0.0, wv / jnp.where(broke, 1.0, beta))
        vs = vs.at[j + 1].set(vnext)
        stop = stop | broke
        return vs, h, stop

    _, h, _ = jax.lax.fori_loop(0, m, step, (vs, h, jnp.array(False)))
    return h


def leading_eigenvalues(
    layer: SelfAttentionLayer,
    x: Float[Array, "n d"],
    k: int = 6,
    *,
    iters: int = 60,
    t=0,
    key: PRNGKeyArray | None = None,
    space: Literal["auto", "tangent", "full"] = "auto",
) -> Complex[np.ndarray, " k"]:
    r"""The ``k`` multipliers of largest modulus, matrix-free (Arnoldi on Jacobian-vector products).

    Only JVPs of the layer are evaluated (``jax.jvp``; $B$ is applied token by token, never
    formed), so memory is $O(\text{iters}\cdot nd)$ and the compiled part runs on any backend,
    TPU included (which has no non-symmetric eigensolver): the small Hessenberg matrix's
    eigenvalues (the Ritz values) are computed on the host with NumPy. Without restarts the Ritz
    values of the dominant, well-separated part of the spectrum converge first; use
    ``iters >= dimension`` for exact results on small problems (the Krylov space then fills the
    whole space, up to breakdown, which is detected).

    Arguments:
        layer: a `SelfAttentionLayer`.
        x: the point ``(n, d)``.
        k: how many eigenvalues to return.
        iters: Krylov dimension (capped at the dimension of the space).
        t: layer index.
        key: PRNG key for the start vector (default ``PRNGKey(0)``).
        space: see `tangent_jacobian`.

    Returns:
        NumPy complex array of the (at most) ``k`` Ritz values of largest modulus, sorted by
        decreasing modulus.
    """
    x = jnp.asarray(x)
    op, size = _jvp_operator(layer, x, t, _use_tangent(layer, space))
    m = int(min(iters, size))
    key = jr.PRNGKey(0) if key is None else key
    v0 = jr.normal(key, (size,), x.dtype)
    with jax.default_matmul_precision("highest"):
        h = np.asarray(jax.jit(lambda v: _arnoldi(op, v, m))(v0), dtype=np.float64)
    # Leading block up to the first breakdown (zero subdiagonal entry).
    sub = np.abs(np.diag(h, -1))
    zero = np.nonzero(sub == 0.0)[0]
    m_eff = int(zero[0]) + 1 if zero.size else m
    ritz = np.linalg.eigvals(h[:m_eff, :m_eff])
    order = np.argsort(-np.abs(ritz), kind="stable")
    return ritz[order][:k]
