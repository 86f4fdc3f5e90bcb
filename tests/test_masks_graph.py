import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import rankdyn as rd


def test_graph_oracle_paper_masks_n128():
    n = 128
    g = rd.graph_info(rd.masks.complete_mask(n))
    assert (g.strongly_connected, g.radius, g.num_centers, g.diameter) == (True, 1, n, 1)
    g = rd.graph_info(rd.masks.causal_mask(n))
    assert (g.strongly_connected, g.quasi_strongly_connected, g.radius, g.centers) == (False, True, 1, (0,))
    g = rd.graph_info(rd.masks.window_mask(n, 1, 1))
    assert (g.strongly_connected, g.radius, g.diameter) == (True, 64, 127)
    g = rd.graph_info(rd.masks.window_mask(n, 1, 0))
    assert (g.strongly_connected, g.quasi_strongly_connected, g.radius, g.centers) == (False, True, 127, (0,))


def test_global_tokens_are_centers_and_shrink_radius():
    g = rd.graph_info(rd.masks.global_local_mask(64, num_global=2, window=1))
    assert {0, 1} <= set(g.centers) and g.radius == 1 and g.diameter == 2


def test_disconnected_mask_has_no_center():
    m = np.eye(5, dtype=bool)
    g = rd.graph_info(m)
    assert not g.quasi_strongly_connected and g.radius is None and g.centers == ()


def test_mask_semantics():
    m = rd.masks.causal_mask(4)
    assert m[3, 0] and not m[0, 3]  # token 3 attends to token 0, not the reverse
    w = rd.masks.window_mask(6, 2, 0)
    assert w[5, 3] and not w[5, 2] and not w[3, 4]
    d = rd.masks.dilated_mask(20, window=2, dilation=4)
    assert d[10, 14] and d[10, 18] and d[10, 11] and not d[10, 12] and not d[10, 19]
    r = rd.masks.random_mask(30, p=0.2, seed=1)
    assert r.diagonal().all() and 0.1 < r.mean() < 0.35


def test_bad_masks_raise_actionable_errors():
    with pytest.raises(ValueError, match="square"):
        rd.masks.mask_from_adjacency(np.ones((2, 3), bool))
    with pytest.raises(ValueError, match="boolean"):
        rd.masks.mask_from_adjacency(np.full((2, 2), 0.5))
    bad = np.ones((4, 4), bool)
    bad[1, 1] = bad[3, 3] = False
    with pytest.raises(ValueError, match=r"self-loops.*\[1, 3\]"):
        rd.masks.mask_from_adjacency(bad)
    with pytest.raises(ValueError, match="unknown mask"):
        rd.masks.make_mask("diagonal", 4)


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 24), p=st.floats(0.0, 0.5), seed=st.integers(0, 10_000))
def test_graph_invariants_on_random_masks(n, p, seed):
    """Centers reach every node within the radius; r <= diameter <= 2r for undirected masks.

    (For directed graphs diameter <= 2r can fail: a center may reach all in one hop while the
    way back is long, so the inequality is checked on the symmetrised mask only.)"""
    mask = rd.masks.random_mask(n, p, seed)
    g = rd.graph_info(mask)
    dist = rd.masks.distances(mask)
    assert g.quasi_strongly_connected == bool(g.centers)
    if g.centers:
        assert min(dist[c].max() for c in g.centers) == g.radius
        assert all(np.isfinite(dist[c]).all() for c in g.centers)
    non_centers = set(range(n)) - set(g.centers)
    assert all(not np.isfinite(dist[v]).all() for v in non_centers)
    if g.strongly_connected:
        assert g.radius <= g.diameter
    sym = rd.graph_info(mask | mask.T)
    if sym.strongly_connected:
        assert sym.radius <= sym.diameter <= 2 * sym.radius
    # Edge j -> i iff M[i, j]: every allowed attention is one hop.
    i, j = np.nonzero(mask & ~np.eye(n, dtype=bool))
    assert np.all(dist[j, i] == 1)
