r"""Linear stability of fixed points of one layer map on the product of spheres (SPEC §4.4, §5.6).

For the post-LN map $F(X) = \mathrm{LN}(A(X) X W_V)$ (eq. 3) the state space is
$(\mathbb S^{d-1})^n$. At a fixed point $X^* = F(X^*)$ the multipliers are the eigenvalues of

$$J_T = B^\top\, DF(X^*)\, B,\qquad B = \mathrm{blockdiag}(B_1,\dots,B_n),\quad
B_i \in \mathbb R^{d\times(d-1)},\ B_i^\top B_i = I,\ B_i^\top X^*_i = 0,$$

the Jacobian restricted to the tangent space (radial directions projected out; the output of
post-LN is tangent to the spheres by construction). $|\lambda| < 1$ for all multipliers means
linearly stable, one $|\lambda| > 1$ means unstable (a saddle or a source); $|\lambda| = 1$
(non-hyperbolic) is "marginal", which all the paper's equilibria have because the first token
converges only algebraically (SPEC §5.1). For the un-normalised map (``placement="none"``) and
pre-LN (whose iterates are not on the spheres) the full space $\mathbb R^{n d}$ is used.
"""

from __future__ import annotations

import dataclasses
from typing import Literal

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
from jaxtyping import Array, Complex, Float, PRNGKeyArray

from ._equilibria import equilibrium_residual
from ._layer import SelfAttentionLayer

__all__ = [
    "tangent_basis",
    "tangent_jacobian",
    "layer_jacobian",
    "StabilityReport",
    "stability",
    "leading_eigenvalues",
    "classify_moduli",
    "block_eigvals",
    "cluster_means",
]


def _token_bases(x: Float[Array, "n d"]) -> Float[Array, "n d dm1"]:
    r"""Per token an orthonormal ``(d, d-1)`` basis of the complement of ``x_i`` (Householder).

    $H = I - 2 v v^\top / v^\top v$ with $v = u + \sigma e_1$, $u = x_i/\|x_i\|$,
    $\sigma = \mathrm{sign}(u_1)$ (never 0, so $\|v\|^2 = 2 + 2|u_1| \ge 2$): $H e_1 = -\sigma u$, so
    the other columns of $H$ span $u^\perp$.
    """
    n, d = x.shape
    nrm = jnp.linalg.norm(x, axis=-1, keepdims=True)
    u = x / jnp.where(nrm > 0, nrm, 1.0)
    sigma = jnp.where(u[:, 0] >= 0, 1.0, -1.0).astype(x.dtype)
    v = u.at[:, 0].add(sigma)
    h = jnp.eye(d, dtype=x.dtype)[None] - 2.0 * v[:, :, None] * v[:, None, :] / jnp.sum(v * v, -1)[:, None, None]
    return h[:, :, 1:]


def tangent_basis(x: Float[Array, "n d"]) -> Float[Array, "nd nt"]:
    r"""Orthonormal basis of the tangent space of $(\mathbb S^{d-1})^n$ at ``x``.

    Returns:
        ``B`` of shape ``(n*d, n*(d-1))`` (block diagonal; rows index ``x.reshape(-1)``) with
        $B^\top B = I$ and $B^\top \mathrm{vec}(e_i x_i^\top) = 0$ for every token $i$. Tokens
        need not have unit norm (the basis is that of their directions).
    """
    n, d = x.shape
    u = _token_bases(x)
    return jnp.einsum("ij,iab->iajb", jnp.eye(n, dtype=x.dtype), u).reshape(n * d, n * (d - 1))


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
        raise ValueError(f"space must be 'auto', 'tangent' or 'full', got {space!r}.")
    if space == "auto":
        return layer.placement == "post"
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


def classify_moduli(moduli, tol: float = 1e-6) -> tuple[str, int, int]:
    """``(classification, unstable_dims, neutral_dims)`` from eigenvalue moduli.

    ``unstable_dims`` = #{|lambda| > 1 + tol}, ``neutral_dims`` = #{| |lambda| - 1 | <= tol};
    classification is ``"unstable"`` if any is unstable, else ``"marginal"`` if any is neutral,
    else ``"stable"``.
    """
    moduli = np.asarray(moduli)
    unstable = int(np.sum(moduli > 1 + tol))
    neutral = int(np.sum(np.abs(moduli - 1) <= tol))
    cls = "unstable" if unstable else ("marginal" if neutral else "stable")
    return cls, unstable, neutral


@dataclasses.dataclass(frozen=True)
class StabilityReport:
    """Linearisation of one layer map at a point (host-side NumPy arrays).

    Attributes:
        eigenvalues: complex multipliers, sorted by decreasing modulus.
        moduli: their raw moduli (classification uses cluster-averaged ones, see `cluster_means`).
        spectral_radius: the largest (cluster-averaged) modulus.
        classification: ``"stable"`` (all |lambda| < 1 - tol), ``"unstable"`` (some |lambda| > 1 + tol) or ``"marginal"`` (none outside,
            some within tol of 1).
        unstable_dims: number of expanding directions, #{|lambda| > 1 + tol}.
        neutral_dims: number of neutral directions, #{| |lambda| - 1 | <= tol} (non-hyperbolic
            tokens and symmetry directions).
        residual: $\\|F(x) - x\\|_F$ (the multipliers mean something only when this is small).
        space: ``"tangent"`` or ``"full"``.
        tol: the tolerance used.
    """

    eigenvalues: np.ndarray
    moduli: np.ndarray
    spectral_radius: float
    classification: str
    unstable_dims: int
    neutral_dims: int
    residual: float
    space: str
    tol: float

    def to_dict(self) -> dict:
        """JSON-ready dict (eigenvalues as ``[re, im]`` pairs)."""
        return {
            "eigenvalues": [[float(z.real), float(z.imag)] for z in self.eigenvalues],
            "moduli": [float(m) for m in self.moduli],
            "spectral_radius": self.spectral_radius,
            "classification": self.classification,
            "unstable_dims": self.unstable_dims,
            "neutral_dims": self.neutral_dims,
            "residual": self.residual,
            "space": self.space,
            "tol": self.tol,
        }


def cluster_means(eigs: np.ndarray, radius: float = 1e-3) -> np.ndarray:
    """Replace each eigenvalue by the mean of its cluster (single linkage within ``radius``).

    A Jordan block of size ``m`` perturbed by rounding ``eps`` has eigenvalues on a circle of
    radius ``~eps ** (1/m)`` around the true value, but their mean is exact to ``O(eps)`` (the
    trace). The paper's equilibria have defective multipliers 1 (``m`` up to ``d - 1``), so
    classifying raw moduli with a tolerance of 1e-6 would call them unstable at d >= 4.
    """
    eigs = np.asarray(eigs)
    k = eigs.shape[0]
    if k == 0:
        return eigs
    near = np.abs(eigs[:, None] - eigs[None, :]) <= radius
    from scipy.sparse.csgraph import connected_components

    _, labels = connected_components(near, directed=False)
    means = np.array([eigs[labels == c].mean() for c in range(labels.max() + 1)])
    return means[labels]


def _report(eigs, residual, space, tol, cluster) -> StabilityReport:
    eigs = np.asarray(eigs)
    mod = np.abs(eigs)
    order = np.argsort(-mod, kind="stable")
    eigs, mod = eigs[order], mod[order]
    # Classify the cluster-averaged moduli (robust to defective multipliers, see cluster_means).
    eff = np.abs(cluster_means(eigs, cluster)) if cluster > 0 else mod
    cls, unstable, neutral = classify_moduli(eff, tol)
    return StabilityReport(
        eigenvalues=eigs,
        moduli=mod,
        spectral_radius=float(eff.max()) if mod.size else 0.0,
        classification=cls,
        unstable_dims=unstable,
        neutral_dims=neutral,
        residual=float(residual),
        space=space,
        tol=float(tol),
    )


def stability(
    layer: SelfAttentionLayer,
    x: Float[Array, "n d"],
    *,
    t=0,
    tol: float = 1e-6,
    space: Literal["auto", "tangent", "full"] = "auto",
    cluster: float = 1e-3,
) -> StabilityReport:
    r"""Multipliers of ``layer`` at ``x`` by a dense Jacobian and a dense (NumPy, CPU) eigensolver.

    Arguments:
        layer: a `SelfAttentionLayer`.
        x: a fixed point ``(n, d)`` (or near one: see ``residual``).
        t: layer index.
        tol: tolerance on $|\lambda| - 1$ for the classification.
        space: see `tangent_jacobian`.
        cluster: eigenvalues closer than this are averaged before classifying (defective
            multipliers; see `cluster_means`); 0 classifies the raw moduli.

    Returns:
        A `StabilityReport`. Eigenvalues are computed per strongly connected block of the
        token dependency pattern (`block_eigvals`), which is exact for the causal mask's block
        triangular Jacobian.
    """
    x = jnp.asarray(x)
    jac = np.asarray(tangent_jacobian(layer, x, t, space=space), dtype=np.float64)
    residual = float(_residual(layer, x, t))
    eigs = block_eigvals(jac, x.shape[0]) if jac.size else np.zeros(0, complex)
    return _report(eigs, residual, "tangent" if _use_tangent(layer, space) else "full", tol, cluster)


# ||F(x) - x||_F, compiled once per layer structure.
_residual = eqx.filter_jit(equilibrium_residual)


def block_eigvals(jac: np.ndarray, num_tokens: int) -> np.ndarray:
    """Eigenvalues of a token-blocked matrix via its block-triangular (SCC) structure.

    Token ``i``'s output depends on token ``j`` only if ``j`` is reachable from ``i`` in the
    mask, so exact zero blocks appear (the causal Jacobian is block lower triangular). Up to a
    permutation the matrix is block triangular over the strongly connected components of the
    block pattern, and its spectrum is the union of the diagonal blocks' spectra. Computing those
    separately matters here: the non-hyperbolic tokens at $e_d$ carry Jordan blocks of
    eigenvalue 1 (size up to ``d - 1``) whose dense eigenvalues would be perturbed by
    ``eps ** (1 / size)`` (~1e-3 for d = 6) through the coupling with other tokens.
    """
    from scipy.sparse.csgraph import connected_components

    m = jac.shape[0] // num_tokens
    blocks = np.abs(jac).reshape(num_tokens, m, num_tokens, m).max(axis=(1, 3))
    ncomp, labels = connected_components(blocks > 0, directed=True, connection="strong")
    out = []
    for c in range(ncomp):
        idx = np.concatenate([np.arange(i * m, (i + 1) * m) for i in np.nonzero(labels == c)[0]])
        out.append(np.linalg.eigvals(jac[np.ix_(idx, idx)]))
    return np.concatenate(out)


def _jvp_operator(layer, x, t, tangent: bool):
    """The matrix-free map v -> J v (in tangent coordinates when ``tangent``)."""
    f = _layer_map(layer, t)
    n, d = x.shape
    if not tangent:
        return lambda v: jax.jvp(f, (x,), (v.reshape(n, d),))[1].reshape(-1), n * d
    u = _token_bases(x)  # (n, d, d-1): B applied per token, never formed densely

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
