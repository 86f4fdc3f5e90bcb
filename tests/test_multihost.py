"""Multi-host evidence: one sharded `simulate` over 2 processes (`jax.distributed`, CPU
collectives, coordinator on localhost) equals a single-process run.

It runs ``examples/multihost_simulate.py``, the recipe the README points to, as two processes
with one CPU device each; the reference is an unsharded `simulate` in this process.
"""

import importlib.util
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from helpers import own_compiles

import rankdyn as rd

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "multihost_simulate.py"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _example():
    spec = importlib.util.spec_from_file_location("multihost_simulate", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_two_processes_equal_one(tmp_path):
    n, d, batch, layers = 6, 8, 11, 8  # 11 trajectories on 2 devices: the padding crosses processes
    out = tmp_path / "metrics.json"
    env = {k: v for k, v in own_compiles().items() if k not in ("XLA_FLAGS", "NPROC")}
    env |= {"JAX_PLATFORMS": "cpu", "PYTHONPATH": os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])}
    port = _free_port()
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                str(EXAMPLE),
                "--coordinator",
                f"127.0.0.1:{port}",
                "--num-processes",
                "2",
                "--process-id",
                str(i),
                "--local-devices",
                "1",
                "--n",
                str(n),
                "--d",
                str(d),
                "--batch",
                str(batch),
                "--num-layers",
                str(layers),
                "--out",
                str(out),
            ],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for i in range(2)
    ]
    try:
        logs = [p.communicate(timeout=300)[0] for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    assert [p.returncode for p in procs] == [0, 0], "\n----\n".join(log[-3000:] for log in logs)
    result = json.loads(out.read_text())
    assert result["info"] == {"num_processes": 2, "num_devices": 2, "local_devices": 1}

    layer, x0 = _example().problem(n, d, batch)  # float64 here (conftest) as in the example
    ref = rd.simulate(layer, x0, layers, per_trajectory=True)  # one process, one device, no sharding
    assert set(result["metrics"]) == set(ref.metrics)
    for name, v in ref.metrics.items():
        got = np.asarray(result["metrics"][name], dtype=np.float64)
        assert got.shape == v.shape, name
        # Same per-trajectory program on every device: equal up to float64 rounding.
        np.testing.assert_allclose(got, np.asarray(v), rtol=1e-10, atol=1e-12, err_msg=name)
