"""The speed table of `benchmarks/README.md`, rewritten between markers by each full run."""

from __future__ import annotations

from pathlib import Path

BEGIN, END = "<!-- BEGIN simulate_speed -->", "<!-- END simulate_speed -->"


def _run(r) -> str:
    if not r or r.get("status", "ok") != "ok":
        return (r or {}).get("status", "-")
    return f"{r['wall_s']:.2f} ({r['cpu_s']:.2f})"


def _x(a, b) -> str:
    return f"{a / b:.2f}x" if a and b else "-"


def table(report) -> str:
    pk = report["peak"]
    lines = [
        f"Measured {report['date']} on {report['device']}; load average before the run "
        f"{report['loadavg_before'][0]:.1f}, after {report['loadavg_after'][0]:.1f}; "
        + ", ".join(f"{k} {v}" for k, v in report["versions"].items())
        + ".",
        f"Command: `{report['command']}`.",
        "",
        f"Measured {pk['cores']}-core float32 matmul peak ({pk['size']}^3, best of {pk['repeats']}): JAX "
        f"{pk['jax_gflops']:.1f} GFLOP/s"
        + (f", PyTorch {pk['torch_gflops']:.1f}" if "torch_gflops" in pk else "")
        + f"; peak = {pk['peak_gflops']:.1f} GFLOP/s.",
        "",
        "| config (n, d, layers, batch) | metrics | rankdyn 1 device s (cpu s) | rankdyn all cores s (cpu s) "
        "| PyTorch s (cpu s) | vs PyTorch: 1 device / all cores | % of peak: 1 device / all cores / PyTorch "
        "| cores busy (cpu/wall): 1 device / all cores / PyTorch |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for c in report["configs"]:
        label = f"{c['config']} ({c['n']}, {c['d']}, {c['layers']}, {c['batch']})"
        for m in c["metrics_sets"]:
            one, many, tor = c["rankdyn"].get(f"{m}/1"), c["rankdyn"].get(f"{m}/all"), c["torch"].get(m)
            w = lambda r: r["wall_s"] if r and r.get("status", "ok") == "ok" else None  # noqa: E731
            frac = lambda r: (
                f"{100 * c['total_model_flops'] / r['wall_s'] / 1e9 / pk['peak_gflops']:.0f}%"
                if w(r)
                else "-"
            )  # noqa: E731
            busy = lambda r: f"{r['cpu_s'] / r['wall_s']:.2f}" if w(r) else "-"  # noqa: E731
            lines.append(
                f"| {label} | {m} | {_run(one)} | {_run(many)} | {_run(tor)} | {_x(w(tor), w(one))} / "
                f"{_x(w(tor), w(many))} | {frac(one)} / {frac(many)} / {frac(tor)} | {busy(one)} / {busy(many)} / "
                f"{busy(tor)} |"
            )
    lines += [
        "",
        "Default metrics against mu-only (rankdyn wall): "
        + "; ".join(
            f"{c['config']} {_x((c['rankdyn'].get(f'default/{d}') or {}).get('wall_s'), (c['rankdyn'].get(f'mu/{d}') or {}).get('wall_s'))} "
            f"({'1 device' if d == '1' else 'all cores'})"
            for c in report["configs"]
            for d in ("1", "all")
            if set(c["metrics_sets"]) >= {"default", "mu"}
        )
        + ".",
    ]
    agree = [
        f"{c['config']} {m}: " + ", ".join(f"{k} {v:.1e}" for k, v in a["max_rel_err"].items())
        for c in report["configs"]
        for m, a in c.get("agreement", {}).items()
    ]
    if agree:
        lines.append(
            "PyTorch against rankdyn before timing, max relative error over the first "
            f"{report['configs'][0]['agreement_layers']} layers (8 or fewer): " + "; ".join(agree) + "."
        )
    for c in report["configs"]:
        if "memory" in c and "ratio" in c["memory"]:
            m = c["memory"]
            lines.append(
                f"Peak RSS `{c['config']}` (mu, eps_min, streamed): {m[str(c['layers'])]['peak_rss_bytes'] / 2**20:.0f}"
                f" MiB at {c['layers']} layers vs {m['128']['peak_rss_bytes'] / 2**20:.0f} MiB at 128 "
                f"(ratio {m['ratio']:.3f})."
            )
    return "\n".join(lines)


def write_readme(path: Path, text: str) -> None:
    block = f"{BEGIN}\n{text}\n{END}"
    old = path.read_text() if path.exists() else "# Benchmarks\n"
    if BEGIN in old and END in old:
        new = old[: old.index(BEGIN)] + block + old[old.index(END) + len(END) :]
    else:
        new = old.rstrip("\n") + "\n\n## simulate speed (latest run)\n\n" + block + "\n"
    path.write_text(new)
