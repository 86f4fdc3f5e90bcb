"""Peak resident memory (VmHWM) of one configuration at its depth and at 128 layers.

Each depth runs in a fresh process (``--_memory-child CONFIG LAYERS``), ``metrics="mu,eps_min"``,
batch statistics streamed (rankdyn's default: no per-trajectory values are kept).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from ._hardware import Clock


def _peak_rss() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def memory_child(name: str, layers: int, quick: bool) -> None:
    import jax

    import rankdyn as rd

    from ._configs import build, config

    cfg = dict(config(name, quick), layers=layers)
    layer, x0 = build(cfg)
    tr = rd.simulate(layer, x0, layers, metrics="mu,eps_min")
    jax.block_until_ready(tr.summary)
    device_peak = None
    if jax.default_backend() != "cpu":
        device_peak = (jax.devices()[0].memory_stats() or {}).get("peak_bytes_in_use")
    print(json.dumps({"layers": layers, "peak_rss_bytes": _peak_rss(), "device_peak_bytes": device_peak}))


def bench_memory(script: str, name: str, cfg: dict, quick: bool) -> dict:
    out = {}
    for layers in (cfg["layers"], 128):
        cmd = [sys.executable, script, "--_memory-child", name, str(layers)] + (["--quick"] if quick else [])
        with Clock() as c:
            proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if proc.returncode:
            return {"status": f"memory child failed: {proc.stderr[-1500:]}"}
        rec = json.loads(proc.stdout.strip().splitlines()[-1])
        out[str(layers)] = rec | {"wall_s": c.wall}
        print(f"   memory at {layers} layers: peak RSS {rec['peak_rss_bytes'] / 2**20:.0f} MiB", flush=True)
    out["ratio"] = out[str(cfg["layers"])]["peak_rss_bytes"] / out["128"]["peak_rss_bytes"]
    print(f"   peak memory ratio {out['ratio']:.3f}", flush=True)
    return out
