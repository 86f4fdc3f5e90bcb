"""One status enumeration: every solver and run reports a member of `rankdyn.RESULTS`.

Equinox refuses to compare members of different enumerations (a ValueError), so each comparison
below fails if that result still used an enumeration of its own; `rankdyn.RESULTS` is its one
public name. Oracles: a NaN start, opposite tokens (LN undefined), a token that underflows without a
normalisation, a map that overflows and one whose tangent falls below the smallest normal double.
"""

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optimistix as optx
import pytest

import rankdyn as rd
from rankdyn._equilibria import _continuation
from rankdyn._equilibria._branch import branch_status
from rankdyn._equilibria._solve import status_names
from rankdyn._run._simulate import status_of
from rankdyn.equilibria import Branch
from rankdyn.flow import FlowField, solve_flow
from rankdyn.lyapunov import FLAG_NONFINITE, FLAG_UNDERFLOW

R = rd.RESULTS


#: The members these runs can end with.
NAMES = ("successful", "nonfinite", "degenerate", "parameter_end", "underflow")


def _names(result) -> list[str]:
    """The member name of every entry (host side), by comparing with each of `NAMES`."""
    names = np.full(np.shape(result == R.successful), "other", dtype=object)
    for name in NAMES:
        names[np.asarray(result == getattr(R, name))] = name
    return names.tolist()


def test_one_enumeration_under_one_name():
    # One home: the old names of 0.4 (each room's own enumeration) are gone.
    assert not any(hasattr(m, "RESULTS") for m in (rd.equilibria, rd.flow))
    assert not hasattr(rd.equilibria, "BRANCH_RESULTS")
    assert repr(R.nonfinite).startswith("rankdyn.RESULTS<Non-finite")  # its public name, not the module's
    assert issubclass(R, eqx.Enumeration) and issubclass(R, optx.RESULTS) and issubclass(R, diffrax.RESULTS)
    # Both libraries' own results promote (the solvers return those).
    assert bool(R.promote(optx.RESULTS.nonlinear_divergence) == R.nonlinear_divergence)
    assert bool(R.promote(diffrax.RESULTS.dt_min_reached) == R.dt_min_reached)
    assert bool(R.promote(diffrax.RESULTS.successful) == R.successful)
    ours = ("residual_above_tolerance", "degenerate", "nonfinite", "parameter_end")
    ours += ("newton_failed", "underflow", "max_steps_reached")
    assert all(hasattr(R, name) for name in ours) and not hasattr(R, "nonfinite_state")
    # One member for a normalisation that met a zero row, in a trajectory or an equilibrium search.
    assert not hasattr(R, "degenerate_normalisation") and "equilibri" in R[R.degenerate]
    # One nonfinite, its message covering the solver's case and ours.
    assert bool(R.promote(optx.RESULTS.nonfinite) == R.nonfinite) and "zero" in R[R.nonfinite]
    assert set(status_names()) >= {"successful", "nonfinite", "degenerate"}
    assert branch_status(R.parameter_end) == "parameter_end"
    with pytest.raises(ValueError, match="same type"):  # the check below can fail
        _ = R.successful == optx.RESULTS.successful


@pytest.mark.slow
def test_every_result_compares_with_the_one_enumeration():
    # find_equilibria: start 0 at the 2-D example's point A, start 1 NaN, start 2 opposite tokens.
    w = 2.0
    layer = rd.theory.uniform_causal_layer(2, 2, rd.weights.bidiagonal(2, w))
    a = np.array([[0.0, 1.0], [-1 / w, np.sqrt(1 - 1 / w**2)]])
    x0 = jnp.asarray(np.stack([a, np.full((2, 2), np.nan), [[0.0, 1.0], [0.0, -1.0]]]))
    sol = rd.find_equilibria(layer, x0, max_steps=0, throw=False)
    assert _names(sol.result) == ["successful", "nonfinite", "degenerate"]
    assert list(sol.status) == _names(sol.result)

    # solve_flow: every trajectory integrated to the end.
    field = FlowField(np.ones((2, 2), bool), 2, "sa")
    x0 = np.array([[[1.0, 0.0], [0.6, 0.8]], [[0.0, 1.0], [0.8, -0.6]]])
    flow = solve_flow(field, x0, 0.1, beta=1.0, saves=2, dt=0.05, solver="euler")
    assert _names(flow.result) == ["successful", "successful"]

    # A branch ends with a member of R (continue_branch's own run: test_continuation.py compares
    # its newton_failed with R); parameter_end is its success.
    assert _continuation.RESULTS is R
    one = np.zeros(1)
    br = Branch(one, np.zeros((1, 1)), np.zeros((1, 1), complex), one > 0, one, one, one, (), R.parameter_end)
    assert br.status == "parameter_end" and br.to_dict()["message"] == R[R.parameter_end]
    with pytest.raises(ValueError, match="not a status a branch ends with"):
        branch_status(R.successful)

    # simulate without a normalisation: x -> A x diag(1, 1e-200); tokens on the second axis
    # reach 1e-400, below the smallest double, so their trajectory underflows.
    none = rd.theory.uniform_causal_layer(2, 2, jnp.diag(jnp.array([1.0, 1e-200])), placement="none")
    x0 = jnp.array([[[1.0, 1.0], [1.0, -1.0]], [[0.0, 1.0], [0.0, 1.0]]])
    traj = rd.simulate(none, x0, 2, metrics="mu", per_trajectory=True)
    assert _names(traj.result) == ["successful", "underflow"]
    assert np.asarray(traj.degenerate).tolist() == [False, True]  # read from result
    # With a normalisation the same flag is a normalisation that met a zero row; nonfinite first.
    nonfinite, degenerate = np.array([False, False, True]), np.array([False, True, True])
    assert _names(status_of(nonfinite, degenerate, "pre")) == ["successful", "degenerate", "nonfinite"]
    assert _names(status_of(nonfinite, degenerate, "none")) == ["successful", "underflow", "nonfinite"]

    # Lyapunov, x -> x^2: 1 is a fixed point, from 2 it overflows, from 1e-200 the tangent
    # vector (2x) falls below the smallest normal double.
    lyap = rd.lyapunov_spectrum_map(
        lambda x: x * x, jnp.array([[1.0], [2.0], [1e-200]]), 40, key=jax.random.key(0)
    )
    assert _names(lyap.result) == ["successful", "nonfinite", "underflow"]
    assert np.asarray(lyap.flags).tolist() == [0, FLAG_NONFINITE, FLAG_UNDERFLOW]  # read from result
