r"""The hand-written JAX baseline: what a JAX user writes without rankdyn.

One ``jax.jit`` around a ``lax.scan`` over layers of the post-LN layer (eq. 3,
$X \leftarrow \mathrm{LN}(A(X) X W_V)$, rows onto the unit sphere), hand-batched over the whole
batch (``einsum`` with a batch axis, no chunking, no ``vmap``): the three projections, the
scores, the masked softmax, $A V$, the row normalisation, and per layer and trajectory $\mu$
(eq. 4) and Theorem 1's $\epsilon$ (smallest attention weight on mask edges), reduced to mean,
std, min and max over the batch at the end. It is the floor `rankdyn.simulate` is held to.
"""

from __future__ import annotations

import math


def jax_inputs(layer):
    """The single-head weights ``(layers?, d, k)``, mask and temperature of a rankdyn layer."""
    w = layer.weights
    return w.w_q[..., 0, :, :], w.w_k[..., 0, :, :], w.w_v[..., 0, :, :], layer.mask, float(layer.dqk)


def make_jax_loop(num_layers: int, per_layer: bool, dqk: float):
    """A compiled ``run(x0, wq, wk, wv, mask) -> {name: {mean, std, min, max}}`` over layers 0..T."""
    import jax
    import jax.numpy as jnp
    from jax import lax

    hi = lax.Precision.HIGHEST
    scale = 1.0 / math.sqrt(dqk)

    def stats(v):  # (layers + 1, batch)
        return {"mean": v.mean(1), "std": v.std(1), "min": v.min(1), "max": v.max(1)}

    def mu(x):
        return jnp.sqrt(jnp.sum((x - x.mean(1, keepdims=True)) ** 2, axis=(1, 2)))

    @jax.jit
    def run(x0, wq, wk, wv, mask):
        neg = jnp.finfo(x0.dtype).min

        def step(x, w):
            q_w, k_w, v_w = w if per_layer else (wq, wk, wv)
            q = jnp.einsum("bnd,dk->bnk", x, q_w, precision=hi)
            k = jnp.einsum("bnd,dk->bnk", x, k_w, precision=hi)
            v = jnp.einsum("bnd,de->bne", x, v_w, precision=hi)
            s = jnp.einsum("bnk,bmk->bnm", q, k, precision=hi) * scale
            a = jnp.where(mask, jax.nn.softmax(jnp.where(mask, s, neg), axis=-1), 0.0)
            eps = jnp.min(jnp.where(mask, a, jnp.inf), axis=(1, 2))
            y = jnp.einsum("bnm,bme->bne", a, v, precision=hi)
            y = y / jnp.linalg.norm(y, axis=-1, keepdims=True)
            return y, (mu(y), eps)

        xs = (wq, wk, wv) if per_layer else None
        a0 = jnp.where(mask, jax.nn.softmax(jnp.where(mask, _scores(x0, wq, wk, per_layer), neg), -1), 0.0)
        eps0 = jnp.min(jnp.where(mask, a0, jnp.inf), axis=(1, 2))
        _, (mus, eps) = lax.scan(step, x0, xs, length=None if per_layer else num_layers)
        return {
            "mu": stats(jnp.concatenate([mu(x0)[None], mus])),
            "eps_min": stats(jnp.concatenate([eps0[None], eps])),
        }

    def _scores(x, wq, wk, per_layer):
        q_w, k_w = (wq[0], wk[0]) if per_layer else (wq, wk)
        q = jnp.einsum("bnd,dk->bnk", x, q_w, precision=hi)
        k = jnp.einsum("bnd,dk->bnk", x, k_w, precision=hi)
        return jnp.einsum("bnk,bmk->bnm", q, k, precision=hi) * scale

    return run
