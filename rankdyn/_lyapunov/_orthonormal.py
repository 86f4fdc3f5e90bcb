r"""Batched re-orthonormalisation of tangent vectors for the QR (Benettin) method: $Y = QR$.

CholeskyQR2 first (Gram matrices, k x k factorisations and matrix products only), Householder
for a chunk where it failed.

Yamamoto, Nakatsukasa, Yanagisawa and Fukaya, "Roundoff error analysis of the CholeskyQR2
algorithm" (ETNA 44, 2015), abstract: for one Cholesky QR pass "the deviation from orthogonality
of the computed Q factor is of order $O((\kappa_2(X))^2 u)$", and iterated twice, "if
$\kappa_2(X)$ is at most $O(u^{-1/2})$, both the residual and deviation from orthogonality are
shown to be of order $O(u)$".
"""

from __future__ import annotations

import jax.numpy as jnp
from jax import lax

__all__ = ["orthonormalise"]

#: The first pass is accepted when $\|Q_1^\top Q_1 - I\|_F^2 \le$ this, i.e. $\kappa_2(Q_1)^2 \le 3$:
#: the second pass then factors a matrix of condition <= sqrt(3), so its Q is orthonormal to O(u).
FIRST_PASS_TOL_SQ = 0.25


def _lower_inverse(low):
    r"""$L^{-1}$ for a batch ``(c, k, k)`` of lower triangular matrices, by matrix products only.

    Diagonal blocks double in size level by level (k padded with the identity to a power of
    two): $\begin{pmatrix} A & 0 \\ C & D \end{pmatrix}^{-1} = \begin{pmatrix} A^{-1} & 0 \\
    -D^{-1} C A^{-1} & D^{-1} \end{pmatrix}$, every block pair of a level in one batched product.
    Why not ``lax.linalg.triangular_solve``: on XLA:CPU it calls the LAPACK that scipy bundles
    (OpenBLAS), whose own thread pool competes with XLA's: on 2 loaded cores it is hundreds of
    times slower than one OpenBLAS thread (measured: benchmarks/README.md).
    """
    hi = lax.Precision.HIGHEST
    c, k, _ = low.shape
    size = 1 << max(0, (k - 1).bit_length())
    if size > k:
        eye = jnp.eye(size, dtype=low.dtype)[None, k:, k:]
        low = jnp.pad(low, ((0, 0), (0, size - k), (0, size - k))) + jnp.pad(eye, ((0, 0), (k, 0), (k, 0)))
    inv = (1 / jnp.diagonal(low, axis1=1, axis2=2)).reshape(c, size, 1, 1)
    b = 1
    while b < size:
        nb = size // (2 * b)
        # The (2b, 2b) diagonal blocks of L; C is the lower left (b, b) block of each.
        diag = jnp.diagonal(low.reshape(c, nb, 2 * b, nb, 2 * b), axis1=1, axis2=3)
        lower_left = jnp.moveaxis(diag, -1, 1)[:, :, b:, :b]
        pairs = inv.reshape(c, nb, 2, b, b)
        a_inv, d_inv = pairs[:, :, 0], pairs[:, :, 1]
        off = -jnp.matmul(jnp.matmul(d_inv, lower_left, precision=hi), a_inv, precision=hi)
        top = jnp.concatenate([a_inv, jnp.zeros_like(a_inv)], axis=-1)
        inv = jnp.concatenate([top, jnp.concatenate([off, d_inv], axis=-1)], axis=-2)
        b *= 2
    return inv[:, 0, :k, :k]


def _cholesky_pass(a):
    r"""One Cholesky QR pass of a batch ``(c, m, k)``: $G = A^\top A = L L^\top$, $Q = A L^{-\top}$.

    $L^{-1}$ is formed once per member (`_lower_inverse`) and applied as a matrix product; the
    second pass makes up for the explicit inverse. Returns ``(Q, diag L, G)``.
    """
    hi = lax.Precision.HIGHEST
    g = jnp.einsum("cmi,cmj->cij", a, a, precision=hi)
    low = jnp.linalg.cholesky(g)
    inv = _lower_inverse(low)
    return jnp.einsum("cmi,cji->cmj", a, inv, precision=hi), jnp.diagonal(low, axis1=1, axis2=2), g


def _cholesky_qr2(y):
    r"""CholeskyQR2 of a batch ``(c, m, k)``: ``(Q, |diag R|, ok)``, $R = R_2 R_1$.

    The Gram matrix of the second pass is $Q_1^\top Q_1$, so the first pass's loss of
    orthogonality comes for free: ``ok`` says it was at most `FIRST_PASS_TOL_SQ` (and finite)
    in every member, which is when the result is orthonormal to O(u) (module docstring).
    A failed Cholesky factorisation (NaN) is not ok.
    """
    q1, d1, _ = _cholesky_pass(y)
    q, d2, g2 = _cholesky_pass(q1)
    off = jnp.sum((g2 - jnp.eye(y.shape[-1], dtype=y.dtype)[None]) ** 2, axis=(1, 2))
    # diag(R_2 R_1) = diag(R_2) diag(R_1) for upper triangular factors.
    return q, jnp.abs(d1 * d2), jnp.all(off <= FIRST_PASS_TOL_SQ)  # NaN compares False


def _householder_qr(y):
    q, r = jnp.linalg.qr(y)
    return q, jnp.abs(jnp.diagonal(r, axis1=1, axis2=2))


def orthonormalise(y):
    r"""Batched QR ``(c, m, k) -> (Q, |diag R|, fell_back)``.

    CholeskyQR2; Householder for the whole chunk when it failed in any member (tangent vectors with
    $\kappa_2 \gtrsim u^{-1/2}$, e.g. a random start in a spectrum that spans $e^{\pm 10}$ per step,
    or Gram entries that under/overflow). The branch is a real ``lax.cond`` (its predicate is not
    batched), so the cheap path costs nothing extra when it succeeds; ``fell_back`` says which
    branch ran (the adaptive QR interval restarts from one step after a fallback).
    """
    # Householder needs fewer flops for k > m / 4 (about 4 m k^2 - 4 k^3 / 3 with an explicit Q,
    # against 8 m k^2, half the time at m = 2048, k = 2016 on one core), but XLA:CPU runs it in
    # the LAPACK scipy bundles, whose threads fight XLA's (an order of magnitude behind PyTorch at
    # 4 x (2048 x 64); measured: benchmarks/README.md): CholeskyQR2 stays first for every k.
    q, diag, ok = _cholesky_qr2(y)
    q, diag = lax.cond(ok, lambda: (q, diag), lambda: _householder_qr(y))
    return q, diag, ~ok
