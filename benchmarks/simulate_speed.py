"""rankdyn.simulate against PyTorch, a hand-written JAX loop and the machine's peak, in one run.

    python benchmarks/simulate_speed.py [--quick] [--json OUT] [--configs small,bert,long]
                                        [--metrics default,mu] [--devices both|1|all] [--repeats N>=3]
                                        [--no-readme] [--force-readme] [--no-torch] [--no-memory]

Per configuration and metric set (post-LN, orthogonal W_V, BERT-uniform W_Q/W_K, float32;
`speed/_configs.py`), on identical inputs and weights:

* rankdyn ``simulate`` with the default metrics or ``metrics="mu,eps_min"`` (batch statistics
  streamed, as the CLI runs it), on 1 device and on every core (`rankdyn.use_cpu_devices`),
  each variant in its own process (`speed/_rankdyn_child.py`);
* on 1 device, mu-only: the hand-written ``jit`` + ``lax.scan`` loop (`speed/_reference_jax.py`)
  in the same process;
* PyTorch computing the same metrics at the same layers in two formulations, batched ``@`` and
  ``einsum``, ``torch.set_num_threads(cores)`` (`speed/_reference_torch.py`), first checked
  against rankdyn on a short run; the faster is the baseline;
* the float32 matmul peak over all cores, measured in the same run (`speed/_hardware.py`).

Every figure is the median of ``--repeats`` runs (>= 3) with min and max (`speed/_repeat.py`),
wall and process CPU seconds, with the load average before and after each row. A start load
above 0.25 per core marks the run "loaded machine, not comparable" and leaves the HISTORY.md
tables alone. ``--quick`` (~2 min on 2 cores): small and bert mu-only, small default metrics on
256 trajectories. The tables go into ``benchmarks/HISTORY.md`` (``--readme`` to choose another
file) between markers (`speed/_readme.py`); the README quotes their headline.
``RANKDYN_BENCH_TINY=1`` shrinks every configuration to check the script itself.
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

from speed._configs import (  # noqa: E402
    CONFIGS,
    METRICS,
    QUICK_CONFIGS,
    QUICK_METRICS,
    build,
    config,
    executed_flops,
    model_flops,
)
from speed._hardware import cores, device_name, matmul_peak, versions  # noqa: E402
from speed._repeat import load, loaded, repeat  # noqa: E402


def bench_row(name, m, args) -> dict:
    """One table row: a configuration and a metric set, every contender in the same conditions."""
    cfg = config(name, args.quick, m)
    res = {
        "config": name,
        "metrics": m,
        **cfg,
        "model_flops_per_layer_traj": model_flops(cfg),
        "executed_flops_per_layer_traj": executed_flops(cfg),
        "total_model_flops": model_flops(cfg) * cfg["layers"] * cfg["batch"],
        "load_before": load(),
        "rankdyn": {},
        "torch": {},
    }
    print(f"== {name} / {m}: {cfg}", flush=True)
    if not args.no_torch:
        import jax
        import torch
        from speed._reference_torch import FORMS, agreement, torch_inputs, torch_simulate

        torch.set_num_threads(cores())
        layer, x0 = build(cfg)
        # PyTorch on CUDA when rankdyn runs on a GPU (gpu_check.sh), else on the CPU like rankdyn.
        dev = "cuda" if torch.cuda.is_available() and jax.default_backend() == "gpu" else "cpu"
        res["torch_threads"], res["torch_device"] = torch.get_num_threads(), dev
        a = agreement(torch, layer, x0, cfg, m, min(cfg["layers"], 8))
        res["agreement"] = a
        print(f"   torch vs rankdyn over {a['layers']} layers: {a['max_rel_err']}", flush=True)
        if not a["ok"]:
            raise SystemExit(f"{name}: PyTorch and rankdyn disagree: {a['max_rel_err']}")
        tx, wq, wk, wv, mask, dqk = torch_inputs(torch, dev, layer, x0)

        def torch_run(form):
            torch_simulate(torch, tx, wq, wk, wv, mask, dqk, cfg["layers"], cfg["per_layer"], m, form=form)
            if dev == "cuda":
                torch.cuda.synchronize()

        # The SVDs dominate the default metrics and are the same call in both formulations, so
        # quick mode times only the faster formulation of the mu-only row there.
        forms = FORMS if not (args.quick and m == "default") else (args.torch_form_mu or FORMS[0],)
        for form in forms:
            torch_run(form)  # warm-up: allocator, thread pool
            res["torch"][form] = repeat(lambda: torch_run(form), args.repeats)
            print(f"   torch {form}: {res['torch'][form]}", flush=True)
        best = min(res["torch"], key=lambda f: res["torch"][f]["wall_s"])
        res["torch_best"] = best
        if m == "mu":
            args.torch_form_mu = best
        del layer, x0, tx
    from speed._rankdyn_child import run_child

    for devices in args.device_sets:
        r = run_child(__file__, name, devices, m, args.quick, args.child_timeout, args.repeats)
        res["rankdyn"][devices] = r
        print(f"   rankdyn on {devices} device(s): {r}", flush=True)
    res["load_after"] = load()
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
    p.add_argument(
        "--quick",
        action="store_true",
        help="~2 min on 2 cores: small and bert mu-only, small default metrics on 256 trajectories",
    )
    p.add_argument("--repeats", type=int, default=3, help="timed repeats of every figure (>= 3; median kept)")
    p.add_argument("--child-timeout", type=float, default=900.0, help="seconds per rankdyn process")
    p.add_argument("--no-torch", action="store_true")
    p.add_argument("--no-memory", action="store_true")
    p.add_argument("--no-readme", action="store_true")
    p.add_argument("--readme", type=Path, default=HERE / "HISTORY.md")
    p.add_argument("--_child", nargs=3, metavar=("CONFIG", "DEVICES", "METRICS"), help=argparse.SUPPRESS)
    p.add_argument("--force-readme", action="store_true", help="write the tables even from a loaded machine")
    p.add_argument("--_memory-child", nargs=2, metavar=("CONFIG", "LAYERS"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args._child:
        from speed._rankdyn_child import child

        child(*args._child, args.quick, args.repeats)
        return 0
    if args._memory_child:
        from speed._memory import memory_child

        memory_child(args._memory_child[0], int(args._memory_child[1]), args.quick)
        return 0
    if args.repeats < 3:
        p.error("--repeats: at least 3 (each figure is a median with its spread)")
    names = [c for c in args.configs.split(",") if c]
    for c in names:
        if c not in CONFIGS:
            p.error(f"--configs: unknown config {c!r}; choose from {', '.join(CONFIGS)}")
    args.metric_sets = ["mu"] if args.no_all_metrics else [m for m in args.metrics.split(",") if m]
    for m in args.metric_sets:
        if m not in METRICS:
            p.error(f"--metrics: unknown set {m!r}; choose from {', '.join(METRICS)}")
    rows = [(c, m) for c in names for m in args.metric_sets]
    if args.quick:
        rows = [(c, m) for c in QUICK_CONFIGS for m in ("mu", "default") if m in QUICK_METRICS[c]]
    args.device_sets = ["1", "all"] if args.devices == "both" else [args.devices]
    args.torch_form_mu = None
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
    report["loaded"] = loaded(report["loadavg_before"][0])
    print(report["device"], report["versions"], "load", report["loadavg_before"], flush=True)
    if report["loaded"]:
        print(
            f"load average {report['loadavg_before'][0]:.2f} > 0.25 per core: loaded machine, figures not "
            "comparable; the tables in HISTORY.md are left as they are",
            flush=True,
        )
    report["peak"] = matmul_peak(4096, args.repeats) | {"repeats": args.repeats}
    print(f"matmul peak: {report['peak']}", flush=True)
    report["rows"] = []
    before = report["peak"]
    for name, m in rows:
        # This host's matmul throughput drifted 2x within minutes (150 to 312 GFLOP/s at 4096^3,
        # 2026-12-01), so each row also gets the peak measured right before and after it (one
        # measurement between two rows serves both), and its "% of peak" is taken against the
        # larger of those two (the conservative figure).
        res = bench_row(name, m, args)
        after = matmul_peak(4096, args.repeats)
        res["peak"] = {
            "before_gflops": before["peak_gflops"],
            "after_gflops": after["peak_gflops"],
            "peak_gflops": max(before["peak_gflops"], after["peak_gflops"]),
        }
        before = after
        if name == "long" and m == "mu" and not args.no_memory:
            from speed._memory import bench_memory

            res["memory"] = bench_memory(__file__, name, config(name, args.quick), args.quick)
        report["rows"].append(res)
        if args.json:  # after each row, so a run cut short keeps what it measured
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps(report, indent=1))
    report["loadavg_after"] = list(os.getloadavg())
    from speed._readme import table, write_readme

    text = table(report)
    print("\n" + text)
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))
    if args.no_readme or (report["loaded"] and not args.force_readme):
        print(f"{args.readme.name} not rewritten" + (" (loaded machine)" if report["loaded"] else ""))
    else:
        write_readme(args.readme, text, quick=args.quick)
        print(f"table written to {args.readme}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
