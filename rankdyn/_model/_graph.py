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
import scipy.sparse as sp
from scipy.sparse.csgraph import shortest_path

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
    m = mask_from_adjacency(mask)
    # Edge j -> i iff M[i, j]; csgraph wants adjacency[u, v] = edge u -> v, i.e. M transposed.
    return shortest_path(sp.csr_matrix(m.T.astype(np.int8)), unweighted=True, directed=True)


def graph_info(mask) -> GraphInfo:
    """Strong connectivity, centers, radius and diameter of a mask (docs/theory.md#masks-as-graphs).

    Arguments:
        mask: boolean ``(n, n)`` with ``M[i, j]`` = token i attends to token j, diagonal True.

    Returns:
        A `GraphInfo`. Oracles at n = 128: complete r = 1; causal r = 1 with center {0};
        window +-1 r = 64; uni-directional window r = 127.

    Raises:
        ValueError: if the mask is not square, not boolean, or lacks self-loops.
    """
    dist = distances(mask)
    n = dist.shape[0]
    eccentricity = dist.max(axis=1)  # largest distance from each node
    centers = tuple(int(c) for c in np.flatnonzero(np.isfinite(eccentricity)))
    strongly = len(centers) == n
    radius = int(eccentricity[list(centers)].min()) if centers else None
    diameter = int(eccentricity.max()) if strongly else None
    return GraphInfo(
        num_tokens=n,
        strongly_connected=strongly,
        quasi_strongly_connected=bool(centers),
        centers=centers,
        radius=radius,
        diameter=diameter,
    )
