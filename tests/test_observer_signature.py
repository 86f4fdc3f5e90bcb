"""One observer signature, ``(t, x, args) -> dict`` (Diffrax's ``SaveAt(fn=...)``), in
`rankdyn.simulate` (t the layer index, args the layer) and `rankdyn.flow.solve_flow` (t the
time, args the inverse temperature)."""

import jax.numpy as jnp
import numpy as np
import pytest

import rankdyn as rd
from rankdyn.flow import FlowField, FlowObserver, solve_flow
from rankdyn.masks import complete_mask


def _with_t(t, x, args):
    return {"t": jnp.asarray(t, x.dtype), "n": jnp.asarray(args.num_tokens, x.dtype), "mu": rd.mu(x)}


@pytest.mark.parametrize("progress", [False, True])
def test_simulate_passes_the_layer_index_and_the_layer(getkey, progress):
    # progress=True splits the depth into compiled pieces: t must continue across them.
    layer = rd.make_layer(getkey(), n=4, d=3, mask="causal")
    x0 = rd.initial_tokens(getkey(), "sphere", 4, 3, batch=2)
    tr = rd.simulate(layer, x0, 6, save_every=2, observe=_with_t, per_trajectory=True, progress=progress)
    np.testing.assert_array_equal(tr.metrics["t"], [[0, 2, 4, 6]] * 2)
    np.testing.assert_array_equal(tr.metrics["n"], 4)
    ref = rd.simulate(layer, x0, 6, save_every=2, metrics="mu", per_trajectory=True)
    np.testing.assert_array_equal(tr.metrics["mu"], ref.metrics["mu"])


@pytest.mark.slow  # two Diffrax programs: about 5 s of compile on the 2-core reference machine
def test_solve_flow_takes_any_function_with_the_same_signature():
    f = FlowField(complete_mask(4), 3)
    x0 = np.random.default_rng(0).normal(size=(2, 4, 3))
    kw = dict(beta=jnp.asarray([0.5, 2.0]), saves=3, solver="rk4", dt=0.1, per_trajectory=True)
    obs = lambda t, x, beta: {"t": t, "beta": beta + 0 * t, "mu": rd.mu(x)}  # noqa: E731
    sol = solve_flow(f, x0, 1.0, observe=obs, **kw)
    ref = solve_flow(f, x0, 1.0, observe=FlowObserver(metrics="mu"), **kw)
    # (beta, batch, time) per trajectory: the temperatures are the leading axis.
    np.testing.assert_allclose(sol.metrics["t"], [[[0, 0.5, 1]] * 2] * 2)
    np.testing.assert_allclose(sol.metrics["beta"], [[[0.5] * 3] * 2, [[2.0] * 3] * 2])
    # Two observers are two compiled programs, and XLA promises no equal bits across programs: with
    # the suite's code generator (tests/conftest.py) one of the 12 values differs in its last bit.
    # A wrong state or time would be off by far more than a few ulp.
    np.testing.assert_allclose(sol.metrics["mu"], ref.metrics["mu"], rtol=1e-15, atol=0)
    # `clustered` is added for time_to_cluster, as the default observer records it.
    np.testing.assert_array_equal(sol.metrics["clustered"], ref.metrics["clustered"])
