"""Attention masks as directed graphs (docs/theory.md#the-model, docs/theory.md#masks-as-graphs).

A mask is a boolean ``(n, n)`` matrix with ``M[i, j] = True`` iff token ``i`` may attend to
token ``j``, i.e. iff the edge ``(j, i)`` (information flows ``j -> i``) is in the graph.
Assumption A1 of the paper requires every self-loop, so the diagonal is always True.

Masks are built as concrete NumPy arrays: they describe structure, are analysed with graph
algorithms on the host (`rankdyn.graph_info`), and become a JAX array field of the layer.
"""

from __future__ import annotations

import os
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
    "random_mask_bytes",
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


#: Uniform numbers drawn at once by `random_mask` (a block of rows): 32 MB of float64, where one
#: draw of all n^2 took 8 bytes per entry on top of the mask's 1 (32 GiB at n = 65536).
_DRAW_BLOCK = 2**22


def random_mask_bytes(n: int, p: float) -> int:
    """Host bytes of an edge-probability random mask at its peak: the ``(n, n)`` booleans, one
    block of draws, and the CSR form `rankdyn._model._mask_structure.as_structure` makes of it
    (``np.nonzero``'s two int64 index arrays, the row of each edge, the rows' bytes and their
    digest's concatenation: 56 bytes per expected edge; tracemalloc measured peaks of 458 MB
    at n = 8192, p = 0.1, where this gives 443 MB, and 42 MB at n = 2048, where it gives 38 MB)."""
    edges = n + p * n * (n - 1)
    # The draws are freed before the CSR form is made: the larger of the two phases counts.
    return int(n * n + max(8 * min(n * n, max(n, _DRAW_BLOCK)), 56 * edges))


def random_mask(n: int, p: float = 0.1, seed: int = 0) -> Bool[np.ndarray, "n n"]:
    """Erdos-Renyi directed mask: each off-diagonal edge present with probability p, plus self-loops.

    The uniform numbers are drawn a block of rows at a time: the same stream, so the same mask
    as one ``rng.random((n, n)) < p``, without its n^2 float64 numbers.

    Raises:
        UsageError: for a bad ``n`` or ``p``, or when the mask (`random_mask_bytes`) exceeds the
            machine's physical memory: ``mask_degree`` (``--mask-degree``) draws a sparse random
            mask at any n.
    """
    n = _check_n(n)
    if not 0.0 <= p <= 1.0:
        raise UsageError(f"edge probability p must be in [0, 1], got {p}.")
    need = random_mask_bytes(n, p)
    try:
        physical = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        physical = None
    if physical is not None and need > physical:
        raise UsageError(
            f"a random mask with edge probability {p} at n = {n} needs about {need / 2**30:.1f} GiB "
            f"(an n x n array and its edges), more than this machine's {physical / 2**30:.1f} GiB: "
            "draw a fixed number of keys per token with mask_degree (--mask-degree K) instead."
        )
    rng = np.random.default_rng(seed)
    m = np.empty((n, n), dtype=bool)
    rows = max(1, _DRAW_BLOCK // n)
    for start in range(0, n, rows):
        m[start : start + rows] = rng.random((min(rows, n - start), n)) < p
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
