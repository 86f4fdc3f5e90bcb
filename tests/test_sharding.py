"""Batch sharding over several devices equals one device (issue 'Performance at scale').

The CPU is split into 4 XLA devices with ``--xla_force_host_platform_device_count=4``, which
must be set before JAX is imported: the comparison therefore runs in a subprocess.
"""

import json
import os
import subprocess
import sys
import textwrap

import jax
import pytest

import rankdyn as rd
from rankdyn._sharding import batch_mesh, resolve_mesh

SCRIPT = textwrap.dedent(
    """
    import json
    import jax
    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp, jax.random as jr, numpy as np
    import rankdyn as rd
    from rankdyn._sharding import batch_mesh, shard_batch

    out = {"num_devices": len(jax.devices())}
    layer = rd.make_layer(jr.PRNGKey(0), n=6, d=6, mask="causal", qk="gaussian", num_layers=8)
    # 10 trajectories on 4 devices: exercises the padding; (2, 5) batch shape: the flattening.
    x0 = rd.initial_tokens(jr.PRNGKey(1), "sphere", 6, 6, batch=(2, 5))
    one = rd.simulate(layer, x0, 8, save_every=2, save_states=True)
    many = rd.simulate(layer, x0, 8, save_every=2, save_states=True, devices="all")
    mu_only = jax.tree_util.Partial(lambda x: {"mu": rd.mu(x)})
    two = rd.simulate(layer, x0, 8, save_every=2, devices=2, chunk_size=2, observe=mu_only, per_trajectory=True)
    out["max_abs_diff"] = max(
        float(np.max(np.abs(np.asarray(one.metrics[k]) - np.asarray(many.metrics[k])))) for k in one.metrics
    )
    out["max_abs_diff_two"] = max(
        float(np.max(np.abs(np.asarray(one.metrics[k]) - np.asarray(two.metrics[k])))) for k in two.metrics
    )
    out["states_diff"] = float(np.max(np.abs(np.asarray(one.states) - np.asarray(many.states))))
    out["same_flags"] = bool(np.array_equal(one.degenerate, many.degenerate)
                             and np.array_equal(one.nonfinite, many.nonfinite))
    out["shapes_equal"] = all(one.metrics[k].shape == many.metrics[k].shape for k in one.metrics)
    # Dropout: the per-trajectory key streams must follow the trajectories onto their devices.
    drop = rd.make_layer(jr.PRNGKey(2), n=6, d=6, mask="window", qk="gaussian", dropout=0.2)
    xd = rd.initial_tokens(jr.PRNGKey(3), "sphere", 6, 6, batch=8)
    d1 = rd.simulate(drop, xd, 5, key=jr.PRNGKey(4), observe=mu_only, per_trajectory=True)
    d4 = rd.simulate(drop, xd, 5, key=jr.PRNGKey(4), devices="all", observe=mu_only, per_trajectory=True)
    out["dropout_diff"] = float(np.max(np.abs(np.asarray(d1.metrics["mu"]) - np.asarray(d4.metrics["mu"]))))
    # shard_batch really splits the leading axis over the 4 devices.
    xs = shard_batch(jnp.zeros((8, 6, 6)), batch_mesh())
    out["shard_devices"] = len(xs.sharding.device_set)
    out["shard_rows"] = sorted({s.data.shape[0] for s in xs.addressable_shards})
    try:
        shard_batch(jnp.zeros((3, 6, 6)))
        out["odd_raises"] = False
    except ValueError as e:
        out["odd_raises"] = "multiple of" in str(e)
    print(json.dumps(out))
    """
)


@pytest.mark.slow
def test_sharded_simulate_equals_single_device():
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=4", JAX_PLATFORMS="cpu")
    proc = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["num_devices"] == 4
    assert out["shard_devices"] == 4 and out["shard_rows"] == [2]
    assert out["shapes_equal"] and out["same_flags"] and out["odd_raises"]
    # Same per-trajectory program on every device: equal up to float64 rounding of the GEMMs.
    assert out["max_abs_diff"] <= 1e-12, out
    assert out["max_abs_diff_two"] <= 1e-12, out
    assert out["states_diff"] <= 1e-12, out
    assert out["dropout_diff"] <= 1e-12, out


def test_mesh_arguments_are_checked():
    mesh = batch_mesh()
    assert mesh.axis_names == ("batch",) and mesh.devices.size == len(jax.devices())
    assert resolve_mesh(None) is None
    assert resolve_mesh(1).devices.size == 1
    with pytest.raises(ValueError, match="device"):
        batch_mesh(len(jax.devices()) + 1)
    with pytest.raises(ValueError, match="empty"):
        batch_mesh([])
    bad = jax.sharding.Mesh(mesh.devices, ("data",))
    with pytest.raises(ValueError, match="axis 'batch'"):
        resolve_mesh(bad)
    with pytest.raises(ValueError, match="chunk_size"):
        rd.simulate(rd.make_layer(jax.random.PRNGKey(0), n=3, d=3), jax.numpy.ones((2, 3, 3)), 1, chunk_size=0)
