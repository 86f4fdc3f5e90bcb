"""XLA:CPU's "may be stuck" lines: several host devices get a threshold that a loaded machine does
not reach (`rankdyn._run._devices.quiet_stuck_warnings`), and XLA really reads it.

Each case runs in a fresh process: XLA reads ``XLA_FLAGS`` once, when the CPU client is created.
"""

import os
import subprocess
import sys

import pytest

FLAG = "--xla_cpu_collective_call_warn_stuck_timeout_seconds"

#: use_cpu_devices(2), then one psum whose device 0 arrives ``sleep`` seconds late.
_LATE_DEVICE = """
import sys, time
import numpy as np
import rankdyn._run._devices as D
if len(sys.argv) > 2:
    D.STUCK_WARNING_S = int(sys.argv[2])
D.use_cpu_devices(2)
import os
print("FLAGS", os.environ.get("XLA_FLAGS", ""), flush=True)
import jax, jax.numpy as jnp
from jax.sharding import Mesh, PartitionSpec as P

sleep = float(sys.argv[1])


def late(i):
    if int(i) == 0:
        time.sleep(sleep)
    return np.float32(1.0)


def f(x):
    y = jax.pure_callback(late, jax.ShapeDtypeStruct((), jnp.float32), jax.lax.axis_index("x"))
    return jax.lax.psum(x * y, "x")


mesh = Mesh(np.array(jax.devices()), ("x",))
g = jax.jit(jax.shard_map(f, mesh=mesh, in_specs=P("x"), out_specs=P()))
print("SUM", float(g(jnp.ones(2))[0]), flush=True)
"""


def _start(*args, xla_flags=""):
    env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "NPROC", "JAX_NUM_CPU_DEVICES")}
    env |= {"XLA_FLAGS": xla_flags, "JAX_PLATFORMS": "cpu"}
    cmd = [sys.executable, "-c", _LATE_DEVICE, *map(str, args)]
    return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _finish(proc) -> subprocess.CompletedProcess:
    try:
        out, err = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        proc.kill()  # as subprocess.run does
        raise
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def _run(*args, xla_flags=""):
    return _finish(_start(*args, xla_flags=xla_flags))


@pytest.mark.slow
def test_several_devices_get_rankdyns_threshold_and_a_users_own_wins():
    proc = _run(0)
    assert proc.returncode == 0, proc.stderr  # XLA knows the flag (an unknown one aborts the process)
    assert f"{FLAG}=600" in proc.stdout and "SUM 2.0" in proc.stdout, proc.stdout
    proc = _run(0, xla_flags=f"{FLAG}=45")
    assert proc.returncode == 0, proc.stderr
    assert f"FLAGS {FLAG}=45\n" in proc.stdout, proc.stdout  # kept as the user wrote it, not added twice


@pytest.mark.slow  # two processes, each waits 3 s at a rendezvous
def test_xla_reads_the_threshold_rankdyn_sets():
    # A 1-second threshold set by rankdyn makes XLA log the line for a 3-second wait, so the value
    # rankdyn passes governs it; with rankdyn's default the same wait is silent.
    # Both at once: each mostly sleeps through its wait.
    started = _start(3, 1), _start(3)
    loud, quiet = (_finish(p) for p in started)
    assert loud.returncode == 0, loud.stderr
    assert "may be stuck" in loud.stderr and "false-positive" in loud.stderr, loud.stderr
    assert quiet.returncode == 0 and "SUM 2.0" in quiet.stdout, quiet.stderr
    assert "may be stuck" not in quiet.stderr, quiet.stderr
