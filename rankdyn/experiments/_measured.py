"""A `Measured` whose compute result holds more than its JSON: the series that checks and figures read.

A target's ``measured`` JSON is a summary (the file format keeps it small), while its checks and
figures may need the full series it was computed from (every saved time, the example
trajectories, the bands of a figure). Such fields are declared with `off_json` and kept out of
`OffJsonMeasured.to_dict`, so the JSON stays the summary and the checks stay pure functions of
the one typed result.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ._target import Measured, jsonable

__all__ = ["OffJsonMeasured", "off_json"]


def off_json(**kwargs: Any) -> Any:
    """A dataclass field kept out of the JSON (``dataclasses.field`` with ``metadata["json"] = False``)."""
    return dataclasses.field(metadata={"json": False}, **kwargs)


@dataclasses.dataclass(frozen=True)
class OffJsonMeasured(Measured):
    """A `Measured` whose `off_json` fields are in the typed result but not in its JSON."""

    def to_dict(self) -> dict[str, Any]:
        """The fields not declared with `off_json`, as JSON values (the target JSON's ``measured``)."""
        return {
            f.name: jsonable(getattr(self, f.name))
            for f in dataclasses.fields(self)
            if f.metadata.get("json", True)
        }
