"""Typed results of the equilibrium searches: frozen dataclasses with ``to_dict()`` for JSON.

`equilibrium_census` returns a `CensusResult` (one `EquilibriumRecord` per class), `tree_search`
a `TreeResult`, `joint_search` a `JointResult` and `symmetry_group` a `SymmetryGroup`; the joint
search's settings are one `JointOptions`, shared by the census and the joint search.

``to_dict()`` gives the JSON layout (as JSON values, `rankdyn._run._io.to_jsonable`); fields are
read as attributes.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from .._arguments import check_count
from .._errors import UsageError
from .._run._io import to_jsonable

__all__ = [
    "SymmetryGroup",
    "TreeResult",
    "JointResult",
    "JointOptions",
    "EquilibriumRecord",
    "CensusResult",
]


class _Result:
    """``to_dict`` for the dataclasses."""

    def to_dict(self) -> dict[str, Any]:
        """Field -> JSON value (nested results as dicts, arrays as lists)."""
        return {f.name: to_jsonable(getattr(self, f.name)) for f in dataclasses.fields(self)}


@dataclasses.dataclass(frozen=True, eq=False)
class SymmetryGroup(_Result):
    """The discrete symmetries of a layer map (`symmetry_group`).

    Attributes:
        sign: whether $X \\mapsto -X$ commutes with the map.
        all_permutations: every token permutation does (complete mask).
        permutations: the enumerated token permutations (index arrays) otherwise.
    """

    sign: bool
    all_permutations: bool
    permutations: Sequence = ()

    def __post_init__(self):
        object.__setattr__(self, "permutations", tuple(np.asarray(p) for p in self.permutations))


@dataclasses.dataclass(frozen=True, eq=False)
class TreeResult(_Result):
    """`tree_search`: every solution ``x (m, n, d)``, per-token ``saturation`` statistics and how
    the first token was found (``first_token``: ``"exact"`` or ``"search"``)."""

    x: np.ndarray
    saturation: list
    first_token: str


@dataclasses.dataclass(frozen=True, eq=False)
class JointResult(_Result):
    """`joint_search`: ``classes`` (`EquilibriumClass` list), ``first_round`` (per class, the round
    that first found it), ``rounds`` (per round: starts, status counts, new classes, seconds),
    ``status_counts`` over all starts and ``timing``."""

    classes: list
    first_round: list
    rounds: list
    status_counts: dict
    timing: dict


@dataclasses.dataclass(frozen=True)
class JointOptions:
    """Settings of the joint search (`joint_search`; `equilibrium_census` takes them as ``joint=``).

    Attributes:
        starts: random starts of the first round; ``chunk``: starts per compiled batch.
        method: ``"gn"`` or ``"lm"`` (as in `find_equilibria`); ``solver``: an Optimistix solver instead.
        max_steps: Newton steps per start; ``short_steps``: a first budget, after which only the
            starts still iterating continue (0 disables it).
        forward_steps, minimise_steps, learning_rate: forward iterations and Adam steps (on the
            squared residual) before the solve.
        deflation_rounds: rounds that deflate all classes found so far; ``deflation_starts``:
            starts per such round (default ``starts // 4``).
        target_ranks, target_starts: extra rank-biased rounds, one per rank, and their starts.
        residual_tol, rank_tol: as in `find_equilibria` (None: the dtype's default).
        dedup_tol: max-abs distance (modulo symmetries) under which two solutions are one.
        progress: show a progress bar.

    Raises:
        UsageError: for counts below 1 (starts, chunk) or below 0, and tolerances that are not
            finite and >= 0.
    """

    starts: int = 4096
    chunk: int = 1024
    method: str = "gn"
    solver: Any = None
    max_steps: int = 100
    short_steps: int = 25
    forward_steps: int = 0
    minimise_steps: int = 0
    learning_rate: float = 1e-2
    deflation_rounds: int = 2
    deflation_starts: int | None = None
    target_ranks: Sequence[int] = ()
    target_starts: int = 512
    residual_tol: float | None = None
    rank_tol: float | None = None
    dedup_tol: float = 2e-2
    progress: bool = False

    def __post_init__(self):
        for name in ("starts", "chunk"):
            check_count(getattr(self, name), name)
        for name in ("deflation_rounds", "max_steps", "short_steps", "forward_steps", "minimise_steps"):
            check_count(getattr(self, name), name, minimum=0)
        for name in ("dedup_tol", "rank_tol", "residual_tol", "learning_rate"):
            v = getattr(self, name)
            if v is not None and not (math.isfinite(v) and v >= 0):
                raise UsageError(f"{name} must be finite and >= 0, got {v}.")

    @classmethod
    def names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in dataclasses.fields(cls))


@dataclasses.dataclass(frozen=True, eq=False)
class EquilibriumRecord(_Result):
    """One class of equilibria in a census (the representative ``tokens`` and its properties)."""

    rank: int
    residual: float
    error_estimate: float
    spectral_radius: float
    classification: str
    unstable_dims: int
    neutral_dims: int
    count: int
    first_round: str | None
    closed_form_match: bool | None
    steps: list | None
    singular_values: np.ndarray
    moduli: np.ndarray
    tokens: np.ndarray


@dataclasses.dataclass(frozen=True, eq=False)
class CensusResult(_Result):
    """`equilibrium_census`: the classes of equilibria and how they were found.

    Attributes:
        method: ``"exact"``, ``"tree-search"`` or ``"joint-search"``.
        completeness: how complete the enumeration is (``kind`` ``"exact"`` or ``"saturation"``).
        equilibria: one `EquilibriumRecord` per class, by rank then residual.
        by_rank, by_rank_and_class: counts of classes (modulo symmetry) per rank (and stability).
        status_counts, rounds: the joint search's per-start statuses and rounds (else empty).
        closed_forms: matches with the given closed forms (None without closed forms).
        coverage: the joint search's coverage of the exact classes (``joint_coverage``), or None.
        symmetries: the symmetry group as JSON.
        timing: seconds of the search, its compiles and the stability analysis.
    """

    method: str
    completeness: dict
    equilibria: tuple
    by_rank: dict
    by_rank_and_class: dict
    status_counts: dict
    rounds: list
    closed_forms: dict | None
    coverage: dict | None
    symmetries: dict
    timing: dict
