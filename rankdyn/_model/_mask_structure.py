"""Masks as structure: a mask that knows its shape, without an ``(n, n)`` array (docs/long-context.md).

A `MaskStructure` describes a mask graph by its kind and a few integers (complete, causal,
window with left and right widths, dilated, global, block-sparse) or, for arbitrary masks
(random masks, a user's boolean array), by its rows in CSR form (``indptr``, ``indices``: the
keys each query attends to). It answers what the blocked attention path (`rankdyn._model._blocked`)
and the graph quantities (`rankdyn._model._graph`) need:

- `MaskStructure.block_pairs`: which key blocks each query block touches;
- `MaskStructure.eccentricities`: each token's eccentricity in closed form, for the named kinds
  whose graph is a path of blocks (complete, causal, window, global, block-sparse);
- `MaskStructure.csr`: the rows as CSR (linear in the number of edges), for the BFS of the
  other kinds.

`MaskStructure.dense` gives the boolean array of the existing constructors (`rankdyn._model._masks`),
bit for bit, for the dense path and as the oracle of the tests. No JAX here: the command line
builds masks while it checks its flags.
"""

from __future__ import annotations

import dataclasses
import hashlib

import numpy as np

from .._errors import UsageError
from ._masks import (
    causal_mask,
    complete_mask,
    dilated_mask,
    global_local_mask,
    mask_from_adjacency,
    random_mask,
    window_mask,
)

__all__ = ["MaskStructure", "make_mask_structure", "as_structure", "KINDS"]

#: The kinds of `MaskStructure`; ``csr`` is an arbitrary mask given by its rows.
KINDS = ("complete", "causal", "window", "dilated", "global", "block-sparse", "csr")


def _nonneg(name: str, v) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 0:
        raise UsageError(f"{name} must be a non-negative integer, got {v!r}.")
    return int(v)


@dataclasses.dataclass(frozen=True)
class MaskStructure:
    """A mask graph by its structure; ``M[i, j]`` (token i attends to token j) as in `rankdyn.masks`.

    Build one with the class methods (`window`, `causal`, ...), `make_mask_structure` (the CLI's
    names) or `as_structure` (a boolean array). Hashable: it is a static part of a layer.

    Attributes:
        kind: one of `KINDS`.
        n: number of tokens.
        left, right: window widths (``window``; ``global``'s window; blocks for ``block-sparse``).
        dilation, hops: the dilated mask's tokens per hop and number of hops.
        num_global: the global tokens of ``global``.
        block: the block size of ``block-sparse``.
        rows: ``(indptr, indices)`` as bytes for ``csr`` (int64), else None.
    """

    kind: str
    n: int
    left: int = 0
    right: int = 0
    dilation: int = 1
    hops: int = 0
    num_global: int = 0
    block: int = 1
    rows: tuple[bytes, bytes] | None = dataclasses.field(default=None, repr=False)
    digest: str = ""

    # ------------------------------------------------------------------ constructors
    @classmethod
    def complete(cls, n: int) -> "MaskStructure":
        return cls("complete", _check_n(n))

    @classmethod
    def causal(cls, n: int) -> "MaskStructure":
        return cls("causal", _check_n(n))

    @classmethod
    def window(cls, n: int, left: int = 1, right: int | None = None) -> "MaskStructure":
        """Token i attends to ``i - left <= j <= i + right`` (``right`` defaults to ``left``)."""
        right = left if right is None else right
        return cls("window", _check_n(n), left=_nonneg("left", left), right=_nonneg("right", right))

    @classmethod
    def dilated(cls, n: int, window: int = 2, dilation: int = 4) -> "MaskStructure":
        """`rankdyn.masks.dilated_mask`: ``i +- 1`` and ``i +- m * dilation`` for ``1 <= m <= window``."""
        if window < 0 or dilation < 1:
            raise UsageError(
                f"dilated mask needs window >= 0 and dilation >= 1, got window={window}, dilation={dilation}."
            )
        return cls("dilated", _check_n(n), dilation=int(dilation), hops=int(window))

    @classmethod
    def global_local(cls, n: int, num_global: int = 1, window: int = 1) -> "MaskStructure":
        """`rankdyn.masks.global_local_mask`: a window +-``window`` plus ``num_global`` global tokens."""
        n = _check_n(n)
        if not 0 <= num_global <= n:
            raise UsageError(f"num_global must be in [0, n={n}], got {num_global}.")
        w = _nonneg("window", window)
        return cls("global", n, left=w, right=w, num_global=int(num_global))

    @classmethod
    def block_sparse(cls, n: int, block: int, left: int = 0, right: int | None = None) -> "MaskStructure":
        """Blocks of ``block`` tokens; a query of block b attends to the keys of blocks
        ``b - left .. b + right`` (BigBird's sliding blocks; ``left = right = 0``: block-diagonal)."""
        if isinstance(block, bool) or not isinstance(block, (int, np.integer)) or block < 1:
            raise UsageError(f"block must be a positive integer, got {block!r}.")
        right = left if right is None else right
        left, right = _nonneg("left", left), _nonneg("right", right)
        return cls("block-sparse", _check_n(n), left=left, right=right, block=int(block))

    @classmethod
    def from_csr(cls, n: int, indptr, indices) -> "MaskStructure":
        """An arbitrary mask from its rows: row i attends to ``indices[indptr[i]:indptr[i+1]]``
        (sorted, without duplicates, each row holding i: assumption A1)."""
        n = _check_n(n)
        indptr = np.ascontiguousarray(indptr, np.int64)
        indices = np.ascontiguousarray(indices, np.int64)
        if indptr.shape != (n + 1,) or indptr[0] != 0 or indptr[-1] != indices.size:
            raise UsageError(f"a CSR mask needs indptr of shape ({n + 1},) from 0 to len(indices).")
        if indices.size and (indices.min() < 0 or indices.max() >= n):
            raise UsageError(f"a CSR mask's indices must lie in [0, {n - 1}].")
        row = np.repeat(np.arange(n), np.diff(indptr))
        has_self = np.zeros(n, bool)
        has_self[row[indices == row]] = True
        if not has_self.all():
            missing = np.flatnonzero(~has_self)[:10]
            raise UsageError(
                f"mask lacks self-loops (assumption A1) in rows {missing.tolist()}; every token must attend "
                "to itself."
            )
        rows = (indptr.tobytes(), indices.tobytes())
        digest = hashlib.sha1(rows[0] + rows[1]).hexdigest()
        return cls("csr", n, rows=rows, digest=digest)

    # ------------------------------------------------------------------ equality (csr by content)
    def __eq__(self, other):
        if not isinstance(other, MaskStructure):
            return NotImplemented
        return self._key() == other._key()

    def __hash__(self):
        return hash(self._key())

    def _key(self):
        shape = (self.left, self.right, self.dilation, self.hops, self.num_global, self.block)
        return (self.kind, self.n, *shape, self.digest)

    # ------------------------------------------------------------------ views
    @property
    def shape(self) -> tuple[int, int]:
        return (self.n, self.n)

    @property
    def ndim(self) -> int:
        return 2

    @property
    def named(self) -> bool:
        """True for a kind given by a few integers (not ``csr``)."""
        return self.kind != "csr"

    @property
    def symmetric(self) -> bool | None:
        """True when ``M = M^T`` is known from the kind (the BFS then needs one direction)."""
        if self.kind in ("complete", "dilated"):
            return True
        if self.kind in ("window", "global", "block-sparse"):
            return self.left == self.right
        return None

    def csr(self) -> tuple[np.ndarray, np.ndarray]:
        """``(indptr, indices)``: the keys of each row, sorted; O(edges) memory, no ``(n, n)`` array."""
        if self.kind == "csr":
            return np.frombuffer(self.rows[0], np.int64), np.frombuffer(self.rows[1], np.int64)
        if self.kind == "dilated":
            reach = self.hops * self.dilation
            hops = {s * m * self.dilation for m in range(1, self.hops + 1) for s in (-1, 1)}
            offs = sorted({0, -1, 1} | hops)
            offs = np.array([o for o in offs if abs(o) <= max(reach, 1)], np.int64)
            cols = np.arange(self.n)[:, None] + offs[None, :]
            ok = (cols >= 0) & (cols < self.n)
            indptr = np.concatenate([[0], np.cumsum(ok.sum(axis=1))])
            return indptr, cols[ok]
        lo, hi = self.key_interval(np.arange(self.n), np.arange(self.n))
        if self.kind == "global" and self.num_global:
            # Rows below num_global see every key; the others their window and the global tokens.
            g = self.num_global
            lo2 = np.where(np.arange(self.n) < g, 0, lo)
            hi2 = np.where(np.arange(self.n) < g, self.n - 1, hi)
            parts = [np.union1d(np.arange(min(g, self.n)), np.arange(a, b + 1)) for a, b in zip(lo2, hi2)]
            indptr = np.concatenate([[0], np.cumsum([p.size for p in parts])])
            return indptr, np.concatenate(parts)
        counts = hi - lo + 1
        indptr = np.concatenate([[0], np.cumsum(counts)])
        cols = np.repeat(lo - indptr[:-1], counts) + np.arange(indptr[-1])
        return indptr, cols

    def key_interval(self, lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """For query rows ``lo..hi`` (arrays), an interval of keys holding every key they attend to
        (exact for complete, causal, window and block-sparse; the band of dilated and of global's window)."""
        n = self.n
        if self.kind == "complete":
            a, b = np.zeros_like(lo), np.full_like(hi, n - 1)
        elif self.kind == "causal":
            a, b = np.zeros_like(lo), hi
        elif self.kind in ("window", "global"):
            a, b = lo - self.left, hi + self.right
        elif self.kind == "dilated":
            reach = max(1, self.hops * self.dilation)
            a, b = lo - reach, hi + reach
        elif self.kind == "block-sparse":
            a = (lo // self.block - self.left) * self.block
            b = (hi // self.block + self.right + 1) * self.block - 1
        else:
            raise RuntimeError(f"key_interval has no interval for kind {self.kind!r}")
        return np.clip(a, 0, n - 1), np.clip(b, 0, n - 1)

    def block_pairs(self, size: int) -> tuple[np.ndarray, np.ndarray]:
        """The ``(query block, key block)`` pairs the mask touches, for blocks of ``size`` tokens,
        sorted by query block then key block (int32 arrays). No ``(n, n)`` array is built."""
        nb = -(-self.n // size)
        if self.kind == "csr":
            indptr, indices = self.csr()
            row = np.repeat(np.arange(self.n), np.diff(indptr))
            code = np.unique((row // size) * nb + indices // size)
            return (code // nb).astype(np.int32), (code % nb).astype(np.int32)
        q = np.arange(nb)
        lo, hi = self.key_interval(q * size, np.minimum((q + 1) * size, self.n) - 1)
        first, last = lo // size, hi // size
        if self.kind == "global" and self.num_global:
            g_last = (self.num_global - 1) // size
            first = np.where(q * size < self.num_global, 0, first)
            last = np.where(q * size < self.num_global, nb - 1, last)
            # Every query block also reads the global tokens' key blocks 0..g_last.
            extra = [np.arange(0, min(g_last, f - 1) + 1) if f > 0 else np.arange(0) for f in first]
        else:
            extra = [np.arange(0)] * nb
        qs, ks = [], []
        for i in range(nb):
            k = np.concatenate([extra[i], np.arange(first[i], last[i] + 1)])
            qs.append(np.full(k.size, i))
            ks.append(k)
        return np.concatenate(qs).astype(np.int32), np.concatenate(ks).astype(np.int32)

    def dense(self) -> np.ndarray:
        """The boolean ``(n, n)`` array (the constructors of `rankdyn.masks`, bit for bit)."""
        n = self.n
        if self.kind == "complete":
            return complete_mask(n)
        if self.kind == "causal":
            return causal_mask(n)
        if self.kind == "window":
            return window_mask(n, self.left, self.right)
        if self.kind == "dilated":
            return dilated_mask(n, self.hops, self.dilation)
        if self.kind == "global":
            return global_local_mask(n, self.num_global, self.left)
        if self.kind == "block-sparse":
            b = np.arange(n) // self.block
            off = b[None, :] - b[:, None]
            return (off >= -self.left) & (off <= self.right)
        indptr, indices = self.csr()
        m = np.zeros((n, n), bool)
        m[np.repeat(np.arange(n), np.diff(indptr)), indices] = True
        return m

    def __array__(self, dtype=None, copy=None):
        # np.asarray(structure): the dense array, for code written for small boolean masks.
        m = self.dense()
        return m if dtype is None else m.astype(dtype)

    # ------------------------------------------------------------------ graph quantities
    def eccentricities(self) -> np.ndarray | None:
        r"""Each token's eccentricity $\max_v \mathrm{dist}(c, v)$ (``inf``: c is not a centre), in
        closed form, O(n); None for kinds without one (dilated, csr: `rankdyn._model._graph` runs BFS).

        Information moves ``j -> i`` when i attends to j: a window lets it move ``left`` tokens
        forward and ``right`` back per layer, so ``dist(c, v) = ceil((v - c) / left)`` for v > c
        and ``ceil((c - v) / right)`` for v < c.
        """
        n = self.n
        if self.kind == "complete":
            return _window_ecc(n, n - 1, n - 1)
        if self.kind == "causal":
            return _window_ecc(n, n - 1, 0)
        if self.kind == "window":
            return _window_ecc(n, self.left, self.right)
        if self.kind == "global":
            g, w = self.num_global, self.left
            if g == 0:
                return _window_ecc(n, w, w)
            if n == 1:
                return np.zeros(1)
            # A global token reaches all in one layer; another token c reaches the tokens that attend
            # to it (globals, its window) in one, the rest through a global token in two.
            c = np.arange(n)
            far = np.maximum(c - g, n - 1 - c) > w
            return np.where((c >= g) & far, 2.0, 1.0)
        if self.kind == "block-sparse":
            nb = -(-n // self.block)
            blocks = _window_ecc(nb, self.left, self.right)[np.arange(n) // self.block]
            return np.maximum(blocks, 1.0 if n > 1 else 0.0)
        return None


def _check_n(n) -> int:
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise UsageError(f"number of tokens n must be a positive integer, got {n!r}.")
    return int(n)


def _window_ecc(n: int, left: int, right: int) -> np.ndarray:
    """Eccentricities of the window graph (i attends to ``i - left .. i + right``), O(n)."""
    c = np.arange(n, dtype=np.float64)

    def hops(dist, step):
        with np.errstate(divide="ignore", invalid="ignore"):
            h = np.ceil(dist / step) if step > 0 else np.where(dist > 0, np.inf, 0.0)
        return np.where(dist == 0, 0.0, h)

    return np.maximum(hops(n - 1 - c, left), hops(c, right))


def _random_rows(n: int, degree: int, seed: int) -> MaskStructure:
    """A random mask of ``degree`` keys per row besides the token itself (drawn with replacement
    among the other tokens, repeats merged), as CSR: a sparse random mask at any n."""
    if isinstance(degree, bool) or not isinstance(degree, (int, np.integer)) or not 1 <= degree <= n - 1:
        raise UsageError(f"--mask-degree must be an integer in [1, n - 1 = {n - 1}], got {degree!r}.")
    rng = np.random.default_rng(seed)
    row = np.arange(n)[:, None]
    draw = rng.integers(0, n - 1, (n, degree))
    draw = draw + (draw >= row)  # skip the token itself: uniform over the n - 1 others
    code = np.unique(np.concatenate([(row * n + draw).ravel(), np.arange(n) * (n + 1)]))
    rows, cols = code // n, code % n
    indptr = np.concatenate([[0], np.cumsum(np.bincount(rows, minlength=n))])
    return MaskStructure.from_csr(n, indptr, cols)


def make_mask_structure(
    name: str,
    n: int,
    *,
    window: int = 1,
    dilation: int = 4,
    num_global: int = 1,
    p: float = 0.1,
    seed: int = 0,
    degree: int | None = None,
) -> MaskStructure:
    """`rankdyn.masks.make_mask`'s names as a `MaskStructure` (``dense()`` gives make_mask's array).

    ``degree`` (random only) draws that many keys per row instead of the edge probability ``p``.
    """
    if name == "complete":
        return MaskStructure.complete(n)
    if name == "causal":
        return MaskStructure.causal(n)
    if name == "window":
        return MaskStructure.window(n, window, window)
    if name == "window-uni":
        return MaskStructure.window(n, window, 0)
    if name == "dilated":
        return MaskStructure.dilated(n, window, dilation)
    if name == "global":
        return MaskStructure.global_local(n, num_global, window)
    if name == "random":
        if degree is not None:
            return _random_rows(_check_n(n), degree, seed)
        return as_structure(random_mask(n, p, seed))
    raise UsageError(f"unknown mask {name!r}.")


def as_structure(mask) -> MaskStructure:
    """A `MaskStructure` as is, or a boolean ``(n, n)`` array (checked as `mask_from_adjacency`) as CSR."""
    if isinstance(mask, MaskStructure):
        return mask
    m = mask_from_adjacency(mask)
    rows, cols = np.nonzero(m)
    indptr = np.concatenate([[0], np.cumsum(np.bincount(rows, minlength=m.shape[0]))])
    return MaskStructure.from_csr(m.shape[0], indptr, cols)
