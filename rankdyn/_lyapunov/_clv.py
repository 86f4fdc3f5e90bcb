r"""Covariant Lyapunov vectors by Ginelli's algorithm, batched over trajectories with ``vmap``.

Ginelli, Poggi, Turchi, Chaté, Livi and Politi, "Characterizing dynamics with covariant Lyapunov
vectors", Phys. Rev. Lett. 99, 130601 (2007). For a map with Jacobians $J_t = Df_t(x_t)$:

1. **Forward** (the QR method of `rankdyn._lyapunov._qr`, one factorisation per step):
   $J_t Q_t = Q_{t+1} R_{t+1}$, $Q_t \in \mathbb R^{m\times k}$ orthonormal, $R_{t+1}$ upper
   triangular with a positive diagonal. The first ``discard`` steps bring $Q_t$ onto the
   backward Lyapunov (Gram-Schmidt) vectors; then $Q_t$ and $R_{t+1}$ are stored for the
   ``num_steps`` recorded steps, and $R_{t+1}$ alone for ``discard_backward`` more steps.
2. **Backward**: from a random upper-triangular $C$ at the end,
   $C_t = R_{t+1}^{-1} C_{t+1} D_t^{-1}$ with $D_t$ the diagonal of column norms (each column
   normalised). Over the ``discard_backward`` steps $C$ converges, column $j$ to the
   coefficients of the $j$-th covariant vector in the basis $Q_t$ (the backward iteration
   contracts the faster directions away, as the forward one does the slower ones).
3. The covariant vectors are $V_t = Q_t C_t$ (unit columns). They are covariant,
   $J_t V_t = V_{t+1}\,\mathrm{diag}(\gamma_t)$ column by column, and
   $\frac1T\sum_t \log\gamma_{t,j} \to \lambda_j$.

Upper triangular $C$ keeps span of the first $j$ covariant vectors equal to span of the first
$j$ columns of $Q_t$: the unstable subspace (exponents $> 0$) is $\mathrm{span}\,Q_t[:, :u]$.
The smallest principal angle $\theta_t$ between it and the span of the other $k - u$ vectors
is ``atan2`` of $\sigma_{\min}((I - Q_u Q_u^\top) Q_s)$ and $\sigma_{\max}(Q_u^\top Q_s)$ (its
sine and cosine; $Q_s$ an orthonormal basis of the stable span), accurate at small angles,
which are what matters: $\theta_t \to 0$ marks a tangency (a loss of hyperbolicity).
Memory: $Q_t$ and $V_t$ ($2 T m k$ numbers per trajectory of a chunk) and $R_t$
($(T + T_b) k^2$), counted before compute (`rankdyn._lyapunov._budget.check_clv_memory`).
"""

from __future__ import annotations

from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
from jax import lax

from .._errors import UsageError
from .._run._interrupt import check_interrupt
from ._clv_result import CovariantVectors
from ._orthonormal import _lower_inverse, orthonormalise
from ._result import FLAG_NONFINITE, FLAG_UNDERFLOW

__all__ = ["ginelli", "subspace_angles", "check_clv_counts", "assemble_clv"]

_HI = lax.Precision.HIGHEST


def check_clv_counts(num_steps, k, dim: int, discard, discard_backward, num_unstable, what="num_steps"):
    """The depths and ``k`` of a covariant-vector run as the method allows, or a `UsageError`."""

    def count(v, name, low):
        if not isinstance(v, (int, np.integer)) or isinstance(v, bool) or v < low:
            raise UsageError(f"{name} must be an integer >= {low}, got {v!r}.")

    count(num_steps, what, 1)
    count(discard, "discard", 0)
    count(discard_backward, "discard_backward", 0)
    if not isinstance(k, (int, np.integer)) or isinstance(k, bool) or not 1 <= k <= dim:
        raise UsageError(
            f"k (the number of covariant vectors) must be an integer in [1, {dim}] (the dimension of the "
            f"tangent space), got {k!r}; e.g. k={min(dim, 4)}."
        )
    if num_unstable is not None:
        if not isinstance(num_unstable, (int, np.integer)) or isinstance(num_unstable, bool):
            raise UsageError(f"num_unstable must be None or an integer in [0, k], got {num_unstable!r}.")
        if not 0 <= num_unstable <= k:
            raise UsageError(f"num_unstable must be in [0, k={k}], got {num_unstable}.")


def _upper_inverse(r):
    """$R^{-1}$ of a batch ``(c, k, k)`` of upper triangular matrices: $(R^\\top)^{-1}$ transposed,
    by `_orthonormal._lower_inverse` (matrix products only)."""
    return jnp.swapaxes(_lower_inverse(jnp.swapaxes(r, 1, 2)), 1, 2)


def _forward(steps, project, carry, ts, keep: tuple[bool, bool], count: bool):
    r"""``len(ts)`` forward QR steps of a chunk: $J_t Q_t = Q_{t+1} R_{t+1}$.

    Stores ``(x_t, Q_t)`` when ``keep[0]`` and $R_{t+1}$ when ``keep[1]``; adds
    $\log R_{t+1,ii}$ to the sums when ``count``. $R = Q^\top Y$ (upper triangular up to
    rounding, its lower part dropped): `orthonormalise` returns $Q$ and $|\mathrm{diag}\,R|$ only.
    """
    tiny = jnp.finfo(carry[1].dtype).tiny

    def body(c, t):
        x, q, sums, flags = c
        x1, y = steps(x, q, t)
        y = lax.optimization_barrier(project(x1, y))  # as in _qr._piece: keeps the Gram a matmul
        q1, diag, _ = orthonormalise(y)
        r = jnp.triu(jnp.einsum("cmi,cmj->cij", q1, y, precision=_HI))
        finite = jnp.all(jnp.isfinite(r), axis=(1, 2)) & jnp.all(jnp.isfinite(x1.reshape(x1.shape[0], -1)), 1)
        flags = (
            flags
            | jnp.where(finite, 0, FLAG_NONFINITE)
            | jnp.where(jnp.any(diag < tiny, 1), FLAG_UNDERFLOW, 0)
        )
        if count:
            sums = sums + jnp.log(jnp.maximum(diag, tiny))
        out = ((x, q) if keep[0] else ()) + ((r,) if keep[1] else ())
        return (x1, q1, sums, flags), out

    return lax.scan(body, carry, ts)


def _backward_step(c, r):
    r"""$C \leftarrow R^{-1} C$, columns normalised; returns the log of the norms (the
    backward growth, $-\log\gamma$ of the covariance factors)."""
    c = jnp.einsum("cij,cjl->cil", _upper_inverse(r), c, precision=_HI)
    norms = jnp.linalg.norm(c, axis=1, keepdims=True)
    return c / norms, jnp.log(norms[:, 0])


@eqx.filter_jit
def _chunk(propagate, init_q, x0, key, index, k: int, num_steps: int, discard: int, discard_backward: int):
    """Ginelli's algorithm for one chunk ``x0`` ``(c, *state)``: ``(states, vectors, exps, flags)``."""
    steps = jax.vmap(propagate, in_axes=(0, 0, None))
    project = jax.vmap(propagate.project)
    c, dtype = x0.shape[0], x0.dtype
    key_q, key_c = jr.split(key)
    with jax.default_matmul_precision("highest"):
        keys = jax.vmap(lambda i: jr.fold_in(key_q, i))(index)
        q0 = orthonormalise(jax.vmap(init_q)(x0, keys))[0]
        carry = (x0, q0, jnp.zeros((c, k), dtype), jnp.zeros(c, jnp.int32))
        t = jnp.arange(discard + num_steps + discard_backward, dtype=jnp.int32)
        carry, _ = _forward(steps, project, carry, t[:discard], (False, False), False)
        carry, (xs, qs, rs) = _forward(
            steps, project, carry, t[discard : discard + num_steps], (True, True), True
        )
        _, sums, flags = carry[1], carry[2], carry[3]
        carry, (rf,) = _forward(steps, project, carry, t[discard + num_steps :], (False, True), False)
        flags = carry[3]
        # A random upper triangular start (unit columns): any C with a nonzero diagonal converges.
        g = jax.vmap(lambda i: jr.normal(jr.fold_in(key_c, i), (k, k), dtype))(index)
        g = (
            jnp.triu(g)
            + jnp.eye(k, dtype=dtype)[None] * jnp.sign(jnp.diagonal(g, axis1=1, axis2=2))[:, None, :]
        )
        cmat = g / jnp.linalg.norm(g, axis=1, keepdims=True)
        cmat, _ = lax.scan(lambda cm, r: _backward_step(cm, r), cmat, rf, reverse=True)

        def back(cm, qr):
            q, r = qr
            cm, _ = _backward_step(cm, r)
            return cm, jnp.einsum("cmi,cij->cmj", q, cm, precision=_HI)

        cmat, vs = lax.scan(back, cmat, (qs, rs), reverse=True)
    ok = jnp.all(jnp.isfinite(vs), axis=(0, 2, 3))
    flags = flags | jnp.where(ok, 0, FLAG_NONFINITE)
    # Scans stack time first: (T, c, ...) -> (c, T, ...).
    return jnp.swapaxes(xs, 0, 1), jnp.swapaxes(vs, 0, 1), sums / num_steps, flags


def ginelli(
    propagate,
    init_q: Callable,
    x0: jax.Array,
    k: int,
    num_steps: int,
    discard: int,
    discard_backward: int,
    *,
    key,
    chunk: int,
    num_unstable: int | None = None,
):
    """Run `_chunk` over a batch ``x0`` ``(num, *state)`` in chunks (the last one padded with
    copies of its first member), and each chunk's angles; ``propagate`` and ``init_q`` as for
    `rankdyn._lyapunov._qr.run_qr`. Returns per trajectory ``(states (num, T, *state),
    vectors (num, T, m, k), exponents (num, k), flags (num,), angles (num, T), counts (num,))``,
    ``counts`` the unstable dimension (``num_unstable``, or the exponents > 0)."""
    num = x0.shape[0]
    chunk = max(1, min(chunk, num))
    parts = []
    # The bookkeeping between the compiled programs is host-side NumPy, put on the device as is:
    # in eager JAX every op of each new shape (an index range, a slice, a cast) compiled a program.
    index_dtype = jax.dtypes.canonicalize_dtype(np.int64)  # jnp.arange's: int32 without x64
    for start in range(0, num, chunk):
        xs = x0 if chunk == num else x0[start : start + chunk]  # a whole slice is an eager program
        real = xs.shape[0]
        if real < chunk:
            xs = jnp.concatenate([xs, jnp.broadcast_to(xs[:1], (chunk - real,) + xs.shape[1:])])
        index = jax.device_put(np.arange(start, start + chunk, dtype=index_dtype))
        states, vectors, exps, flags = (
            v if real == chunk else v[:real]
            for v in _chunk(propagate, init_q, xs, key, index, k, num_steps, discard, discard_backward)
        )
        if num_unstable is None:
            counts = np.sum(np.asarray(exps) > 0, axis=-1)
        else:
            counts = np.full(real, int(num_unstable))
        parts.append(
            (
                states,
                vectors,
                exps,
                flags,
                subspace_angles(vectors, counts),
                jax.device_put(np.asarray(counts, np.int32)),
            )
        )
        check_interrupt()
    if len(parts) == 1:
        return parts[0]
    return tuple(jnp.concatenate(vs) for vs in zip(*parts))


def _angles_at(vectors, u: int):
    r"""Smallest principal angle between span ``vectors[..., :u]`` and span ``vectors[..., u:]``
    (module docstring), for ``vectors`` ``(N, m, k)`` and a static ``0 < u < k``."""
    with jax.default_matmul_precision("highest"):
        qu = orthonormalise(vectors[..., :u])[0]
        qs = orthonormalise(vectors[..., u:])[0]
        cos = jnp.linalg.svd(jnp.einsum("nmi,nmj->nij", qu, qs, precision=_HI), compute_uv=False)
        rest = qs - jnp.einsum(
            "nmi,nij->nmj", qu, jnp.einsum("nmi,nmj->nij", qu, qs, precision=_HI), precision=_HI
        )
        sin = jnp.linalg.svd(rest, compute_uv=False)
    return jnp.arctan2(jnp.min(sin, axis=-1), jnp.max(cos, axis=-1))


@eqx.filter_jit
def _angles(vectors, u: int):
    """`_angles_at` for ``(N, T, m, k)``, one step at a time (``lax.map``: the QR and SVD
    workspace is that of one step, not of the stored trajectory)."""
    return lax.map(lambda v: _angles_at(v, u), jnp.swapaxes(vectors, 0, 1)).T


def subspace_angles(vectors, num_unstable) -> jax.Array:
    r"""``(num, T)`` smallest angle between the unstable span (the first ``num_unstable[i]``
    vectors of trajectory ``i``) and the span of the others; NaN where either is empty.

    One compiled program per distinct count (at most k + 1, usually one).
    """
    num, steps, m, k = vectors.shape
    counts = np.asarray(num_unstable)
    # Filled on the host and put on the device once (eager JAX compiled a fill and a scatter).
    out = np.full((num, steps), np.nan, vectors.dtype)
    for u in sorted(set(counts.tolist()) - {0, k}):
        sel = np.flatnonzero(counts == u)
        out[sel] = np.asarray(_angles(vectors if len(sel) == num else vectors[sel], int(u)))
    return jax.device_put(out)


def assemble_clv(
    states,
    vectors,
    exps,
    flags,
    angles,
    counts,
    batch_shape,
    *,
    space,
    dim,
    unit,
    num_steps,
    discard,
    discard_backward,
) -> CovariantVectors:
    """A `CovariantVectors` from `ginelli`'s outputs (batch axes restored)."""
    return CovariantVectors(
        vectors=vectors.reshape(batch_shape + vectors.shape[1:]),
        states=states.reshape(batch_shape + states.shape[1:]),
        exponents=exps.reshape(batch_shape + exps.shape[1:]),
        angles=angles.reshape(batch_shape + angles.shape[1:]),
        num_unstable=counts.reshape(batch_shape),
        flags=flags.reshape(batch_shape),
        steps=jax.device_put(np.arange(discard, discard + num_steps, dtype=np.int32)),
        space=space,
        dim=int(dim),
        unit=unit,
        num_steps=int(num_steps),
        discard=int(discard),
        discard_backward=int(discard_backward),
    )
