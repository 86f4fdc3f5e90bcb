r"""Observables of many tokens in $O(n d)$: order parameter, low harmonics, clusters on the circle.

None of them forms an $n \times n$ matrix, so they follow the noisy flow at $n$ in the thousands
(docs/theory.md#the-noisy-flow):

- the order parameter $r = |\frac1n\sum_i x_i|$ (0 for a uniform density in the limit, 1 for one
  cluster);
- the harmonic amplitudes $a_\ell = \big(\frac{1}{n^2}\sum_{i,j} Z_\ell(\langle x_i, x_j\rangle)\big)^{1/2}$,
  $\ell = 1, 2, 3$, with $Z_\ell$ the zonal polynomial of the sphere: Chebyshev $T_\ell$ on $S^1$,
  where $a_\ell = |\frac1n\sum_i e^{i\ell\theta_i}|$ (the empirical density's Fourier mode), and
  Legendre $P_\ell$ on $S^2$, where by the addition theorem
  $a_\ell^2 = \frac{4\pi}{2\ell + 1}\sum_m |\frac1n\sum_i Y_{\ell m}(x_i)|^2$. On $S^2$ they come from
  the moments $m = \frac1n\sum_i x_i$, $M = \frac1n\sum_i x_i x_i^\top$,
  $T = \frac1n\sum_i x_i^{\otimes 3}$: $a_1^2 = |m|^2$, $a_2^2 = \frac32|M|_F^2 - \frac12$,
  $a_3^2 = \frac52|T|_F^2 - \frac32|m|^2$ (from $P_2(c) = \frac{3c^2 - 1}2$,
  $P_3(c) = \frac{5c^3 - 3c}2$ and $\frac1{n^2}\sum_{ij}\langle x_i, x_j\rangle^k = |m^{(k)}|_F^2$);
- on $S^1$ the number of clusters in $O(n \log n)$: the angles sorted, a cluster ends at every
  gap (the wrap-around one included) wider than $\arccos c$, the components of
  ``cluster_count``'s graph $\langle x_i, x_j\rangle \ge c$ on the circle.
"""

from __future__ import annotations

import equinox as eqx
import jax.numpy as jnp
from jax import lax
from jaxtyping import Array, ArrayLike, Float

from .._errors import UsageError

__all__ = ["order_parameter", "harmonics", "circle_cluster_count", "DensityObserver"]

_HI = lax.Precision.HIGHEST
#: The highest harmonic degree `harmonics` computes.
MAX_DEGREE = 3


def order_parameter(x: Float[ArrayLike, "n d"]) -> Float[Array, ""]:
    r"""$|\frac1n\sum_i x_i|$, the norm of the tokens' mean."""
    x = jnp.asarray(x)
    return jnp.linalg.norm(jnp.mean(x, axis=0))


def harmonics(x: Float[ArrayLike, "n d"], degree: int = MAX_DEGREE) -> Float[Array, " degree"]:
    r"""The amplitudes $a_1, \dots, a_L$ of the empirical density's harmonics (module docstring).

    Arguments:
        x: ``(n, 2)`` unit tokens on $S^1$ or ``(n, 3)`` on $S^2$.
        degree: $L$, 1 to 3.

    Returns:
        ``(degree,)`` amplitudes in $[0, 1]$ (1 for one cluster; of order $n^{-1/2}$ for i.i.d.
        uniform tokens).

    Raises:
        UsageError: ``d`` not 2 or 3, or ``degree`` not 1 to 3.
    """
    x = jnp.asarray(x)
    d = x.shape[-1]
    if d not in (2, 3):
        raise UsageError(f"harmonics are defined on S^1 (d = 2) and S^2 (d = 3), got d = {d}.")
    if isinstance(degree, bool) or not isinstance(degree, int) or not 1 <= degree <= MAX_DEGREE:
        raise UsageError(f"degree must be an integer from 1 to {MAX_DEGREE}, got {degree!r}.")
    if d == 2:
        # e^{i l theta} = (x_0 + i x_1)^l for unit tokens: real polynomials, no angle.
        c, s = x[:, 0], x[:, 1]
        re, im, out = c, s, []
        for _ in range(degree):
            out.append(jnp.hypot(jnp.mean(re), jnp.mean(im)))
            re, im = re * c - im * s, re * s + im * c
        return jnp.stack(out)
    m = jnp.mean(x, axis=0)
    sq = [jnp.sum(m * m)]
    if degree >= 2:
        mm = jnp.einsum("ia,ib->ab", x, x, precision=_HI) / x.shape[0]
        sq.append(1.5 * jnp.sum(mm * mm) - 0.5)
    if degree >= 3:
        t = jnp.einsum("ia,ib,ic->abc", x, x, x, precision=_HI) / x.shape[0]
        sq.append(2.5 * jnp.sum(t * t) - 1.5 * sq[0])
    # The squares are >= 0 exactly (sums of squares); round-off may dip below.
    return jnp.sqrt(jnp.maximum(jnp.stack(sq), 0))


def circle_cluster_count(x: Float[ArrayLike, "n 2"], cos_threshold: float | Array = 0.99) -> Float[Array, ""]:
    r"""Clusters of tokens on $S^1$ in $O(n \log n)$: gaps wider than $\arccos c$ between sorted angles.

    Equals `rankdyn.flow.cluster_count` on the circle (the components of $\langle x_i, x_j\rangle \ge c$)
    without its $n \times n$ matrices.

    Arguments:
        x: ``(n, 2)`` unit tokens.
        cos_threshold: the cosine $c$ above which two tokens are neighbours.

    Returns:
        The count as a float scalar (1 when no gap is wider: the tokens then chain around the circle).

    Raises:
        UsageError: ``d`` other than 2.
    """
    x = jnp.asarray(x)
    if x.shape[-1] != 2:
        raise UsageError(f"circle_cluster_count needs tokens on S^1 (d = 2), got d = {x.shape[-1]}.")
    theta = jnp.sort(jnp.arctan2(x[:, 1], x[:, 0]))
    gaps = jnp.diff(theta, append=theta[:1] + 2 * jnp.pi)
    wide = jnp.sum(gaps > jnp.arccos(jnp.asarray(cos_threshold, x.dtype)))
    return jnp.maximum(wide, 1).astype(x.dtype)


class DensityObserver(eqx.Module):
    r"""``(t, x, beta) -> {name: scalar}`` in $O(n d)$: the noisy flow's default observer.

    Records ``order_parameter``; on $S^1$ and $S^2$ ``harmonic_1`` to ``harmonic_<degree>``
    (`harmonics`); on $S^1$ ``clusters`` (`circle_cluster_count`); and ``clustered``, 1 when every
    token lies within ``eps / 2`` of the mean direction (so the diameter is at most ``eps``, the
    sense of `FlowObserver`'s ``clustered``, tested in $O(n d)$; 0 when the mean is 0).

    Attributes:
        degree: the highest harmonic recorded.
        cos_threshold: the cosine above which two tokens on $S^1$ are neighbours.
        eps: the diameter at or below which the tokens count as one cluster.
    """

    cos_threshold: Float[Array, ""]
    eps: Float[Array, ""]
    degree: int = eqx.field(static=True)

    def __init__(self, degree: int = MAX_DEGREE, cos_threshold: float = 0.99, eps: float = 1e-2):
        if isinstance(degree, bool) or not isinstance(degree, int) or not 1 <= degree <= MAX_DEGREE:
            raise UsageError(f"degree must be an integer from 1 to {MAX_DEGREE}, got {degree!r}.")
        self.degree = degree
        self.cos_threshold = jnp.asarray(cos_threshold)
        self.eps = jnp.asarray(eps)

    def __call__(self, t, x: Float[Array, "n d"], beta) -> dict[str, Float[Array, ""]]:
        d = x.shape[-1]
        m = jnp.mean(x, axis=0)
        r = jnp.linalg.norm(m)
        out = {"order_parameter": r}
        if d in (2, 3):
            for ell, a in enumerate(harmonics(x, self.degree), start=1):
                out[f"harmonic_{ell}"] = a
        if d == 2:
            out["clusters"] = circle_cluster_count(x, self.cos_threshold.astype(x.dtype))
        u = m / jnp.where(r > 0, r, 1)
        far = jnp.max(jnp.linalg.norm(x - u[None, :], axis=-1))
        out["clustered"] = ((r > 0) & (far <= self.eps.astype(x.dtype) / 2)).astype(x.dtype)
        return out
