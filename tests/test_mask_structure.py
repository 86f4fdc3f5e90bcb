"""Masks as structure: graph quantities without an (n, n) distance matrix.

Oracles: the all-pairs BFS of `rankdyn._model._graph.distances` (SciPy) on the dense array of the
existing constructors, and the dense array itself for the CSR rows and the touched key blocks.
"""

import numpy as np
import pytest

from rankdyn._errors import UsageError
from rankdyn._model._graph import GraphInfo, distances, graph_info
from rankdyn._model._mask_structure import MaskStructure as MS, as_structure, make_mask_structure
from rankdyn._model._masks import make_mask


def _oracle(m) -> GraphInfo:
    dist = distances(m)
    ecc = dist.max(axis=1)
    centers = tuple(int(c) for c in np.flatnonzero(np.isfinite(ecc)))
    strongly = len(centers) == len(ecc)
    return GraphInfo(
        len(ecc), strongly, bool(centers), centers,
        int(ecc[list(centers)].min()) if centers else None, int(ecc.max()) if strongly else None,
    )  # fmt: skip


def _cases(n):
    yield MS.complete(n)
    yield MS.causal(n)
    for left in range(4):
        for right in range(4):
            yield MS.window(n, left, right)
    for hops in range(3):
        for dil in (1, 2, 3, 5):
            yield MS.dilated(n, hops, dil)
    for g in range(min(n, 2) + 1):
        for w in range(3):
            yield MS.global_local(n, g, w)
    for b in (1, 2, 3):
        for left in range(3):
            for right in range(3):
                yield MS.block_sparse(n, b, left, right)
    for seed in range(3):
        yield make_mask_structure("random", n, p=0.15, seed=seed)
        if n > 2:
            yield make_mask_structure("random", n, degree=2, seed=seed)


@pytest.mark.parametrize("n", [1, 2, 7, 13])
def test_graph_info_equals_all_pairs_bfs(n):
    # Closed forms (window, causal, global, block-sparse) and bounded BFS (dilated, random) against
    # all-pairs BFS; an off-by-one in a window's reach or a swapped direction changes the radius.
    for s in _cases(n):
        want = _oracle(s.dense())
        assert graph_info(s) == want, s
        assert graph_info(s.dense()) == want, s  # a dense array goes through the CSR path


def test_dense_and_csr_agree_with_the_constructors():
    for name in ("complete", "causal", "window", "window-uni", "dilated", "global", "random"):
        for n in (1, 6, 11):
            kw = dict(window=2, dilation=3, num_global=2 if n > 1 else 1, p=0.3, seed=1)
            s = make_mask_structure(name, n, **kw)
            dense = make_mask(name, n, **kw)
            assert np.array_equal(s.dense(), dense)
            indptr, indices = s.csr()
            rebuilt = np.zeros((n, n), bool)
            rebuilt[np.repeat(np.arange(n), np.diff(indptr)), indices] = True
            assert np.array_equal(rebuilt, dense), name
            assert as_structure(dense).dense().tolist() == dense.tolist()


@pytest.mark.parametrize("size", [1, 3, 4])
def test_block_pairs_cover_every_edge_once(size):
    for s in _cases(11):
        qb, kb = s.block_pairs(size)
        nb = -(-s.n // size)
        touched = np.zeros((nb, nb), bool)
        touched[qb, kb] = True
        rows, cols = np.nonzero(s.dense())
        assert touched[rows // size, cols // size].all(), s
        assert len(set(zip(qb.tolist(), kb.tolist()))) == qb.size, s
        assert np.all(np.diff(qb) >= 0)


def test_a_structured_mask_at_65536_tokens():
    # Closed forms: window +-16 over n tokens has radius n / (2 * 16) (from the middle token) and
    # diameter (n - 1) / 16 rounded up; no (n, n) array (it would be 4 GiB).
    n = 65536
    g = graph_info(MS.window(n, 16, 16))
    assert (g.radius, g.diameter, g.num_centers) == (2048, 4096, n)
    g = graph_info(make_mask_structure("window-uni", n, window=16))
    assert (g.radius, g.centers, g.diameter) == (4096, (0,), None)
    assert MS.window(n, 16, 16).block_pairs(128)[0].size == 3 * 512 - 2


def test_bad_structures_are_refused():
    with pytest.raises(UsageError, match="self-loops"):
        MS.from_csr(2, [0, 1, 2], [1, 0])
    with pytest.raises(UsageError, match="mask-degree"):
        make_mask_structure("random", 4, degree=4)
    with pytest.raises(UsageError, match="left"):
        MS.window(5, -1, 0)
