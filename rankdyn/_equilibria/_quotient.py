r"""Continuous symmetries of one layer map: rotations that commute with it, and their orbit directions.

A rotation $R = e^{t\Omega}$ ($\Omega^\top = -\Omega$, tokens are rows) with $F(XR) = F(X)R$ maps an
equilibrium to a circle (or torus) of equilibria, so the multiplier $+1$ appears identically
along every branch, with eigenvectors $X\Omega$ (differentiate $F(Xe^{t\Omega}) = Xe^{t\Omega}$
at $t = 0$). Under uniform attention with an orthogonal $W_V$, for instance, every $\Omega$ that
commutes with $W_V$ qualifies. Differentiating the symmetry at $t = 0$ gives a condition linear in
$\Omega$,

$$DF(X)[X\Omega] - F(X)\,\Omega = 0 \quad\text{for every } X,$$

which `commuting_rotations` imposes at a few random points of the sphere product (a generic
point suffices; three guard against coincidences) and solves by an SVD over the basis
$E_{ab} - E_{ba}$ of $\mathfrak{so}(d)$. `orbit_complement` then gives an orthonormal basis $Q$ of
the complement of the orbit directions in the tangent coordinates at an equilibrium: the
continuation solves and the multipliers live on that slice.
Discrete symmetries (token permutations, $X \mapsto -X$) are not quotiented: they make
pitchforks generic, which the branch-point test detects.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np

from .._model._layer import SelfAttentionLayer

__all__ = ["commuting_rotations", "orbit_complement", "MAX_ROTATION_DIM"]

#: Above this token dimension the search for commuting rotations (d (d - 1) / 2 JVPs per point)
#: is skipped: trained layers have no such symmetry, and the generic case has none either.
MAX_ROTATION_DIM = 16


@eqx.filter_jit
def _defects(layer, x, gens, t):
    """``DF(X)[X Omega_j] - F(X) Omega_j`` for every generator (vmapped JVPs)."""
    f = lambda y: layer(y, t)[0]
    with jax.default_matmul_precision("highest"):
        fx = f(x)

        def one(om):
            return (jax.jvp(f, (x,), (x @ om,))[1] - fx @ om).reshape(-1)

        return jax.vmap(one)(gens)


def commuting_rotations(
    layer: SelfAttentionLayer, *, t: int = 0, points: int = 3, key=None, rtol: float = 1e-8
) -> np.ndarray:
    r"""Skew-symmetric generators $\Omega$ of the rotations $R$ with $F(XR) = F(X)R$.

    The null space, over $\Omega = \sum_{a<b} c_{ab}(E_{ab} - E_{ba})/\sqrt2$, of the stacked
    linear maps $\Omega \mapsto DF(X_r)[X_r\Omega] - F(X_r)\Omega$ at ``points`` random $X_r$.

    Arguments:
        layer: a `SelfAttentionLayer`; ``t``: the layer index of a per-layer stack.
        points: random points of the sphere product at which the linear condition is imposed.
        key: PRNG key of those points (default ``key(0)``).
        rtol: singular values below ``rtol`` times the largest (or times 1) count as zero.

    Returns:
        ``(s, d, d)`` orthonormal (Frobenius) skew generators; ``s = 0`` when there is none, or when
        ``d > MAX_ROTATION_DIM`` (not searched).
    """
    d = layer.dim
    if d < 2 or d > MAX_ROTATION_DIM:
        return np.zeros((0, d, d))
    dt = layer.weights.w_v.dtype
    pairs = [(a, b) for a in range(d) for b in range(a + 1, d)]
    basis = np.zeros((len(pairs), d, d))
    for j, (a, b) in enumerate(pairs):
        basis[j, a, b], basis[j, b, a] = 1 / np.sqrt(2), -1 / np.sqrt(2)
    key = jr.key(0) if key is None else key
    rows = []
    for k in jr.split(key, points):
        x = jr.normal(k, (layer.num_tokens, d), dt)
        x = x / jnp.linalg.norm(x, axis=-1, keepdims=True)
        rows.append(np.asarray(_defects(layer, x, jnp.asarray(basis, dt), t), dtype=np.float64).T)
    mat = np.concatenate(rows, axis=0)  # (points * n * d, #generators)
    _, sv, vt = np.linalg.svd(mat, full_matrices=True)
    scale = max(1.0, float(sv[0]) if sv.size else 1.0)
    sv = np.concatenate([sv, np.zeros(vt.shape[0] - sv.size)])
    null = vt[sv <= rtol * scale]
    return np.einsum("sj,jab->sab", null, basis)


def orbit_complement(
    x: np.ndarray, basis: np.ndarray, generators: np.ndarray, rtol: float = 1e-8
) -> tuple[np.ndarray, int]:
    r"""Orthonormal basis $Q$ of the tangent coordinates orthogonal to the symmetry orbit at ``x``.

    The orbit directions are $B^\top \mathrm{vec}(X\Omega_j)$ (``basis`` $= B$, ``(n d, m)``); their
    span has dimension ``s'`` (smaller than the number of generators where ``x`` is fixed by
    some rotations, e.g. a rank-1 point).

    Returns:
        ``(Q (m, m - s'), s')``; ``Q = I`` and ``s' = 0`` without generators.
    """
    m = basis.shape[1]
    if generators.shape[0] == 0:
        return np.eye(m), 0
    orbit = basis.T @ np.stack([(x @ om).reshape(-1) for om in generators], axis=1)  # (m, s)
    u, sv, _ = np.linalg.svd(orbit, full_matrices=True)
    s = int(np.sum(sv > rtol * max(1.0, float(sv[0]))))
    return u[:, s:], s
