r"""Spread a batch of trajectories over several devices with ``jax.sharding``.

Trajectories are independent, so the batch axis is split over a one-dimensional device mesh
named ``"batch"`` and every device runs the same compiled program on its share: no
communication, and results equal those of one device (the test compares them). On several
hosts, ``jax.distributed.initialize()`` first makes ``jax.devices()`` list every host's
devices; the same mesh then spans the cluster (``examples/multihost_simulate.py``, tested by
``tests/test_multihost.py``). On CPU, create the devices with `rankdyn.use_cpu_devices`, not
with XLA flags alone: see ``rankdyn/_run/_devices.py`` for the deadlock that it avoids.
"""

from __future__ import annotations

from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec
from jaxtyping import Array, ArrayLike

from .._errors import UsageError

__all__ = ["BATCH_AXIS", "batch_mesh", "shard_batch", "resolve_mesh"]

#: Name of the mesh axis over which trajectories are split.
BATCH_AXIS = "batch"


def batch_mesh(devices: Sequence[jax.Device] | int | None = None) -> Mesh:
    """A one-dimensional `jax.sharding.Mesh` with axis ``"batch"``.

    Arguments:
        devices: the devices to use; an int ``k`` takes the first ``k`` of `jax.devices()`;
            None takes all of them (on several hosts: all hosts' devices).

    Raises:
        ValueError: for an empty device list or more devices than exist.
    """
    available = jax.devices()
    if devices is None:
        devs = list(available)
    elif isinstance(devices, (int, np.integer)) and not isinstance(devices, bool):
        if not 1 <= devices <= len(available):
            raise UsageError(f"devices={devices} but {len(available)} device(s) are available: {available}.")
        devs = list(available[:devices])
    else:
        devs = list(devices)
        if not devs:
            raise UsageError("devices is empty; pass None for all devices or a non-empty list.")
    return Mesh(np.array(devs), (BATCH_AXIS,))


def resolve_mesh(devices) -> Mesh | None:
    """``None`` stays None (one device, no sharding); a `Mesh` is checked; else `batch_mesh`."""
    if devices is None:
        return None
    if isinstance(devices, Mesh):
        if devices.axis_names != (BATCH_AXIS,):
            raise UsageError(
                f"the mesh must be one-dimensional with axis {BATCH_AXIS!r}, got axes {devices.axis_names}; "
                "build it with rankdyn.sweep.batch_mesh()."
            )
        return devices
    if devices == "all":
        return batch_mesh(None)
    return batch_mesh(devices)


def shard_batch(x: ArrayLike, mesh: Mesh | None = None) -> Array:
    """Place ``x`` with its leading (batch) axis split over ``mesh`` (default: all devices).

    Raises:
        ValueError: if the leading axis is not a multiple of the number of devices (pad it, or
            let `rankdyn.simulate(..., devices=...)` pad for you).
    """
    mesh = batch_mesh() if mesh is None else mesh
    x = jnp.asarray(x)
    k = mesh.devices.size
    if x.ndim == 0 or x.shape[0] % k:
        raise UsageError(
            f"the leading axis ({x.shape[0] if x.ndim else 'scalar'}) must be a multiple of the "
            f"{k} device(s)."
        )
    return jax.device_put(x, NamedSharding(mesh, PartitionSpec(BATCH_AXIS)))


def map_sharded(fn, mesh: Mesh, replicated, batched, *, shared_out: bool = False):
    """Run ``fn(replicated, batched)`` with ``batched`` (a pytree of arrays with a common
    leading axis) split over ``mesh`` and ``replicated`` copied to every device.

    The leading axis is padded to a multiple of the device count with copies of member 0
    (computed and discarded), so any batch size works. Outputs must keep the leading axis;
    with ``shared_out``, ``fn`` returns ``(batched outputs, shared outputs)``, the latter the
    same on every device (computed from all of them with a collective) and returned once.
    """
    import equinox as eqx

    num = jax.tree.leaves(batched)[0].shape[0]
    k = mesh.devices.size
    pad = (-num) % k
    if pad:
        batched = jax.tree.map(lambda v: jnp.concatenate([v, jnp.repeat(v[:1], pad, axis=0)]), batched)
    dynamic, static = eqx.partition(replicated, eqx.is_array)

    def local(dyn, b):
        return fn(eqx.combine(dyn, static), b)

    spec = PartitionSpec(BATCH_AXIS)
    out_specs = (spec, PartitionSpec()) if shared_out else spec
    in_specs = (PartitionSpec(), spec)
    mapped = jax.shard_map(local, mesh=mesh, in_specs=in_specs, out_specs=out_specs, check_vma=False)
    out = mapped(dynamic, batched)
    cut = (lambda o: jax.tree.map(lambda v: v[:num], o)) if pad else (lambda o: o)
    return (cut(out[0]), out[1]) if shared_out else cut(out)
