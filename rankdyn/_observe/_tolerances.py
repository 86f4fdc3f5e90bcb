r"""Round-off floors and tolerances: each defined once, scaled by the dtype, imported everywhere.

A token matrix whose tokens agree to the last bit has $\mu(X)/\|X\|_F \approx \epsilon_{\text{mach}}$,
not 0, so every threshold that separates "collapsed" or "equal" from "not" depends on the dtype.

- `round_off_floor`: the largest value of a relative collapse metric that round-off alone can
  produce (``ROUND_OFF_EPS`` machine epsilons): the grey band of the figures and the CLI's
  ``* at floor`` mark.
- `fit_floor`: rate fits leave out the points below ``FIT_FLOOR_EPS`` machine epsilons (a
  margin of 100 above the round-off floor, so round-off never bends a fitted slope); the sweep
  and the reproduce targets use it.
- `RANK_TOL`: the numerical rank of a trajectory's token matrix counts the singular values above
  ``RANK_TOL`` times the largest one (``--rank-tol``); `RANK_METRICS` are the metrics that read it.
- `KEEPS_RANK_TOL`: a trajectory "keeps rank k" at finite depth when $\sigma_k > 10^{-3}\sigma_1$
  (collapse is slow, so a collapsing state still has small nonzero $\sigma_k$ at depth): the
  counterexample search's fractions and `rankdyn.rank_classifier`.
- `scaled_tol`: a tolerance given in float64 terms, scaled to another dtype by
  $(\epsilon/\epsilon_{64})^{1/2}$ (equal in float64; e.g. 1e-8 becomes 2.3e-4 in float32), for the
  equilibrium tolerances (closed-form matching, rank, deduplication, the marginal band).
- `default_residual_tol`: the success threshold of the equilibrium solvers.
- `merge_tol`: the distance under which two computed equilibria are one, from the dtype's eps and
  the points' own error estimates (their conditioning): ``MERGE_EPS`` eps plus ``MERGE_ERRORS``
  times the two estimates. In float32 it is about 1.2e-4 for well-conditioned points (it was the
  scaled 1e-6, 2.3e-2, which merged distinct equilibria closer than that).
"""

from __future__ import annotations

import numpy as np

from .._errors import UsageError

__all__ = [
    "ROUND_OFF_EPS",
    "FIT_FLOOR_EPS",
    "RANK_TOL",
    "RANK_METRICS",
    "KEEPS_RANK_TOL",
    "EQUILIBRIUM_RANK_TOL",
    "round_off_floor",
    "fit_floor",
    "scaled_tol",
    "default_residual_tol",
    "MERGE_EPS",
    "MERGE_ERRORS",
    "merge_tol",
]

#: Multiple of the machine epsilon below which a relative collapse metric is round-off.
ROUND_OFF_EPS = 10.0
#: Multiple of the machine epsilon below which rate fits leave a point out.
FIT_FLOOR_EPS = 1000.0
#: Relative tolerance of the numerical rank of a trajectory (``num_rank``, ``--rank-tol``).
RANK_TOL = 1e-6
#: The metrics that read the rank tolerance.
RANK_METRICS = ("num_rank",)
#: Relative threshold of "keeps rank k" at finite depth: sigma_k > KEEPS_RANK_TOL * sigma_1.
KEEPS_RANK_TOL = 1e-3
#: Relative rank tolerance of an equilibrium in float64 (accurate to ~1e-14); `scaled_tol` for others.
EQUILIBRIUM_RANK_TOL = 1e-8

#: Rounding floor of the distance of two equal equilibria (unit-norm tokens), in machine epsilons.
MERGE_EPS = 1000.0
#: Two equilibria with error estimates e_a, e_b are one within MERGE_ERRORS (e_a + e_b) (+ the floor):
#: an estimate (a last Newton correction, or sqrt(residual) at a double root) may be low by a few.
MERGE_ERRORS = 10.0

_EPS64 = float(np.finfo(np.float64).eps)


def _floating(dtype, what: str) -> np.dtype:
    dt = np.dtype(dtype)
    if not np.issubdtype(dt, np.floating):
        raise UsageError(f"{what} needs a floating dtype (float32/float64), got {dt}; pass the run's dtype.")
    return dt


def round_off_floor(dtype, scale: float = 1.0) -> float:
    r"""Largest value of a collapse metric that round-off alone can produce in ``dtype``.

    ``ROUND_OFF_EPS`` $\cdot\,\epsilon_{\text{mach}}(\text{dtype}) \cdot$ ``scale``, where
    ``scale`` is the size of the tokens (e.g. $\|X^{(0)}\|_F$ for $\mu$, 1 for $\mu/\|X\|_F$).

    Arguments:
        dtype: the dtype the run computed in (``"float32"``, ``np.float64``, ...).
        scale: the scale the metric is measured against.

    Returns:
        The floor as a float (1.19e-6 for float32 at scale 1, 2.2e-15 for float64).

    Raises:
        UsageError: if ``dtype`` is not a floating dtype or ``scale`` is not finite and positive.
    """
    dt = _floating(dtype, "round_off_floor")
    if not (np.isfinite(scale) and scale > 0):
        raise UsageError(
            f"round_off_floor needs a finite scale > 0, got {scale}; pass e.g. the layer-0 value."
        )
    return float(ROUND_OFF_EPS * np.finfo(dt).eps * scale)


def fit_floor(dtype, scale: float = 1.0) -> float:
    r"""The value below which a rate fit leaves a point out: ``FIT_FLOOR_EPS`` $\epsilon$ ``scale``.

    A ``scale`` of 0 (e.g. a non-finite layer-0 value replaced by 0) gives 0: nothing left out.
    """
    dt = _floating(dtype, "fit_floor")
    return float(FIT_FLOOR_EPS * np.finfo(dt).eps * scale)


def scaled_tol(tol64: float, dtype) -> float:
    r"""``tol64`` (a tolerance in float64 terms) scaled to ``dtype``.

    $tol_{64} (\epsilon/\epsilon_{64})^{1/2}$.

    The square root keeps a tolerance as far above the dtype's round-off, in orders of magnitude,
    as it is in float64 halfway down: 1e-8 stays 1e-8 in float64 and is 2.3e-4 in float32.
    """
    dt = _floating(dtype, "scaled_tol")
    return float(tol64 * np.sqrt(np.finfo(dt).eps / _EPS64))


def default_residual_tol(dtype) -> float:
    r"""Success threshold $\|F(X) - X\|_F$ of the equilibrium solvers: 1e-10 in float64, 1e-5 in
    float32 (about $\epsilon^{0.6}$, rounded); other dtypes are refused.

    Raises:
        UsageError: for a dtype other than float32 / float64 (float16 cannot resolve an equilibrium).
    """
    bits = np.finfo(_floating(dtype, "default_residual_tol")).bits
    if bits not in (32, 64):
        raise UsageError(
            f"equilibria need float32 or float64, got {np.dtype(dtype)}: its round-off is too coarse to "
            "tell an equilibrium apart; build the layer with dtype=float32 or float64."
        )
    return 1e-10 if bits == 64 else 1e-5


def merge_tol(dtype, error_a=0.0, error_b=0.0) -> float:
    r"""Distance under which two computed equilibria are the same point.

    $\text{MERGE\_EPS}\,\epsilon + \text{MERGE\_ERRORS}\,(e_a + e_b)$, with $e_a, e_b$ the
    points' error estimates (e.g. `rankdyn._equilibria.polish_tokens`'s): the eps term is the rounding
    of unit-norm coordinates, the estimates carry each point's conditioning (a double root is
    pinned only to $\sqrt{\text{residual}}$). Two distinct equilibria closer than this cannot be
    told apart at that accuracy; farther ones are kept apart however close (0.058 at n = d = 6).

    Returns:
        1.2e-4 in float32 and 2.2e-13 in float64 for exact points (``error_a = error_b = 0``).
    """
    dt = _floating(dtype, "merge_tol")
    return float(MERGE_EPS * np.finfo(dt).eps + MERGE_ERRORS * (error_a + error_b))
