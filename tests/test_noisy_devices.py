"""The noisy flow's numbers do not depend on the chunk or on the number of devices (issue 53).

One key gives trajectory b the Brownian path of ``fold_in(key, b)`` through a
`diffrax.VirtualBrownianTree`, whatever the chunk or the device that integrates it, so
`rankdyn.flow.solve_flow(noise=...)` must give the same bits in a process with one CPU device and
in one with two (the default device, and the second device), at chunk 1 and at the whole batch.
The device count is fixed before JAX initialises: each count is a subprocess, as in
tests/test_sharding.py.
"""

import json
import os
import subprocess
import sys
import textwrap

import pytest

SCRIPT = textwrap.dedent(
    """
    import hashlib, json, sys
    import jax
    jax.config.update("jax_enable_x64", True)
    import jax.random as jr, numpy as np
    from rankdyn._model._masks import complete_mask
    from rankdyn._model._tokens import initial_tokens
    from rankdyn.flow import DensityObserver, FlowField, solve_flow

    n, d, batch = 8, 3, 3
    x0 = initial_tokens(jr.PRNGKey(0), "sphere", n, d, batch=batch)
    field = FlowField(complete_mask(n), d, "sa")

    def digest(chunk):
        sol = solve_flow(
            field, x0, beta=np.asarray([1.0, 4.0]), times=np.linspace(0.0, 0.5, 6), noise=0.7,
            key=jr.PRNGKey(3), solver="heun", dt=0.05, chunk=chunk, save_states=True,
            per_trajectory=True, observe=DensityObserver(),
        )
        h = hashlib.sha256(np.asarray(sol.states).tobytes())
        for k in sorted(sol.metrics):
            h.update(np.asarray(sol.metrics[k]).tobytes())
        h.update(np.asarray(sol.drift).tobytes())
        return h.hexdigest(), float(np.max(np.asarray(sol.drift)))

    out = {"num_devices": len(jax.devices())}
    for dev in range(len(jax.devices())):
        with jax.default_device(jax.devices()[dev]):
            for chunk in (1, batch):
                out[f"device{dev}_chunk{chunk}"] = digest(chunk)
    print(json.dumps(out))
    """
)


def _run(num_devices: int) -> dict:
    flags = os.environ.get("XLA_FLAGS", "")
    if num_devices > 1:
        # Extended, not replaced: both processes compile at the same optimisation level.
        flags = (flags + f" --xla_force_host_platform_device_count={num_devices}").strip()
    env = dict(os.environ, XLA_FLAGS=flags, JAX_PLATFORMS="cpu")
    cmd = [sys.executable, "-c", SCRIPT]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.slow  # two fresh processes
def test_noisy_flow_is_bitwise_across_chunks_and_device_counts():
    one, two = _run(1), _run(2)
    assert one["num_devices"] == 1 and two["num_devices"] == 2
    runs = {f"1 device, {k}": v for k, v in one.items() if k != "num_devices"}
    runs |= {f"2 devices, {k}": v for k, v in two.items() if k != "num_devices"}
    assert len(runs) == 6
    digests = {k: v[0] for k, v in runs.items()}
    assert len(set(digests.values())) == 1, digests
    # Not a trivially constant run: the noise moved the tokens off the sphere by a scheme error > 0.
    assert all(0 < v[1] < 0.1 for v in runs.values()), runs
