"""A second `simulate` with other temperatures, value matrices, inputs or seeds compiles nothing.

Compilations are counted with ``jax.monitoring`` (one ``backend_compile`` event per XLA
program built), so the test sees every compile, including eager helper ops, not only those of
one wrapped function.
"""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import rankdyn as rd
from rankdyn._run._io import CompileTimer


def _mu_only(t, x, args):
    return {"mu": rd.mu(x), "sigma_min": rd.metrics.singular_values(x)[-1]}


MU_ONLY = jax.tree_util.Partial(_mu_only)


@pytest.mark.slow  # compiles every model kind twice
def test_second_call_with_new_values_compiles_nothing(getkey):
    n, d, T = 5, 4, 6
    cases = {
        # name: (layer builder from a key, simulate kwargs builder from a key)
        "shared, default metrics": (lambda k: rd.make_layer(k, n=n, d=d, mask="causal"), lambda k: {}),
        "per-layer weights, custom observe": (
            lambda k: rd.make_layer(k, n=n, d=d, mask="window", num_layers=T),
            lambda k: {"observe": MU_ONLY, "save_every": 2},
        ),
        "dropout, keys": (
            lambda k: rd.make_layer(k, n=n, d=d, mask="complete", dropout=0.1),
            lambda k: {"key": k, "observe": MU_ONLY},
        ),
    }
    for name, (make, kwargs) in cases.items():
        layer = make(getkey())
        x0 = rd.initial_tokens(getkey(), "sphere", n, d, batch=3)
        first_kw = kwargs(getkey())
        with CompileTimer() as first:
            ref = rd.simulate(layer, x0, T, per_trajectory=True, **first_kw)
            jax.block_until_ready(ref.metrics)
        assert first.compiles >= 1, name  # the counter does see compilations
        # Other temperature, other W_V (new seed), other inputs, other dropout key, other rank_tol.
        other = rd.make_layer(
            getkey(),
            n=n,
            d=d,
            mask=np.asarray(layer.mask),
            num_layers=layer.num_layers,
            dropout=layer.dropout,
            value="gaussian",
        )
        # A strongly typed temperature where make_layer's is weakly typed: still no new program.
        other = eqx.tree_at(lambda l: l.dqk, other, jnp.asarray(0.37, dtype=layer.dqk.dtype))
        x1 = rd.initial_tokens(getkey(), "gaussian", n, d, batch=3)
        kw = kwargs(getkey())
        if "observe" not in kw:
            kw["rank_tol"] = 1e-3
        with CompileTimer() as second:
            traj = rd.simulate(other, x1, T, per_trajectory=True, **kw)
            jax.block_until_ready(traj.metrics)
        assert second.compiles == 0, (name, second.compiles)
        # ... and the second call did compute something different.
        assert not np.allclose(np.asarray(traj.metrics["mu"]), np.asarray(ref.metrics["mu"])), name


def test_first_compile_is_reported_separately(getkey):
    """`CompileTimer` splits the first call into compile and run time (the benchmark relies on it)."""
    from rankdyn._run._io import CompileTimer

    layer = rd.make_layer(getkey(), n=7, d=3, mask="window-uni")
    x0 = rd.initial_tokens(getkey(), "sphere", 7, 3, batch=2)
    with CompileTimer() as t1:
        rd.simulate(layer, x0, 4, observe=MU_ONLY)
    x1 = rd.initial_tokens(getkey(), "gaussian", 7, 3, batch=2)
    with CompileTimer() as t2:
        rd.simulate(layer, x1, 4, observe=MU_ONLY)
    assert t1.compile_s > 0.0 and t2.compile_s == 0.0
    assert t1.total_s >= t1.compile_s
