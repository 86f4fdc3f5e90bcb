r"""Deduplication: group equilibria that coincide up to the layer's symmetries."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import numpy as np
from jaxtyping import ArrayLike, Float

from .._errors import UsageError
from ._results import SymmetryGroup
from ._symmetry import group_distance, trivial_group

__all__ = ["EquilibriumClass", "deduplicate"]


@dataclasses.dataclass(frozen=True)
class EquilibriumClass:
    """One distinct equilibrium (up to symmetry) found by `deduplicate`.

    Attributes:
        x: the representative (the member with the smallest residual), NumPy ``(n, d)``.
        residual: its residual.
        members: indices (into the inputs of `deduplicate`) of all starts in this class.
    """

    x: np.ndarray
    residual: float
    members: np.ndarray

    @property
    def count(self) -> int:
        return int(len(self.members))


def deduplicate(
    xs: Float[ArrayLike, "m n d"],
    residuals: Float[ArrayLike, " m"],
    *,
    tol: float = 2e-2,
    symmetries: "SymmetryGroup | dict | None" = None,
    known: Sequence[np.ndarray] = (),
    errors: "Float[ArrayLike, ' m'] | None" = None,
) -> list[EquilibriumClass]:
    r"""Group equilibria that coincide up to symmetry (max-abs distance below ``tol``).

    With ``errors`` (per-point error estimates, already multiplied by any safety factor) the
    threshold of a point $a$ against a class representative $b$ is ``tol`` $+ e_a + e_b$: each
    pair is compared at its own accuracy (`rankdyn._observe._tolerances.merge_tol`).

    Greedy clustering in order of increasing residual: each point joins the first class whose
    representative is within ``tol`` of some image of it, else starts a new class.

    Arguments:
        xs: candidate equilibria (only pass the converged ones).
        residuals: their residuals (the best one represents a class).
        tol: max-abs distance, 2e-2 by default. Degenerate equilibria are pinned only to
            about 1e-3..1e-2 by a rounding-level residual (module docstring). Measured at
            n = d = 6, w = 7: copies of a closed form lie within 4.3e-3 of it, while two
            distinct equilibria can be as close as 0.058 (ranks 3 and 4, differing in tokens 5-6).
        symmetries: a `SymmetryGroup` (`symmetry_group`); default: the identity only.
        known: representatives of classes found earlier (e.g. a previous deflation round); a
            point matching one of them gets class index ``< len(known)``. Those classes are
            returned first, possibly with no members.
        errors: per-point error estimates ``(m,)`` added to ``tol`` pairwise (known classes: 0).

    Returns:
        A list of `EquilibriumClass`, known classes first, then new ones in order of discovery.
    """
    xs = np.asarray(xs)
    res = np.asarray(residuals, dtype=float)
    if xs.ndim != 3 or res.shape != xs.shape[:1]:
        raise UsageError(f"xs must be (m, n, d) and residuals (m,), got {xs.shape} and {res.shape}.")
    group = symmetries or trivial_group()
    err = np.zeros(len(xs)) if errors is None else np.asarray(errors, dtype=float)
    if err.shape != res.shape:
        raise UsageError(f"errors must be (m,) like residuals, got {err.shape}.")
    reps = [np.asarray(k) for k in known]
    rep_err = [0.0] * len(reps)
    rep_res = [math.inf] * len(reps)
    members: list[list[int]] = [[] for _ in reps]
    order = np.argsort(res, kind="stable")
    for i in order:
        x = xs[i]
        found = -1
        for c, r in enumerate(reps):
            if group_distance(r, x, group) <= tol + err[i] + rep_err[c]:
                found = c
                break
        if found < 0:
            reps.append(x)
            rep_err.append(float(err[i]))
            rep_res.append(float(res[i]))
            members.append([int(i)])
        else:
            members[found].append(int(i))
            if res[i] < rep_res[found] and found >= len(known):
                rep_res[found] = float(res[i])
    out = []
    for c, r in enumerate(reps):
        rr = rep_res[c] if np.isfinite(rep_res[c]) else float("nan")
        out.append(EquilibriumClass(x=r, residual=rr, members=np.asarray(members[c], dtype=int)))
    return out
