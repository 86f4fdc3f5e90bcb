r"""Trained weights as a dynamical system: value/output spectra and the equilibria of one trained layer.

Two questions the theorems raise about a trained transformer
(docs/theory.md#trained-weights-as-a-dynamical-system):

1. Are the trained value maps close to the orthogonal case of Theorem 2 / Corollary 1, and do
   they satisfy the boundedness assumption $\|W_V\|_2 \le 1$? `matrix_summary` and
   `value_output_report` measure, per head $h$, $W_V^h$ (``d x d_v``) and the product
   $W_V^h W_O^h$ (``d x d``, the head's contribution to the token update), and their sum
   $W_{VO} = \sum_h W_V^h W_O^h$, which is the value matrix of the multi-head map when all heads
   attend alike (e.g. on collapsed tokens).
2. Does one trained layer, in the theory's setting, have stable higher-rank equilibria?
   `theory_layer` builds that map from the trained attention (all heads), value and output
   weights, without biases, skip or MLP, with the paper's LN (rows onto the unit sphere):

   $$F(X) = \mathrm{LN}\Big(\sum_h A^h(X)\, X\, W_V^h W_O^h\Big),\qquad
   A^h(X) = \mathrm{softmax}_{\mathcal G}\big(X W_Q^h (X W_K^h)^\top/\sqrt{d_{QK}}\big).$$

   Biases are dropped because the theorems' map is linear in $X$ before LN; with them the
   collapsed points below would move and LN would no longer remove the scale. `collapsed_equilibria`
   lists the rank-one equilibria in closed form, `attractor_census` iterates $F$ from random
   starts on $(\mathbb S^{d-1})^n$ (an attracting equilibrium has a basin of positive measure,
   so iteration finds every stable one with a basin the starts can hit) and `leading_multipliers`
   classifies a point by its largest multipliers on the tangent space (matrix-free Arnoldi, since
   the dense tangent Jacobian at n = 8, d = 384 is 3064 x 3064).
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jaxtyping import Array, ArrayLike, Float

from .._errors import UsageError
from .._model._layer import SelfAttentionLayer
from .._model._masks import make_mask
from .._model._norms import SphereNorm
from .._observe._tolerances import RANK_TOL

__all__ = [
    "orthogonality_distance",
    "matrix_summary",
    "value_output_report",
    "theory_layer",
    "collapsed_equilibria",
    "iterate_map",
    "attractor_census",
    "leading_multipliers",
]


def orthogonality_distance(w: Float[ArrayLike, "m k"]) -> tuple[float, float]:
    r"""Distance of ``w`` from a multiple of a matrix with orthonormal columns, and the best multiple.

    $$\delta(W) = \min_c \frac{\|W^\top W - c I\|_F}{\|W^\top W\|_F},\qquad
    c^* = \frac{\operatorname{tr}(W^\top W)}{k},$$

    the least-squares $c$ (the projection of $W^\top W$ on $I$ in the Frobenius inner product).
    $\delta = 0$ iff $W = \sqrt{c^*} Q$ with $Q^\top Q = I$; since LN removes the scale of $W_V$,
    $\delta$ (not $\|W_V\|_2$) says how close the LN dynamics are to the orthogonal case.

    Arguments:
        w: a real ``(m, k)`` matrix (the columns are the output features of ``x @ w``).

    Returns:
        ``(delta, c_star)`` as Python floats (computed in float64).

    Raises:
        UsageError: if ``w`` is not a nonzero 2-D matrix.
    """
    w = np.asarray(w, dtype=np.float64)
    if w.ndim != 2 or not np.any(w):
        raise UsageError(f"orthogonality_distance: w must be a nonzero 2-D matrix, got shape {w.shape}.")
    g = w.T @ w
    c = float(np.trace(g) / g.shape[0])
    return float(np.linalg.norm(g - c * np.eye(g.shape[0])) / np.linalg.norm(g)), c


def matrix_summary(w: Float[ArrayLike, "m k"]) -> dict:
    r"""Singular values, $\|W\|_2$, whether $\|W\|_2 \le 1$ (the sufficient form of A3) and $\delta(W)$.

    Returns:
        ``{"singular_values", "norm2", "norm2_le_1", "orth_distance", "c_star", "shape"}``.
    """
    w = np.asarray(w, dtype=np.float64)
    s = np.linalg.svd(w, compute_uv=False)
    delta, c = orthogonality_distance(w)
    return {
        "singular_values": s,
        "norm2": float(s[0]),
        "norm2_le_1": bool(s[0] <= 1.0),
        "orth_distance": delta,
        "c_star": c,
        "shape": list(w.shape),
    }


def value_output_report(w_v: Float[ArrayLike, "heads d dv"], w_o: Float[ArrayLike, "hdv d"]) -> dict:
    r"""`matrix_summary` of every $W_V^h$, every $W_V^h W_O^h$ and of $W_{VO} = \sum_h W_V^h W_O^h$.

    Arguments:
        w_v: per-head value maps ``(heads, d, d_v)`` (``x @ w_v[h]`` is head h's value).
        w_o: the output projection ``(heads * d_v, d)``; rows ``h*d_v:(h+1)*d_v`` belong to head h.

    Returns:
        ``{"heads": [{"w_v": summary, "w_vo": summary}, ...], "w_v": summary of the concatenated
        (d, heads*d_v) value map, "w_vo_sum": summary, "w_vo_sum_matrix": (d, d) array}``.

    Raises:
        UsageError: on inconsistent shapes.
    """
    w_v = np.asarray(w_v, dtype=np.float64)
    w_o = np.asarray(w_o, dtype=np.float64)
    if w_v.ndim != 3 or w_o.shape != (w_v.shape[0] * w_v.shape[2], w_v.shape[1]):
        raise UsageError(
            f"value_output_report: expected w_v (heads, d, d_v) and w_o (heads * d_v, d); got {w_v.shape} "
            f"and {w_o.shape}."
        )
    heads, d, dv = w_v.shape
    w_oh = w_o.reshape(heads, dv, d)
    prods = np.einsum("hdv,hve->hde", w_v, w_oh)
    total = prods.sum(axis=0)
    return {
        "heads": [{"w_v": matrix_summary(w_v[h]), "w_vo": matrix_summary(prods[h])} for h in range(heads)],
        "w_v": matrix_summary(np.concatenate(list(w_v), axis=1)),
        "w_vo_sum": matrix_summary(total),
        "w_vo_sum_matrix": total,
    }


def theory_layer(
    w_q: Float[ArrayLike, "heads d dk"],
    w_k: Float[ArrayLike, "heads d dk"],
    w_v: Float[ArrayLike, "heads d dv"],
    w_o: Float[ArrayLike, "hdv d"],
    num_tokens: int,
    *,
    mask="complete",
    dqk: float | None = None,
    dtype=None,
) -> SelfAttentionLayer:
    r"""One trained layer as the theory's map on $(\mathbb S^{d-1})^n$ (module docstring): all heads,
    $W_O$, the paper's LN after the attention, no biases, no skip, no MLP.

    Arguments:
        w_q, w_k, w_v, w_o: one layer's trained weights in rankdyn's layout (``x @ w``).
        num_tokens: n (keep it <= 8: the dense tangent Jacobian has $(n(d-1))^2$ entries).
        mask: a mask name (`rankdyn.make_mask`, window 1) or a boolean ``(n, n)`` array.
        dqk: the temperature (default: the head width, as trained).
        dtype: the weights' dtype (default float64 when x64 is on, else float32).

    Raises:
        UsageError: for ``num_tokens < 1``.
    """
    if int(num_tokens) < 1:
        raise UsageError(f"theory_layer: num_tokens must be >= 1, got {num_tokens}.")
    dtype = jnp.zeros(()).dtype if dtype is None else dtype
    m = make_mask(mask, int(num_tokens), window=1) if isinstance(mask, str) else np.asarray(mask)
    cast = lambda a: jnp.asarray(np.asarray(a), dtype)
    return SelfAttentionLayer(
        m,
        cast(w_q),
        cast(w_k),
        cast(w_v),
        w_o=cast(w_o),
        dqk=dqk,
        norm=SphereNorm(),
        placement="post",
    )


def collapsed_equilibria(w_vo: Float[ArrayLike, "d d"], *, imag_tol: float = 1e-9) -> list[dict]:
    r"""The collapsed (rank-one, $\mu = 0$) equilibria $X = \mathbf 1 x^\top$ of `theory_layer`.

    In closed form.

    Every attention row sums to 1, so on $X = \mathbf 1 x^\top$ every head gives $A^h X = X$ and
    $F(X) = \mathbf 1\, \mathrm{LN}(x W_{VO})$: $X$ is fixed iff $x W_{VO} = \lambda x$ with
    $\lambda > 0$, i.e. $x$ is a unit left eigenvector of $W_{VO}$ with a real positive
    eigenvalue (for any mask, any $n$). $\lambda < 0$ gives a 2-cycle $x \to -x$, and a
    complex pair a rotation, so a layer whose dominant eigenvalue is not real positive has no
    attracting collapsed point.

    Returns:
        One dict per real positive eigenvalue, largest first: ``{"eigenvalue", "x" (d,),
        "dominant": whether it has the largest modulus}``.
    """
    w = np.asarray(w_vo, dtype=np.float64)
    lam, vec = np.linalg.eig(w.T)  # left eigenvectors: x W = lam x  <=>  W^T x = lam x
    top = np.max(np.abs(lam))
    out = []
    for i in np.argsort(-lam.real):
        if abs(lam[i].imag) > imag_tol * top or lam[i].real <= 0:
            continue
        x = np.real(vec[:, i])
        out.append(
            {
                "eigenvalue": float(lam[i].real),
                "x": x / np.linalg.norm(x),
                "dominant": bool(abs(lam[i]) >= top * (1 - 1e-12)),
            }
        )
    return out


@eqx.filter_jit
def _iterate(layer, x0s, steps):
    f = jax.vmap(lambda x: layer(x)[0])
    return lax.fori_loop(0, steps, lambda i, x: f(x), f(x0s))


def iterate_map(
    layer: SelfAttentionLayer, x0s: Float[ArrayLike, "m n d"], steps: int
) -> tuple[Float[Array, "m n d"], Float[Array, " m"], Float[Array, " m"]]:
    r"""Iterate ``layer`` ``steps`` times from each start; return the end points and their residuals.

    Returns:
        ``(x, r1, r2)``: the points after ``steps + 1`` applications, $r_1 = \|F(X) - X\|_F$
        (a fixed point) and $r_2 = \|F(F(X)) - X\|_F$ (a point of period 1 or 2).
    """
    x = _iterate(layer, jnp.asarray(x0s), int(steps))
    f = jax.vmap(lambda y: layer(y)[0])
    x1 = f(x)
    x2 = f(x1)
    return x, jnp.linalg.norm(x1 - x, axis=(1, 2)), jnp.linalg.norm(x2 - x, axis=(1, 2))


def attractor_census(
    layer: SelfAttentionLayer,
    key,
    *,
    starts: int = 32,
    steps: int = 1000,
    x0: Float[ArrayLike, "m n d"] | None = None,
    tol: float | None = None,
    rank_rtol: float = RANK_TOL,
) -> dict:
    r"""Where the iterates of $F$ end from random (or given) starts: fixed points by rank, 2-cycles, neither.

    Arguments:
        layer: a post-LN layer (e.g. `theory_layer`).
        key: PRNG key of the uniform starts on $(\mathbb S^{d-1})^n$.
        starts: number of random starts (ignored when ``x0`` is given).
        steps: iterations before the residuals are measured.
        x0: optional starts ``(m, n, d)`` (normalised first), e.g. real token embeddings (the
            name of the starts in `rankdyn.simulate`).
        tol: residual under which a point counts as fixed (default 1e-8 in float64, 1e-4 in float32).
        rank_rtol: relative singular-value tolerance of the rank (`rankdyn._observe._tolerances.RANK_TOL`).

    Returns:
        ``{"x": end points, "fixed": bool (m,), "period2": bool (m,) (2-cycles that are not fixed),
        "collapsed_moving": bool (m,) (neither, but $\mu < $ tol $\sqrt n$: merged tokens whose
        common direction moves), "rank": (m,), "mu": (m,) (eq. 4), "residual": (m,), "counts":
        {"fixed rank k": .., "2-cycle": .., "collapsed, moving": .., "not converged": ..}, "steps",
        "tol"}``.
    """
    from .._equilibria._solve import equilibrium_rank
    from .._observe._metrics import mu

    n, d = layer.num_tokens, layer.dim
    dt = layer.weights.w_q.dtype
    x0s = x0
    if x0s is None:
        x0s = jax.random.normal(key, (starts, n, d), dt)
    x0s = jnp.asarray(x0s, dt)
    x0s = x0s / jnp.linalg.norm(x0s, axis=-1, keepdims=True)
    tol = (1e-8 if dt == jnp.float64 else 1e-4) if tol is None else tol
    x, r1, r2 = iterate_map(layer, x0s, steps)
    ranks = np.asarray(jax.vmap(lambda y: equilibrium_rank(y, rank_rtol))(x))
    mus = np.asarray(jax.vmap(mu)(x))
    fixed = np.asarray(r1) < tol
    period2 = ~fixed & (np.asarray(r2) < tol)
    # mu / sqrt(n) is the rms distance of the tokens from their mean: below tol the tokens have
    # merged even when the common direction keeps moving (a rotation, no fixed point).
    merged = ~fixed & ~period2 & (mus < tol * np.sqrt(n))
    counts: dict[str, int] = {}
    for k in sorted(set(ranks[fixed].tolist())):
        counts[f"fixed rank {k}"] = int(np.sum(fixed & (ranks == k)))
    counts["2-cycle"] = int(period2.sum())
    counts["collapsed, moving"] = int(merged.sum())
    counts["not converged"] = int(np.sum(~fixed & ~period2 & ~merged))
    return {
        "x": np.asarray(x),
        "fixed": fixed,
        "period2": period2,
        "collapsed_moving": merged,
        "rank": ranks,
        "mu": mus,
        "residual": np.asarray(r1),
        "counts": counts,
        "steps": int(steps),
        "tol": float(tol),
    }


def leading_multipliers(
    layer: SelfAttentionLayer, x: Float[ArrayLike, "n d"], *, k: int = 6, iters: int = 120, tol: float = 1e-6
) -> dict:
    r"""The largest multipliers of ``layer`` at a fixed point on $(\mathbb S^{d-1})^n$ and the classification.

    Matrix-free (`rankdyn._equilibria.leading_eigenvalues`, Arnoldi on Jacobian-vector products
    in the tangent space): the dominant Ritz values converge first, and only the largest modulus
    decides stability ($<1-$tol stable, $>1+$tol unstable, else marginal).

    Returns:
        ``{"eigenvalues": complex (k,), "spectral_radius", "classification", "residual"}``.
    """
    from .._equilibria._linearise import leading_eigenvalues
    from .._equilibria._solve import equilibrium_residual
    from .._equilibria._stability import classify_moduli

    x = jnp.asarray(x, layer.weights.w_q.dtype)
    eig = leading_eigenvalues(layer, x, k, iters=iters)
    cls, _, _ = classify_moduli(np.abs(eig[:1]), tol)
    return {
        "eigenvalues": eig,
        "spectral_radius": float(np.abs(eig[0])),
        "classification": cls,
        "residual": float(equilibrium_residual(layer, x)),
    }
