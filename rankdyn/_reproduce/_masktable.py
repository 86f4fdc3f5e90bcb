"""The masks of the paper's experiments and their graph facts (docs/theory.md#masks-as-graphs)."""

from __future__ import annotations

import numpy as np

from .._model._graph import graph_info
from .._model._masks import make_mask

__all__ = ["PAPER_MASKS", "MASK_LABELS", "masks_for", "mask_table"]

#: Masks of the paper (Fig. 2, 3, 6): complete, causal, window +-1, uni-directional window.
PAPER_MASKS = ("complete", "causal", "window", "window-uni")
MASK_LABELS = {
    "complete": "complete",
    "causal": "causal",
    "window": "window +-1",
    "window-uni": "uni window",
    "dilated": "dilated",
    "global": "global+local",
}


def masks_for(names, n: int) -> dict[str, np.ndarray]:
    """Name -> boolean mask. ``dilated`` uses 2 hops of dilation 4 plus the unit window;
    ``global`` one global token plus the +-1 window; the others window 1."""
    out = {}
    for name in names:
        if name == "dilated":
            out[name] = make_mask("dilated", n, window=2, dilation=4)
        elif name == "global":
            out[name] = make_mask("global", n, window=1, num_global=1)
        else:
            out[name] = make_mask(name, n, window=1)
    return out


def mask_table(masks: dict[str, np.ndarray]) -> dict[str, dict]:
    """Graph facts per mask: strongly / quasi-strongly connected, number of centers, radius."""
    out = {}
    for name, m in masks.items():
        g = graph_info(m)
        out[name] = {
            "strongly_connected": g.strongly_connected,
            "quasi_strongly_connected": g.quasi_strongly_connected,
            "num_centers": g.num_centers,
            "radius": g.radius,
        }
    return out
