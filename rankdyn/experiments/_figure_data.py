"""Fields of a `Measured` result that feed a target's figures or checks but not its JSON.

A theory target draws its figures from per-start arrays (basin outcomes on an angle grid, the
states of a trajectory) that the target JSON has never held: keeping them in the typed result
lets ``render`` draw from the result alone, and leaving them out of ``to_dict`` keeps the JSON
(``out/<target>.json``) as it was.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ._target import Measured, jsonable

__all__ = ["MeasuredWithFigureData", "figure_data"]


def figure_data(default: Any = None) -> Any:
    """A dataclass field kept out of the JSON (``to_dict``) of a `MeasuredWithFigureData`."""
    return dataclasses.field(default=default, repr=False, compare=False, metadata={"json": False})


@dataclasses.dataclass(frozen=True)
class MeasuredWithFigureData(Measured):
    """A `Measured` whose `figure_data` fields are left out of ``to_dict``."""

    def to_dict(self) -> dict[str, Any]:
        """The JSON fields as JSON values (the `figure_data` fields left out)."""
        return {
            f.name: jsonable(getattr(self, f.name))
            for f in dataclasses.fields(self)
            if f.metadata.get("json", True)
        }
