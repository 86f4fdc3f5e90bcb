"""The shape every reproduce target shares: compute -> checks -> render, assembled once here.

A target module holds ``NAME``, ``CLAIM`` and five functions:

1. ``sizes(quick) -> dict``: the sizes of a quick or a full run (the one size function).
2. ``compute(sizes, seed) -> <Target>Measured``: the numbers, as a frozen dataclass deriving from
   `Measured` (its ``to_dict`` is the target JSON's ``measured``). No checks, no figures, no prose.
   A target that shares runs takes ``cache=``, one on a trained checkpoint ``ckpt=``.
3. ``checks(measured) -> list[Check]``: pure functions of the measured result that feed
   `_verdict.verdict`. A test feeds each target's ``checks`` a synthetic result that must fail.
4. ``render(out, measured, checks, *, quick) -> Rendered``: figures and prose, the prose generated
   from the numbers (a sentence states a conclusion only when the numbers say so).
5. ``describe(measured, checks, sizes, *, seed, quick) -> Description``: what the result says
   besides the numbers: the setting, the key numbers, the criterion.

`rankdyn._reproduce._registry.run_target` composes them (in float64 when the target's record
says so) into `TargetResult.to_dict()`, so the result's keys (`RESULT_KEYS`) are assembled in one
place for every target.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from .._run._io import to_jsonable
from ._verdict import VERDICT_RULE, Check, checks_json, verdict

__all__ = ["Measured", "Rendered", "Description", "TargetResult", "off_json"]


def off_json(**kwargs: Any) -> Any:
    """A `Measured` field kept out of its JSON (``dataclasses.field`` with ``metadata["json"] = False``).

    A target's ``measured`` JSON is a summary (the file format keeps it small), while its checks and
    figures may need the full series it was computed from (every saved time, example trajectories,
    the bands of a figure): such fields are in the typed result, so the checks stay pure functions
    of it, but not in the JSON.
    """
    return dataclasses.field(metadata={"json": False}, **kwargs)


@dataclasses.dataclass(frozen=True)
class Measured:
    """Base of a target's typed compute result: a frozen dataclass of its measured numbers."""

    def to_dict(self) -> dict[str, Any]:
        """The fields not declared with `off_json`, as JSON values (the target JSON's ``measured``)."""
        return {
            f.name: to_jsonable(getattr(self, f.name))
            for f in dataclasses.fields(self)
            if f.metadata.get("json", True)
        }


@dataclasses.dataclass(frozen=True)
class Rendered:
    """What every target's ``render`` returns.

    Attributes:
        figures: file names of the PNGs written into the output folder.
        notes: prose generated from the numbers.
        tables: Markdown tables for the report (after the checks table; may be empty).
    """

    figures: Sequence[str]
    notes: str
    tables: str = ""


@dataclasses.dataclass(frozen=True)
class Description:
    """What every target's ``describe`` returns: the parts of its result that are not numbers.

    Attributes:
        setting: sizes, seed, dtype and every other input that made the numbers.
        key_numbers: label -> number for the short report.
        criterion: the rule the verdict follows, in words.
        model: the model measured, when it stands in for the paper's.
        verdict_word: the verdict when it is not `_verdict.verdict` of the checks.
        measured: the JSON's ``measured`` when it is more than the typed result (else None).
        extra: further top-level keys of the JSON (kept for file-format compatibility).
    """

    setting: Mapping[str, Any]
    key_numbers: Mapping[str, Any] | None = None
    criterion: str = VERDICT_RULE
    model: str | None = None
    verdict_word: str | None = None
    measured: Any = None
    extra: Mapping[str, Any] | None = None


@dataclasses.dataclass(frozen=True)
class TargetResult:
    """What a target returns, before it becomes the JSON of ``out/<target>.json``.

    Attributes:
        name, claim: the target's ``NAME`` and ``CLAIM``.
        setting: sizes, seed, dtype and every other input that made the numbers.
        measured: the typed compute result (`Measured`) or a plain dict.
        checks: the checks, in report order.
        figures: file names of the PNGs written into the output folder.
        notes: prose generated from the numbers.
        key_numbers: label -> number for the short report.
        model: the model measured, when it stands in for the paper's (shown next to the verdict).
        tables: extra Markdown after the checks table (the report's "Tables" section).
        verdict_word: the verdict when it is not `_verdict.verdict` of the checks (an open
            question's `open_question_verdict`), with ``criterion`` its rule.
        criterion: the rule the verdict follows, in words.
        extra: further top-level keys of the JSON (kept for file-format compatibility).
    """

    name: str
    claim: str
    setting: Mapping[str, Any]
    measured: Any
    checks: Sequence[Check]
    figures: Sequence[str] = ()
    notes: str = ""
    key_numbers: Mapping[str, Any] | None = None
    model: str | None = None
    tables: str = ""
    verdict_word: str | None = None
    criterion: str = VERDICT_RULE
    extra: Mapping[str, Any] | None = None

    @property
    def verdict(self) -> str:
        return self.verdict_word if self.verdict_word is not None else verdict(self.checks)

    def to_dict(self) -> dict[str, Any]:
        """The result dict of the reproduce contract (``experiments.RESULT_KEYS`` and the optional keys)."""
        res = {
            "name": self.name,
            "claim": self.claim,
            "setting": to_jsonable(self.setting),
            "measured": to_jsonable(self.measured),
            "checks": checks_json(self.checks),
            "key_numbers": to_jsonable(dict(self.key_numbers or {})),
            "verdict": self.verdict,
            "criterion": self.criterion,
            "figures": list(self.figures),
            "notes": self.notes,
            # The checks have their own table in the report (from "checks"): markdown is the rest.
            "markdown": self.tables.strip("\n"),
        }
        if self.model is not None:
            res["model"] = self.model
        res.update(to_jsonable(dict(self.extra or {})))
        return res
