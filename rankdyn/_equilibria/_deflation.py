r"""Deflation and rank-bias terms of the equilibrium search (Farrell, Birkisson, Funke 2015).

$M(X) = \prod_j (\|X - X_j\|_F^{-p} + \sigma)$ removes known solutions $X_j$ from the zeros of
$M(X) R(X)$; the rank penalty biases the Adam phase of `find_equilibria` towards a rank.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


def _retract(x, on_sphere: bool):
    if not on_sphere:
        return x
    nrm = jnp.linalg.norm(x, axis=-1, keepdims=True)
    return x / jnp.where(nrm > 0, nrm, 1.0)


def _log_deflation(x, known, power, shift):
    """$\\log M(X) = \\sum_j \\log(\\|X - X_j\\|^{-p} + \\sigma)$, computed stably."""
    if known is None:
        return jnp.zeros((), x.dtype)
    dist2 = jnp.sum((x[None] - known) ** 2, axis=(-2, -1))
    # log(d^-p + s) = logaddexp(-p/2 log d^2, log s); the tiny floor keeps d = 0 finite.
    tiny = jnp.finfo(x.dtype).tiny
    return jnp.sum(jnp.logaddexp(-0.5 * power * jnp.log(dist2 + tiny), jnp.log(shift)))


def _rank_penalty(x, k: int, tau: float):
    s = jnp.linalg.svd(x, compute_uv=False)
    s2 = s**2
    tail = jnp.sum(s2[k:]) / jnp.sum(s2)
    low = jax.nn.relu(jnp.log(tau) - jnp.log(s[k - 1] / s[0] + jnp.finfo(x.dtype).tiny))
    return tail + low
