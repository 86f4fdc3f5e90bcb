r"""Singular values of the small token matrices of the collapse metrics, with an accuracy contract.

The collapse metrics need all $k = \min(n, d)$ singular values of every ``(n, d)`` token
matrix at every saved layer: $\sigma_{\max}$, $\sigma_{\min}$, $\sigma_2/\sigma_1$, the
stable rank $\|X\|_F^2/\sigma_{\max}^2$, the numerical rank and the effective rank (which
needs them all). Two backward-stable methods are offered; both work on $X$ itself, never on
the Gram matrix $X X^\top$, whose eigenvalues would lose every singular value below
$\sqrt{\epsilon}\,\sigma_{\max}$ (float32: $3\cdot 10^{-4}\,\sigma_{\max}$):

* ``"lapack"`` (default): LAPACK's divide-and-conquer SVD (``jnp.linalg.svd``) of the
  rescaled matrix. A tall $m \times k$ matrix ($m > k$) is first reduced by a Householder QR
  (``jnp.linalg.qr(mode="r")``, LAPACK ``geqrf``) to its $k \times k$ triangle $R$, whose
  singular values are those of $X$; the SVD is taken of $R$. This is what LAPACK's
  ``gesdd`` does itself for $m \gtrsim 11k/6$, but JAX's CPU wrapper of ``gesdd`` allocates
  an $m \times m$ array for $U$ even when no vectors are asked for: 17 GB at 65,536 tokens,
  which the blocked attention path never otherwise holds. With the QR first, no array larger
  than $m \times k$ exists. Measured on JAX 0.10.2, 2-core CPU: as fast at 64 x 32, 4x
  faster at 768 x 128 and 4096 x 64 than the SVD of $X$ itself.
* ``"bisection"``: plain `jax.numpy` on fixed shapes, so XLA can vectorise it across a batch.
  Golub-Kahan bidiagonalisation $X = U B V^\top$ by Householder reflections ($B$ upper
  bidiagonal, diagonal $q$, superdiagonal $e$), then bisection for every singular value at
  once: the number of singular values of $B$ below $x$ is the number of negative pivots of
  $B^\top B - x^2 I = L D L^\top$, from the differential stationary qd recurrence (Parlett &
  Dhillon 2000)
  $$t_0 = -x^2,\quad d_i = q_i^2 + t_i,\quad t_{i+1} = t_i\, e_i^2 / d_i - x^2,$$
  which is mixed relatively stable. Lane $j$ bisects $[0, \max q + \max e]$ (a Gershgorin
  bound on $\sigma_{\max}$) ``mantissa bits + 2`` times, ending narrower than
  $\epsilon\,\sigma_{\max}$. On XLA:CPU it measured 1.5x (16 x 16) to 8x (32 x 64, batch
  1024) slower than ``"lapack"``: XLA does not vectorise the reduction and the qd recurrence
  well. It is kept as an independent check and for accelerators (not measured there yet).

Both first scale $X$ by a power of two so that $\max_{ij}|X_{ij}| \in [1/2, 1)$ (exact), and
scale the singular values back: tokens of norm $10^{-20}$ in float32, whose squares
underflow, are handled.

**Accuracy contract** (tested in ``tests/test_spectral.py`` for $k = \min(n, d) \le 12$,
checked by hand at 32 x 64, and in ``tests/test_memory_paths.py`` at 4096 x 8 on the QR route,
random and nearly rank-deficient): for a float32 or float64 input, every returned singular value
satisfies
$$|\hat\sigma_i - \sigma_i| \le 8\, k\, \epsilon\, \sigma_{\max},$$
$\epsilon$ the machine epsilon of the input dtype and $\sigma_i$ those of float64 LAPACK (in
practice a few $\epsilon\,\sigma_{\max}$). Values below about $k\,\epsilon\,\sigma_{\max}$
are therefore rounding noise, as for any backward-stable SVD; a zero matrix gives zeros.
"""

from __future__ import annotations

import jax.numpy as jnp
from jax import lax
from jaxtyping import Array, Float

from .._errors import UsageError

__all__ = ["singular_values", "SVD_METHODS"]

#: Values of ``method`` accepted by `singular_values`.
SVD_METHODS = ("lapack", "bisection")

_HI = lax.Precision.HIGHEST


def _householder(x, lead):
    """Unit Householder vector ``v`` and ``|alpha|`` with ``(I - 2 v v^T) x = alpha e_p``.

    ``x`` is zero before index ``p`` (given as the one-hot ``lead``), and so is ``v``.
    """
    nrm = jnp.sqrt(jnp.sum(x * x))
    x0 = jnp.sum(jnp.where(lead, x, 0.0))
    # alpha = -sign(x_p) ||x|| avoids cancellation in v_p = x_p - alpha.
    sign = jnp.where(x0 < 0, -1.0, 1.0).astype(x.dtype)
    v = jnp.where(lead, x + sign * nrm, x)
    vn = jnp.sqrt(2.0 * nrm * (nrm + jnp.abs(x0)))
    # A zero column needs no reflection: v = 0 leaves the matrix as it is.
    return v / jnp.where(vn > 0, vn, 1.0), nrm


def _bidiagonal(a: Float[Array, "m k"]) -> tuple[Array, Array]:
    """Diagonal ``|q|`` (k) and superdiagonal ``|e|`` (k - 1) of the bidiagonal form of ``a``.

    Step j reflects rows j.. of column j onto the diagonal (from the left), then columns j+1..
    of row j onto the superdiagonal (from the right). The reflections act on the whole array:
    the entries they would touch outside the active block are already zero, so no masking of
    the updates is needed, and one ``fori_loop`` body of fixed shape compiles in a second
    (unrolled, the k shrinking shapes took minutes to compile at k = 32).
    """
    m, k = a.shape
    rows, cols = jnp.arange(m), jnp.arange(k)

    def step(j, carry):
        w, q, e = carry
        v, qj = _householder(jnp.where(rows >= j, w[:, j], 0.0), rows == j)
        w = w - 2.0 * v[:, None] * jnp.matmul(v, w, precision=_HI)[None, :]
        u, ej = _householder(jnp.where(cols > j, w[j, :], 0.0), cols == j + 1)
        w = w - 2.0 * jnp.matmul(w, u, precision=_HI)[:, None] * u[None, :]
        return w, q.at[j].set(qj), e.at[j].set(ej)

    zeros = jnp.zeros((k,), a.dtype)
    _, q, e = lax.fori_loop(0, k, step, (a, zeros, zeros))
    return q, e[: k - 1]


def _count_below(q2, e2, x2, pivmin):
    """Number of singular values of the bidiagonal below ``sqrt(x2)`` (per lane of ``x2``)."""
    k = q2.shape[0]
    t = -x2
    count = jnp.zeros(x2.shape, jnp.int32)
    for i in range(k):
        d = q2[i] + t
        # A zero pivot is replaced by a tiny negative one (LAPACK's dlaneg does the same).
        d = jnp.where(jnp.abs(d) < pivmin, -pivmin, d)
        count = count + (d < 0).astype(jnp.int32)
        if i < k - 1:
            t = t * (e2[i] / d) - x2
    return count


def _bisect(q, e):
    """All singular values of the bidiagonal ``(q, e)``, ascending."""
    k, dtype = q.shape[0], q.dtype
    q2, e2 = q * q, e * e
    hi0 = jnp.max(q) + (jnp.max(e) if k > 1 else 0.0)
    lo = jnp.zeros((k,), dtype)
    hi = jnp.full((k,), hi0, dtype)
    # Lane j holds count(lo) <= j < count(hi): it brackets the (j+1)-th smallest value.
    j = jnp.arange(k, dtype=jnp.int32)
    finfo = jnp.finfo(dtype)
    pivmin = jnp.asarray(finfo.tiny, dtype) * jnp.maximum(1.0, jnp.max(e2) if k > 1 else 1.0)

    def step(_, lohi):
        lo, hi = lohi
        mid = 0.5 * (lo + hi)
        above = _count_below(q2, e2, mid * mid, pivmin) > j
        return jnp.where(above, lo, mid), jnp.where(above, mid, hi)

    lo, hi = lax.fori_loop(0, finfo.nmant + 2, step, (lo, hi))
    return 0.5 * (lo + hi)


def _pow2_scale(x):
    """The power of two ``2^e`` with ``max |x| / 2^e`` in ``[0.5, 1)`` (1 for a zero matrix)."""
    _, expo = jnp.frexp(jnp.max(jnp.abs(x)))
    return jnp.ldexp(jnp.ones((), x.dtype), expo)


def singular_values(x: Float[Array, "n d"], *, method: str = "lapack") -> Float[Array, " k"]:
    r"""All singular values of one token matrix, descending, ``k = min(n, d)``.

    $X = U \operatorname{diag}(\sigma) V^\top$, computed by a backward-stable method (see the
    module docstring) with $|\hat\sigma_i - \sigma_i| \le 8 k \epsilon \sigma_{\max}$. Not
    differentiable by design of use (metrics); differentiate `jnp.linalg.svd` instead.

    Arguments:
        x: a real floating ``(n, d)`` matrix; ``vmap`` over batch axes.
        method: ``"lapack"`` (LAPACK SVD; fastest on CPU) or ``"bisection"``
            (vectorisable bidiagonalisation and bisection in `jax.numpy`).

    Returns:
        The ``min(n, d)`` singular values, descending, in the dtype of ``x``.

    Raises:
        ValueError: if ``x`` is not a 2-D real floating array, or ``method`` is unknown.
    """
    x = jnp.asarray(x)
    if x.ndim != 2 or not jnp.issubdtype(x.dtype, jnp.floating):
        raise UsageError(
            f"singular_values expects one real floating (n, d) matrix, got shape {x.shape} and dtype "
            f"{x.dtype}; vmap it over leading batch axes and cast integers to float."
        )
    if method not in SVD_METHODS:
        raise UsageError(f"method must be one of {SVD_METHODS}, got {method!r}.")
    if min(x.shape) == 0:
        return jnp.zeros((0,), x.dtype)
    a = x if x.shape[0] >= x.shape[1] else x.T  # (m, k) with m >= k
    scale = _pow2_scale(a)
    a = a / scale  # exact: a power of two
    if method == "lapack":
        if a.shape[0] > a.shape[1]:
            # R of a Householder QR has the singular values of a (backward stable, as
            # gesdd's own QR step); it keeps JAX's gesdd from allocating an m x m U.
            a = jnp.linalg.qr(a, mode="r")
        s = jnp.linalg.svd(a, compute_uv=False)
    else:
        q, e = _bidiagonal(a)
        s = _bisect(q, e)[::-1]
    return s * scale
