"""Several CPU devices against one, and hangs, measured side by side in one run.

    python benchmarks/devices_speed.py [--n 32 --d 64 --num-layers 64 --batch 1024] [--repeats 2]
                                      [--hang-tries 0] [--json OUT]

Each measurement is a fresh subprocess (the device count is fixed when JAX initialises), run
in ABAB order so that a shared machine's load drifts over both arms alike:

* ``1 device``: plain ``simulate`` (XLA's default: one device, one pool thread per core);
* ``k devices``: `rankdyn.use_cpu_devices` (k = cores) then ``simulate(devices="all")``;

each with the default metrics (a batched SVD per layer) and with mu only. Reported: wall and
process CPU seconds of the second (compiled) call, and their ratios. With ``--hang-tries N``
it also runs the sharded default metrics N times *without* the pool sizing of
`use_cpu_devices` (only ``jax_num_cpu_devices``) and N times with it, counting runs whose CPU
time stopped growing for 20 s (a deadlock; a slow run keeps using CPU).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = textwrap.dedent(
    """
    import json, os, resource, sys, time
    mode, metrics, n, d, layers, batch = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:7])
    import rankdyn as rd
    if mode == "sharded":
        rd.use_cpu_devices("all")
    elif mode == "unfixed":
        import jax
        jax.config.update("jax_num_cpu_devices", os.cpu_count())
    import jax, jax.numpy as jnp, jax.random as jr
    layer = rd.make_layer(jr.PRNGKey(0), n=n, d=d, mask="causal", qk="bert", value="orthogonal")
    x0 = rd.initial_tokens(jr.PRNGKey(1), "sphere", n, d, batch=batch)
    observe = None if metrics == "default" else jax.tree_util.Partial(lambda t, x, args: {"mu": rd.mu(x)})
    devices = None if mode == "one" else "all"
    def run():
        t, c = time.perf_counter(), time.process_time()
        jax.block_until_ready(rd.simulate(layer, x0, layers, observe=observe, devices=devices).summary)
        return time.perf_counter() - t, time.process_time() - c
    run()  # compile
    wall, cpu = run()
    print(json.dumps({"devices": len(jax.devices()), "wall_s": wall, "cpu_s": cpu}))
    """
)


def watched(cmd, env, stall_s=20.0, limit_s=900.0):
    """(status, stdout): status "hang" if the child's CPU time stopped growing for stall_s."""
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    last, since, start = None, time.monotonic(), time.monotonic()
    try:
        while proc.poll() is None:
            time.sleep(0.5)
            try:
                f = open(f"/proc/{proc.pid}/stat").read().rsplit(")", 1)[1].split()
                cpu = int(f[11]) + int(f[12])
            except (OSError, IndexError):
                continue
            if cpu != last:
                last, since = cpu, time.monotonic()
            elif time.monotonic() - since > stall_s:
                return "hang", ""
            if time.monotonic() - start > limit_s:
                return "timeout", ""
        return ("ok" if proc.returncode == 0 else f"rc={proc.returncode}"), proc.stdout.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=32)
    p.add_argument("--d", type=int, default=64)
    p.add_argument("--num-layers", type=int, default=64)
    p.add_argument("--batch", type=int, default=1024)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--hang-tries", type=int, default=0)
    p.add_argument("--json", type=Path, default=None)
    a = p.parse_args()
    env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "NPROC")}
    env |= {"JAX_PLATFORMS": "cpu", "PYTHONPATH": os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])}
    size = [str(v) for v in (a.n, a.d, a.num_layers, a.batch)]
    out = {"config": vars(a) | {"json": str(a.json)}, "cores": os.cpu_count(), "load_before": os.getloadavg()}
    times = {}
    for _ in range(a.repeats):
        for metrics in ("default", "mu"):
            for mode in ("one", "sharded"):
                status, text = watched([sys.executable, "-c", CHILD, mode, metrics, *size], env)
                rec = json.loads(text) if status == "ok" else {"status": status}
                times.setdefault(f"{metrics}/{mode}", []).append(rec)
                print(metrics, mode, rec, flush=True)
    summary = {}
    for metrics in ("default", "mu"):
        one = [r["wall_s"] for r in times[f"{metrics}/one"] if "wall_s" in r]
        many = [r["wall_s"] for r in times[f"{metrics}/sharded"] if "wall_s" in r]
        if one and many:
            summary[metrics] = {
                "one_device_wall_s": statistics.median(one),
                "sharded_wall_s": statistics.median(many),
                "speedup": statistics.median(one) / statistics.median(many),
            }
    out |= {"runs": times, "summary": summary}
    if a.hang_tries:
        hangs = {}
        for _ in range(a.hang_tries):
            for mode in ("unfixed", "sharded"):
                status, _ = watched([sys.executable, "-c", CHILD, mode, "default", *size], env)
                hangs.setdefault(mode, []).append(status)
                print("hang check", mode, status, flush=True)
        out["hang_checks"] = hangs
    out["load_after"] = os.getloadavg()
    print(json.dumps(out["summary"], indent=1))
    if a.json:
        a.json.write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
