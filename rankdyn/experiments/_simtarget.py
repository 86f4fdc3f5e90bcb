"""Pieces shared by the simulation targets (masks-collapse, temperature, layernorm-orthogonal,
depth-table, ablation): a `Measured` whose JSON leaves out what only the figures need, and the
geometric mean over samples that their rate fits use.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from ._target import Measured, jsonable

__all__ = ["SimMeasured", "internal", "geo_mean", "ratio_text"]


def internal():
    """A field carried from compute to render (curves, the setting) but left out of the JSON's
    ``measured``, which keeps exactly the keys it had before the split."""
    return dataclasses.field(metadata={"json": False})


@dataclasses.dataclass(frozen=True)
class SimMeasured(Measured):
    """A `Measured` whose ``to_dict`` skips `internal` fields."""

    def to_dict(self) -> dict[str, Any]:
        """The JSON fields (not the `internal` ones) as JSON values."""
        return {
            f.name: jsonable(getattr(self, f.name))
            for f in dataclasses.fields(self)
            if f.metadata.get("json", True)
        }


def geo_mean(v: np.ndarray, ok: np.ndarray) -> np.ndarray:
    r"""Geometric mean over the finite samples of ``v (batch, S)``: $\exp(\overline{\log v})$.

    The rate of the typical trajectory: an arithmetic mean is dominated by the slowest sample.
    Values are clipped at 1e-300 so that an exact 0 (round-off collapse) stays finite in the log.
    """
    return np.exp(np.mean(np.log(np.maximum(v[ok], 1e-300)), axis=0))


def ratio_text(values) -> str:
    """``"a"`` or ``"a to b"``: the range of some ratios to 3 significant digits."""
    lo, hi = float(np.nanmin(values)), float(np.nanmax(values))
    return f"{lo:.3g}" if f"{lo:.3g}" == f"{hi:.3g}" else f"{lo:.3g} to {hi:.3g}"
