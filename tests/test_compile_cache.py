"""`rankdyn reproduce`'s persistent compilation cache: where it lives, how it is turned off, and
that a warm run (every program loaded from the cache) gives the cold run's numbers exactly."""

import argparse
import json
import subprocess
import sys

import pytest
from helpers import own_compiles

from rankdyn._commands.reproduce import default_compile_cache, use_compile_cache
from rankdyn.cli import main as cli_main


def test_default_cache_folder_and_switches(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("RANKDYN_CACHE_DIR", str(tmp_path / "c"))
    assert default_compile_cache() == tmp_path / "c" / "compile"
    monkeypatch.delenv("RANKDYN_CACHE_DIR")
    assert default_compile_cache() == __import__("pathlib").Path.home() / ".cache" / "rankdyn" / "compile"
    off = argparse.Namespace(compile_cache=None, no_compile_cache=True)
    assert use_compile_cache(off) is None
    monkeypatch.setenv("RANKDYN_NO_COMPILE_CACHE", "1")
    assert use_compile_cache(argparse.Namespace(compile_cache=None, no_compile_cache=False)) is None
    # Both flags: refused before any compute, one error line.
    argv = ["reproduce", "temperature", "--quick", "--out", str(tmp_path / "o")]
    assert cli_main([*argv, "--compile-cache", str(tmp_path / "cc"), "--no-compile-cache"]) == 2
    err = capsys.readouterr().err
    assert "--compile-cache and --no-compile-cache contradict" in err and err.count("error:") == 1
    assert not (tmp_path / "o").exists() and not (tmp_path / "cc").exists()


def _reproduce(tmp_path, name, extra, env):
    out = tmp_path / name
    cmd = [sys.executable, "-m", "rankdyn", "reproduce", "temperature", "--quick", "--no-progress"]
    res = subprocess.run(
        [*cmd, "--out", str(out), *extra], capture_output=True, text=True, env=env, timeout=300
    )
    assert res.returncode == 0, res.stderr
    return json.loads((out / "temperature.json").read_text())


@pytest.mark.slow
def test_warm_run_loads_every_program_and_gives_identical_numbers(tmp_path):
    env = {k: v for k, v in own_compiles().items() if k != "RANKDYN_NO_COMPILE_CACHE"}
    env["RANKDYN_CACHE_DIR"] = str(tmp_path / "home_cache")  # the default, kept inside tmp_path
    cold = _reproduce(tmp_path, "cold", [], env)
    cache = tmp_path / "home_cache" / "compile"
    entries = sorted(p.name for p in cache.iterdir())
    assert len(entries) >= 5, entries  # small programs too: the size and time thresholds are off
    assert cold["provenance"]["compile_cache"] == str(cache)
    # The result and the report say whether the run was cold, and on which CPU.
    assert cold["provenance"]["compile_cache_state"] == f"{cache}: 0 programs at the start (cold)"
    from rankdyn._run._io import cpu_model

    report = (tmp_path / "cold" / "report.md").read_text()
    assert f"CPU {cpu_model()}" in report and "programs at the start (cold)" in report
    warm = _reproduce(tmp_path, "warm", [], env)
    held = len([e for e in entries if not e.endswith("-atime")])
    assert warm["provenance"]["compile_cache_state"] == f"{cache}: {held} programs at the start (warm)"
    assert sorted(p.name for p in cache.iterdir()) == entries  # every program was found: none added
    for key in ("measured", "checks", "verdict"):
        assert json.dumps(warm[key], sort_keys=True) == json.dumps(cold[key], sort_keys=True), key


def _piece_text(solver, dt, chunk):
    """The StableHLO of the flow's piece program (`rankdyn._flow._solve._piece`) as `solve_flow`
    builds it: one piece of two intervals, ``chunk`` trajectories."""
    import jax.numpy as jnp

    from rankdyn._flow import _solve, _solvers
    from rankdyn.flow import FlowField, FlowObserver
    from rankdyn.masks import causal_mask

    solver_obj, controller = _solvers._solver_and_controller(solver, None, None, None, dt)
    cfg = (solver_obj, controller, dt, 64, False)  # solver, controller, dt0, max_steps, keep_states
    x = jnp.ones((1, chunk, 4, 3)) / jnp.sqrt(3.0)
    field = FlowField(causal_mask(4), 3, "sa")
    args = (field, FlowObserver(), x, jnp.ones(1), jnp.arange(3.0), jnp.ones(chunk, bool), cfg)
    return _solve._piece.lower(*args).as_text()


def test_equinox_hook_is_checked_for_the_installed_equinox():
    """`host_checked_times` replaces a private function of Equinox, on the Equinox lines it was
    checked against only (`EQUINOX_CHECKED`): another installed line fails here, so the hook is
    checked again (the test below) before the tuple is extended."""
    import inspect

    from equinox import _errors

    from rankdyn._flow._solvers import EQUINOX_CHECKED, equinox_line

    assert equinox_line() in EQUINOX_CHECKED, f"Equinox {equinox_line()}: re-check host_checked_times"
    impl = _errors.branched_error_if_impl
    assert list(inspect.signature(impl).parameters) == ["x", "pred", "index", "msgs", "on_error"]
    assert callable(_errors.branched_error_if_impl_jit)


@pytest.mark.slow  # lowers the flow's whole piece program
def test_flow_programs_hold_no_host_callback(monkeypatch):
    """JAX never writes a program with a host callback to the persistent cache, so the flow's
    piece program must hold none: Diffrax's runtime re-checks of the traced saved times (and of
    dt), which `solve_flow` has made on the host, are left out (`host_checked_times`)."""
    import contextlib

    from rankdyn._flow import _solve

    for solver, dt in (("tsit5", None), ("rk4", 0.25)):
        assert "callback" not in _piece_text(solver, dt, chunk=2), solver
    # The control: with Diffrax's checks left in, the same program holds host callbacks.
    monkeypatch.setattr(_solve, "host_checked_times", contextlib.nullcontext)
    for solver, dt in (("tsit5", None), ("rk4", 0.25)):
        assert "callback" in _piece_text(solver, dt, chunk=3), solver  # another shape: traced again
