"""The speed tables of `benchmarks/HISTORY.md`, rewritten between markers by each unloaded run."""

from __future__ import annotations

from pathlib import Path

from ._repeat import spread

MARKERS = {
    False: ("<!-- BEGIN simulate_speed -->", "<!-- END simulate_speed -->"),
    True: ("<!-- BEGIN simulate_speed_quick -->", "<!-- END simulate_speed_quick -->"),
}


def _ok(r) -> bool:
    return bool(r) and r.get("status", "ok") == "ok"


def _x(a, b) -> str:
    return f"{a / b:.2f}x" if a and b else "-"


def table(report) -> str:
    pk = report["peak"]
    note = " **Loaded machine, not comparable.**" if report.get("loaded") else ""
    lines = [
        f"Measured {report['date']} on {report['device']}; load average before the run "
        f"{report['loadavg_before'][0]:.2f}, after {report['loadavg_after'][0]:.2f};{note} "
        + ", ".join(f"{k} {v}" for k, v in report["versions"].items())
        + ".",
        f"Command: `{report['command']}`. Each figure: median wall seconds of "
        f"{pk['repeats']} runs (min-max; median process CPU seconds).",
        "",
        f"Measured {pk['cores']}-core float32 matmul peak at the start ({pk['size']}^3, best of "
        f"{pk['repeats']}; each row's % of peak uses the larger of the peaks measured right before and after "
        "that row, in GFLOP/s in its own column): JAX "
        f"{pk['jax_gflops']:.1f} GFLOP/s"
        + (f", PyTorch {pk['torch_gflops']:.1f}" if "torch_gflops" in pk else "")
        + f"; peak = {pk['peak_gflops']:.1f} GFLOP/s.",
        "",
        "| config (n, d, layers, batch) | metrics | rankdyn 1 device | rankdyn all cores "
        "| hand-written JAX loop "
        "| PyTorch (faster form) | vs PyTorch: 1 device / all cores | simulate / JAX loop "
        "| % of peak: 1 device / all cores / JAX loop / PyTorch | peak before / after the row "
        "| chunk | load before / after |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for c in report["rows"]:
        label = f"{c['config']} ({c['n']}, {c['d']}, {c['layers']}, {c['batch']})"
        one, many = c["rankdyn"].get("1"), c["rankdyn"].get("all")
        loop = (one or {}).get("jax_loop")
        tor = c["torch"].get(c.get("torch_best"))
        w = lambda r: r["wall_s"] if _ok(r) else None  # noqa: E731

        row_peak = c.get("peak", pk)["peak_gflops"]  # the row's own (older runs: the run's)

        def frac(r):
            if not w(r):
                return "-"
            return f"{100 * c['total_model_flops'] / r['wall_s'] / 1e9 / row_peak:.0f}%"

        form = f" `{c['torch_best']}`" if tor else ""
        lines.append(
            f"| {label} | {c['metrics']} | {spread(one)} | {spread(many)} | {spread(loop)} "
            f"| {spread(tor)}{form} "
            f"| {_x(w(tor), w(one))} / {_x(w(tor), w(many))} | {_x(w(one), w(loop))} "
            f"| {frac(one)} / {frac(many)} / {frac(loop)} / {frac(tor)} | {_peaks(c)} "
            f"| {(one or {}).get('chunk', '-')} "
            f"| {c['load_before']:.2f} / {c['load_after']:.2f} |"
        )
    agree = [
        f"{c['config']} {c['metrics']}: "
        + ", ".join(f"{k} {v:.1e}" for k, v in c["agreement"]["max_rel_err"].items())
        for c in report["rows"]
        if "agreement" in c
    ]
    if agree:
        lines += [
            "",
            "PyTorch (both formulations) against rankdyn before timing, max relative error over the first "
            "8 layers: " + "; ".join(agree) + ".",
        ]
    flops = {
        c["config"]: (c.get("executed_flops_per_layer_traj", 0), c["model_flops_per_layer_traj"])
        for c in report["rows"]
    }
    folded = [f"{k} {ex / 1e6:.3g} of {m / 1e6:.3g}" for k, (ex, m) in flops.items() if 0 < ex < m]
    if folded:
        lines += [
            "",
            "% of peak counts the model FLOPs (Q, K, V projections, QK^T, AV). rankdyn folds W_Q W_K^T into "
            "one d x d matrix where that saves FLOPs, so it executes fewer (MFLOP per layer and trajectory, "
            "executed of model: " + "; ".join(folded) + "; the fold itself, once per layer for the batch, "
            "not counted); the JAX loop and PyTorch execute the model FLOPs.",
        ]
    lines += _scaling(report)
    for c in report["rows"]:
        if "memory" in c and "ratio" in c["memory"]:
            m = c["memory"]
            lines.append(
                f"Peak RSS `{c['config']}` (mu, eps_min, streamed): "
                f"{m[str(c['layers'])]['peak_rss_bytes'] / 2**20:.0f}"
                f" MiB at {c['layers']} layers vs {m['128']['peak_rss_bytes'] / 2**20:.0f} MiB at 128 "
                f"(ratio {m['ratio']:.3f})."
            )
    return "\n".join(lines)


def _peaks(c) -> str:
    pk = c.get("peak")
    return f"{pk['before_gflops']:.0f} / {pk['after_gflops']:.0f}" if pk and "before_gflops" in pk else "-"


def _scaling(report) -> list[str]:
    r"""The cores model (benchmarks/DEVNOTES.md, "Scaling over cores") from each row's CPU seconds.

    $T(K) = W / K + c$ with $W$ = CPU seconds on 1 device and $c = (\mathrm{CPU}_{all} - W) / k$
    the per-device overhead measured on the run's $k$ cores; expected speed-up $W / T(K)$.
    """
    out = []
    for c in report["rows"]:
        one, many = c["rankdyn"].get("1"), c["rankdyn"].get("all")
        k = (many or {}).get("devices")
        if not (_ok(one) and _ok(many) and k and k > 1):
            continue
        work, over = one["cpu_s"], max(0.0, (many["cpu_s"] - one["cpu_s"]) / k)
        exp = ", ".join(f"{n} cores {work / (work / n + over):.1f}x" for n in (k, 8, 16))
        out.append(
            f"Cores model, {c['config']} {c['metrics']}: W = {work:.2f} CPU s on 1 device, per-device "
            f"overhead c = {over:.2f} s (from {many['cpu_s']:.2f} CPU s on {k} devices); expected speed-up "
            f"W / (W/K + c): {exp}; measured wall 1 device / {k} devices: "
            f"{one['wall_s'] / many['wall_s']:.2f}x."
        )
    return [""] + out if out else []


def write_readme(path: Path, text: str, quick: bool = False) -> None:
    begin, end = MARKERS[quick]
    block = f"{begin}\n{text}\n{end}"
    old = path.read_text() if path.exists() else "# Benchmarks\n"
    if begin in old and end in old:
        new = old[: old.index(begin)] + block + old[old.index(end) + len(end) :]
    else:
        new = old.rstrip("\n") + "\n\n## simulate speed (latest run)\n\n" + block + "\n"
    path.write_text(new)
