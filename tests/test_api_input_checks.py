"""Python entry points given a wrong key, parameter or start: a `UsageError` (or a `SolveError`
whose message names the real cause) instead of a deep JAX traceback or a misleading hint.

The tests' jaxtyping hook checks annotations before the body runs; a user's session has no such
hook, so the refusals are called through `inspect.unwrap` (the function as a user calls it).
"""

import inspect

import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest

import rankdyn as rd
from rankdyn._errors import SolveError, UsageError
from rankdyn.equilibria import continue_branch, find_equilibria


@pytest.mark.parametrize("key", [0, None, "seed", np.zeros(3, np.uint32)])
def test_make_layer_refuses_what_is_not_a_prng_key(key):
    # An int or None failed inside JAX ("invalid PRNG key data") naming no argument.
    with pytest.raises(UsageError, match=r"make_layer\(\): key must be a PRNG key"):
        inspect.unwrap(rd.make_layer)(key, n=2, d=2)


@pytest.mark.slow  # builds and compiles layers (about 4-11 s under load)
def test_make_layer_takes_both_kinds_of_key():
    a = rd.make_layer(jr.PRNGKey(1), n=2, d=2, qk="bert")
    b = rd.make_layer(jr.key(1), n=2, d=2, qk="bert")
    assert np.array_equal(a.weights.w_q, b.weights.w_q)  # the same draw from the same seed


def test_continue_branch_refuses_a_parameter_that_is_not_a_number():
    # float("a") raised a plain ValueError: an internal error on the command line.
    family = lambda p: rd.make_layer(jr.key(0), n=2, d=2, value="bidiagonal", w=p, qk="zero")  # noqa: E731
    with pytest.raises(UsageError, match="p_start and p_end must be real numbers, got 'a'"):
        inspect.unwrap(continue_branch)(family, np.ones((2, 2)), "a", 2.0)


@pytest.mark.slow  # builds and compiles layers (about 4-11 s under load)
def test_find_equilibria_names_non_finite_starts():
    """All-NaN starts: the `SolveError` names the non-finite starts (not residual_tol, max_steps
    or the number of starts). With throw=False they stay per-start statuses."""
    layer = rd.make_layer(jr.key(0), n=2, d=2, value="bidiagonal", w=2.0, qk="zero")
    x0 = jnp.stack([jnp.eye(2), jnp.full((2, 2), jnp.nan)])
    with pytest.raises(SolveError) as err:
        find_equilibria(layer, x0)
    msg = str(err.value)
    assert "1 start(s) did not reach residual_tol" in msg, msg
    assert "1 of them start from NaN or infinite values in x0 (the first at batch index (1,))" in msg, msg
    sol = find_equilibria(layer, x0, throw=False)
    assert not bool(jnp.all(sol.result == rd.RESULTS.successful))


def test_counts_are_never_truncated():
    """``chunk=2.7`` and ``horizon=2.5`` ran with 2 (a silently different run); ``"10"`` reached
    deep code as a TypeError. Each is a `UsageError` naming the argument, before any compute."""
    from rankdyn.lyapunov import lyapunov_spectrum_map
    from rankdyn.theory import basins_across

    def halve(x, p):
        return x / 2 + p

    starts = jnp.zeros((3, 1))
    for kwargs, name in (({"horizon": 2.5}, "horizon"), ({"max_period": "8"}, "max_period")):
        with pytest.raises(UsageError, match=f"{name} must be an integer >= 1"):
            inspect.unwrap(basins_across)(halve, starts, [0.0, 1.0], **kwargs)
    with pytest.raises(UsageError, match="chunk must be an integer >= 1, got 2.7"):
        inspect.unwrap(lyapunov_spectrum_map)(
            lambda x: x / 2, jnp.ones((4, 2)), 8, chunk=2.7, key=jr.PRNGKey(0)
        )
    with pytest.raises(UsageError, match="chunk must be an integer >= 1, got 2.7"):
        inspect.unwrap(rd.theory.basin_fractions)(None, jnp.ones((2, 2, 2)), 1, None, chunk=2.7)
