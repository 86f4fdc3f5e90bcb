"""rankdyn.simulate against a PyTorch eager baseline and the machine's matmul peak, in one run.

    python benchmarks/simulate_speed.py [--json OUT] [--configs small,bert,long] [--quick]
                                        [--no-readme] [--no-torch] [--no-memory]

Per configuration (post-LN, orthogonal W_V, BERT-uniform W_Q/W_K, float32), on identical
inputs and weights:

* rankdyn ``simulate`` saving ``mu`` and ``eps_min`` at every layer; compile time (from
  ``jax.monitoring`` events) apart from run time; then a second call with another
  temperature, other value matrices and another seed, which must compile nothing;
* a PyTorch eager implementation as peers write it (a Python loop over layers of batched
  tensor ops, ``torch.no_grad``), saving the same two metrics at every layer; it is first
  checked to agree with rankdyn on a short run;
* the float32 matmul peak of the device (a large square matmul, best of several, in JAX and
  in PyTorch; the larger counts as "peak").

GFLOP/s count the model FLOPs of one layer, the same for both implementations:
Q, K, V projections (2 n d d_k + 2 n d d_k + 2 n d d_v) and the attention products QK^T and
A V (2 n^2 d_k + 2 n^2 d_v); softmax, LN and metrics are not counted. Wall and process CPU
seconds are both reported, with the load average: on a shared machine wall time is noisy.

``long`` also measures peak memory (VmHWM, one subprocess per depth) at 10,000 and 128 layers.
The table is written into ``benchmarks/README.md`` between markers (other sections are kept).
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np

import rankdyn as rd
from rankdyn._io import CompileTimer, write_json

HERE = Path(__file__).resolve().parent
BEGIN, END = "<!-- BEGIN simulate_speed -->", "<!-- END simulate_speed -->"

CONFIGS = {
    # name: n, d, dqk, layers, batch, mask, per-layer weights
    "small": dict(n=32, d=64, dqk=64, layers=128, batch=4096, mask="causal", per_layer=False),
    "bert": dict(n=128, d=768, dqk=64, layers=128, batch=32, mask="complete", per_layer=True),
    "long": dict(n=16, d=16, dqk=16, layers=10_000, batch=1024, mask="causal", per_layer=False),
}
QUICK = {
    "small": dict(layers=16, batch=512),
    "bert": dict(layers=8, batch=4),
    "long": dict(layers=1000, batch=128),
}


# ----------------------------------------------------------------------------- helpers
def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def device_name() -> str:
    dev = jax.devices()[0]
    kind = getattr(dev, "device_kind", str(dev))
    if dev.platform == "cpu":
        return f"CPU: {cpu_name()} ({os.cpu_count()} cores visible)"
    return f"{dev.platform.upper()}: {kind} x{len(jax.devices())}"


class Clock:
    """Wall and process-CPU seconds of a block."""

    def __enter__(self):
        self.w0, self.c0 = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc):
        self.wall = time.perf_counter() - self.w0
        self.cpu = time.process_time() - self.c0
        return False


def model_flops(cfg) -> float:
    """FLOPs of one layer for one trajectory: projections + QK^T + AV (see module docstring)."""
    n, d, k = cfg["n"], cfg["d"], cfg["dqk"]
    return 2 * n * d * k * 2 + 2 * n * d * d + 2 * n * n * k + 2 * n * n * d


def executed_flops(cfg) -> float:
    """FLOPs rankdyn actually executes per layer and trajectory (W_Q W_K^T folded when cheaper)."""
    from rankdyn._layer import _fold_qk

    n, d, k = cfg["n"], cfg["d"], cfg["dqk"]
    qk = 2 * n * d * d + 2 * n * n * d if _fold_qk(n, d, k) else 4 * n * d * k + 2 * n * n * k
    return qk + 2 * n * d * d + 2 * n * n * d


def matmul_peak(size: int, repeats: int) -> dict:
    """Best-of-``repeats`` float32 GFLOP/s of a ``size``-square matmul in JAX (HIGHEST) and torch."""
    out = {"size": size}
    a = jr.normal(jr.PRNGKey(0), (size, size), jnp.float32)
    f = jax.jit(lambda a: jnp.matmul(a, a, precision=jax.lax.Precision.HIGHEST))
    f(a).block_until_ready()
    best, best_cpu = math.inf, math.inf
    for _ in range(repeats):
        with Clock() as c:
            f(a).block_until_ready()
        best, best_cpu = min(best, c.wall), min(best_cpu, c.cpu)
    out["jax_gflops"] = 2 * size**3 / best / 1e9
    # Per CPU-second (all threads summed): robust to time-slicing on a shared machine.
    out["jax_gflops_per_cpu_s"] = 2 * size**3 / best_cpu / 1e9
    try:
        import torch

        dev = "cuda" if torch.cuda.is_available() and jax.default_backend() == "gpu" else "cpu"
        ta = torch.randn(size, size, device=dev)
        _sync(torch, dev, ta @ ta)
        best = math.inf
        for _ in range(repeats):
            with Clock() as c:
                _sync(torch, dev, ta @ ta)
            best = min(best, c.wall)
        out["torch_gflops"] = 2 * size**3 / best / 1e9
    except ImportError:
        pass
    out["peak_gflops"] = max(out["jax_gflops"], out.get("torch_gflops", 0.0))
    return out


def _sync(torch, dev, t):
    if dev == "cuda":
        torch.cuda.synchronize()
    return t


# ----------------------------------------------------------------------------- problem
def build(cfg, seed: int, dqk=None):
    """The layer and initial tokens of a configuration (float32)."""
    k1, k2 = jr.split(jr.PRNGKey(seed))
    layer = rd.make_layer(
        k1, n=cfg["n"], d=cfg["d"], mask=cfg["mask"], dqk=dqk, placement="post", value="orthogonal", qk="bert",
        num_layers=cfg["layers"] if cfg["per_layer"] else None, dtype=jnp.float32,
    )
    x0 = rd.initial_tokens(k2, "sphere", cfg["n"], cfg["d"], batch=cfg["batch"], dtype=jnp.float32)
    return layer, x0


#: mu only (eps_min is always saved): a pytree, so the compiled program is reused across calls.
OBSERVE_MU = jax.tree_util.Partial(lambda x: {"mu": rd.mu(x)})


#: ``devices=`` for simulate (``--devices``); e.g. "all" with XLA_FLAGS=--xla_force_host_platform_device_count=2
#: splits the batch over both CPU cores (each host-platform device runs on its own thread).
DEVICES = None


def run_rankdyn(layer, x0, num_layers, observe=OBSERVE_MU):
    tr = rd.simulate(layer, x0, num_layers, observe=observe, devices=DEVICES, per_trajectory=True)
    jax.block_until_ready(tr.metrics)
    return tr


def torch_weights(layer, torch, dev):
    w = layer.weights
    conv = lambda a: torch.from_numpy(np.array(a, dtype=np.float32)).to(dev)
    # (layers?, 1 head, d, k) -> drop the head axis
    return conv(w.w_q[..., 0, :, :]), conv(w.w_k[..., 0, :, :]), conv(w.w_v[..., 0, :, :])


def torch_simulate(torch, x0, wq, wk, wv, mask, dqk, num_layers, per_layer):
    """The peers' way: a Python loop over layers of batched tensor ops (post-LN, eq. 3)."""
    x = x0
    allowed = mask
    mus = [(x - x.mean(dim=1, keepdim=True)).flatten(1).norm(dim=1)]
    eps = []
    with torch.no_grad():
        for t in range(num_layers):
            q_w, k_w, v_w = (wq[t], wk[t], wv[t]) if per_layer else (wq, wk, wv)
            q = x @ q_w
            k = x @ k_w
            v = x @ v_w
            scores = q @ k.transpose(1, 2) / math.sqrt(dqk)
            scores = scores.masked_fill(~allowed, float("-inf"))
            a = torch.softmax(scores, dim=-1)
            eps.append(a.masked_fill(~allowed, float("inf")).amin(dim=(1, 2)))
            x = a @ v
            x = x / x.norm(dim=-1, keepdim=True)  # the paper's LN: rows onto the unit sphere
            mus.append((x - x.mean(dim=1, keepdim=True)).flatten(1).norm(dim=1))
    mu = torch.stack(mus, dim=1)
    eps = torch.stack([eps[0]] + eps, dim=1) if eps else None
    return mu, eps


def torch_inputs(torch, dev, layer, x0):
    wq, wk, wv = torch_weights(layer, torch, dev)
    mask = torch.from_numpy(np.array(layer.mask)).to(dev)
    x = torch.from_numpy(np.array(x0, dtype=np.float32)).to(dev)
    return x, wq, wk, wv, mask, float(layer.dqk)


# ----------------------------------------------------------------------------- one config
def bench_config(name, cfg, args, peak):
    res = {"config": name, **cfg, "model_flops_per_layer_traj": model_flops(cfg),
           "executed_flops_per_layer_traj": executed_flops(cfg), "metrics_saved": "mu and eps_min at every layer"}
    total_flops = model_flops(cfg) * cfg["layers"] * cfg["batch"]
    print(f"== {name}: {cfg}", flush=True)
    with Clock() as c:
        layer, x0 = build(cfg, seed=0)
        jax.block_until_ready((layer, x0))
    res["build_s"] = c.wall

    # rankdyn: first call (compile + run), then a timed warm call.
    with CompileTimer() as ct:
        run_rankdyn(layer, x0, cfg["layers"])
    res["rankdyn_first_call_s"] = ct.total_s
    res["rankdyn_compile_s"] = ct.compile_s
    res["rankdyn_compiles_first_call"] = ct.compiles
    best = None
    for _ in range(args.repeats):
        with Clock() as c:
            tr = run_rankdyn(layer, x0, cfg["layers"])
        if best is None or c.wall < best.wall:
            best = c
    res["rankdyn_s"], res["rankdyn_cpu_s"] = best.wall, best.cpu
    res["rankdyn_gflops"] = total_flops / best.wall / 1e9
    res["rankdyn_fraction_of_peak"] = res["rankdyn_gflops"] / peak
    res["rankdyn_gflops_per_cpu_s"] = total_flops / best.cpu / 1e9
    res["rankdyn_fraction_of_peak_cpu"] = res["rankdyn_gflops_per_cpu_s"] / args.peak_cpu
    print(f"   rankdyn: compile {ct.compile_s:.2f} s, run {best.wall:.2f} s wall / {best.cpu:.2f} s cpu, "
          f"{res['rankdyn_gflops']:.1f} GFLOP/s ({100 * res['rankdyn_fraction_of_peak']:.0f}% of peak)", flush=True)

    # Second call: other temperature, other value matrices (other seed), other inputs.
    layer2, x02 = build(cfg, seed=1, dqk=0.5 * cfg["dqk"])
    with CompileTimer() as cc2, Clock() as c2:
        run_rankdyn(layer2, x02, cfg["layers"])
    res["rankdyn_compiles_second_call"] = cc2.compiles
    res["rankdyn_second_call_s"] = c2.wall
    print(f"   second call (dqk/2, new W_V, new seed): {cc2.compiles} compilations, {c2.wall:.2f} s", flush=True)

    if name == "small" and not args.no_all_metrics:
        with CompileTimer() as cta:
            tra = rd.simulate(layer, x0, cfg["layers"], devices=DEVICES, per_trajectory=True)
            jax.block_until_ready(tra.metrics)
        with Clock() as ca:
            tra = rd.simulate(layer, x0, cfg["layers"], devices=DEVICES, per_trajectory=True)
            jax.block_until_ready(tra.metrics)
        res["rankdyn_all_metrics_first_call_s"] = cta.total_s
        res["rankdyn_all_metrics_s"], res["rankdyn_all_metrics_cpu_s"] = ca.wall, ca.cpu
        print(f"   all 13 metrics every layer: first call {cta.total_s:.2f} s, warm {ca.wall:.2f} s wall / "
              f"{ca.cpu:.2f} s cpu", flush=True)

    if not args.no_torch:
        try:
            import torch
        except ImportError:
            torch = None
            res["torch"] = "not installed"
        if torch is not None:
            dev = "cuda" if torch.cuda.is_available() and jax.default_backend() == "gpu" else "cpu"
            res["torch_version"], res["torch_device"], res["torch_threads"] = torch.__version__, dev, torch.get_num_threads()
            tx, wq, wk, wv, mask, dqk = torch_inputs(torch, dev, layer, x0)
            # Agreement before timing: a short run of both, same inputs and weights.
            check_layers = min(cfg["layers"], 8)
            mu_t, eps_t = torch_simulate(torch, tx, wq, wk, wv, mask, dqk, check_layers, cfg["per_layer"])
            tr_chk = run_rankdyn(layer, x0, check_layers)
            mu_r, eps_r = np.asarray(tr_chk.metrics["mu"]), np.asarray(tr_chk.metrics["eps_min"])
            # Relative error, with a floor at 1e-3 of the initial mu: collapsed states (mu at the
            # float32 rounding level, e.g. `bert` after 2 layers) agree only to that level.
            floor = 1e-3 * np.abs(mu_r[:, :1])
            err_mu = float(np.max(np.abs(mu_t.cpu().numpy() - mu_r) / np.maximum(np.abs(mu_r), floor)))
            err_eps = float(np.max(np.abs(eps_t.cpu().numpy() - eps_r) / np.abs(eps_r)))
            res["agreement_layers"], res["agreement_max_rel_err_mu"], res["agreement_max_rel_err_eps"] = (
                check_layers, err_mu, err_eps)
            res["agreement_ok"] = bool(err_mu < 1e-3 and err_eps < 1e-3)
            print(f"   torch vs rankdyn over {check_layers} layers: max rel err mu {err_mu:.1e}, eps {err_eps:.1e}",
                  flush=True)
            if not res["agreement_ok"]:
                raise SystemExit(f"{name}: PyTorch and rankdyn disagree (mu {err_mu:.2e}, eps {err_eps:.2e}).")
            best_t = None
            for _ in range(args.repeats):
                with Clock() as c:
                    mu_full, _ = torch_simulate(torch, tx, wq, wk, wv, mask, dqk, cfg["layers"], cfg["per_layer"])
                    _sync(torch, dev, mu_full)
                if best_t is None or c.wall < best_t.wall:
                    best_t = c
            res["torch_s"], res["torch_cpu_s"] = best_t.wall, best_t.cpu
            res["torch_gflops"] = total_flops / best_t.wall / 1e9
            res["torch_fraction_of_peak"] = res["torch_gflops"] / peak
            res["speedup_vs_torch"] = best_t.wall / res["rankdyn_s"]
            res["speedup_vs_torch_cpu_time"] = best_t.cpu / res["rankdyn_cpu_s"]
            # Same trajectories at the end? (both collapse; compare the layer where mu is largest.)
            print(f"   torch: {best_t.wall:.2f} s wall / {best_t.cpu:.2f} s cpu, {res['torch_gflops']:.1f} GFLOP/s; "
                  f"rankdyn is {res['speedup_vs_torch']:.2f}x faster (cpu time {res['speedup_vs_torch_cpu_time']:.2f}x)",
                  flush=True)
    del layer, x0, layer2, x02
    return res


# ----------------------------------------------------------------------------- memory
def memory_child(name: str, layers: int, quick: bool, save_every: int = 1) -> None:
    """Run one configuration at a given depth and print its peak resident memory (VmHWM)."""
    cfg = dict(CONFIGS[name], **(QUICK[name] if quick else {}))
    cfg["layers"] = layers
    layer, x0 = build(cfg, seed=0)
    tr = rd.simulate(layer, x0, layers, observe=OBSERVE_MU, save_every=save_every, per_trajectory=True)
    jax.block_until_ready(tr.metrics)
    out_bytes = sum(np.asarray(v).nbytes for v in tr.metrics.values())
    device_peak = None
    if jax.default_backend() != "cpu":
        device_peak = (jax.devices()[0].memory_stats() or {}).get("peak_bytes_in_use")
    hwm = None
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            hwm = int(line.split()[1]) * 1024
    if hwm is None:
        import resource

        hwm = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(json.dumps({"layers": layers, "save_every": save_every, "peak_rss_bytes": hwm, "output_bytes": out_bytes,
                      "device_peak_bytes": device_peak}))


def bench_memory(name, cfg, quick):
    out = {}
    sparse = max(1, cfg["layers"] // 100)
    for layers, every in ((cfg["layers"], 1), (128, 1), (cfg["layers"], sparse)):
        cmd = [sys.executable, __file__, "--_memory-child", name, str(layers), str(every)] + (["--quick"] if quick else [])
        with Clock() as c:
            proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if proc.returncode:
            raise SystemExit(f"memory child failed:\n{proc.stderr[-3000:]}")
        rec = json.loads(proc.stdout.strip().splitlines()[-1])
        rec["wall_s"] = c.wall
        out[str(layers) if every == 1 else f"{layers}_every_{every}"] = rec
        print(f"   memory at {layers} layers (metrics every {every}): peak RSS {rec['peak_rss_bytes'] / 2**20:.0f} MiB "
              f"(saved metrics {rec['output_bytes'] / 2**20:.1f} MiB)", flush=True)
    deep, shallow = out[str(cfg["layers"])], out["128"]
    out["ratio"] = deep["peak_rss_bytes"] / shallow["peak_rss_bytes"]
    # Saved metrics grow with depth by construction (layers x batch x metrics); the rest must not.
    out["ratio_excluding_saved_metrics"] = (deep["peak_rss_bytes"] - deep["output_bytes"]) / (
        shallow["peak_rss_bytes"] - shallow["output_bytes"])
    out["ratio_sparse_saves"] = out[f"{cfg['layers']}_every_{sparse}"]["peak_rss_bytes"] / shallow["peak_rss_bytes"]
    out["sparse_every"] = sparse
    print(f"   peak memory ratio {out['ratio']:.3f} ({out['ratio_excluding_saved_metrics']:.3f} without the "
          f"saved metrics themselves); with metrics every {sparse} layers {out['ratio_sparse_saves']:.3f}", flush=True)
    return out


# ----------------------------------------------------------------------------- report
def versions() -> dict:
    v = {"python": platform.python_version(), "jax": jax.__version__, "rankdyn": rd.__version__,
         "numpy": np.__version__}
    try:
        import jaxlib

        v["jaxlib"] = jaxlib.__version__
    except ImportError:
        pass
    try:
        import equinox

        v["equinox"] = equinox.__version__
    except (ImportError, AttributeError):
        pass
    try:
        import torch

        v["torch"] = torch.__version__
    except ImportError:
        pass
    return v


def table(report) -> str:
    peak = report["peak"]["peak_gflops"]
    lines = [
        f"Measured {report['date']} on {report['device']} (load average before the run "
        f"{report['loadavg_before'][0]:.1f}, after {report['loadavg_after'][0]:.1f}); "
        + ", ".join(f"{k} {v}" for k, v in report["versions"].items()) + ".",
        f"Command: `{report['command']}`.",
        "",
        f"Measured float32 matmul peak ({report['peak']['size']}^3): JAX {report['peak']['jax_gflops']:.1f} GFLOP/s"
        + (f", PyTorch {report['peak']['torch_gflops']:.1f} GFLOP/s" if "torch_gflops" in report["peak"] else "")
        + f"; peak = {peak:.1f} GFLOP/s (JAX per CPU-second, all threads summed: "
        f"{report['peak']['jax_gflops_per_cpu_s']:.1f}).",
        "",
        "| config | n | d | d_QK | layers | batch | mask | rankdyn compile s | rankdyn run s (cpu s) | rankdyn GFLOP/s "
        "| % of peak (per cpu s) | PyTorch s (cpu s) | PyTorch GFLOP/s | speed-up vs PyTorch (cpu time) | 2nd call compiles |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in report["configs"]:
        tor = (f"{r['torch_s']:.2f} ({r['torch_cpu_s']:.2f}) | {r['torch_gflops']:.1f} | "
               f"{r['speedup_vs_torch']:.2f}x ({r['speedup_vs_torch_cpu_time']:.2f}x)") if "torch_s" in r else "- | - | -"
        lines.append(
            f"| {r['config']} | {r['n']} | {r['d']} | {r['dqk']} | {r['layers']} | {r['batch']} | {r['mask']} | "
            f"{r['rankdyn_compile_s']:.2f} | {r['rankdyn_s']:.2f} ({r['rankdyn_cpu_s']:.2f}) | {r['rankdyn_gflops']:.1f} | "
            f"{100 * r['rankdyn_fraction_of_peak']:.0f}% ({100 * r['rankdyn_fraction_of_peak_cpu']:.0f}%) | {tor} | {r['rankdyn_compiles_second_call']} |"
        )
    lines.append("")
    lines.append("Both implementations save mu (eq. 4) and eps_min (Theorem 1's epsilon) at every layer. "
                 "GFLOP/s count the model FLOPs (Q, K, V projections, QK^T, AV) for both; rankdyn executes fewer "
                 "where it folds W_Q W_K^T (executed / model FLOPs: "
                 + ", ".join(f"{r['config']} {r['executed_flops_per_layer_traj'] / r['model_flops_per_layer_traj']:.2f}"
                             for r in report["configs"]) + " of the model FLOPs).")
    for r in report["configs"]:
        if "rankdyn_all_metrics_s" in r:
            lines.append(f"With all 13 default metrics (batched SVD per saved layer) `{r['config']}` takes "
                         f"{r['rankdyn_all_metrics_s']:.2f} s warm ({r['rankdyn_all_metrics_cpu_s']:.2f} s cpu), "
                         f"{r['rankdyn_all_metrics_first_call_s']:.2f} s on its first call.")
        if "memory" in r:
            m = r["memory"]
            deep = m[str(r["layers"])]
            sh = m["128"]
            lines.append(
                f"Peak memory `{r['config']}`: {deep['peak_rss_bytes'] / 2**20:.0f} MiB at {r['layers']} layers vs "
                f"{sh['peak_rss_bytes'] / 2**20:.0f} MiB at 128 layers (ratio {m['ratio']:.3f}; "
                f"{m['ratio_excluding_saved_metrics']:.3f} without the saved metrics, "
                f"{deep['output_bytes'] / 2**20:.1f} MiB vs {sh['output_bytes'] / 2**20:.2f} MiB); saving every "
                f"{m['sparse_every']} layers instead: ratio {m['ratio_sparse_saves']:.3f}.")
    return "\n".join(lines)


def write_readme(path: Path, text: str) -> None:
    block = f"{BEGIN}\n{text}\n{END}"
    old = path.read_text() if path.exists() else "# Benchmarks\n"
    if BEGIN in old and END in old:
        new = old[: old.index(BEGIN)] + block + old[old.index(END) + len(END):]
    else:
        new = old.rstrip("\n") + "\n\n## simulate speed (latest run)\n\n" + block + "\n"
    path.write_text(new)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--json", type=Path, default=None, help="write all measurements here")
    p.add_argument("--configs", default="small,bert,long")
    p.add_argument("--quick", action="store_true", help="small sizes, for a smoke test (no README update)")
    p.add_argument("--repeats", type=int, default=2, help="timed repeats (best is kept)")
    p.add_argument("--no-torch", action="store_true")
    p.add_argument("--no-memory", action="store_true")
    p.add_argument("--no-all-metrics", action="store_true", help="skip the all-metrics timing of `small`")
    p.add_argument("--no-readme", action="store_true")
    p.add_argument("--readme", type=Path, default=HERE / "README.md")
    p.add_argument("--devices", default=None, help="simulate(devices=...): 'all' or a count (default: one device)")
    p.add_argument("--_memory-child", nargs=3, metavar=("CONFIG", "LAYERS", "EVERY"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args._memory_child:
        memory_child(args._memory_child[0], int(args._memory_child[1]), args.quick, int(args._memory_child[2]))
        return 0
    global DEVICES
    DEVICES = None if args.devices is None else ("all" if args.devices == "all" else int(args.devices))
    names = [c for c in args.configs.split(",") if c]
    for c in names:
        if c not in CONFIGS:
            p.error(f"unknown config {c!r}; choose from {', '.join(CONFIGS)}")
    report = {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "device": device_name(), "backend": jax.default_backend(), "versions": versions(),
        "command": "python benchmarks/simulate_speed.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "loadavg_before": list(os.getloadavg()), "quick": args.quick, "simulate_devices": args.devices,
        "num_jax_devices": len(jax.devices()),
    }
    print(report["device"], report["versions"], "load", report["loadavg_before"], flush=True)
    report["peak"] = matmul_peak(2048 if args.quick else 4096, repeats=3 if args.quick else 5)
    print(f"matmul peak: {report['peak']}", flush=True)
    peak = report["peak"]["peak_gflops"]
    args.peak_cpu = report["peak"]["jax_gflops_per_cpu_s"]
    report["configs"] = []
    for name in names:
        cfg = dict(CONFIGS[name], **(QUICK[name] if args.quick else {}))
        res = bench_config(name, cfg, args, peak)
        if name == "long" and not args.no_memory:
            res["memory"] = bench_memory(name, cfg, args.quick)
        report["configs"].append(res)
        if args.json:  # after each config, so a run cut short (e.g. a timeout) keeps what it measured
            write_json(args.json, report)
    report["loadavg_after"] = list(os.getloadavg())
    text = table(report)
    print("\n" + text)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        write_json(args.json, report)
    if not args.quick and not args.no_readme:
        write_readme(args.readme, text)
        print(f"table written to {args.readme}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
