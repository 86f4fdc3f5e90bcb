"""One sharded `rankdyn.simulate` over several processes (hosts) with `jax.distributed`.

Start the same command once per process, with its own ``--process-id``::

    python examples/multihost_simulate.py --coordinator host0:12345 --num-processes 2 --process-id 0
    python examples/multihost_simulate.py --coordinator host0:12345 --num-processes 2 --process-id 1

(on SLURM or Open MPI, ``jax.distributed.initialize()`` can find all three by itself). Each
process contributes ``--local-devices`` CPU devices; the batch of trajectories is split over
the devices of every process and nothing is communicated during the run. Process 0 gathers
the per-layer metrics and writes them to ``--out`` (JSON). ``tests/test_multihost.py`` runs
this script as 2 processes on localhost and compares the result with a single-process run.
"""

from __future__ import annotations

import argparse
import json


def problem(n: int, d: int, batch: int):
    """The layer and initial tokens: fixed keys, so every process builds the same ones."""
    import jax.random as jr

    import rankdyn as rd

    layer = rd.make_layer(jr.PRNGKey(0), n=n, d=d, mask="causal", qk="gaussian")
    return layer, rd.initial_tokens(jr.PRNGKey(1), "sphere", n, d, batch=batch)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--coordinator", default=None, help="host:port of process 0 (omit for a single process)")
    p.add_argument("--num-processes", type=int, default=1)
    p.add_argument("--process-id", type=int, default=0)
    p.add_argument("--local-devices", default="1", help="CPU devices of this process: N or 'all'")
    p.add_argument("--batch", type=int, default=12, help="trajectories (all processes together)")
    p.add_argument("--num-layers", type=int, default=8)
    p.add_argument("--n", type=int, default=6)
    p.add_argument("--d", type=int, default=8)
    p.add_argument("--out", default="multihost_metrics.json")
    args = p.parse_args(argv)

    import jax

    import rankdyn as rd

    # Both before JAX initialises: the device count, and CPU collectives between processes
    # (the run itself needs none; gathering the results at the end does).
    rd.use_cpu_devices(args.local_devices)
    jax.config.update("jax_enable_x64", True)
    if args.num_processes > 1:
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
        jax.distributed.initialize(
            coordinator_address=args.coordinator, num_processes=args.num_processes, process_id=args.process_id
        )

    from jax.experimental import multihost_utils

    # Every process makes the same calls with the same shapes and keys (the multi-controller
    # model); simulate keeps only this process's share of the batch on its devices.
    layer, x0 = problem(args.n, args.d, args.batch)
    traj = rd.simulate(layer, x0, args.num_layers, devices="all", per_trajectory=True)
    # Results are global arrays; only local shards are addressable, so gather to every process.
    metrics = {k: multihost_utils.process_allgather(v, tiled=True).tolist() for k, v in traj.metrics.items()}
    if jax.process_index() == 0:
        info = {
            "num_processes": jax.process_count(),
            "num_devices": len(jax.devices()),
            "local_devices": len(jax.local_devices()),
        }
        with open(args.out, "w") as f:
            json.dump({"info": info, "metrics": metrics}, f)
    if args.num_processes > 1:
        jax.distributed.shutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
