"""The flow's memory estimate, and x64 switched between building a
layer and simulating it.

``rankdyn flow`` and `solve_flow` refuse a batch or a number of saves that cannot fit before
anything is allocated, with the estimate and the fix, as ``simulate`` does. The available memory
is fixed at 16 GiB here, so the verdicts do not depend on the machine; reaching the compute
raises at once instead of allocating.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rankdyn._errors import UsageError
from rankdyn._run import _memory
from rankdyn.cli import main

_AVAILABLE = (16 * 2**30, "host RAM")


class _ReachedCompute(Exception):
    pass


def _boom(*args, **kwargs):
    raise _ReachedCompute("the run went past the checks")


def test_flow_command_refuses_what_cannot_fit_before_compute(tmp_path, monkeypatch, capsys):
    """The audit's two commands: one ``error:`` line with the estimate, the largest part and the
    flag to lower, exit 2, nothing written, and no mask built (the first step of the compute)."""
    import rankdyn._model._masks as masks

    monkeypatch.setattr(_memory, "available_memory", lambda backend=None: _AVAILABLE)
    monkeypatch.setattr(masks, "make_mask", _boom)
    cases = [
        (["--batch", "2000000", "--n", "64", "--d", "64"], "initial tokens", "lower --batch"),
        (["--saves", "10000000"], "working set of one piece", "lower --saves"),
        (["--saves", "200000", "--save-states", "--time", "1"], "working set of one piece", "lower --saves"),
    ]
    for i, (flags, part, fix) in enumerate(cases):
        out = tmp_path / f"o{i}"
        assert main(["flow", *flags, "--out", str(out), "--no-progress"]) == 2, flags
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("rankdyn flow: error: "), err
        assert f"({part}" in err[0] and "16.0 GiB of host RAM" in err[0] and fix in err[0], err
        assert not out.exists()


def test_solve_flow_refuses_what_cannot_fit_before_compute(monkeypatch):
    """The API: ten million saved times, or states of a large batch kept, are refused by
    `solve_flow` itself before its first compiled piece, naming the argument to change."""
    from rankdyn._flow import _solve
    from rankdyn.flow import FlowField, solve_flow

    monkeypatch.setattr(_memory, "available_memory", lambda backend=None: _AVAILABLE)
    monkeypatch.setattr(_solve, "_piece", _boom)
    field = FlowField(np.ones((32, 32), bool), 3)
    x0 = np.random.default_rng(0).normal(size=(64, 32, 3))
    with pytest.raises(UsageError, match=r"solve_flow needs about .* use fewer saved times"):
        solve_flow(field, x0, 1.0, beta=1.0, saves=10**7)
    big = np.broadcast_to(x0[:1], (20000, 32, 3))
    with pytest.raises(UsageError, match=r"\(saved states: .*pass save_states=False"):
        solve_flow(field, big, 1.0, beta=1.0, saves=5001, save_states=True)


def test_flow_memory_estimate_follows_its_parts():
    """The estimate's parts are the sizes' arithmetic: tokens grow with the batch, the piece with
    the saved times of a piece and n^2, the states only when kept."""
    kw = dict(batch=64, chunk=64, piece=100, saves=2001, n=32, d=3, betas=1, itemsize=4, num_metrics=8)
    base = _memory.flow_memory(**kw, per_trajectory=False, save_states=False)
    assert base.parts["initial tokens"] == 2 * 64 * 32 * 3 * 4
    assert base.parts[_memory.FLOW_PARTS["piece"]] == 64 * (101 * (2 * 96 + 4 * 1024) + 16 * 96) * 4
    assert _memory.FLOW_PARTS["states"] not in base.parts
    kept = _memory.flow_memory(**kw, per_trajectory=True, save_states=True)
    assert kept.parts["saved states"] == 2 * 64 * 2001 * 96 * 4
    assert kept.parts["per-trajectory metrics"] == 2 * 64 * 2001 * 8 * 4


@pytest.mark.slow  # compiles the scan in float64 and float32
def test_x64_switched_off_between_building_and_simulating():
    """A layer and tokens made with x64 on, simulated after it is switched off: the run computes
    in float32, bitwise as if the tokens had been given in float32."""
    import rankdyn as rd

    assert jax.config.jax_enable_x64  # tests/conftest.py
    layer = rd.make_layer(jax.random.PRNGKey(0), n=4, d=4, mask="causal", mlp=True)
    x0 = jnp.asarray(np.random.default_rng(0).normal(size=(3, 4, 4)))
    try:
        jax.config.update("jax_enable_x64", False)
        got = rd.simulate(layer, x0, 3)
        want = rd.simulate(layer, np.asarray(x0, np.float32), 3)
    finally:
        jax.config.update("jax_enable_x64", True)
    mu = np.asarray(got.summary.mean["mu"])
    assert mu.dtype == np.float32 and np.all(np.isfinite(mu))
    np.testing.assert_array_equal(mu, np.asarray(want.summary.mean["mu"]))
