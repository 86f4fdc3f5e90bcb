"""Attention masks as directed graphs, and the graph quantities that enter the theorems.

``M[i, j] = True`` iff token ``i`` may attend to token ``j``; information flows along edges
``j -> i``. `graph_info` gives strong and quasi-strong connectivity, the centre nodes and the
radius $r$ of Theorem 1 (``docs/theory.md#masks-as-graphs``). A `MaskStructure` is a mask by its
structure (kind and widths, or CSR rows): `graph_info` and the blocked attention path use it
without an ``(n, n)`` array (``docs/long-context.md``).
"""

from ._model._graph import GraphInfo as GraphInfo, distances as distances, graph_info as graph_info
from ._model._mask_structure import MaskStructure as MaskStructure, make_mask_structure as make_mask_structure
from ._model._masks import (
    MASK_NAMES as MASK_NAMES,
    causal_mask as causal_mask,
    complete_mask as complete_mask,
    dilated_mask as dilated_mask,
    global_local_mask as global_local_mask,
    make_mask as make_mask,
    mask_from_adjacency as mask_from_adjacency,
    random_mask as random_mask,
    window_mask as window_mask,
)
