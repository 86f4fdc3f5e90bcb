r"""Equilibrium classes of a token matrix as integer labels, for basins that follow a parameter.

A limit $X$ ``(n, d)`` of the layer map is labelled by what stays fixed while a parameter moves
it continuously: its numerical **rank** and its **coincidence pattern**, which tokens are equal
($x_i = x_j$) or opposite ($x_i = -x_j$). The pattern is read at a relative tolerance
($\|x_i \mp x_j\| \le$ ``tol`` $\max(\|x_i\|, \|x_j\|)$) and written canonically:

- each token $i$ points at the first token $j \le i$ it coincides with, and says whether it is
  opposite to it: $e_i = 2 j + [x_i = -x_j] \in [0, 2i + 2)$, a mixed-radix integer;
- over the token permutations the map commutes with (`rankdyn.equilibria.symmetry_group`), the
  smallest such integer is kept; for the complete mask (every permutation) the tokens are sorted
  by the shape of their class instead, which gives the same pattern for every ordering;
- only relative signs enter, so the label does not change under the sign symmetry $X \mapsto -X$.

The label is ``rank * PATTERNS + pattern`` (`token_class_label`), traced, and `token_class_name`
writes it back in words. Two equilibria with one rank and one coincidence pattern share a label
(e.g. two rank-2 pairs of distinct tokens): the label is coarser than the census's classes, but
it is the same at every parameter value, so attractors are matched by it, never by distance.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from .._errors import UsageError

__all__ = ["token_class_label", "token_class_name", "MAX_CLASS_TOKENS"]

#: The most tokens a label encodes: rank * 2^n n! stays below 2^31 (an int32 label).
MAX_CLASS_TOKENS = 9


def _patterns(n: int) -> int:
    """The number of pattern codes of ``n`` tokens, $\\prod_i 2(i + 1) = 2^n n!$."""
    return 2**n * math.factorial(n)


def _check_tokens(num_tokens) -> int:
    n = int(num_tokens)
    if not 1 <= n <= MAX_CLASS_TOKENS:
        raise UsageError(
            f"token classes are labelled for 1 to {MAX_CLASS_TOKENS} tokens (an int32 label), got {n}."
        )
    return n


def _code(together, opposite, weights):
    """The mixed-radix code of one coincidence pattern (``(n, n)`` bool matrices)."""
    # The diagonal is True: the first j <= i it meets (int32 throughout: the label is int32).
    first = jnp.argmax(together, axis=1).astype(jnp.int32)
    sign = jnp.take_along_axis(opposite & ~jnp.eye(opposite.shape[0], dtype=bool), first[:, None], 1)[:, 0]
    return jnp.sum((2 * first + sign.astype(jnp.int32)) * jnp.asarray(weights))


def token_class_label(
    num_tokens: int, *, permutations=None, all_permutations: bool = False, tol: float = 1e-3
):
    r"""A traced labeller ``label(x, p=None) -> int32`` of a token matrix's equilibrium class.

    Arguments:
        num_tokens: $n$ (the state ``x`` is ``(n, d)``, or flattened ``(n d,)``).
        permutations: ``(G, n)`` token permutations the map commutes with (a group, identity
            included); the label is the same for $X$ and $PX$. None: the identity alone.
        all_permutations: every token permutation is a symmetry (the complete mask).
        tol: relative tolerance of the rank ($\sigma_i > tol\,\sigma_1$) and of a coincidence.

    Returns:
        ``label(x, p=None)``, for `basins_across` (``p`` is not read).

    Raises:
        UsageError: for ``num_tokens`` outside ``[1, MAX_CLASS_TOKENS]``, a ``tol`` outside (0, 1),
            or permutations that are not ``(G, n)`` permutations of ``range(n)``.
    """
    n = _check_tokens(num_tokens)
    if not (math.isfinite(tol) and 0 < tol < 1):
        raise UsageError(f"tol must be in (0, 1), got {tol}.")
    perms = None
    if permutations is not None and len(permutations) and not all_permutations:
        perms = np.asarray(permutations)
        if perms.ndim != 2 or perms.shape[1] != n or not np.all(np.sort(perms, axis=1) == np.arange(n)):
            raise UsageError(
                f"permutations must be (G, {n}) permutations of range({n}), got shape {perms.shape}."
            )
    weights = np.cumprod([1] + [2 * (i + 1) for i in range(n - 1)]).astype(np.int32)
    base = np.int32(_patterns(n))

    def label(x, p=None):
        x = jnp.reshape(x, (n, -1))
        size = jnp.linalg.norm(x, axis=-1)
        scale = tol * jnp.maximum(size[:, None], size[None, :])
        together = jnp.linalg.norm(x[:, None] - x[None], axis=-1) <= scale
        opposite = jnp.linalg.norm(x[:, None] + x[None], axis=-1) <= scale
        together = together | opposite
        if all_permutations:
            order = _class_order(together, opposite, n)
            code = _code(together[order][:, order], opposite[order][:, order], weights)
        elif perms is not None:
            codes = jax.vmap(lambda q: _code(together[q][:, q], opposite[q][:, q], weights))(
                jnp.asarray(perms)
            )
            code = jnp.min(codes)
        else:
            code = _code(together, opposite, weights)
        s = jnp.linalg.svd(x, compute_uv=False)
        rank = jnp.sum(s > tol * s[0]).astype(jnp.int32)
        return rank * jnp.int32(base) + code.astype(jnp.int32)

    return label


def _class_order(together, opposite, n):
    """An ordering of the tokens that depends only on the shapes of their classes: the largest
    class first (its larger side, then the other), classes of one shape by their first token."""
    same = together & ~opposite
    s = jnp.sum(same, axis=1, dtype=jnp.int32)
    o = jnp.sum(opposite & ~jnp.eye(n, dtype=bool), axis=1, dtype=jnp.int32)
    rep = jnp.argmax(together, axis=1).astype(jnp.int32)
    with_rep = jnp.take_along_axis(same, rep[:, None], 1)[:, 0]
    side = jnp.where(s == o, ~with_rep, s < o).astype(jnp.int32)
    key = (((2 * n + 1 - (s + o)) * (n + 2) + (n + 1 - jnp.maximum(s, o))) * n + rep) * 2 + side
    return jnp.argsort(key, stable=True)


def token_class_name(label: int, num_tokens: int) -> str:
    """A label of `token_class_label` in words, e.g. ``"rank 1: x1 = x2 = -x3"`` (token numbers of
    one representative of the class)."""
    n = _check_tokens(num_tokens)
    rank, code = divmod(int(label), _patterns(n))
    groups: dict[int, list[str]] = {}
    for i in range(n):
        code, e = divmod(code, 2 * (i + 1)) if i < n - 1 else (0, code)
        first, sign = divmod(e, 2)
        groups.setdefault(first, []).append(("-" if sign else "") + f"x{i + 1}")
    ties = [" = ".join(g) for g in groups.values() if len(g) > 1]
    return f"rank {rank}: " + ("; ".join(ties) if ties else "tokens distinct")
