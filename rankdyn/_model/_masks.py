"""Attention masks as directed graphs (docs/theory.md#the-model, docs/theory.md#masks-as-graphs).

A mask is a boolean ``(n, n)`` matrix with ``M[i, j] = True`` iff token ``i`` may attend to
token ``j``, i.e. iff the edge ``(j, i)`` (information flows ``j -> i``) is in the graph.
Assumption A1 of the paper requires every self-loop, so the diagonal is always True.

Masks are built as concrete NumPy arrays: they describe structure, are analysed with graph
algorithms on the host (`rankdyn.graph_info`), and become a JAX array field of the layer.
"""

from __future__ import annotations

import sys

import numpy as np
from jaxtyping import Bool

from .._errors import UsageError
from ._names import MASK_NAMES as MASK_NAMES

__all__ = [
    "complete_mask",
    "causal_mask",
    "window_mask",
    "dilated_mask",
    "global_local_mask",
    "random_mask",
    "mask_from_adjacency",
    "make_mask",
    "MASK_NAMES",
]


def _check_n(n: int) -> int:
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise UsageError(f"number of tokens n must be a positive integer, got {n!r}.")
    return int(n)


def _offsets(n: int) -> np.ndarray:
    """``off[i, j] = j - i``: how far ahead (positive) or behind (negative) token j is."""
    idx = np.arange(n)
    return idx[None, :] - idx[:, None]


def complete_mask(n: int) -> Bool[np.ndarray, "n n"]:
    """Bidirectional (BERT-style) attention: every token attends to every token."""
    n = _check_n(n)
    return np.ones((n, n), dtype=bool)


def causal_mask(n: int) -> Bool[np.ndarray, "n n"]:
    """Causal (GPT-style) attention: token i attends to tokens j <= i. Token 0 is the only center."""
    n = _check_n(n)
    return _offsets(n) <= 0


def window_mask(n: int, left: int = 1, right: int | None = None) -> Bool[np.ndarray, "n n"]:
    """Sliding window: token i attends to j with ``i - left <= j <= i + right``.

    ``right`` defaults to ``left`` (the paper's bidirectional window has left = right = 1); the
    uni-directional window of the paper is ``left=1, right=0``.
    """
    n = _check_n(n)
    right = left if right is None else right
    for name, val in (("left", left), ("right", right)):
        if isinstance(val, bool) or not isinstance(val, (int, np.integer)) or val < 0:
            raise UsageError(f"window width {name} must be a non-negative integer, got {val!r}.")
    off = _offsets(n)
    return (off >= -left) & (off <= right)


def dilated_mask(n: int, window: int = 2, dilation: int = 4) -> Bool[np.ndarray, "n n"]:
    """Dilated window (Longformer style) with a unit local window kept.

    Token i attends to ``i``, ``i +- 1`` and ``i +- m * dilation`` for ``1 <= m <= window``.
    The unit window is kept because a purely dilated pattern splits the tokens into
    ``dilation`` disconnected classes (no center node, Theorem 1 does not apply); Longformer
    gets the same effect by leaving some heads undilated.
    """
    n = _check_n(n)
    if window < 0 or dilation < 1:
        raise UsageError(
            f"dilated mask needs window >= 0 and dilation >= 1, got window={window}, dilation={dilation}."
        )
    off = np.abs(_offsets(n))
    return (off <= 1) | ((off <= window * dilation) & (off % dilation == 0))


def global_local_mask(n: int, num_global: int = 1, window: int = 1) -> Bool[np.ndarray, "n n"]:
    """Longformer/BigBird style: a bidirectional window plus ``num_global`` global tokens.

    The first ``num_global`` tokens attend to, and are attended by, every token; they are
    center nodes, which makes the radius at most 2 whatever ``n`` is.
    """
    n = _check_n(n)
    if not 0 <= num_global <= n:
        raise UsageError(f"num_global must be in [0, n={n}], got {num_global}.")
    m = window_mask(n, window, window)
    m[:num_global, :] = True
    m[:, :num_global] = True
    return m


def random_mask(n: int, p: float = 0.1, seed: int = 0) -> Bool[np.ndarray, "n n"]:
    """Erdos-Renyi directed mask: each off-diagonal edge present with probability p, plus self-loops."""
    n = _check_n(n)
    if not 0.0 <= p <= 1.0:
        raise UsageError(f"edge probability p must be in [0, 1], got {p}.")
    rng = np.random.default_rng(seed)
    m = rng.random((n, n)) < p
    np.fill_diagonal(m, True)
    return m


def mask_from_adjacency(adjacency) -> Bool[np.ndarray, "n n"]:
    """Validate a user mask (``M[i, j]``: token i may attend to token j) and return it as bool.

    Raises:
        ValueError: if the array is not square, not boolean (0/1 integers are accepted), or lacks
            self-loops (assumption A1); the message names the offending rows.
    """
    m = np.asarray(adjacency)
    if m.ndim != 2 or m.shape[0] != m.shape[1]:
        raise UsageError(f"a mask must be a square (n, n) matrix, got shape {m.shape}.")
    if m.dtype != bool:
        if np.issubdtype(m.dtype, np.integer) and np.isin(m, (0, 1)).all():
            m = m.astype(bool)
        else:
            raise UsageError(
                f"a mask must be boolean (or 0/1 integers), got dtype {m.dtype}; "
                "pass `mask.astype(bool)` if that is what you mean."
            )
    missing = np.flatnonzero(~np.diagonal(m))
    if missing.size:
        shown = ", ".join(map(str, missing[:10])) + (" ..." if missing.size > 10 else "")
        raise UsageError(
            f"mask lacks self-loops (assumption A1) in rows [{shown}]; every token must be allowed "
            "to attend to itself. Fix: `np.fill_diagonal(mask, True)`."
        )
    return m.copy()


def check_fixed_attention(mask, fixed_attention):
    r"""``fixed_attention`` checked against ``mask``: its shape, and no weight where the mask has no edge.

    A fixed $A$ replaces $\mathrm{softmax}_{\mathcal G}$, which is 0 off the graph
    (eq. 1); an $A_{ij} \ne 0$ with $M_{ij} = 0$ would silently run a different graph than the
    layer (and its symmetry group, equilibria and reports) says. Traced arrays are not checked.

    Returns:
        ``fixed_attention`` unchanged.

    Raises:
        UsageError: naming ``fixed_attention``, its shape or the first offending entries, and the fix.
    """
    n = mask.shape[0]
    if fixed_attention.shape != (n, n):
        raise UsageError(f"fixed_attention must be ({n}, {n}) like the mask, got {fixed_attention.shape}.")
    # A tracer exists only once JAX is loaded: this module does not load it (the sweep and the
    # command line build masks while checking their flags, before JAX).
    jax = sys.modules.get("jax")
    if jax is not None and any(isinstance(a, jax.core.Tracer) for a in (mask, fixed_attention)):
        return fixed_attention
    m, a = np.asarray(mask, bool), np.asarray(fixed_attention)
    bad = np.argwhere(~m & (a != 0))
    if bad.size:
        shown = ", ".join(f"({i}, {j})" for i, j in bad[:5]) + (" ..." if len(bad) > 5 else "")
        raise UsageError(
            f"fixed_attention has weight outside the mask at {len(bad)} entries [{shown}] (row i, "
            "column j: token i attends to j where the mask forbids it); zero those entries and "
            "renormalise the rows (e.g. `a = a * mask; a /= a.sum(1, keepdims=True)`), or pass the "
            "mask that A's support is."
        )
    return fixed_attention


def make_mask(
    name: str,
    n: int,
    *,
    window: int = 1,
    dilation: int = 4,
    num_global: int = 1,
    p: float = 0.1,
    seed: int = 0,
) -> Bool[np.ndarray, "n n"]:
    """Build a mask by its CLI name (one of `MASK_NAMES`).

    ``window`` is the half-width for ``window`` and ``global``, the number of dilated hops for
    ``dilated``, and the look-back for ``window-uni`` (the paper's masks use ``window=1``).
    """
    if name == "complete":
        return complete_mask(n)
    if name == "causal":
        return causal_mask(n)
    if name == "window":
        return window_mask(n, window, window)
    if name == "window-uni":
        return window_mask(n, window, 0)
    if name == "dilated":
        return dilated_mask(n, window, dilation)
    if name == "global":
        return global_local_mask(n, num_global, window)
    if name == "random":
        return random_mask(n, p, seed)
    raise UsageError(f"unknown mask {name!r}; expected one of {', '.join(MASK_NAMES)}.")
