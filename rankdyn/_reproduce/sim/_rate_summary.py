"""Pieces shared by the simulation targets (masks-collapse, temperature, layernorm-orthogonal,
depth-table, ablation): the geometric mean over samples that their rate fits use, and the range
of some numbers as text for their notes.
"""

from __future__ import annotations

import numpy as np

__all__ = ["geo_mean", "ratio_text"]


def geo_mean(v: np.ndarray, ok: np.ndarray) -> np.ndarray:
    r"""Geometric mean over the finite samples of ``v (batch, S)``: $\exp(\overline{\log v})$.

    The rate of the typical trajectory: an arithmetic mean is dominated by the slowest sample.
    Values are clipped at 1e-300 so that an exact 0 (round-off collapse) stays finite in the log.
    """
    return np.exp(np.mean(np.log(np.maximum(v[ok], 1e-300)), axis=0))


def ratio_text(values) -> str:
    """``"a"`` or ``"a to b"``: the range of some numbers to 3 significant digits."""
    lo, hi = float(np.nanmin(values)), float(np.nanmax(values))
    return f"{lo:.3g}" if f"{lo:.3g}" == f"{hi:.3g}" else f"{lo:.3g} to {hi:.3g}"
