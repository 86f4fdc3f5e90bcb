r"""Depth with random, resampled value matrices at diffusive scaling (arXiv 2601.21942, 2604.01978).

A residual post-LN layer with step $h = T / L$ and value matrix $W_V^{(t)} = I + \sigma h^{-1/2} G_t$,
$G_t$ with i.i.d. $N(0, 1/d)$ entries drawn afresh at every layer $t$:

$$x_i^{(t+1)} = \mathrm{LN}\Big(x_i^{(t)} + h \sum_j A_{ij}(X^{(t)})\, W_V^{(t)} x_j^{(t)}\Big)
= \mathrm{LN}\Big(x_i^{(t)} + h\, a_i + \sigma \sqrt h\, G_t a_i\Big),\qquad a_i = \sum_j A_{ij} x_j.$$

The deterministic part moves a token by $O(h)$ per layer and the random part by $O(\sqrt h)$ with
mean zero, so over $L = T / h$ layers both add up to $O(1)$: the increment's variance is
$\sigma^2 h\, |P_{x_i} a_i|^2 (d - 1)/d$ to leading order (linear in $h$, the diffusive scaling),
and as $L \to \infty$ the depth has a diffusive limit driven by the one matrix
$\sum_{t < s/h} \sqrt h\, G_t$, a $d \times d$ Brownian motion with entries of variance $s/d$, shared
by every token: the common noise of `solve_flow(..., common_noise=True)`. Fedorov, Sander, Elie,
Marion and Laurière (arXiv 2601.21942, abstract) state the limit: "under diffusion scaling and
token-wise RMS normalization ... the discrete token dynamics converge to an interacting-particle
system on the sphere where tokens are driven by a common matrix-valued Brownian noise". (The
paper's equations could not be read from here; the scaling above is the issue's, checked by
``tests/test_noisy_flow.py`` through the increment variance.)

In `rankdyn.SelfAttentionLayer` with ``skip=True`` the update is $X + A X W_V$ with row tokens,
so the step $h$ is folded into the value matrices: ``w_v[t] = h I + sigma sqrt(h) G_t^T``.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
from jaxtyping import Array, ArrayLike, Float, PRNGKeyArray

from .._errors import UsageError

__all__ = ["random_depth_values", "random_depth_layer"]


def _positive(name, value, *, zero=False) -> float:
    ok = isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool)
    if not ok or not math.isfinite(value) or (value < 0 if zero else value <= 0):
        raise UsageError(f"{name} must be a finite number {'>= 0' if zero else '> 0'}, got {value!r}.")
    return float(value)


def random_depth_values(
    key: PRNGKeyArray, num_layers: int, d: int, *, sigma: float, horizon: float = 1.0, dtype=None
) -> Float[Array, "layers 1 d d"]:
    r"""The per-layer value matrices $h\,W_V^{(t)} = h I + \sigma\sqrt h\, G_t^\top$, $h = T / L$.

    Arguments:
        key: the PRNG key; layer $t$ draws $G_t$ from ``jax.random.fold_in(key, t)``.
        num_layers: $L \ge 1$.
        d: the token dimension ($\ge 2$).
        sigma: the noise level $\sigma \ge 0$.
        horizon: the depth-time $T > 0$ the $L$ layers span.
        dtype: the dtype of the result (default JAX's float).

    Returns:
        ``(L, 1, d, d)``: the ``w_v`` of a one-head `rankdyn.SelfAttentionLayer` with per-layer
        weights and ``skip=True`` (the step $h$ included).

    Raises:
        UsageError: a non-positive ``num_layers``, ``d < 2``, a negative or non-finite ``sigma``,
            a non-positive ``horizon``.
    """
    if isinstance(num_layers, bool) or not isinstance(num_layers, (int, np.integer)) or num_layers < 1:
        raise UsageError(f"num_layers must be an integer >= 1, got {num_layers!r}.")
    if isinstance(d, bool) or not isinstance(d, (int, np.integer)) or d < 2:
        raise UsageError(f"d must be an integer >= 2 (the sphere S^(d-1)), got {d!r}.")
    sigma = _positive("sigma", sigma, zero=True)
    h = _positive("horizon", horizon) / int(num_layers)
    dtype = jnp.zeros(()).dtype if dtype is None else dtype
    keys = jax.vmap(lambda t: jr.fold_in(key, t))(jnp.arange(int(num_layers)))
    g = jax.vmap(lambda k: jr.normal(k, (d, d), dtype))(keys) / math.sqrt(d)
    w = h * jnp.eye(d, dtype=dtype)[None] + sigma * math.sqrt(h) * jnp.swapaxes(g, -1, -2)
    return w[:, None]


def random_depth_layer(
    mask: ArrayLike,
    d: int,
    num_layers: int,
    *,
    key: PRNGKeyArray,
    sigma: float,
    beta: float,
    horizon: float = 1.0,
):
    r"""A post-LN residual `rankdyn.SelfAttentionLayer` with `random_depth_values` and scores
    $\beta\langle x_i, x_j\rangle$ ($W_Q = W_K = I$, ``dqk`` $= 1/\beta^2$).

    Run it with ``rankdyn.simulate(layer, x0, num_layers)``; the $L$ layers span depth-time ``horizon``.

    Raises:
        UsageError: as `random_depth_values`, or ``beta <= 0``.
    """
    from .._model._layer import SelfAttentionLayer

    beta = _positive("beta", beta)
    w_v = random_depth_values(key, num_layers, d, sigma=sigma, horizon=horizon)
    eye = jnp.broadcast_to(jnp.eye(d, dtype=w_v.dtype), w_v.shape)
    return SelfAttentionLayer(mask, eye, eye, w_v, dqk=1.0 / beta**2, placement="post", skip=True)
