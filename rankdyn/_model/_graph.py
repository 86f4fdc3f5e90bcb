"""Graph quantities of a mask that enter the theorems (docs/theory.md#masks-as-graphs).

Edges follow the flow of information, ``j -> i`` whenever ``M[i, j]`` (token i attends to j).
A *center* is a node from which every node is reachable; the graph is *quasi-strongly
connected* iff it has a center. The *radius* is ``r = min_{c in centers} max_v dist(c, v)``:
the number of layers after which a center's information has reached everyone, which sets the
rate ``(1 - eps^r)^{t/r}`` of Theorem 1.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ._mask_structure import MaskStructure, as_structure
from ._masks import mask_from_adjacency

__all__ = ["GraphInfo", "graph_info", "distances"]


@dataclasses.dataclass(frozen=True)
class GraphInfo:
    """Connectivity summary of a mask graph.

    Attributes:
        num_tokens: n.
        strongly_connected: every token reaches every other token.
        quasi_strongly_connected: at least one center exists (Theorem 1's hypothesis).
        centers: indices (0-based) of the center nodes.
        radius: min over centers of the largest distance to any node; None without centers.
        diameter: the longest shortest path if strongly connected, else None (some pair is
            then unreachable and the diameter is infinite).
    """

    num_tokens: int
    strongly_connected: bool
    quasi_strongly_connected: bool
    centers: tuple[int, ...]
    radius: int | None
    diameter: int | None

    @property
    def num_centers(self) -> int:
        return len(self.centers)

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["centers"] = list(self.centers)
        d["num_centers"] = self.num_centers
        return d


def distances(mask) -> np.ndarray:
    """``dist[u, v]``: number of edges on a shortest path ``u -> v`` (``inf`` if unreachable).

    Uses breadth-first search (SciPy's unweighted shortest paths), O(n (n + |E|)).
    """
    import scipy.sparse as sp  # SciPy on demand: named masks need none (0.3-0.4 s of a CLI call)
    from scipy.sparse.csgraph import shortest_path

    m = mask_from_adjacency(mask)
    # Edge j -> i iff M[i, j]; csgraph wants adjacency[u, v] = edge u -> v, i.e. M transposed.
    return shortest_path(sp.csr_matrix(m.T.astype(np.int8)), unweighted=True, directed=True)


def graph_info(mask) -> GraphInfo:
    """Strong connectivity, centers, radius and diameter of a mask (docs/theory.md#masks-as-graphs).

    No ``(n, n)`` distance matrix: named masks use their closed-form eccentricities
    (`MaskStructure.eccentricities`, O(n)); other masks (dilated, random, a boolean array) the
    condensation into strongly connected components (the centres are the source component when it
    is unique) and exact BFS from the centres with bounds on the eccentricities (`_bounded`), each
    BFS O(n + |E|). `distances` (all pairs) is kept as the oracle of the tests.

    Arguments:
        mask: boolean ``(n, n)`` with ``M[i, j]`` = token i attends to token j, diagonal True, or a
            `MaskStructure`.

    Returns:
        A `GraphInfo`. Oracles at n = 128: complete r = 1; causal r = 1 with center {0};
        window +-1 r = 64; uni-directional window r = 127.

    Raises:
        ValueError: if the mask is not square, not boolean, or lacks self-loops.
    """
    s = as_structure(mask)
    n = s.n
    ecc = s.eccentricities()
    if ecc is not None:
        finite = np.isfinite(ecc)
        centers = np.flatnonzero(finite)
        radius = int(ecc[finite].min()) if centers.size else None
        strongly = bool(finite.all())
        diameter = int(ecc.max()) if strongly else None
    else:
        centers, radius, diameter, strongly = _bfs_quantities(s)
    return GraphInfo(
        num_tokens=n,
        strongly_connected=strongly,
        quasi_strongly_connected=bool(len(centers)),
        centers=tuple(centers.tolist()),
        radius=radius,
        diameter=diameter,
    )


def _bfs_quantities(s: MaskStructure):
    """Centres, radius, diameter and strong connectivity of a mask from its CSR rows, exactly."""
    import scipy.sparse as sp
    from scipy.sparse.csgraph import connected_components

    n = s.n
    indptr, indices = s.csr()
    data = np.ones(indices.size, np.int8)
    m = sp.csr_matrix((data, indices, indptr), shape=(n, n))  # M[i, j]: edge j -> i
    flow = m.T.tocsr()  # flow[u, v]: information moves u -> v
    ncomp, comp = connected_components(flow, directed=True, connection="strong")
    # A component with an edge into it from another component is not a source of the condensation.
    row = np.repeat(np.arange(n), np.diff(indptr))
    entered = np.zeros(ncomp, bool)
    entered[comp[row][comp[indices] != comp[row]]] = True
    sources = np.flatnonzero(~entered)
    if sources.size != 1:
        return np.arange(0), None, None, False
    centers = np.flatnonzero(comp == sources[0])
    strongly = ncomp == 1
    symmetric = s.symmetric if s.symmetric is not None else (m != m.T).nnz == 0
    radius, diameter = _bounded(flow, None if symmetric else m, centers, strongly)
    return centers, radius, diameter, strongly


def _bounded(flow, back, centers: np.ndarray, strongly: bool) -> tuple[int, int | None]:
    r"""Exact radius over ``centers`` (and the diameter if ``strongly``) by BFS with eccentricity bounds.

    The bounds of Takes & Kosters (BoundingDiameters), in their directed form: after a forward BFS
    from v (distances $d(v, \cdot)$, eccentricity $e(v)$) and a backward one ($d(\cdot, v)$), every
    w has $\max(d(w, v), e(v) - d(v, w)) \le e(w) \le d(w, v) + e(v)$ (triangle inequality). BFS
    goes alternately from the unresolved candidate of smallest lower bound (radius) and of largest
    upper bound (diameter) until the bounds meet: exact, and usually a few BFS (iFUB-style exit).
    ``back`` is None for a symmetric mask (the backward BFS is the forward one).
    """
    from scipy.sparse.csgraph import shortest_path

    n = flow.shape[0]
    cand = np.zeros(n, bool)
    cand[centers] = True
    lo, up = np.zeros(n), np.full(n, np.inf)
    turn = 0
    while True:
        r_lo, r_up = lo[cand].min(), up[cand].min()
        d_lo, d_up = (lo.max(), up.max()) if strongly else (0.0, 0.0)
        if r_lo == r_up and d_lo == d_up:
            return int(r_up), (int(d_up) if strongly else None)
        open_ = cand & (lo < up)
        want_radius = r_lo < r_up and (turn % 2 == 0 or d_lo == d_up)
        if want_radius:
            v = int(np.flatnonzero(open_)[np.argmin(lo[open_])])
        else:
            v = int(np.flatnonzero(open_)[np.argmax(up[open_])])
        turn += 1
        fwd = shortest_path(flow, unweighted=True, directed=True, indices=v)
        bwd = fwd if back is None else shortest_path(back, unweighted=True, directed=True, indices=v)
        e = fwd.max()
        with np.errstate(invalid="ignore"):
            lo = np.maximum(lo, np.maximum(bwd, e - fwd))
        up = np.minimum(up, bwd + e)
        lo[v] = up[v] = e
