r"""Batched re-orthonormalisation of tangent vectors for the QR (Benettin) method: $Y = QR$.

CholeskyQR2 first (matrix products and k x k factorisations), Householder for a chunk where it
lost orthogonality.
"""

from __future__ import annotations

import jax.numpy as jnp
from jax import lax

__all__ = ["orthonormalise"]


def _cholesky_qr2(y):
    r"""CholeskyQR2 of a batch ``(c, m, k)``: $Y = QR$ from two Cholesky factorisations of Gram matrices.

    $R_1^\top R_1 = Y^\top Y$, $Q_1 = Y R_1^{-1}$, then the same on $Q_1$ (the second pass restores
    orthogonality to rounding when $\kappa(Y) \lesssim u^{-1/2}$). Matrix products and k x k
    factorisations only: on XLA:CPU this is ~500x cheaper than ``jnp.linalg.qr`` for m = 2048, k = 64.
    Returns ``(Q, |diag R|, orthogonality error)``; the error is NaN or large when it failed.
    """
    hi = lax.Precision.HIGHEST

    def step(a):
        g = jnp.einsum("cmi,cmj->cij", a, a, precision=hi)
        low = jnp.linalg.cholesky(g)
        # a = q r with r = low^T: q^T = low^{-1} a^T (one triangular solve).
        qt = lax.linalg.triangular_solve(low, jnp.swapaxes(a, 1, 2), left_side=True, lower=True)
        return jnp.swapaxes(qt, 1, 2), jnp.abs(jnp.diagonal(low, axis1=1, axis2=2))

    q1, d1 = step(y)
    q, d2 = step(q1)
    k = y.shape[-1]
    err = jnp.max(
        jnp.abs(jnp.einsum("cmi,cmj->cij", q, q, precision=hi) - jnp.eye(k, dtype=y.dtype)[None]), axis=(1, 2)
    )
    return q, d1 * d2, err


def _householder_qr(y):
    q, r = jnp.linalg.qr(y)
    return q, jnp.abs(jnp.diagonal(r, axis1=1, axis2=2))


def orthonormalise(y):
    r"""Batched QR ``(c, m, k) -> (Q, |diag R|)``: CholeskyQR2, or Householder for the whole chunk
    when CholeskyQR2 lost orthogonality in any member (ill-conditioned tangent vectors, e.g. a
    direction contracted by $e^{-40}$ in one layer). The branch is a real ``lax.cond`` (its
    predicate is not batched), so the cheap path costs nothing extra when it succeeds.
    """
    q, diag, err = _cholesky_qr2(y)
    tol = 64 * jnp.finfo(y.dtype).eps * y.shape[-1]
    ok = jnp.all(err <= tol)  # NaN (a failed Cholesky) compares False
    return lax.cond(ok, lambda: (q, diag), lambda: _householder_qr(y))
