r"""The speed limit at the program's own shapes: the layer's matmuls timed alone, against `simulate`.

    python benchmarks/shape_floor.py [--quick] [--config small] [--repeats N] [--json OUT] [--no-torch-loop]

For one reference configuration (`speed/_configs.py`; default ``small``: n 32, d 64, 128 layers,
1024 trajectories, post-LN, mu-only metrics, float32, one device) the layer's products are
timed at the shapes `rankdyn.simulate` runs them: per chunk of ``c`` trajectories (the chunk the
autotuner picks for this run, `rankdyn._run._autotune.tuned_chunk`), ``vmap`` over the chunk:

* the query-key projection, $X M$ with $M = W_Q W_K^\top/\sqrt{d_{QK}}$ folded where that saves
  FLOPs (`rankdyn._model._layer._fold_qk`), as one ``(c n, d) x (d, d)`` GEMM (else $X W_Q$ and $X W_K$);
* the value projection $X W_V$, ``(c n, d) x (d, d_V)``;
* the scores $(X M) X^\top$, ``c`` batched ``(n, d) x (d, n)`` products;
* $A (X W_V)$, ``c`` batched ``(n, n) x (n, d_V)`` products.

Each product is timed with ``jnp.einsum`` (jitted, the layer's precision), ``torch.bmm`` /
``torch.mm`` and ``torch.matmul`` (``torch.set_num_threads(cores)``); the fastest counts. The
**shape floor** of one layer is the sum of the fastest times times the number of chunks: no
implementation of this layer that computes these products one after another can be faster
(softmax, the mask, LayerNorm and the metrics come on top). Reported next to it: `simulate`'s
time per layer (median of ``--repeats`` calls after a warm-up), the floor as a fraction of it,
`simulate`'s model GFLOP/s as a fraction of the 4096^3 matmul peak measured in the same run, and
the fastest PyTorch loop (`speed/_reference_torch.py`, batched ``@`` or ``einsum``), and the
same sum with ``jnp.einsum``'s times alone (XLA's own kernels at these shapes: the part of the gap
that is the products themselves).

Levers tried at the same shapes, reported either way: both projections as one GEMM against
``[M | W_V]`` (``(c n, d) x (d, 2d)``); the floor at the full batch instead of the chunk; the two
attention products in other layouts in XLA (`LAYOUTS`: an operand transposed first, the output
transposed, the batch axis last, ``vmap`` of ``matmul``). Each
figure is a median with its spread; the load average is recorded (a loaded machine inflates
every figure; the ratios measured in one run are the fairer read). ``--quick`` (~1-2 min on 2
cores): 3 repeats, the peak at 4096 with 2 repeats.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from speed._configs import build, config, executed_flops, model_flops  # noqa: E402
from speed._hardware import cores, device_name, matmul_peak, versions  # noqa: E402
from speed._repeat import load, loaded, repeat  # noqa: E402


def _median_call(fn, repeats: int, inner: int) -> dict:
    """Median (and spread) over ``repeats`` of the mean time of ``inner`` back-to-back calls."""
    fn()  # warm-up: compiles (JAX) and faults in the buffers
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(inner):
            fn()
        times.append((time.perf_counter() - t0) / inner)
    return {"s": statistics.median(times), "min_s": min(times), "max_s": max(times)}


def products(layer, chunk: int) -> list[dict]:
    """The layer's matmuls at the program's shapes: name, operand shapes, einsum spec, FLOPs."""
    from rankdyn._model._layer import _fold_qk

    w = layer.weights
    n, d = layer.num_tokens, layer.dim
    dk, dv = w.w_q.shape[-1], w.w_v.shape[-1]
    rows = []
    if _fold_qk(n, d, dk):
        rows.append(dict(name="X M (query-key, folded)", kind="mm", a=(chunk * n, d), b=(d, d)))
        width = d
    else:
        rows.append(dict(name="X W_Q", kind="mm", a=(chunk * n, d), b=(d, dk)))
        rows.append(dict(name="X W_K", kind="mm", a=(chunk * n, d), b=(d, dk)))
        width = dk
    rows.append(dict(name="X W_V", kind="mm", a=(chunk * n, d), b=(d, dv)))
    rows.append(dict(name="scores (XM) X^T", kind="bmm_t", a=(chunk, n, width), b=(chunk, n, width)))
    rows.append(dict(name="A (X W_V)", kind="bmm", a=(chunk, n, n), b=(chunk, n, dv)))
    for r in rows:
        a, b = r["a"], r["b"]
        if r["kind"] == "mm":
            r["flops"] = 2 * a[0] * a[1] * b[1]
        elif r["kind"] == "bmm_t":
            r["flops"] = 2 * a[0] * a[1] * a[2] * b[1]
        else:
            r["flops"] = 2 * a[0] * a[1] * a[2] * b[2]
    return rows


def time_product(row: dict, precision, repeats: int, torch) -> dict:
    """``jnp.einsum`` and the PyTorch forms of one product; the fastest is the product's floor."""
    import jax
    import jax.numpy as jnp
    import jax.random as jr

    ka, kb = jr.split(jr.PRNGKey(1))
    a = jr.normal(ka, row["a"], jnp.float32)
    b = jr.normal(kb, row["b"], jnp.float32)
    spec = {"mm": "nd,dk->nk", "bmm_t": "bnd,bmd->bnm", "bmm": "bnm,bmd->bnd"}[row["kind"]]
    f = jax.jit(lambda a, b: jnp.einsum(spec, a, b, precision=precision))
    # About 50 ms of work per measurement, so the dispatch of one call is a small part of it.
    inner = max(1, int(0.05 / max(row["flops"] / 30e9, 1e-6)))
    res = {"jnp.einsum": _median_call(lambda: f(a, b).block_until_ready(), repeats, inner)}
    if torch is not None:
        ta, tb = (torch.from_numpy(jax.device_get(v).copy()) for v in (a, b))
        with torch.no_grad():
            if row["kind"] == "mm":
                forms = {"torch.mm": lambda: torch.mm(ta, tb), "torch.matmul": lambda: torch.matmul(ta, tb)}
            elif row["kind"] == "bmm_t":
                tbt = tb.transpose(1, 2)
                forms = {"torch.bmm": lambda: torch.bmm(ta, tbt), "torch.matmul": lambda: ta @ tbt}
            else:
                forms = {"torch.bmm": lambda: torch.bmm(ta, tb), "torch.matmul": lambda: ta @ tb}
            for k, fn in forms.items():
                res[k] = _median_call(fn, repeats, inner)
    best = min(res, key=lambda k: res[k]["s"])
    return {"times": res, "fastest": best, "s": res[best]["s"], "gflops": row["flops"] / res[best]["s"] / 1e9}


#: Other batchings of the two attention products in XLA (each transposes inside the program, so
#: its time includes what the layout costs): the lever "a different batching of the attention
#: products". name -> (einsum spec, how the second operand is laid out first).
LAYOUTS = {
    "bmm_t": {
        "bnd,bdm->bnm (X^T)": ("bnd,bdm->bnm", lambda b: b.swapaxes(1, 2)),
        "bnd,bmd->bmn (S^T)": ("bnd,bmd->bmn", None),
        "ndb,mdb->nmb (batch last)": ("ndb,mdb->nmb", "batch_last"),
    },
    "bmm": {
        "bnm,bdm->bnd (V^T)": ("bnm,bdm->bnd", lambda b: b.swapaxes(1, 2)),
        "vmap(matmul)": (None, None),
        "nmb,mdb->ndb (batch last)": ("nmb,mdb->ndb", "batch_last"),
    },
}


def time_layouts(row: dict, precision, repeats: int) -> dict:
    """``jnp`` forms of a batched product under `LAYOUTS`: seconds each (median)."""
    import jax
    import jax.numpy as jnp
    import jax.random as jr

    ka, kb = jr.split(jr.PRNGKey(1))
    a = jr.normal(ka, row["a"], jnp.float32)
    b = jr.normal(kb, row["b"], jnp.float32)
    inner = max(1, int(0.05 / max(row["flops"] / 30e9, 1e-6)))
    out = {}
    for name, (spec, prep) in LAYOUTS[row["kind"]].items():
        if spec is None:
            f = jax.jit(jax.vmap(lambda x, y: jnp.matmul(x, y, precision=precision)))
            args = (a, b)
        elif prep == "batch_last":
            f = jax.jit(lambda x, y, spec=spec: jnp.einsum(spec, x, y, precision=precision))
            args = (jnp.moveaxis(a, 0, -1), jnp.moveaxis(b, 0, -1))
        else:
            prep = prep or (lambda y: y)
            f = jax.jit(lambda x, y, spec=spec, prep=prep: jnp.einsum(spec, x, prep(y), precision=precision))
            args = (a, b)
        out[name] = _median_call(lambda f=f, args=args: f(*args).block_until_ready(), repeats, inner)["s"]
    return out


def time_simulate(layer, x0, cfg, repeats: int) -> dict:
    import jax

    import rankdyn as rd

    def run():
        tr = rd.simulate(layer, x0, cfg["layers"], metrics="mu,eps_min")
        jax.block_until_ready(tr.summary)

    run()  # compiles, and tunes the chunk on first use on this machine
    return repeat(run, repeats)


def time_torch_loop(torch, layer, x0, cfg, repeats: int) -> dict:
    from speed._reference_torch import FORMS, torch_inputs, torch_simulate

    xt, wq, wk, wv, mask, dqk = torch_inputs(torch, "cpu", layer, x0)
    out = {}
    for form in FORMS:

        def run(form=form):
            torch_simulate(torch, xt, wq, wk, wv, mask, dqk, cfg["layers"], cfg["per_layer"], "mu", form=form)

        run()
        out[form] = repeat(run, repeats)
    best = min(out, key=lambda k: out[k]["wall_s"])
    return {"forms": out, "fastest": best, "wall_s": out[best]["wall_s"]}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--config", default="small", help="a configuration of speed/_configs.py")
    p.add_argument("--quick", action="store_true", help="3 repeats and a shorter peak (~1-2 min on 2 cores)")
    p.add_argument("--repeats", type=int, default=None, help="repeats per figure (>= 3; default 5, quick 3)")
    p.add_argument("--no-torch-loop", action="store_true", help="skip the PyTorch loop baseline")
    p.add_argument("--json", type=Path, default=None, help="write the report here")
    args = p.parse_args(argv)
    repeats = args.repeats or (3 if args.quick else 5)
    if repeats < 3:
        p.error("--repeats must be at least 3 (every figure is a median)")

    import rankdyn as rd

    rd.use_cpu_devices(1)  # simulate on one device, as the "small" figure
    import torch

    from rankdyn._model._layer import PRECISIONS
    from rankdyn._observe._metric_observer import MetricObserver, parse_metrics
    from rankdyn._run._autotune import tuned_chunk

    torch.set_num_threads(cores())
    load0 = load()
    cfg = config(args.config, False, "mu")
    layer, x0 = build(cfg)
    obs = MetricObserver(parse_metrics("mu,eps_min"))
    chunk = tuned_chunk(layer, obs, x0, cfg["batch"], cfg["layers"], save_every=1, eps=True)
    num_chunks = math.ceil(cfg["batch"] / chunk)
    prec = PRECISIONS[layer.precision]
    print(
        f"{device_name()}; {args.config} {cfg}; simulate's chunk {chunk} ({num_chunks} per layer)", flush=True
    )

    rows = products(layer, chunk)
    for r in rows:
        r |= time_product(r, prec, repeats, torch)
        print(
            f"  {r['name']:26s} {str(r['a']):>16s} x {str(r['b']):<16s} {r['s'] * 1e3:8.3f} ms "
            f"({r['fastest']}, {r['gflops']:.1f} GFLOP/s)",
            flush=True,
        )
    floor_layer = num_chunks * sum(r["s"] for r in rows)
    # The same sum with XLA's own kernels only: how much of the gap to the floor is the products
    # themselves (XLA:CPU's against PyTorch's at these shapes) and how much the rest of the layer.
    jax_floor_layer = num_chunks * sum(r["times"]["jnp.einsum"]["s"] for r in rows)

    # Lever: the two projections as one GEMM against [M | W_V] (what _project does for d >= 256).
    n, d = layer.num_tokens, layer.dim
    proj = [r for r in rows if r["kind"] == "mm"]
    joint = dict(name="[M | W_V] one GEMM", kind="mm", a=(chunk * n, d), b=(d, sum(r["b"][1] for r in proj)))
    joint["flops"] = 2 * joint["a"][0] * d * joint["b"][1]
    joint |= time_product(joint, prec, repeats, torch)
    # Lever: the products at the full batch, one chunk per layer.
    print("levers: one [M | W_V] GEMM, the full batch ...", flush=True)
    full = products(layer, cfg["batch"])
    for r in full:
        r |= time_product(r, prec, repeats, torch)
    floor_full = sum(r["s"] for r in full)
    # Lever: the attention products in other layouts (XLA only).
    layouts = {r["name"]: time_layouts(r, prec, repeats) for r in rows if r["kind"] != "mm"}

    print("timing simulate ...", flush=True)
    sim = time_simulate(layer, x0, cfg, repeats)
    sim_layer = sim["wall_s"] / cfg["layers"]
    print(f"simulate {sim['wall_s']:.3f} s; timing the PyTorch loop and the peak ...", flush=True)
    loop = None if args.no_torch_loop else time_torch_loop(torch, layer, x0, cfg, repeats)
    peak = matmul_peak(4096, 2 if args.quick else 3)
    flops_layer = model_flops(cfg) * cfg["batch"]
    report = {
        "command": "python benchmarks/shape_floor.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "device": device_name(),
        "versions": versions(),
        "config": args.config,
        **cfg,
        "chunk": chunk,
        "chunks_per_layer": num_chunks,
        "load_before": load0,
        "loaded_machine": loaded(load0),
        "products": rows,
        "shape_floor_per_layer_s": floor_layer,
        "lever_joint_projection": {
            "joint_s": joint["s"],
            "separate_s": sum(r["s"] for r in proj),
            "fastest": joint["fastest"],
        },
        "lever_full_batch": {"floor_per_layer_s": floor_full, "products": full},
        "lever_layouts_s": layouts,
        "simulate": sim | {"per_layer_s": sim_layer},
        "simulate_fraction_of_shape_floor": floor_layer / sim_layer,
        "jax_floor_per_layer_s": jax_floor_layer,
        "simulate_fraction_of_jax_floor": jax_floor_layer / sim_layer,
        "model_flops_per_layer": flops_layer,
        "executed_flops_per_layer": executed_flops(cfg) * cfg["batch"],
        "simulate_gflops": flops_layer / sim_layer / 1e9,
        "peak": peak,
        "simulate_fraction_of_peak": flops_layer / sim_layer / 1e9 / peak["peak_gflops"],
        "floor_fraction_of_peak": executed_flops(cfg)
        * cfg["batch"]
        / floor_layer
        / 1e9
        / peak["peak_gflops"],
        "torch_loop": loop,
        "simulate_speedup_over_torch_loop": None if loop is None else loop["wall_s"] / sim["wall_s"],
        "load_after": load(),
    }
    print(
        f"shape floor per layer {floor_layer * 1e3:.3f} ms ({num_chunks} chunks of {chunk}); "
        f"at the full batch "
        f"{floor_full * 1e3:.3f} ms"
    )
    print(
        f"projections: one [M | W_V] GEMM {joint['s'] * 1e3:.3f} ms vs two "
        f"{sum(r['s'] for r in proj) * 1e3:.3f} ms"
    )
    for r in rows:
        if r["name"] in layouts:
            forms = "; ".join(f"{k} {v * 1e3:.3f}" for k, v in layouts[r["name"]].items())
            print(f"{r['name']} in XLA: jnp.einsum {r['times']['jnp.einsum']['s'] * 1e3:.3f} ms; {forms} ms")
    print(
        f"simulate per layer {sim_layer * 1e3:.3f} ms (median of {repeats}; "
        f"whole run {sim['wall_s']:.3f} s): "
        f"the floor is {report['simulate_fraction_of_shape_floor']:.0%} of it"
    )
    print(
        f"the products with jnp.einsum alone: {jax_floor_layer * 1e3:.3f} ms per layer, "
        f"{report['simulate_fraction_of_jax_floor']:.0%} of simulate's time"
    )
    print(
        f"simulate {report['simulate_gflops']:.1f} model GFLOP/s = "
        f"{report['simulate_fraction_of_peak']:.0%} of "
        f"the 4096^3 peak {peak['peak_gflops']:.1f} GFLOP/s; the floor's products run at "
        f"{report['floor_fraction_of_peak']:.0%} of it"
    )
    if loop is not None:
        print(
            f"fastest PyTorch loop ({loop['fastest']}) {loop['wall_s']:.3f} s: simulate is "
            f"{report['simulate_speedup_over_torch_loop']:.2f}x it"
        )
    print(
        f"load average {load0:.1f} -> {report['load_after']:.1f}"
        + (" (loaded machine: not comparable)" if report["loaded_machine"] else "")
    )
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=1, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
