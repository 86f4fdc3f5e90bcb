r"""Closed-form counterexamples of the paper: the 2-D example and equilibria of every rank.

(docs/theory.md#constructions.)

All constructions use the **causal mask**, $W_Q = W_K = 0$ (so $A_{ij} = 1/i$ for $j \le i$,
constant in $t$), a constant $W_V$ and the paper's post-LN (rows onto the unit sphere):

$$X^{(t+1)}_{i,:} = \frac{\sum_{j\le i} X^{(t)}_{j,:} W_V}{\|\sum_{j\le i} X^{(t)}_{j,:} W_V\|_2}
\qquad\text{(eq. 3; the } 1/i \text{ cancels under LN).}$$

With the full upper-bidiagonal $W_V = I + wS$ (row-vector convention $(xW)_1 = x_1$,
$(xW)_m = w x_{m-1} + x_m$) a fixed point satisfies (App. F.1)

$$X_1 = \beta_1 X_1 W_V,\qquad X_{i+1} = \beta_{i+1}\big(X_i/\beta_i + X_{i+1} W_V\big),\qquad
\beta_i = 1/\|\textstyle\sum_{j \le i} X_j W_V\|_2 .$$
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
from jaxtyping import Array, ArrayLike, Float, PRNGKeyArray

from .._errors import UsageError
from .._model._layer import SelfAttentionLayer
from .._model._masks import causal_mask
from .._model._norms import SphereNorm

__all__ = [
    "uniform_causal_layer",
    "example_2d",
    "rank_k_equilibrium",
    "all_closed_form_equilibria",
    "lemma13_sample",
    "lemma13_condition",
]


def uniform_causal_layer(
    n: int, d: int, w_v: ArrayLike, *, placement: str = "post", radius: float = 1.0
) -> SelfAttentionLayer:
    r"""The layer of the paper's constructions: causal mask, $W_Q = W_K = 0$, given $W_V$, sphere LN.

    Zero query/key weights make every score 0, so the masked softmax is uniform over the
    allowed tokens: $A_{ij} = 1/i$ for $j \le i$ (1-indexed); see docs/theory.md#constructions.

    Arguments:
        n: number of tokens.
        d: token dimension.
        w_v: the value matrix ``(d, d)`` (e.g. `rankdyn.weights.bidiagonal(d, w)`).
        placement: ``"post"`` (eq. 3, default), ``"none"`` (eq. 2) or ``"pre"``.
        radius: the sphere radius of the LN (the paper uses 1).

    Raises:
        ValueError: if ``w_v`` is not ``(d, d)``.
    """
    w_v = jnp.asarray(w_v)
    if w_v.shape != (d, d):
        raise UsageError(f"w_v must be a square (d, d) = ({d}, {d}) matrix, got shape {w_v.shape}.")
    if not jnp.issubdtype(w_v.dtype, jnp.floating):
        w_v = w_v.astype(float)
    zero = jnp.zeros((d, d), w_v.dtype)
    return SelfAttentionLayer(causal_mask(n), zero, zero, w_v, norm=SphereNorm(radius), placement=placement)


def example_2d(w: float | int) -> dict:
    r"""The 2-D illustrative example, $N = d = 2$ (docs/theory.md#constructions, paper §4.3.1 and App. E).

    $W_V = \begin{bmatrix}1 & w\\0 & 1\end{bmatrix}$. With token 1 at $(0, 1)$ the second token
    has exactly two fixed points with $X_{2,1} = -1/w$:
    $A = (-1/w, \sqrt{1 - 1/w^2})$ (repelling) and $B = (-1/w, -\sqrt{1 - 1/w^2})$ (attracting).
    Started in the open arc $(\theta_A, 270^\circ)$ token 2 converges to $B$ (rank 2).

    Arguments:
        w: the off-diagonal entry, $w > 1$.

    Returns:
        dict with ``W_V`` (2, 2), ``A``, ``B``, ``e`` (= (0, 1), token 1's limit),
        ``X_A``, ``X_B`` (the (2, 2) equilibria $\{(0,1), A\}$ and $\{(0,1), B\}$),
        ``theta_A`` and ``theta_B`` (degrees, in [0, 360)), and the linearisation multipliers
        ``multipliers_A = (1, 1 + \sqrt{1-1/w^2})``, ``multipliers_B = (1, 1 - \sqrt{1-1/w^2})``
        (derived in ``tests/test_stability.py``).

    Raises:
        ValueError: if ``w <= 1``.
    """
    w = float(w)
    if not w > 1.0:
        raise UsageError(f"the 2-D example needs w > 1 (WLOG, docs/theory.md#constructions), got w={w}.")
    s = math.sqrt(1.0 - 1.0 / w**2)
    a = jnp.array([-1.0 / w, s])
    b = jnp.array([-1.0 / w, -s])
    e = jnp.array([0.0, 1.0])
    theta_a = math.degrees(math.atan2(s, -1.0 / w)) % 360.0
    theta_b = math.degrees(math.atan2(-s, -1.0 / w)) % 360.0
    return {
        "W_V": jnp.array([[1.0, w], [0.0, 1.0]]),
        "A": a,
        "B": b,
        "e": e,
        "X_A": jnp.stack([e, a]),
        "X_B": jnp.stack([e, b]),
        "theta_A": theta_a,
        "theta_B": theta_b,
        "multipliers_A": (1.0, 1.0 + s),
        "multipliers_B": (1.0, 1.0 - s),
    }


def _parse_signs(k: int, signs, first_sign) -> tuple[float, np.ndarray]:
    """Split the sign choices into the first-block sign and the k - 1 token signs."""
    if signs is None:
        return float(first_sign), -np.ones(k - 1)
    signs = np.asarray(signs, dtype=float).reshape(-1)
    if signs.shape[0] == k:
        # Length k: signs[0] is the sign of the repeated first block, the rest of tokens c+1..n.
        if float(first_sign) != 1.0 and float(signs[0]) != float(first_sign):
            raise UsageError(
                f"signs[0]={signs[0]} (the first block's sign) contradicts first_sign={first_sign}; "
                "pass one of them."
            )
        first_sign, signs = float(signs[0]), signs[1:]
    elif signs.shape[0] != k - 1:
        raise UsageError(
            f"signs must have length k = {k} (first-block sign, then one per token c+1..n) or k - 1 = "
            f"{k - 1} (token signs only, with first_sign), got length {signs.shape[0]}."
        )
    if not np.all(np.abs(signs) == 1.0) or abs(float(first_sign)) != 1.0:
        raise UsageError(f"signs must be +1 or -1, got signs={signs.tolist()}, first_sign={first_sign}.")
    return float(first_sign), signs


def rank_k_equilibrium(
    n: int,
    d: int,
    k: int,
    w: float | int,
    signs: Sequence | ArrayLike | None = None,
    first_sign: float | int = 1.0,
    *,
    dtype=None,
) -> Float[Array, "n d"]:
    r"""The closed-form rank-$k$ equilibrium for the full-bidiagonal $W_V = I + wS$.

    (docs/theory.md#constructions.)

    With $c = n - k + 1$: tokens $1..c$ equal $s_0 e_d$ (so $\beta_c = 1/c$); token $p = c + 1$
    solves $X_p (I - W_V) = s_0 c\, e_d$ with $\beta_p = 1$,
    $X_p = (\mathbf 0_{d-2}, -s_0 c/w, s_p\sqrt{1 - c^2/w^2})$; every later token solves
    $X_{i+1}(-wS) = X_i$, i.e. $X_{i+1,m} = -X_{i,m+1}/w$ and
    $X_{i+1,d} = s_{i+1}\sqrt{1 - 1/w^2}$. In closed form, with $J$ counted from the last column
    and $a_c = s_0 c$, $a_p = s_p\sqrt{1-c^2/w^2}$, $a_i = s_i\sqrt{1-1/w^2}$ ($i > p$):

    $$X_{i, d-J} = (-1/w)^J\, a_{i-J},\qquad 0 \le J \le i - c,\ i > c .$$

    ``k = n`` gives the full-rank family ($c = 1$, valid for $w > 1$); ``k = 1`` gives
    $X = s_0 \mathbf 1 e_d^\top$ (valid for every $w$). The rows span $k$ dimensions (a Jordan
    chain of $W_V$), so the rank is exactly $k$ when $w > c$. At $w = c$ the two signs of token
    $p$ give the same point.

    Arguments:
        n: number of tokens.
        d: dimension; needs ``d >= k`` (the paper takes ``d = n``).
        k: the rank, ``1 <= k <= n``.
        w: the superdiagonal of $W_V$; needs ``w >= c = n - k + 1`` for ``k >= 2``.
        signs: the sign choices. Length ``k - 1``: the signs $s_{c+1}, \dots, s_n$ of the last
            coordinates of tokens $c+1..n$ (default all $-1$, the paper's instance and the
            2-D example's attracting point $B$). Length ``k``: ``signs[0]`` is $s_0$, the
            sign of the first block, followed by those ``k - 1`` signs.
        first_sign: $s_0$, the sign of the first block $\pm e_d$ (default $+1$).
        dtype: floating dtype (default: JAX's default float).

    Returns:
        The ``(n, d)`` token matrix, every row of unit norm.

    Raises:
        ValueError: if ``k`` is not in ``[1, n]``, ``d < k``, ``w < c`` (for ``k >= 2``) or the
            signs are malformed.
    """
    if not (isinstance(k, (int, np.integer)) and 1 <= k <= n):
        raise UsageError(f"the rank k must be an integer in [1, n={n}], got {k!r}.")
    if d < k:
        raise UsageError(
            f"a rank-{k} configuration needs d >= k, got d={d}; use d >= {k} (the paper takes d = n)."
        )
    c = n - k + 1
    w = float(w)
    if k >= 2 and not w >= c:
        raise UsageError(
            f"the rank-{k} equilibrium for n={n} needs w >= c = n - k + 1 = {c} (token c+1 has "
            f"first-to-last coordinate -c/w), got w={w}; use w >= {c} (w >= n gives every rank)."
        )
    s0, s = _parse_signs(k, signs, first_sign)
    dt = jnp.zeros((), dtype if dtype is not None else float).dtype
    # a[i] (0-based token i): the "source" value a_i of the closed form; a[c-1] = s0 c is the
    # sum of the repeated block (X_c / beta_c); later tokens carry their last-coordinate value.
    a = np.zeros(n)
    a[: c - 1] = s0
    a[c - 1] = s0 * c
    if k >= 2:
        a[c] = s[0] * math.sqrt(max(0.0, 1.0 - c**2 / w**2))
        a[c + 1 :] = s[1:] * math.sqrt(max(0.0, 1.0 - 1.0 / w**2))
    i = np.arange(n)[:, None]
    jj = (d - 1) - np.arange(d)[None, :]  # J: position counted from the last column
    src = np.clip(i - jj, 0, n - 1)
    val = (-1.0 / w) ** jj * a[src]
    later = (i >= c) & (jj <= i - (c - 1))
    block = (i < c) & (jj == 0)
    x = np.where(later, val, 0.0) + np.where(block, s0, 0.0)
    return jnp.asarray(x, dtype=dt)


def all_closed_form_equilibria(
    n: int, d: int, w: float | int, *, dtype=None
) -> list[tuple[int, Float[Array, "n d"]]]:
    r"""Every closed-form equilibrium for the full-bidiagonal $W_V$ at this ``w``.

    (docs/theory.md#constructions.)

    For each rank $k = 1..\min(n, d)$ that is valid at ``w`` (``k = 1`` always; ``k >= 2`` needs
    $w \ge c = n - k + 1$), all $2^k$ sign choices ($s_0$ and $s_{c+1..n}$), with duplicates
    removed (they only occur at $w = c$ or $w = 1$, where a sign multiplies a zero).

    Returns:
        A list of ``(k, X)`` pairs, ordered by rank.
    """
    out = []
    for k in range(1, min(n, d) + 1):
        c = n - k + 1
        if k >= 2 and not float(w) >= c:
            continue
        seen: list[np.ndarray] = []
        for bits in itertools.product((1.0, -1.0), repeat=k):
            x = rank_k_equilibrium(n, d, k, w, signs=bits, dtype=dtype)
            xn = np.asarray(x)
            if any(np.allclose(xn, y, atol=1e-12, rtol=0) for y in seen):
                continue
            seen.append(xn)
            out.append((k, x))
    return out


def lemma13_condition(x2: Float[Array, " d"], w: ArrayLike, *, condition: str = "proof") -> Array:
    r"""Whether a second token satisfies Lemma 13 (docs/theory.md#constructions), for token 1 at $e_d$.

    Conditions: $X_{2,i} < 0$ for $i \le d-2$, $X_{2,d-1} \le -1/w$ and
    $f = \sum_{i\le d-2} X_{2,i}^2 / X_{2,d-1}^2 \le w^2 - 1$ (``condition="proof"``, what the
    proof needs so that $\bar y = \sqrt{w^2-1-f}$ is real) or $f \le \sqrt{w^2-1}$
    (``condition="paper"``, eq. (41) as printed; stronger for $w > \sqrt 2$).
    """
    w = jnp.asarray(w, x2.dtype)
    head, v = x2[:-2], x2[-2]
    f = jnp.sum(head**2) / v**2
    bound = w**2 - 1 if condition == "proof" else jnp.sqrt(w**2 - 1)
    return jnp.all(head < 0) & (v <= -1 / w) & (f <= bound)


def lemma13_sample(
    key: PRNGKeyArray, d: int, w: ArrayLike, batch: int, *, condition: str = "proof", dtype=None
) -> Float[Array, "batch 2 d"]:
    r"""Inputs $(X_1, X_2)$ satisfying Lemma 13: $X_1 = e_d$, $X_2$ in the valid set.

    (docs/theory.md#constructions.)

    The valid set (see `lemma13_condition`) has positive measure on $\mathbb S^{d-1}$; this
    sampler has a positive density on all of it (it is not the uniform distribution on the
    set, which would need rejection with a tiny acceptance rate in high $d$):
    $v = X_{2,d-1} \sim U(-1, -1/w)$; $f \sim U(0, f_{\max})$ with
    $f_{\max} = \min(b, (1 - v^2)/v^2)$ and $b = w^2 - 1$ (or $\sqrt{w^2-1}$); the first $d-2$
    coordinates are $-\sqrt{f}|v|\,|g|/\|g\|$ with $g$ Gaussian (the negative orthant); and
    $X_{2,d} = \pm\sqrt{1 - v^2(1 + f)}$ with a random sign.

    Arguments:
        key: PRNG key.
        d: dimension, ``d >= 2``.
        w: the bidiagonal's superdiagonal, ``w > 1``.
        batch: number of samples.
        condition: ``"proof"`` ($f \le w^2-1$) or ``"paper"`` ($f \le \sqrt{w^2-1}$, eq. 41).

    Returns:
        ``(batch, 2, d)`` with unit-norm rows.

    Raises:
        ValueError: for ``d < 2``, ``w <= 1`` or an unknown condition.
    """
    if d < 2:
        raise UsageError(f"Lemma 13 needs d >= 2, got d={d}.")
    if condition not in ("proof", "paper"):
        raise UsageError(f"condition must be 'proof' or 'paper', got {condition!r}.")
    if not isinstance(w, jax.core.Tracer) and not float(w) > 1.0:
        raise UsageError(f"Lemma 13 needs w > 1, got w={float(w)}.")
    dt = jnp.zeros((), dtype if dtype is not None else float).dtype
    return _lemma13_sample(key, jnp.asarray(w, dt), d, batch, condition)


@functools.partial(jax.jit, static_argnums=(2, 3, 4))
def _lemma13_sample(key, w, d, batch, condition):
    dt = w.dtype
    kv, kf, kg, ks = jr.split(key, 4)
    v = jr.uniform(kv, (batch,), dt, minval=-1.0, maxval=-1.0 / w)
    bound = w**2 - 1 if condition == "proof" else jnp.sqrt(w**2 - 1)
    fmax = jnp.minimum(bound, (1 - v**2) / v**2)
    f = jr.uniform(kf, (batch,), dt) * fmax if d > 2 else jnp.zeros((batch,), dt)
    g = jnp.abs(jr.normal(kg, (batch, max(d - 2, 1)), dt))[:, : d - 2]
    g = g / jnp.maximum(jnp.linalg.norm(g, axis=-1, keepdims=True), jnp.finfo(dt).tiny)
    head = -(jnp.sqrt(f) * jnp.abs(v))[:, None] * g
    sign = jnp.where(jr.bernoulli(ks, 0.5, (batch,)), 1.0, -1.0).astype(dt)
    last = sign * jnp.sqrt(jnp.maximum(1 - v**2 * (1 + f), 0.0))
    x2 = jnp.concatenate([head, v[:, None], last[:, None]], axis=-1)
    x1 = jnp.broadcast_to(jnp.zeros(d, dt).at[-1].set(1.0), (batch, d))
    return jnp.stack([x1, x2], axis=1)
