"""Attention masks as directed graphs, and the graph quantities that enter the theorems.

``M[i, j] = True`` iff token ``i`` may attend to token ``j``; information flows along edges
``j -> i``. `graph_info` gives strong and quasi-strong connectivity, the centre nodes and the
radius $r$ of Theorem 1 (``docs/theory.md#masks-as-graphs``). A `MaskStructure` is a mask by its
structure (kind and widths, or CSR rows): `graph_info` and the blocked attention path use it
without an ``(n, n)`` array (``docs/long-context.md``).
"""

from ._model._graph import GraphInfo as GraphInfo
from ._model._graph import distances as distances
from ._model._graph import graph_info as graph_info
from ._model._mask_structure import MaskStructure as MaskStructure
from ._model._mask_structure import make_mask_structure as make_mask_structure
from ._model._masks import (
    MASK_NAMES as MASK_NAMES,
)
from ._model._masks import (
    causal_mask as causal_mask,
)
from ._model._masks import (
    complete_mask as complete_mask,
)
from ._model._masks import (
    dilated_mask as dilated_mask,
)
from ._model._masks import (
    global_local_mask as global_local_mask,
)
from ._model._masks import (
    make_mask as make_mask,
)
from ._model._masks import (
    mask_from_adjacency as mask_from_adjacency,
)
from ._model._masks import (
    random_mask as random_mask,
)
from ._model._masks import (
    window_mask as window_mask,
)
