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
- on $S^1$ the Wasserstein-1 distance to a density on a grid (`circle_wasserstein1`), exact for a
  piecewise-constant density, in $O((n + m) \log(n + m))$;
- on $S^1$ the number of clusters in $O(n \log n)$: the angles sorted, a cluster ends at every
  gap (the wrap-around one included) wider than $\arccos c$, the components of
  ``cluster_count``'s graph $\langle x_i, x_j\rangle \ge c$ on the circle.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
from jax import lax
from jaxtyping import Array, ArrayLike, Float

from .._errors import UsageError

__all__ = ["order_parameter", "harmonics", "circle_cluster_count", "circle_wasserstein1", "DensityObserver"]

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


def _segment_abs(a, b, length):
    r"""$\int_0^1 |a + (b - a)s|\,ds \cdot$ ``length`` for a linear segment (exact, either sign)."""
    same = a * b >= 0
    cross = (a * a + b * b) / (2 * jnp.where(same, 1.0, jnp.abs(b - a)))
    return length * jnp.where(same, jnp.abs(a + b) / 2, cross)


def circle_wasserstein1(x: Float[ArrayLike, "n d"], density: Float[ArrayLike, " m"]) -> Float[Array, ""]:
    r"""Wasserstein-1 distance on $S^1$ (arc length) between the tokens' empirical measure and a density.

    On the circle $W_1(\mu, \nu) = \min_\alpha \int_0^{2\pi} |F_\mu - F_\nu - \alpha|\,d\theta$, with $F$
    the distribution functions from angle 0 and the minimum at a median of $D = F_\mu - F_\nu$ (the
    formula of Rabin, Delon and Gousseau, "Transportation distances on the circle", 2011, stated
    from memory, not checked against their text; the tests check it against the transport by hand
    of equispaced atoms, $\pi / (2n)$). $D$ is linear between the sorted angles and the cell edges,
    so the integral is exact there; the median comes from 64 bisections of
    $|\{D \le \alpha\}| = \pi$. $O((n + m)\log(n + m))$, no $n \times m$ array.

    Arguments:
        x: ``(n, 2)`` unit tokens on $S^1$ (angle $\operatorname{atan2}(x_1, x_0)$).
        density: ``(m,)`` non-negative values, piecewise constant on the cells
            $[2\pi k/m, 2\pi(k+1)/m)$ of the angle in $[0, 2\pi)$; normalised here.

    Returns:
        $W_1 \in [0, \pi]$ (arc length; antipodal point masses are $\pi$ apart).

    Raises:
        UsageError: ``d`` other than 2, or ``density`` not 1-D.
    """
    x, p = jnp.asarray(x), jnp.asarray(density)
    if x.shape[-1] != 2 or x.ndim != 2:
        raise UsageError(f"circle_wasserstein1 needs (n, 2) tokens on S^1, got shape {x.shape}.")
    if p.ndim != 1 or p.shape[0] < 1:
        raise UsageError(f"density must be a 1-D array of cell values, got shape {p.shape}.")
    return _circle_w1(x, p)


@jax.jit
def _circle_w1(x, p):
    """`circle_wasserstein1` on checked shapes, compiled (one program per shape, not one per op)."""
    n, m = x.shape[0], p.shape[0]
    two_pi = 2 * jnp.pi
    theta = jnp.sort(jnp.mod(jnp.arctan2(x[:, 1], x[:, 0]), two_pi))
    p = p.astype(x.dtype) / jnp.sum(p)
    edges = jnp.arange(m + 1, dtype=x.dtype) * (two_pi / m)
    cum = jnp.concatenate([jnp.zeros(1, x.dtype), jnp.cumsum(p)])
    # Breakpoints: the cell edges and the angles; D is linear on each piece between them.
    pts = jnp.sort(jnp.concatenate([edges, theta]))
    left, right = pts[:-1], pts[1:]
    length = right - left
    mid = (left + right) / 2

    def f_nu(t):
        k = jnp.clip(jnp.floor(t / (two_pi / m)).astype(jnp.int32), 0, m - 1)
        return cum[k] + p[k] * (t - edges[k]) / (two_pi / m)

    # F_mu is constant on a piece: the count of angles at or before its midpoint.
    f_mu = jnp.searchsorted(theta, mid, side="right").astype(x.dtype) / n
    a, b = f_mu - f_nu(left), f_mu - f_nu(right)

    def below(alpha):  # |{theta : D(theta) <= alpha}|, D linear from a to b on each piece
        lo, hi = jnp.minimum(a, b), jnp.maximum(a, b)
        frac = jnp.clip((alpha - lo) / jnp.where(hi > lo, hi - lo, 1.0), 0, 1)
        return jnp.sum(length * jnp.where(hi > lo, frac, (lo <= alpha).astype(x.dtype)))

    def bisect(_, bounds):
        lo, hi = bounds
        c = (lo + hi) / 2
        return jnp.where(below(c) >= jnp.pi, lo, c), jnp.where(below(c) >= jnp.pi, c, hi)

    lo, hi = lax.fori_loop(0, 64, bisect, (jnp.min(jnp.minimum(a, b)), jnp.max(jnp.maximum(a, b))))
    alpha = (lo + hi) / 2
    return jnp.sum(_segment_abs(a - alpha, b - alpha, length))


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
