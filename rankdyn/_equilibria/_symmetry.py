r"""Discrete symmetries of one layer map, used to count equilibria modulo symmetry.

A symmetry is a map $g$ with $F(gX) = gF(X)$ for the layer map $F$ (eq. 3): then $g$ maps
equilibria to equilibria, and a census counts each orbit once (`docs/theory.md#masks-as-graphs`).
"""

from __future__ import annotations

import itertools
import math

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
from jaxtyping import ArrayLike, Float

from .._model._layer import SelfAttentionLayer
from ._results import SymmetryGroup

__all__ = ["symmetry_group", "symmetric_images", "group_distance", "trivial_group", "as_group"]


def trivial_group() -> SymmetryGroup:
    """The group with only the identity (no sign flip, no permutation)."""
    return SymmetryGroup(sign=False, all_permutations=False, permutations=())


def as_group(group) -> SymmetryGroup:
    """A `SymmetryGroup` (or a dict with its three keys)."""
    return group if isinstance(group, SymmetryGroup) else SymmetryGroup(**group)


def _perm_automorphisms(mask: np.ndarray, fixed_attention: np.ndarray | None, max_tokens: int) -> list:
    n = mask.shape[0]
    if n > max_tokens:
        return [np.arange(n)]
    out = []
    for p in itertools.permutations(range(n)):
        p = np.asarray(p)
        if not np.array_equal(mask[np.ix_(p, p)], mask):
            continue
        if fixed_attention is not None and not np.allclose(fixed_attention[np.ix_(p, p)], fixed_attention):
            continue
        out.append(p)
    return out


def symmetry_group(
    layer: SelfAttentionLayer, *, max_tokens: int = 8, check: bool = True, key=None
) -> SymmetryGroup:
    r"""Discrete symmetries $g$ with $F(gX) = gF(X)$ that `deduplicate` quotients by.

    - Global sign flip $X \mapsto -X$: scores are quadratic in $X$, so $A(-X) = A(X)$ and
      $F(-X) = -F(X)$ whenever the normalisation and the blocks are odd (sphere/RMS LN, no
      MLP bias-GELU). Verified numerically at a random point.
    - Token permutations $P$ that are automorphisms of the mask ($M[p][:, p] = M$, and of a fixed
      attention matrix): $F(PX) = PF(X)$ because the layer has no positional information. The
      complete mask allows all permutations (handled by an assignment problem); other masks are
      enumerated up to ``max_tokens`` tokens (the causal mask has only the identity).
    - Skipped: orthogonal $Z$ with $Z W_V = W_V Z$ (and $Z W_Q W_K^\top Z^\top = W_Q W_K^\top$).
      For the bidiagonal (one Jordan block) and generic $W_V$ these are only $\pm I$, already
      covered by the sign flip; for $W_V \propto I$ or orthogonal $W_V$ they form continuous
      groups, whose orbits show up as neutral multipliers in `rankdyn.stability`.

    Returns:
        A `SymmetryGroup` (``sign``, ``all_permutations``, ``permutations``: index arrays).
    """
    mask = np.asarray(layer.mask)
    n = layer.num_tokens
    fixed = None if layer.fixed_attention is None else np.asarray(layer.fixed_attention)
    complete = bool(mask.all()) and (fixed is None or np.allclose(fixed, fixed[0, 0]))
    perms = [] if complete else _perm_automorphisms(mask, fixed, max_tokens)
    sign = True
    if check:
        test = [np.roll(np.arange(n), 1)] if complete and n > 1 else perms
        key = jr.key(0) if key is None else key
        fx, f_neg, f_perm = map(np.asarray, _probe(layer, key, jnp.asarray(np.stack(test or [np.arange(n)]))))
        scale = 1e3 * float(np.finfo(fx.dtype).eps) * max(1.0, float(np.max(np.abs(fx))))
        sign = bool(np.max(np.abs(f_neg + fx)) <= scale)
        good = all(np.max(np.abs(f - fx[p])) <= scale for f, p in zip(f_perm, test))
        if not good:  # the layer breaks the mask's symmetry (e.g. per-token weights): drop it
            complete, perms = False, [np.arange(n)]
    return SymmetryGroup(sign=sign, all_permutations=complete, permutations=tuple(perms))


@eqx.filter_jit
def _probe(layer: SelfAttentionLayer, key, perms):
    """$F(x)$, $F(-x)$ and $F(x_p)$ for each row $p$ of ``perms``, at a random point $x$ on the
    spheres: one compiled program per layer and shape (the layer called eagerly built dozens)."""
    x = jr.normal(key, (layer.num_tokens, layer.dim), dtype=layer.weights.w_v.dtype)
    x = x / jnp.linalg.norm(x, axis=-1, keepdims=True)
    f = lambda y: layer(y)[0]  # noqa: E731
    return f(x), f(-x), jax.vmap(lambda p: f(x[p]))(perms)


def symmetric_images(x: Float[ArrayLike, "n d"], group: "SymmetryGroup | dict") -> np.ndarray:
    """All images ``g x`` of one equilibrium under `symmetry_group` (for deflation).

    For the complete mask (all permutations) only the sign images are returned: deflating all
    $n!$ copies is not practical there.
    """
    x, group = np.asarray(x), as_group(group)
    perms = (
        group.permutations if not group.all_permutations and group.permutations else [np.arange(x.shape[0])]
    )
    imgs = [x[p] for p in perms]
    if group.sign:
        imgs = imgs + [-y for y in imgs]
    return np.stack(imgs)


def group_distance(x: np.ndarray, y: np.ndarray, group: "SymmetryGroup | dict") -> float:
    """Max-abs distance between ``x`` and the closest image of ``y`` under the group."""
    group = as_group(group)
    signs = (1.0, -1.0) if group.sign else (1.0,)
    best = math.inf
    for s in signs:
        ys = s * y
        if group.all_permutations:
            from scipy.optimize import linear_sum_assignment

            cost = np.max(np.abs(x[:, None, :] - ys[None, :, :]), axis=-1)
            # min over permutations of the max-abs distance: bottleneck assignment; the
            # sum-assignment on squared costs is exact whenever copies are close (what we test).
            r, c = linear_sum_assignment(cost**2)
            best = min(best, float(np.max(cost[r, c])))
        else:
            for p in group.permutations or [np.arange(x.shape[0])]:
                best = min(best, float(np.max(np.abs(x - ys[p]))))
    return best
