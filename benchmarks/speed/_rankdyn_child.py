"""One rankdyn run in its own process: 1 device or every core, default or mu-only metrics.

`rankdyn.use_cpu_devices` must run before JAX initialises, so each variant is a fresh process
(``python benchmarks/simulate_speed.py --_child CONFIG DEVICES METRICS``) that prints one JSON line.
Timed: the second call on the same batch (a warm-up on fewer trajectories left small eager
programs to compile in the timed call, ~2 s under load); the timed call's compiles are reported.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys


def child(name: str, devices: str, metrics: str, quick: bool) -> None:
    import rankdyn as rd

    if devices == "all":
        rd.use_cpu_devices("all")  # before any JAX operation
    import jax

    from rankdyn._io import CompileTimer

    from ._configs import METRICS, build, config
    from ._hardware import Clock

    cfg = config(name, quick)
    layer, x0 = build(cfg)
    k = len(jax.devices()) if devices == "all" else 1
    warm = cfg["batch"]

    def run(x):
        tr = rd.simulate(layer, x, cfg["layers"], metrics=METRICS[metrics], devices=None if k == 1 else "all")
        jax.block_until_ready(tr.summary)
        return tr

    with CompileTimer() as ct, Clock() as cw:
        run(x0[:warm])
    with CompileTimer() as c2, Clock() as c:
        tr = run(x0)
    print(
        json.dumps(
            {
                "devices": len(jax.devices()),
                "nproc_env": os.environ.get("NPROC"),
                "wall_s": c.wall,
                "cpu_s": c.cpu,
                "cores_busy": c.cpu / c.wall,
                "compile_s": ct.compile_s,
                "warmup_batch": warm,
                "warmup_wall_s": cw.wall,
                "compiles_timed_call": c2.compiles,
                "compile_s_timed_call": c2.compile_s,
                "mu_mean_last": float(tr.summary.mean["mu"][-1]),
            }
        )
    )


def run_child(script: str, name: str, devices: str, metrics: str, quick: bool, timeout_s: float) -> dict:
    """Start the child in a clean environment (no inherited XLA_FLAGS/NPROC) and parse its JSON line."""
    env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "NPROC")}
    cmd = [sys.executable, script, "--_child", name, devices, metrics] + (["--quick"] if quick else [])
    try:
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        return {"status": f"timeout after {timeout_s:.0f} s"}
    if proc.returncode:
        return {"status": f"rc={proc.returncode}", "stderr": proc.stderr[-2000:]}
    return {"status": "ok", **json.loads(proc.stdout.strip().splitlines()[-1])}
