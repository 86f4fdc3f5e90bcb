"""rankdyn.simulate against a PyTorch eager loop computing the same metrics, and the machine's peak, in one run.

    python benchmarks/simulate_speed.py [--json OUT] [--configs small,bert,long] [--metrics default,mu]
                                        [--devices both|1|all] [--repeats N] [--quick]
                                        [--no-readme] [--no-torch] [--no-memory] [--no-all-metrics]

Per configuration (post-LN, orthogonal W_V, BERT-uniform W_Q/W_K, float32; `speed/_configs.py`),
on identical inputs and weights:

* rankdyn ``simulate`` with the default metrics and with ``metrics="mu,eps_min"`` (batch
  statistics streamed, as the CLI runs it), each on 1 device and on every core
  (`rankdyn.use_cpu_devices`), each variant in its own process (`speed/_rankdyn_child.py`);
* PyTorch computing the same metrics at the same layers (`speed/_reference_torch.py`), first
  checked against rankdyn on a short run;
* the float32 matmul peak over all cores, measured in the same run (`speed/_hardware.py`).

Reported: wall and process CPU seconds, cores busy (CPU / wall), the ratios, and the fraction
of the peak by model FLOPs (Q, K, V projections, QK^T, AV; softmax, LN, metrics not counted).
The table goes into ``benchmarks/README.md`` between markers (`speed/_readme.py`).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from speed._configs import CONFIGS, METRICS, build, config, executed_flops, model_flops  # noqa: E402
from speed._hardware import Clock, cores, device_name, matmul_peak, versions  # noqa: E402


def bench_config(name, cfg, args) -> dict:
    res = {
        "config": name,
        **cfg,
        "model_flops_per_layer_traj": model_flops(cfg),
        "executed_flops_per_layer_traj": executed_flops(cfg),
        "total_model_flops": model_flops(cfg) * cfg["layers"] * cfg["batch"],
        "metrics_sets": args.metric_sets,
        "rankdyn": {},
        "torch": {},
    }
    print(f"== {name}: {cfg}", flush=True)
    if not args.no_torch:
        import jax
        import torch
        from speed._reference_torch import agreement, torch_inputs, torch_simulate

        layer, x0 = build(cfg)
        # PyTorch on CUDA when rankdyn runs on a GPU (gpu_check.sh), else on the CPU like rankdyn.
        dev = "cuda" if torch.cuda.is_available() and jax.default_backend() == "gpu" else "cpu"
        res["torch_threads"], res["torch_device"] = torch.get_num_threads(), dev
        res["agreement"], res["agreement_layers"] = {}, min(cfg["layers"], 8)
        for m in args.metric_sets:
            a = agreement(torch, layer, x0, cfg, m, res["agreement_layers"])
            res["agreement"][m] = a
            print(f"   torch vs rankdyn ({m}) over {a['layers']} layers: {a['max_rel_err']}", flush=True)
            if not a["ok"]:
                raise SystemExit(f"{name}: PyTorch and rankdyn disagree: {a['max_rel_err']}")
    for m in args.metric_sets:
        for devices in args.device_sets:
            from speed._rankdyn_child import run_child

            r = run_child(__file__, name, devices, m, args.quick, args.child_timeout)
            res["rankdyn"][f"{m}/{devices}"] = r
            print(f"   rankdyn {m} on {devices} device(s): {r}", flush=True)
        if not args.no_torch:
            tx, wq, wk, wv, mask, dqk = torch_inputs(torch, dev, layer, x0)
            best = None
            for _ in range(args.repeats):
                with Clock() as c:
                    torch_simulate(torch, tx, wq, wk, wv, mask, dqk, cfg["layers"], cfg["per_layer"], m)
                    if dev == "cuda":
                        torch.cuda.synchronize()
                best = c if best is None or c.wall < best.wall else best
            res["torch"][m] = {"wall_s": best.wall, "cpu_s": best.cpu}
            print(f"   torch {m}: {best.wall:.2f} s wall / {best.cpu:.2f} s cpu", flush=True)
    return res


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--json", type=Path, default=None, help="write all measurements here")
    p.add_argument("--configs", default="small,bert,long")
    p.add_argument("--metrics", default="default,mu", help="metric sets to time: default, mu, or both")
    p.add_argument("--no-all-metrics", action="store_true", help="time mu-only metrics only")
    p.add_argument(
        "--devices",
        default="both",
        choices=("both", "1", "all"),
        help="rankdyn on 1 device, on every core (use_cpu_devices), or both (default)",
    )
    p.add_argument("--quick", action="store_true", help="small sizes, for a smoke test (no README update)")
    p.add_argument("--repeats", type=int, default=1, help="timed PyTorch repeats (best is kept)")
    p.add_argument("--child-timeout", type=float, default=900.0, help="seconds per rankdyn process")
    p.add_argument("--no-torch", action="store_true")
    p.add_argument("--no-memory", action="store_true")
    p.add_argument("--no-readme", action="store_true")
    p.add_argument("--readme", type=Path, default=HERE / "README.md")
    p.add_argument("--_child", nargs=3, metavar=("CONFIG", "DEVICES", "METRICS"), help=argparse.SUPPRESS)
    p.add_argument("--_memory-child", nargs=2, metavar=("CONFIG", "LAYERS"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args._child:
        from speed._rankdyn_child import child

        child(*args._child, args.quick)
        return 0
    if args._memory_child:
        from speed._memory import memory_child

        memory_child(args._memory_child[0], int(args._memory_child[1]), args.quick)
        return 0
    names = [c for c in args.configs.split(",") if c]
    for c in names:
        if c not in CONFIGS:
            p.error(f"--configs: unknown config {c!r}; choose from {', '.join(CONFIGS)}")
    args.metric_sets = ["mu"] if args.no_all_metrics else [m for m in args.metrics.split(",") if m]
    for m in args.metric_sets:
        if m not in METRICS:
            p.error(f"--metrics: unknown set {m!r}; choose from {', '.join(METRICS)}")
    args.device_sets = ["1", "all"] if args.devices == "both" else [args.devices]
    report = {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "device": device_name(),
        "versions": versions(),
        "cores": cores(),
        "command": "python benchmarks/simulate_speed.py "
        + " ".join(argv if argv is not None else sys.argv[1:]),
        "loadavg_before": list(os.getloadavg()),
        "quick": args.quick,
    }
    print(report["device"], report["versions"], "load", report["loadavg_before"], flush=True)
    repeats = 3
    report["peak"] = matmul_peak(2048 if args.quick else 4096, repeats) | {"repeats": repeats}
    print(f"matmul peak: {report['peak']}", flush=True)
    report["configs"] = []
    for name in names:
        cfg = config(name, args.quick)
        res = bench_config(name, cfg, args)
        if name == "long" and not args.no_memory:
            from speed._memory import bench_memory

            res["memory"] = bench_memory(__file__, name, cfg, args.quick)
        report["configs"].append(res)
        if args.json:  # after each config, so a run cut short keeps what it measured
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps(report, indent=1))
    report["loadavg_after"] = list(os.getloadavg())
    from speed._readme import table, write_readme

    text = table(report)
    print("\n" + text)
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))
    if not args.quick and not args.no_readme:
        write_readme(args.readme, text)
        print(f"table written to {args.readme}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
