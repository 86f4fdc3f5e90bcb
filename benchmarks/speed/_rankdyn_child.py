"""One rankdyn run in its own process: 1 device or every core, default or mu-only metrics.

`rankdyn.use_cpu_devices` must run before JAX initialises, so each variant is a fresh process
(``python benchmarks/simulate_speed.py --_child CONFIG DEVICES METRICS``) that prints one JSON line.
Timed: ``--repeats`` calls after a warm-up call on the same batch (a warm-up on fewer
trajectories left small eager programs to compile in the timed call); median and spread, the
timed calls' compiles, the chunk chosen, and on 1 device the hand-written JAX loop
(`_reference_jax`) in the same process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys


def child(name: str, devices: str, metrics: str, quick: bool, repeats: int = 3) -> None:
    import rankdyn as rd

    # Before any JAX operation, as the CLI does (`--devices 1|all`): also on one device, where the
    # pool's extra thread lets a batched SVD use both cores (rankdyn._run._devices.pool_threads).
    rd.use_cpu_devices("all" if devices == "all" else 1)
    import jax

    from rankdyn._observe._metric_observer import MetricObserver, parse_metrics
    from rankdyn._run._autotune import tuned_chunk
    from rankdyn._run._io import CompileTimer

    from ._configs import METRICS, build, config
    from ._repeat import repeat

    cfg = config(name, quick, metrics)
    layer, x0 = build(cfg)
    k = len(jax.devices()) if devices == "all" else 1

    def run(x):
        tr = rd.simulate(layer, x, cfg["layers"], metrics=METRICS[metrics], devices=None if k == 1 else "all")
        jax.block_until_ready(tr.summary)
        return tr

    # The warm-up is the same call: it compiles, and on one CPU device measures the chunk
    # (rankdyn._run._autotune, cached per machine), so the timed calls run what a second call runs.
    with CompileTimer() as ct:
        tr = run(x0)
    out = {"devices": len(jax.devices()), "nproc_env": os.environ.get("NPROC"), "compile_s": ct.compile_s}
    if k == 1 and jax.default_backend() == "cpu":
        obs = MetricObserver(parse_metrics(METRICS[metrics]))
        eps = METRICS[metrics] is None or "eps_min" in METRICS[metrics]
        out["chunk"] = tuned_chunk(layer, obs, x0, cfg["batch"], cfg["layers"], save_every=1, eps=eps)
    with CompileTimer() as c2:
        out |= repeat(lambda: run(x0), repeats)
    out |= {"compiles_timed_calls": c2.compiles, "compile_s_timed_calls": c2.compile_s}
    out["cores_busy"] = out["cpu_s"] / out["wall_s"]
    out["mu_mean_last"] = float(tr.summary.mean["mu"][-1])
    if k == 1 and metrics == "mu":
        # The floor simulate is held to, in the same process and conditions.
        from ._reference_jax import jax_inputs, make_jax_loop

        wq, wk, wv, mask, dqk = jax_inputs(layer)
        loop = make_jax_loop(cfg["layers"], cfg["per_layer"], dqk)
        ref = jax.block_until_ready(loop(x0, wq, wk, wv, mask))
        out["jax_loop"] = repeat(lambda: jax.block_until_ready(loop(x0, wq, wk, wv, mask)), repeats)
        out["jax_loop"]["mu_mean_last"] = float(ref["mu"]["mean"][-1])
    print(json.dumps(out))


def run_child(
    script: str, name: str, devices: str, metrics: str, quick: bool, timeout_s: float, repeats: int = 3
) -> dict:
    """Start the child in a clean environment (no inherited XLA_FLAGS/NPROC) and parse its JSON line."""
    env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "NPROC")}
    cmd = [sys.executable, script, "--_child", name, devices, metrics, "--repeats", str(repeats)]
    cmd += ["--quick"] if quick else []
    try:
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        return {"status": f"timeout after {timeout_s:.0f} s"}
    if proc.returncode:
        return {"status": f"rc={proc.returncode}", "stderr": proc.stderr[-2000:]}
    return {"status": "ok", **json.loads(proc.stdout.strip().splitlines()[-1])}
