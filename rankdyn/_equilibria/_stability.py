r"""Linear stability of fixed points of one layer map on the product of spheres.

For the post-LN map $F(X) = \mathrm{LN}(A(X) X W_V)$ (eq. 3) the state space is
$(\mathbb S^{d-1})^n$. At a fixed point $X^* = F(X^*)$ the multipliers are the eigenvalues of

$$J_T = B^\top\, DF(X^*)\, B,\qquad B = \mathrm{blockdiag}(B_1,\dots,B_n),\quad
B_i \in \mathbb R^{d\times(d-1)},\ B_i^\top B_i = I,\ B_i^\top X^*_i = 0,$$

the Jacobian restricted to the tangent space (`rankdyn._equilibria._linearise`). All
$|\lambda| < 1$ means linearly stable, one $|\lambda| > 1$ unstable (a saddle or a source);
$|\lambda| = 1$ (non-hyperbolic) is "marginal", which all the paper's equilibria have because
the first token converges only algebraically (`docs/theory.md#stability`).

`multipliers` is the jittable core (``jax.jit``/``jax.vmap`` over points; the token blocks come
from the concrete mask as a static argument); `stability` wraps it into host-side reports.
"""

from __future__ import annotations

import dataclasses
from typing import Literal

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Complex, Float, Int

from .._errors import UsageError
from .._model._layer import SelfAttentionLayer
from ._linearise import _use_tangent, tangent_jacobian
from ._solve import equilibrium_residual

__all__ = [
    "StabilityReport",
    "Multipliers",
    "multipliers",
    "stability",
    "token_blocks",
    "classify_moduli",
    "block_eigvals",
    "cluster_means",
]

CLASSES = ("stable", "marginal", "unstable")


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
    """Linearisation of one layer map at a point, or at a batch of points (host-side NumPy arrays).

    For a batch ``(*batch, n, d)`` every per-point field has the batch axes in front (the
    classification is an array of strings); ``report[i]`` is the report of one point. A report is
    not a sequence: iterating over it is refused.

    Attributes:
        eigenvalues: complex multipliers, sorted by decreasing modulus.
        moduli: their raw moduli (classification uses cluster-averaged ones, see `cluster_means`).
        spectral_radius: the largest (cluster-averaged) modulus.
        classification: ``"stable"`` (all |lambda| < 1 - tol), ``"unstable"`` (some
            |lambda| > 1 + tol) or ``"marginal"`` (none outside, some within tol of 1).
        unstable_dims: number of expanding directions, #{|lambda| > 1 + tol}.
        neutral_dims: number of neutral directions, #{| |lambda| - 1 | <= tol} (non-hyperbolic
            tokens and symmetry directions).
        residual: $\\|F(x) - x\\|_F$ (the multipliers mean something only when this is small).
        space: ``"tangent"`` or ``"full"``.
        tol: the tolerance used.
    """

    eigenvalues: np.ndarray
    moduli: np.ndarray
    spectral_radius: float | np.ndarray
    classification: str | np.ndarray
    unstable_dims: int | np.ndarray
    neutral_dims: int | np.ndarray
    residual: float | np.ndarray
    space: str
    tol: float

    @property
    def batch_shape(self) -> tuple[int, ...]:
        """The batch axes, ``()`` for one point."""
        return np.shape(self.residual)

    def __getitem__(self, index) -> StabilityReport:
        """The report of the points at ``index`` along the batch axes (one point for an integer)."""
        if not self.batch_shape:
            raise TypeError("a report of one point has no batch axes to index.")

        def pick(a):
            a = np.asarray(a)[index]
            return a.item() if a.ndim == 0 else a

        return StabilityReport(
            eigenvalues=np.asarray(self.eigenvalues)[index],
            moduli=np.asarray(self.moduli)[index],
            spectral_radius=pick(self.spectral_radius),
            classification=pick(self.classification),
            unstable_dims=pick(self.unstable_dims),
            neutral_dims=pick(self.neutral_dims),
            residual=pick(self.residual),
            space=self.space,
            tol=self.tol,
        )

    def __iter__(self):
        # Without this, Python would iterate through __getitem__ (the sequence protocol) silently.
        raise TypeError(
            "a StabilityReport is not a sequence: read its array fields (batch axes first), or "
            "report[i] for one point."
        )

    def to_dict(self) -> dict:
        """JSON-ready dict (eigenvalues as ``[re, im]`` pairs; nested lists for a batch)."""
        if self.batch_shape:
            eig = np.asarray(self.eigenvalues)
            return {
                "eigenvalues": np.stack([eig.real, eig.imag], axis=-1).tolist(),
                "moduli": np.asarray(self.moduli, float).tolist(),
                "spectral_radius": np.asarray(self.spectral_radius, float).tolist(),
                "classification": np.asarray(self.classification).tolist(),
                "unstable_dims": np.asarray(self.unstable_dims).tolist(),
                "neutral_dims": np.asarray(self.neutral_dims).tolist(),
                "residual": np.asarray(self.residual, float).tolist(),
                "space": self.space,
                "tol": self.tol,
            }
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


def token_blocks(layer: SelfAttentionLayer) -> tuple[tuple[int, ...], ...]:
    """Strongly connected components of the token dependency graph (from the concrete mask).

    Token ``i``'s output depends on token ``j`` only if ``M[i, j]``, so the Jacobian is block
    triangular over these components up to a permutation, and its spectrum is the union of the
    diagonal blocks' spectra (see `block_eigvals`). The causal mask gives one block per token.
    """
    from scipy.sparse.csgraph import connected_components

    mask = np.asarray(layer.mask)
    ncomp, labels = connected_components(mask, directed=True, connection="strong")
    return tuple(tuple(int(i) for i in np.nonzero(labels == c)[0]) for c in range(ncomp))


class Multipliers(eqx.Module):
    """The jittable part of a stability analysis (arrays; batch axes in front under ``vmap``).

    Attributes:
        eigenvalues: multipliers sorted by decreasing modulus.
        moduli: their raw moduli.
        spectral_radius: the largest cluster-averaged modulus (`cluster_means`).
        code: 0 stable, 1 marginal, 2 unstable (index into ``CLASSES``).
        unstable_dims: #{cluster-averaged |lambda| > 1 + tol}.
        neutral_dims: #{| cluster-averaged |lambda| - 1 | <= tol}.
        residual: $\\|F(X) - X\\|_F$.
    """

    eigenvalues: Complex[Array, "*batch m"]
    moduli: Float[Array, "*batch m"]
    spectral_radius: Float[Array, "*batch"]
    code: Int[Array, "*batch"]
    unstable_dims: Int[Array, "*batch"]
    neutral_dims: Int[Array, "*batch"]
    residual: Float[Array, "*batch"]


def _cluster_means(eigs, radius):
    """Jittable `cluster_means`: single-linkage labels by min-propagation, then cluster means."""
    k = eigs.shape[0]
    near = jnp.abs(eigs[:, None] - eigs[None, :]) <= radius

    def spread(_, labels):
        return jnp.min(jnp.where(near, labels[None, :], k), axis=1)

    labels = jax.lax.fori_loop(0, k, spread, jnp.arange(k))
    same = (labels[:, None] == labels[None, :]).astype(eigs.dtype)
    return (same @ eigs) / jnp.sum(same, axis=1)


def multipliers(
    layer: SelfAttentionLayer,
    x: Float[Array, "n d"],
    *,
    t=0,
    tol: float = 1e-6,
    space: Literal["auto", "tangent", "full"] = "auto",
    cluster: float = 1e-3,
    blocks: tuple[tuple[int, ...], ...] | None = None,
) -> Multipliers:
    r"""Multipliers of ``layer`` at ``x`` and their classification, as arrays (jittable, vmappable).

    Eigenvalues are computed per strongly connected token block (``blocks``, default
    `token_blocks` of the concrete mask; one dense block when the mask is traced), which is
    exact for block triangular Jacobians and keeps the defective multiplier 1 of the paper's
    equilibria from being spread by the coupling to other tokens. Classification uses
    cluster-averaged moduli (`cluster_means`). ``jnp.linalg.eig`` runs on CPU backends.
    """
    x = jnp.asarray(x)
    n, d = x.shape
    tangent = _use_tangent(layer, space)
    if blocks is None:
        blocks = (tuple(range(n)),) if isinstance(layer.mask, jax.core.Tracer) else token_blocks(layer)
    m = d - 1 if tangent else d
    jac = tangent_jacobian(layer, x, t, space=space)
    # Blocks of equal size share one batched eigen-decomposition.
    eigs = []
    for size in sorted({len(b) for b in blocks}):
        tok = np.array([b for b in blocks if len(b) == size])  # (nb, size)
        idx = (tok[:, :, None] * m + np.arange(m)).reshape(len(tok), size * m)
        sub = jac[idx[:, :, None], idx[:, None, :]]
        eigs.append(jnp.linalg.eigvals(sub).reshape(-1))
    eig = jnp.concatenate(eigs)
    mod = jnp.abs(eig)
    order = jnp.argsort(-mod, stable=True)
    eig, mod = eig[order], mod[order]
    eff = jnp.abs(_cluster_means(eig, cluster)) if cluster > 0 else mod
    unstable = jnp.sum(eff > 1 + tol).astype(jnp.int32)
    neutral = jnp.sum(jnp.abs(eff - 1) <= tol).astype(jnp.int32)
    code = jnp.where(unstable > 0, 2, jnp.where(neutral > 0, 1, 0)).astype(jnp.int32)
    return Multipliers(
        eigenvalues=eig,
        moduli=mod,
        spectral_radius=jnp.max(eff),
        code=code,
        unstable_dims=unstable,
        neutral_dims=neutral,
        residual=equilibrium_residual(layer, x, t),
    )


def stability(
    layer: SelfAttentionLayer,
    x: Float[ArrayLike, "*batch n d"],
    *,
    t=0,
    tol: float = 1e-6,
    space: Literal["auto", "tangent", "full"] = "auto",
    cluster: float = 1e-3,
) -> StabilityReport:
    r"""Multipliers of ``layer`` at ``x`` (one point, or a batch in one compiled program).

    Arguments:
        layer: a `SelfAttentionLayer`.
        x: a fixed point ``(n, d)`` (or near one: see ``residual``), or a batch ``(*batch, n, d)``.
        t: layer index.
        tol: tolerance on $|\lambda| - 1$ for the classification.
        space: see `tangent_jacobian`.
        cluster: eigenvalues closer than this are averaged before classifying (defective
            multipliers; see `cluster_means`); 0 classifies the raw moduli.

    Returns:
        One `StabilityReport`; for a batch its fields have the batch axes in front.

    Raises:
        ValueError: if ``x`` is not ``(*batch, n, d)`` for this layer.
    """
    x = jnp.asarray(x)
    n, d = layer.num_tokens, layer.dim
    if x.ndim < 2 or x.shape[-2:] != (n, d):
        raise UsageError(f"x must be (n, d) = ({n}, {d}) or a batch (*batch, {n}, {d}), got shape {x.shape}.")
    blocks = token_blocks(layer)
    space_name = "tangent" if _use_tangent(layer, space) else "full"
    opts = dict(t=t, tol=float(tol), space=space, cluster=float(cluster), blocks=blocks)
    if x.ndim == 2:
        return _report(jax.tree.map(np.asarray, _one(layer, x, opts)), space_name, tol)
    batch = x.shape[:-2]
    out = jax.tree.map(np.asarray, _many(layer, x.reshape((-1, n, d)), opts))
    out = jax.tree.map(lambda a: a.reshape(batch + a.shape[1:]), out)
    return _batched_report(out, space_name, tol)


@eqx.filter_jit
def _one(layer, x, opts):
    with jax.default_matmul_precision("highest"):
        return multipliers(layer, x, **opts)


@eqx.filter_jit
def _many(layer, xs, opts):
    with jax.default_matmul_precision("highest"):
        return jax.vmap(lambda x: multipliers(layer, x, **opts))(xs)


def _batched_report(mp: Multipliers, space: str, tol: float) -> StabilityReport:
    empty = mp.moduli.shape[-1] == 0
    return StabilityReport(
        eigenvalues=np.asarray(mp.eigenvalues),
        moduli=np.asarray(mp.moduli),
        spectral_radius=np.zeros(mp.code.shape) if empty else np.asarray(mp.spectral_radius, float),
        classification=np.asarray(CLASSES)[np.asarray(mp.code)],
        unstable_dims=np.asarray(mp.unstable_dims, int),
        neutral_dims=np.asarray(mp.neutral_dims, int),
        residual=np.asarray(mp.residual, float),
        space=space,
        tol=float(tol),
    )


def _report(mp: Multipliers, space: str, tol: float) -> StabilityReport:
    return StabilityReport(
        eigenvalues=np.asarray(mp.eigenvalues),
        moduli=np.asarray(mp.moduli),
        spectral_radius=float(mp.spectral_radius) if mp.moduli.size else 0.0,
        classification=CLASSES[int(mp.code)],
        unstable_dims=int(mp.unstable_dims),
        neutral_dims=int(mp.neutral_dims),
        residual=float(mp.residual),
        space=space,
        tol=float(tol),
    )


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
