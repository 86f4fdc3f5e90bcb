"""`rankdyn.plans.FlowPlan`: the noisy flow's memory estimated and refused before compute, and the
estimate's drift term against what XLA allocates for the drift.

The deterministic flow's refusals are in tests/test_flow_memory.py. The available memory is fixed
at 4 GiB here, so the verdicts do not depend on the machine.
"""

import subprocess
import sys

import numpy as np
import pytest

from rankdyn._errors import UsageError
from rankdyn._run import _memory
from rankdyn.cli import main
from rankdyn.plans import FlowPlan

_AVAILABLE = (4 * 2**30, "host RAM")


class _ReachedCompute(Exception):
    pass


def _boom(*args, **kwargs):
    raise _ReachedCompute("the run went past the checks")


def test_flow_plan_imports_no_jax():
    code = "import sys\nimport rankdyn._flow._plan\nprint('jax' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False", out.stdout + out.stderr


def test_noisy_flow_command_refuses_what_cannot_fit_before_compute(tmp_path, monkeypatch, capsys):
    """The noisy flow was never estimated: 1024 dense drifts of 1024 x 1024 weights (4.3 GB), and the
    row-blocked drift at 65,536 tokens (2 x 256 x n per trajectory, and the n x n mask). One
    ``error:`` line naming the part and the flag, exit 2, before the mask is built; a run that fits
    goes on to it."""
    import rankdyn._model._masks as masks

    monkeypatch.setattr(_memory, "available_memory", lambda backend=None: _AVAILABLE)
    monkeypatch.setattr(masks, "make_mask", _boom)
    cases = [
        (["--n", "1024", "--batch", "1024"], "the drift's attention weights", "lower --n"),
        (["--n", "65536", "--batch", "16"], "the mask (n x n booleans)", "lower --n"),
        (["--n", "8", "--saves", "20000001", "--time", "1"], "working set of one piece", "lower --saves"),
    ]
    for i, (flags, part, fix) in enumerate(cases):
        out = tmp_path / f"o{i}"
        argv = ["flow", "--noise", "0.1", *flags, "--out", str(out), "--no-progress"]
        assert main(argv) == 2, flags
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("rankdyn flow: error: "), err
        assert f"({part}" in err[0] and "4.0 GiB of host RAM" in err[0] and fix in err[0], err
        assert not out.exists()
    main(["flow", "--noise", "0.1", "--n", "1024", "--batch", "64", "--out", str(tmp_path / "ok")])
    assert "the run went past the checks" in capsys.readouterr().err  # it reached the mask


def test_noisy_solve_flow_refuses_what_cannot_fit_before_compute(monkeypatch):
    """The library: `solve_flow(noise=...)` checks the same plan before its first piece, naming the
    argument (the chunk of trajectories vmapped together)."""
    import jax

    from rankdyn._flow import _sde
    from rankdyn.flow import FlowField, solve_flow

    monkeypatch.setattr(_memory, "available_memory", lambda backend=None: _AVAILABLE)
    monkeypatch.setattr(_sde, "solve_noisy", _boom)
    field = FlowField(np.ones((1024, 1024), bool), 3)
    x0 = np.broadcast_to(np.ones((1, 1024, 3), np.float32) / np.sqrt(3), (1024, 1024, 3))
    key = jax.random.key(0)
    with pytest.raises(UsageError, match=r"solve_flow needs about .*attention weights.*smaller chunk"):
        solve_flow(field, x0, 1.0, beta=1.0, noise=0.1, key=key)
    with pytest.raises(_ReachedCompute):
        solve_flow(field, x0, 1.0, beta=1.0, noise=0.1, key=key, chunk=16)


def test_flow_plan_parts_and_names():
    """The parts are the sizes' arithmetic, and the plan names flags or arguments."""
    plan = FlowPlan(n=2048, d=3, batch=64, saves=101, noise=True)
    parts = plan.memory().parts
    assert parts["the drift's attention weights"] == 64 * 2 * 256 * 2048 * 4  # row blocks above 1024
    assert parts["the mask (n x n booleans) and its row blocks"] == 2 * 2048 * 2048
    assert (
        parts["working set of one piece (saved states, Gram matrices)"]
        == 64 * (6 * (3 * 2048 * 3 + 2048) + 16 * 2048 * 3) * 4
    )  # pieces of 5 intervals (piece_length(100)): 6 saved times
    dense = FlowPlan(n=1024, d=3, batch=8, saves=101, noise=True).memory().parts
    assert dense["the drift's attention weights"] == 8 * 1024 * 1024 * 4
    assert "the drift's attention weights" not in FlowPlan(n=2048, d=3, batch=8, saves=101).memory().parts
    with pytest.raises(UsageError, match=r"^--saves 1: expected an integer >= 2\.$"):
        FlowPlan(n=8, d=3, batch=1, saves=1, flags=True)
    with pytest.raises(UsageError, match=r"^chunk must be an integer >= 1, got 0\.$"):
        FlowPlan(n=8, d=3, batch=1, saves=2, chunk=0)


def test_drift_term_bounds_what_xla_allocates_for_the_drift():
    """XLA's own count of the noisy drift's temporaries (`memory_analysis` of the compiled velocity,
    one trajectory, float32) lies within the plan's drift and mask terms and above 0.5 of them:
    dense at 512 tokens, row-blocked at 4096 (a drift that formed the (n, n) weights there, 67 MB,
    would fail the bound of 42 MB)."""
    import jax
    import jax.numpy as jnp

    from rankdyn._flow._noise import blocked_velocity
    from rankdyn.flow import FlowField

    for n in (512, 4096):
        field = FlowField(np.ones((n, n), bool), 3)
        x = jax.ShapeDtypeStruct((n, 3), jnp.float32)
        temp = jax.jit(lambda x: blocked_velocity(field, x, 1.0)).lower(x).compile().memory_analysis()
        parts = FlowPlan(n=n, d=3, batch=1, saves=2, noise=True).memory().parts
        bound = parts["the drift's attention weights"] + parts["the mask (n x n booleans) and its row blocks"]
        assert 0.5 * bound <= temp.temp_size_in_bytes <= bound, (n, temp.temp_size_in_bytes, bound)
