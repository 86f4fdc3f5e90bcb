r"""`RESULTS`: the one status enumeration of every solver and run in rankdyn.

`find_equilibria`, `solve_flow`, `continue_branch`, `simulate` and the Lyapunov spectra report
their outcome as members of this one `eqx.Enumeration`, so any two results compare
(``sol.result == RESULTS.successful``; Equinox refuses to compare members of different
enumerations). It extends Optimistix's and Diffrax's own ``RESULTS`` (hence Lineax's), so
``RESULTS.promote`` turns a status those libraries return into a member of this one.

**Which member is success.** For a branch of `continue_branch`, ``parameter_end`` (it reached
the end of the parameter interval); for everything else, ``successful``.
"""

from __future__ import annotations

import warnings

import diffrax
import jax
import jax.numpy as jnp
import numpy as np
import optimistix as optx

from ._errors import UsageError

__all__ = ["RESULTS", "results_where", "results_in"]

# One message for ``nonfinite`` (Optimistix's solver failure, our non-finite states and
# branches): Equinox warns at class creation when a member redefines an inherited message, which
# is deliberate here, so that warning (and no other) is silenced around the class statement only.
with warnings.catch_warnings():
    warnings.filterwarnings(
        "ignore", message="Enumeration has duplicate incompatible values for nonfinite", category=UserWarning
    )

    class RESULTS(diffrax.RESULTS, optx.RESULTS):  # pyright: ignore[reportGeneralTypeIssues]
        r"""The status of a solve, a trajectory or a branch: Optimistix's and Diffrax's results plus ours.

        Success is ``parameter_end`` for a branch of `continue_branch` (``max_steps_reached``,
        ``newton_failed`` and ``nonfinite`` end a branch early) and ``successful`` for everything
        else: an equilibrium with $\|F(X) - X\|_F \le$ ``residual_tol`` (`find_equilibria`), a
        flow trajectory integrated to the end with finite states (`solve_flow`), a `simulate`
        trajectory with finite states and no zero token, a Lyapunov trajectory whose tangent
        vectors stayed finite and above the dtype's smallest normal number, a start of
        `basins_across` that settled on a cycle (else ``not_settled`` or ``nonfinite``). Optimistix's and
        Diffrax's own outcomes (``max_steps_reached``, ``singular``, ``dt_min_reached``, ...) are
        promoted from ``optx.RESULTS`` / ``diffrax.RESULTS`` with ``RESULTS.promote``.
        """

        nonfinite = (
            "Non-finite (NaN or infinite) values: met by the solver during a solve, or in a saved "
            "state, a recorded metric or the tangent vectors of a trajectory or branch; for a flow "
            "trajectory or a branch also a token that became zero (it has no direction on the sphere, "
            "LN is undefined there). Try a smaller step or tighter tolerances."
        )
        residual_above_tolerance = (
            "The solver converged (its step criterion was met) at a point whose residual ||F(X) - X||_F "
            "is above residual_tol: a local minimum of the residual, not an equilibrium. Try more starts."
        )
        parameter_end = (
            "The branch reached an end of the parameter interval [min(p_start, p_end), max(p_start, "
            "p_end)]; its last point is solved at that end exactly. This is a branch's success."
        )
        newton_failed = (
            "The Newton corrector on the bordered system did not converge, even at the smallest step "
            "ds_min: the branch may end here (a singular point the corrector cannot pass) or need a "
            "smaller ds_min."
        )
        degenerate = (
            "A normalisation met a zero row (LN is undefined there): in a trajectory, a token became "
            "zero in a layer with a normalisation (e.g. opposite tokens averaged), so it has no "
            "direction and its direction metrics are NaN; in an equilibrium search, the point is not "
            "an equilibrium."
        )
        design_unreachable = (
            "An inverse design did not reach its target: the optimiser did not bring the projected "
            "gradient below its tolerance, the bifurcation could not be re-solved at an iterate, or an "
            "independent continuation of the designed family did not find the prescribed bifurcation. "
            "No design is reported; try a prescribed value nearer the original one."
        )
        underflow = (
            "Values underflowed: a token became zero in a layer without a normalisation (placement='none': "
            "its entries fell below the dtype's range, or cancelled exactly), or a Lyapunov tangent "
            "direction contracted below the dtype's smallest normal number between two QR steps (lower "
            "qr_every)."
        )
        not_settled = (
            "The trajectory did not settle on a cycle of period at most max_period within the horizon "
            "(a longer cycle, a torus, chaos, or a longer transient): raise horizon or max_period."
        )
        negative_density = (
            "A mean-field density became negative (below -1e-10 times its maximum on the grid) at a "
            "saved time: the resolution is too low for it (raise num_modes on the circle, band_limit on "
            "the sphere) or the tolerances too loose."
        )
        under_resolved = (
            "A mean-field density's top 10% of modes (Fourier on the circle, spherical-harmonic degrees "
            "on the sphere) carry more than 1e-10 of its L2 norm at a saved time: it is narrower than "
            "the resolution; raise num_modes (circle) or band_limit (sphere)."
        )


# Shown as its public name (``rankdyn.RESULTS<message>``, not this module's path), as NumPy sets
# ``__module__`` on its public names; pickling looks the class up there too.
RESULTS.__module__ = "rankdyn"


def results_where(pred, a, b):
    """``RESULTS.where`` for an array predicate: ``a`` where ``pred`` holds, else ``b``, elementwise.

    ``RESULTS.where`` takes a scalar predicate only. On concrete arrays this runs on the host
    (NumPy), so building a batch's status compiles no program; traced, it is ``jnp.where``.

    Arguments:
        pred: a boolean array (the batch shape).
        a, b: `RESULTS` members, scalars or of ``pred``'s shape.

    Returns:
        A `RESULTS` member of ``pred``'s shape.
    """
    traced = any(isinstance(v, jax.core.Tracer) for v in jax.tree.leaves((pred, a, b)))
    xp = jnp if traced else np

    def pick(u, v):
        out = xp.where(xp.asarray(pred), xp.asarray(u), xp.asarray(v)).astype(np.int32)
        return out if traced else jax.device_put(out)  # a transfer, not a compiled program

    # An enumeration member is a pytree (its value the leaf, its enumeration static), so mapping
    # over the leaves keeps the enumeration: no private constructor needed.
    if not (isinstance(a, RESULTS) and isinstance(b, RESULTS)):
        raise UsageError(f"results_where takes RESULTS members, got {type(a).__name__}, {type(b).__name__}.")
    return jax.tree.map(pick, a, b)


def results_in(result, *members):
    """Where ``result`` (a `RESULTS` member of any shape) is one of ``members``: a boolean array.

    On a concrete status this runs on the host (NumPy; a derived flag compiles no program);
    traced, with ``jnp``. A member is a pytree whose one leaf is its integer code.

    Raises:
        UsageError: ``result`` or a member is not of `RESULTS`.
    """
    if not isinstance(result, RESULTS) or not all(isinstance(m, RESULTS) for m in members):
        raise UsageError(f"results_in takes RESULTS members, got {type(result).__name__}.")
    (code,) = jax.tree.leaves(result)
    xp = jnp if isinstance(code, jax.core.Tracer) else np
    code = xp.asarray(code)
    out = xp.zeros(code.shape, bool)
    for m in members:
        out = out | (code == xp.asarray(jax.tree.leaves(m)[0]))
    return out
