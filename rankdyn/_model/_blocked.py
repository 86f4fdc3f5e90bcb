r"""How the layer computes $A$: the dense masked softmax, and the blocked path (docs/long-context.md).

The dense path (`masked_softmax`) forms the ``(heads, n, n)`` scores and weights. The blocked path
(`blocked_attention_block`) never does: the tokens are cut into blocks of ``block_size``
(the last one padded), and a ``lax.scan`` walks the static list of (query block, key block) pairs
that the mask touches (`rankdyn._model._mask_structure.MaskStructure.block_pairs`), keeping per
query row the running maximum $m_i$, the running sum $\ell_i = \sum_j e^{R_{ij} - m_i}$, the
running sum $\sum_j e^{R_{ij} - m_i} X W_V{}_j$ and the running minimum of the scores on the mask
(the online softmax of flash attention), up to `step_pairs` pairs per step. Its result is
$A X W_V$ of eq. (1) with the same rounding up to the order of summation, and Theorem 1's $\varepsilon$ is
$\min_i e^{\min_j R_{ij} - m_i} / \ell_i$. Work and memory follow the touched blocks: about
$2 n w d$ FLOPs per head for a window of $w$ keys, not $2 n^2 d$.

The blocked path carries heads, $W_O$, biases, rotary embeddings, the temperature and everything
the layer does around $A$ (skip, MLP, every placement and norm). It refuses what it cannot carry
yet, by name: attention dropout, a fixed attention matrix and a logit bias (each ``(n, n)``).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jaxtyping import Array, ArrayLike, Bool, Float

from .._errors import UsageError
from ._mask_structure import MaskStructure, as_structure
from ._masks import mask_from_adjacency
from ._names import ATTENTION_MODES
from ._norms import qk_normalise
from ._products import _add_bias, _head_einsum, _merge_heads, _project

__all__ = [
    "masked_softmax",
    "blocked_attention_block",
    "blocked_attention_times",
    "resolve_attention",
    "layer_mask",
    "ATTENTION_MODES",
    "AUTO_BLOCKED_MIN_TOKENS",
    "BLOCK_SIZE",
    "choose_block_size",
    "step_pairs",
    "score_entries",
]

# A MaskStructure is static (hashable, no arrays): a pytree node without leaves inside a layer.
jax.tree_util.register_static(MaskStructure)

#: ``attention="auto"`` takes the blocked path from this many tokens (docs/long-context.md: on a
#: 2-core AMD EPYC, causal d = 64, blocked was 1.5x faster at 4096 and about even at 2048).
AUTO_BLOCKED_MIN_TOKENS = 2048
#: The smallest block of the blocked path, in tokens (query and key blocks alike): the size for
#: sparse masks, and the unit of `choose_block_size`'s candidates.
BLOCK_SIZE = 128
#: `choose_block_size`'s candidates and the time per score cell of each, relative to 128, as
#: measured (benchmarks/block_size.py, 2-core AMD EPYC, d = 64: causal 4096 at batch 1 and 8, a
#: window of +-64 at 16384, complete 2048): 512-token blocks took 0.45-0.63x the time per cell of
#: 128-token ones, 256 0.72-1.01x. XLA:CPU's batched 128 x 64 x 128 products run at about 23
#: GFLOP/s, an eighth of its 183 GFLOP/s matmul peak; 512 x 64 x 512 at about 60.
BLOCK_CELL_COST = {128: 1.0, 256: 0.9, 512: 0.6}


def masked_softmax(scores: Float[Array, "... n n"], mask: Bool[ArrayLike, "n n"]) -> Float[Array, "... n n"]:
    r"""Row-wise softmax restricted to the mask graph, eq. (1).

    $A_{ij} = e^{R_{ij}} / \sum_{k \in \mathcal N_i} e^{R_{ik}}$ on edges and 0 elsewhere. Masked
    scores use the dtype's finite minimum (not ``-inf``) and the result is zeroed off the mask,
    so every finite score matrix, however extreme, gives finite weights. Scores that overflowed
    to ``inf`` before this call give NaN: `rankdyn.simulate` refuses, before compute, weights
    whose score bound overflows the dtype, and the depth scan counts any NaN as non-finite.
    """
    neg = jnp.finfo(scores.dtype).min
    a = jax.nn.softmax(jnp.where(mask, scores, neg), axis=-1)
    return jnp.where(mask, a, 0.0)


def resolve_attention(
    attention: str, n: int, *, attn_dropout: float, fixed_attention: bool, logit_bias: bool
) -> str:
    """``"dense"`` or ``"blocked"`` for a layer of ``n`` tokens with these features.

    ``"auto"`` takes the blocked path from `AUTO_BLOCKED_MIN_TOKENS` tokens when the layer has no
    feature it refuses; ``"blocked"`` with such a feature raises.

    Raises:
        UsageError: an unknown mode, or ``"blocked"`` with attention dropout, a fixed attention or
            a logit bias (the message names the flag or argument).
    """
    if attention not in ATTENTION_MODES:
        raise UsageError(f"attention must be one of {', '.join(ATTENTION_MODES)}, got {attention!r}.")
    refused = [
        name
        for name, on in (
            ("--attn-dropout / attn_dropout (attention dropout)", attn_dropout > 0),
            ("fixed_attention", fixed_attention),
            ("logit_bias (MPNet's relative-position bias)", logit_bias),
        )
        if on
    ]
    if attention == "auto":
        return "blocked" if n >= AUTO_BLOCKED_MIN_TOKENS and not refused else "dense"
    if attention == "blocked" and refused:
        raise UsageError(
            f"--attention blocked cannot carry {refused[0]} yet (it needs the (n, n) attention matrix); "
            "use --attention dense (or auto), or drop it."
        )
    return attention


def layer_mask(mask, attention: str, attn_dropout: float, fixed_attention, logit_bias):
    """``(path, mask field)``: the path of `resolve_attention` and the layer's mask on it, a checked
    ``(n, n)`` JAX array on the dense path (a tracer as is), a `MaskStructure` on the blocked one."""
    path = resolve_attention(
        attention, mask.shape[-1], attn_dropout=attn_dropout, fixed_attention=fixed_attention is not None,
        logit_bias=logit_bias is not None,
    )  # fmt: skip
    if path == "blocked":
        return path, as_structure(mask)
    if isinstance(mask, jax.core.Tracer):
        return path, mask
    return path, jnp.asarray(mask.dense() if isinstance(mask, MaskStructure) else mask_from_adjacency(mask))


def choose_block_size(s: MaskStructure) -> int:
    r"""The block size of the blocked path for mask ``s`` when the caller gives none.

    The candidate of `BLOCK_CELL_COST` with the least ``touched cells x cost per cell``, where the
    touched cells are ``len(block_pairs(b)) b^2``: large blocks where the mask is wide (complete,
    causal: about as many cells at 512 as at 128, each cheaper), 128 where it is narrow (a window
    of +-64 touches about 4x the cells at 512). A CSR mask keeps `BLOCK_SIZE`: its per-pair tiles
    are ``b^2`` booleans each.
    """
    if s.kind == "csr" or s.n <= BLOCK_SIZE:  # n <= 128: one block whatever the size
        return BLOCK_SIZE
    cost = {b: s.block_pairs(b)[0].size * min(b, s.n) ** 2 * c for b, c in BLOCK_CELL_COST.items()}
    return min(cost, key=lambda b: (cost[b], b))


def step_pairs(size: int, nb: int) -> int:
    """Block pairs per step of the blocked path for blocks of ``size`` tokens (``nb`` query blocks):
    as many as keep one step's scores within `STEP_CELLS` per trajectory, at least 1."""
    return max(1, min(STEP_CELLS // (size * size), nb))


def score_entries(path: str, n: int, dv: int, block: int = BLOCK_SIZE) -> int:
    """Numbers per head and trajectory that the attention keeps at once beyond the token-sized
    buffers, the unit of the memory estimate (`rankdyn._run._sizing.estimate_parts`): the ``(n, n)``
    scores on the dense path; one step's scores (`step_pairs` blocks) plus the running maximum,
    minimum and sum on the blocked one, ``3 n``, linear in n.

    The blocked path's ``(n, d_v)`` running sums are the attention's output, which the estimate's
    token-sized buffers count already (as on the dense path, ``A V``): counted here too, the
    estimate was 1.49x and 1.55x the peak RSS growth at n = 65536 (window 32, d = 64 and 16,
    ``--metrics stable_rank``), whose growth is 7.1 and 7.3 token-sized buffers per trajectory in
    all (``tests/test_memory_estimates.py``). ``dv`` is unused (the signature both paths share)."""
    if path != "blocked":
        return n * n
    b = min(block, n)
    nb = -(-n // b)
    return step_pairs(b, nb) * b * b + (nb + 1) * b * 3


def _allowed(s: MaskStructure, rows, cols):
    """``M[i, j]`` of a named mask for row indices ``rows (B, 1)`` and key indices ``cols (1, B)``."""
    off = cols - rows
    if s.kind in ("complete", "csr"):
        return jnp.ones(jnp.broadcast_shapes(rows.shape, cols.shape), bool)
    if s.kind == "causal":
        return off <= 0
    if s.kind == "window":
        return (off >= -s.left) & (off <= s.right)
    if s.kind == "dilated":
        a = jnp.abs(off)
        return (a <= 1) | ((a <= s.hops * s.dilation) & (a % s.dilation == 0))
    if s.kind == "global":
        return ((off >= -s.left) & (off <= s.right)) | (rows < s.num_global) | (cols < s.num_global)
    if s.kind == "block-sparse":
        b = cols // s.block - rows // s.block
        return (b >= -s.left) & (b <= s.right)
    raise RuntimeError(f"no mask predicate for kind {s.kind!r}")


#: Score cells per step and trajectory of the blocked path (`step_pairs`): 16 blocks of 128^2, so a
#: step's scores stay cache-sized (1 MiB in float32); with one step per query block row (W = n /
#: 128) the time per token tripled from n = 4096 to 65536 (window +-64, measured); 4 blocks of
#: 256^2, one of 512^2.
STEP_CELLS = 16 * 128 * 128


def _schedule(s: MaskStructure, size: int):
    """The touched pairs in steps of at most `step_pairs` pairs, no query block twice in a step:
    int32 ``(steps, W)`` query and key block indices (padding: the dummy query block ``nb``,
    discarded), and for a CSR mask the boolean ``(steps, W, size, size)`` tiles.

    Pairs are ordered by round (round r: the r-th touched key block of every query block that
    has one), so a step updates each of its query blocks' running statistics once.
    """
    qb, kb = s.block_pairs(size)
    nb = -(-s.n // size)
    tiles = None
    if s.kind == "csr":  # the tile of each pair, in block_pairs' order
        indptr, indices = s.csr()
        row = np.repeat(np.arange(s.n), np.diff(indptr))
        pair = np.searchsorted(qb.astype(np.int64) * nb + kb, (row // size) * nb + indices // size)
        tiles = np.zeros((qb.size, size, size), bool)
        tiles[pair, row % size, indices % size] = True
    rank = np.arange(qb.size) - np.searchsorted(qb, qb, side="left")  # position within its row
    order = np.lexsort((qb, rank))
    qb, kb = qb[order], kb[order]
    width = step_pairs(size, nb)
    # Consecutive pairs fill a step until it is full or a query block would come twice; the
    # rounds are long for banded masks and shrink only at causal's last rows: little padding.
    slot = np.empty(qb.size, np.int64)
    step, pos, seen = 0, 0, set()
    for i, q in enumerate(qb.tolist()):
        if pos == width or q in seen:
            step, pos, seen = step + 1, 0, set()
        slot[i] = step * width + pos
        pos += 1
        seen.add(q)
    total = (step + 1) * width
    q_out, k_out = np.full(total, nb, np.int32), np.zeros(total, np.int32)
    q_out[slot], k_out[slot] = qb, kb
    if tiles is not None:
        placed = np.zeros((total, size, size), bool)
        placed[slot] = tiles[order]
        tiles = placed.reshape(-1, width, size, size)
    return q_out.reshape(-1, width), k_out.reshape(-1, width), tiles


def _pad_blocks(v, nb: int, size: int):
    """``(heads, n, k)`` -> ``(heads, nb + 1, size, k)``, zero rows appended (the last block: the dummy)."""
    h, n, k = v.shape
    return jnp.pad(v, ((0, 0), (0, (nb + 1) * size - n), (0, 0))).reshape(h, nb + 1, size, k)


def _online_softmax(layer, q, k, v, prec):
    """``(A V, eps_min)`` of one head stack ``q (h, n, dk)``, ``k``, ``v (h, n, dv)`` by key blocks.

    Each step takes up to `step_pairs` touched (query block, key block) pairs with distinct query
    blocks (one batched product of ``W`` blocks), so every touched block is computed once, no
    other, and a step's work and memory do not grow with n.
    """
    s: MaskStructure = layer.mask
    n = s.n
    size = min(layer.block_size, n)
    nb = -(-n // size)
    qb, kb, tiles = _schedule(s, size)
    xs = (jnp.asarray(qb), jnp.asarray(kb)) + (() if tiles is None else (jnp.asarray(tiles),))
    scale = (1.0 / jnp.sqrt(layer.dqk)).astype(q.dtype)
    q, k, v = (_pad_blocks(a, nb, size) for a in (q, k, v))
    h, dt = q.shape[0], q.dtype
    neg = jnp.finfo(dt).min
    iota = jnp.arange(size, dtype=jnp.int32)

    def step(carry, pair):
        m, l, smin, acc = carry
        qi, ki = pair[0], pair[1]  # (W,)
        scores = _head_einsum("hwbk,hwck->hwbc", q[:, qi], k[:, ki], prec) * scale
        rows, cols = qi[:, None] * size + iota[None], ki[:, None] * size + iota[None]  # (W, size)
        ok = _allowed(s, rows[:, :, None], cols[:, None, :]) & (cols < n)[:, None, :]
        ok = ok & (qi < nb)[:, None, None]  # the padding pairs of the last step count nothing
        if len(pair) == 3:
            ok = ok & pair[2]
        # A step holds each query block once (`_schedule`): gather its statistics, update, put back.
        m_old = m[:, qi]
        m_new = jnp.maximum(m_old, jnp.max(jnp.where(ok, scores, neg), axis=-1))
        p = jnp.where(ok, jnp.exp(scores - m_new[..., None]), 0.0)
        corr = jnp.exp(m_old - m_new)  # rescales what earlier steps summed (online softmax)
        l_new = l[:, qi] * corr + jnp.sum(p, axis=-1)
        acc_new = acc[:, qi] * corr[..., None] + _head_einsum("hwbc,hwce->hwbe", p, v[:, ki], prec)
        smin_new = jnp.minimum(smin[:, qi], jnp.min(jnp.where(ok, scores, jnp.inf), axis=-1))
        put = lambda a, u: a.at[:, qi].set(u)  # noqa: E731
        return (put(m, m_new), put(l, l_new), put(smin, smin_new), put(acc, acc_new)), None

    init = (
        jnp.full((h, nb + 1, size), neg, dt),
        jnp.zeros((h, nb + 1, size), dt),
        jnp.full((h, nb + 1, size), jnp.inf, dt),
        jnp.zeros((h, nb + 1, size, v.shape[-1]), dt),
    )
    (m, l, smin, acc), _ = lax.scan(step, init, xs)
    out = acc.reshape(h, (nb + 1) * size, -1)[:, :n] / l.reshape(h, (nb + 1) * size, 1)[:, :n]
    m, l, smin = (a.reshape(h, (nb + 1) * size)[:, :n] for a in (m, l, smin))
    # Theorem 1's epsilon: the smallest weight of row i is e^{min_j R_ij - m_i} / l_i.
    eps_min = jnp.min(jnp.exp(smin - m) / l)
    return out, eps_min


def _queries_keys(layer, x_att, w, prec, with_values: bool):
    """``(q, k, [X W_V])`` per head, projected once for all tokens ($O(n d)$), QK-normalised and
    rotated if the layer says so (as on the dense path: the norm right after the projections)."""
    right = [(w.w_q, w.b_q), (w.w_k, w.b_k)] + ([(w.w_v, w.b_v)] if with_values else [])
    parts = _project(x_att, right, prec)
    q, k = parts[0], parts[1]
    if layer.qk_norm:
        q, k = qk_normalise(q), qk_normalise(k)
    if layer.rotary is not None:
        q, k = layer.rotary(q), layer.rotary(k)
    return q, k, parts[2:]


def blocked_attention_block(layer, x_att, x_in, w, prec):
    r"""`SelfAttentionLayer._attention_block` on the blocked path: $(F(X), \varepsilon_{\min})$.

    `_online_softmax` visits the touched key blocks; heads are concatenated and projected by
    $W_O$ (and $b_O$) as on the dense path.
    """
    same = x_att is x_in
    q, k, rest = _queries_keys(layer, x_att, w, prec, same)
    xv = rest[0] if same else _add_bias(_head_einsum("md,hde->hme", x_in, w.w_v, prec), w.b_v)
    heads, eps_min = _online_softmax(layer, q, k, xv, prec)
    return _merge_heads(heads, w, prec), eps_min


def blocked_attention_times(layer, x_att, w, probe, prec, *, uniform: bool = False):
    r"""$A P$ per head, ``(heads, n, p)``, for a probe matrix $P$ ``(n, p)``, without $A$.

    The probe takes the place of the values in the online softmax, so what a measurement needs of
    $A$ comes from the same running sums: $P = e_0$ gives the attention on token 0 (a sink), an
    indicator of the centres their mass, indicators of key-position bins a profile. With
    ``uniform`` the scores are all zero: $P$ averaged over each row's neighbours (the baselines).
    """
    if uniform:
        q = k = jnp.zeros((1, probe.shape[0], 1), probe.dtype)
    else:
        q, k, _ = _queries_keys(layer, x_att, w, prec, False)
    v = jnp.broadcast_to(probe.astype(q.dtype), (q.shape[0],) + probe.shape)
    return _online_softmax(layer, q, k, v, prec)[0]
