"""rankdyn.lyapunov_spectrum against a dense-Jacobian QR by hand and a PyTorch torch.func.jvp loop.

    python benchmarks/lyapunov_speed.py [--quick] [--json OUT] [--repeats N>=3] [--no-torch]
                                        [--no-readme] [--force-readme]

On the ``small`` configuration (n 32, d 64, causal mask, post-LN, orthogonal W_V, BERT-uniform
W_Q/W_K, float32; `speed/_configs.py`), same layer and inputs for every contender:

* ``lyapunov_spectrum`` with k = 64 (1024 trajectories x 128 layers; ``--quick``: 32 x 32);
* the same with the full k = n(d - 1) = 1984 at a small batch (its tangent vectors alone take
  ~17 GB at batch 1024): 4 x 16 layers (``--quick``: 2 x 4);
* "k jvp's per step": a jitted ``lax.scan`` that only pushes k tangent vectors through one
  ``jax.jvp`` each per layer (no projection, no QR): the floor the method cannot beat; the
  target is lyapunov_spectrum <= 1.2 x this;
* the QR method by hand with a dense Jacobian per layer (``jax.jacfwd``, then ``J @ Q``, QR),
  at a small batch (the Jacobian is nd x nd = 2048^2);
* PyTorch: the same method with ``torch.func.vmap(torch.func.jvp)`` over the k tangents, batched
  over trajectories, ``torch.linalg.qr`` per layer, ``torch.set_num_threads(cores)``;
* ``simulate`` with ``metrics="mu"`` on the same batch and depth: the cost of one forward run.

Every figure is the median of ``--repeats`` runs (>= 3) with its spread (`speed/_repeat.py`),
per trajectory-layer, with the load before and after. ``--quick`` takes about 2-3 minutes on
2 cores. Results go into ``benchmarks/README.md`` between the ``lyapunov_speed`` markers, unless
the machine was loaded at the start (then only with ``--force-readme``, and the table says so).
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from speed._configs import build, config  # noqa: E402
from speed._hardware import cores, device_name, versions  # noqa: E402
from speed._repeat import load, loaded, repeat  # noqa: E402

MARKERS = ("<!-- BEGIN lyapunov_speed -->", "<!-- END lyapunov_speed -->")


def sizes(quick: bool) -> dict:
    if quick:
        return {
            "batch": 32,
            "layers": 32,
            "full_batch": 2,
            "full_layers": 4,
            "dense_batch": 2,
            "dense_layers": 4,
        }
    return {
        "batch": 1024,
        "layers": 128,
        "full_batch": 4,
        "full_layers": 16,
        "dense_batch": 4,
        "dense_layers": 16,
    }


def _block(x):
    import jax

    jax.block_until_ready(x)
    return x


def jvp_floor(layer, x0, num_layers, k):
    """k jvp's per layer and trajectory, nothing else: the floor of any matrix-free QR method."""
    import equinox as eqx
    import jax
    import jax.numpy as jnp
    from jax import lax

    n, d = layer.num_tokens, layer.dim

    @eqx.filter_jit
    def run(layer, x0, q0):
        def one(x, q):
            f = lambda z: layer(z, 0)[0]  # noqa: E731
            y, ty = jax.vmap(lambda v: jax.jvp(f, (x,), (v.reshape(n, d),)), in_axes=1, out_axes=(None, -1))(
                q
            )
            return y, ty.reshape(n * d, -1)

        def body(c, _):
            x, q = c
            return jax.vmap(one)(x, q), None

        with jax.default_matmul_precision("highest"):
            (x, q), _ = lax.scan(body, (x0, q0), None, length=num_layers)
        return jnp.sum(q)

    q0 = jnp.broadcast_to(jnp.eye(n * d, k, dtype=x0.dtype), (x0.shape[0], n * d, k))
    return lambda: _block(run(layer, x0, q0))


def dense_qr(layer, x0, num_layers, k):
    """The QR method by hand with a dense Jacobian per layer (``jax.jacfwd``)."""
    import equinox as eqx
    import jax
    import jax.numpy as jnp
    from jax import lax

    n, d = layer.num_tokens, layer.dim

    @eqx.filter_jit
    def run(layer, x0, q0):
        def one(x, q, s):
            f = lambda z: layer(z, 0)[0]  # noqa: E731
            jac = jax.jacfwd(f)(x).reshape(n * d, n * d)
            q, r = jnp.linalg.qr(jac @ q)
            return f(x), q, s + jnp.log(jnp.abs(jnp.diagonal(r)))

        def body(c, _):
            return jax.vmap(one)(*c), None

        with jax.default_matmul_precision("highest"):
            (x, q, s), _ = lax.scan(
                body, (x0, q0, jnp.zeros((x0.shape[0], k), x0.dtype)), None, length=num_layers
            )
        return s / num_layers

    q0 = jnp.broadcast_to(jnp.eye(n * d, k, dtype=x0.dtype), (x0.shape[0], n * d, k))
    return lambda: _block(run(layer, x0, q0))


def torch_qr(layer, x0, num_layers, k):
    """The QR method in PyTorch: torch.func.vmap over torch.func.jvp, one QR per layer."""
    import numpy as np
    import torch

    torch.set_num_threads(cores())
    w = layer.weights
    wq, wk, wv = (torch.tensor(np.asarray(a[0])) for a in (w.w_q, w.w_k, w.w_v))
    mask = torch.tensor(np.asarray(layer.mask))
    dqk = float(layer.dqk)
    x = torch.tensor(np.asarray(x0))
    b, n, d = x.shape

    def f(x):  # one post-LN layer on a batch (b, n, d)
        scores = (x @ wq) @ (x @ wk).transpose(1, 2) / math.sqrt(dqk)
        a = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)
        y = a @ (x @ wv)
        return y / y.norm(dim=-1, keepdim=True)

    def run():
        xs = x
        q = torch.eye(n * d, k).expand(b, n * d, k).contiguous()
        s = torch.zeros(b, k)
        with torch.no_grad():
            for _ in range(num_layers):
                tang = q.permute(2, 0, 1).reshape(k, b, n, d)
                y, ty = torch.func.vmap(lambda v: torch.func.jvp(f, (xs,), (v,)), out_dims=(None, 0))(tang)
                q, r = torch.linalg.qr(ty.reshape(k, b, n * d).permute(1, 2, 0))
                s += torch.log(torch.diagonal(r, dim1=1, dim2=2).abs())
                xs = y
        return s / num_layers

    return run


def rankdyn_run(layer, x0, num_layers, k):
    import rankdyn as rd

    return lambda: _block(rd.lyapunov_spectrum(layer, x0, num_layers, k=k, chunk=x0.shape[0]).exponents)


def simulate_run(layer, x0, num_layers):
    import rankdyn as rd

    return lambda: _block(rd.simulate(layer, x0, num_layers, metrics="mu", chunk=None).summary)


def timed(name, fn, repeats, work) -> dict:
    fn()  # compile and warm up
    r = repeat(fn, repeats)
    r["per_traj_layer_ms"] = 1e3 * r["wall_s"] / work
    print(
        f"  {name:32s} {r['wall_s']:8.3f} s  ({r['per_traj_layer_ms']:.3f} ms per trajectory-layer)",
        flush=True,
    )
    return r


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--json", type=Path, default=None)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--no-torch", action="store_true")
    p.add_argument("--no-readme", action="store_true")
    p.add_argument("--force-readme", action="store_true")
    args = p.parse_args(argv)
    if args.repeats < 3:
        p.error("--repeats must be >= 3 (medians of fewer runs are noise on a shared machine)")
    import jax.numpy as jnp

    sz = sizes(args.quick)
    cfg = config("small", False) | {"batch": sz["batch"], "layers": sz["layers"]}
    layer, x0 = build(cfg)
    n, d, k = cfg["n"], cfg["d"], 64
    load0 = load()
    rows = {}
    print(f"== small, k={k}: batch {sz['batch']} x {sz['layers']} layers", flush=True)
    work = sz["batch"] * sz["layers"]
    rows["lyapunov_spectrum k=64"] = timed(
        "lyapunov_spectrum k=64", rankdyn_run(layer, x0, sz["layers"], k), args.repeats, work
    )
    rows["k jvp's per step (floor)"] = timed(
        "k jvp's per step", jvp_floor(layer, x0, sz["layers"], k), args.repeats, work
    )
    rows["simulate mu"] = timed(
        "simulate metrics=mu", simulate_run(layer, x0, sz["layers"]), args.repeats, work
    )
    if not args.no_torch:
        rows["torch.func.jvp loop k=64"] = timed(
            "torch.func.jvp loop k=64", torch_qr(layer, x0, sz["layers"], k), args.repeats, work
        )
    xs = x0[: sz["dense_batch"]]
    dw = sz["dense_batch"] * sz["dense_layers"]
    rows["lyapunov_spectrum k=64 (dense batch)"] = timed(
        "lyapunov_spectrum k=64 (small batch)",
        rankdyn_run(layer, xs, sz["dense_layers"], k),
        args.repeats,
        dw,
    )
    rows["dense jacfwd QR k=64"] = timed(
        "dense jax.jacfwd QR k=64", dense_qr(layer, xs, sz["dense_layers"], k), args.repeats, dw
    )
    full = n * (d - 1)
    xf = x0[: sz["full_batch"]]
    fw = sz["full_batch"] * sz["full_layers"]
    rows[f"lyapunov_spectrum k={full} (full)"] = timed(
        f"lyapunov_spectrum k={full}", rankdyn_run(layer, xf, sz["full_layers"], full), args.repeats, fw
    )
    load1 = load()
    r = lambda a, b: rows[a]["per_traj_layer_ms"] / rows[b]["per_traj_layer_ms"]  # noqa: E731
    ratios = {
        "lyapunov / k jvp's": r("lyapunov_spectrum k=64", "k jvp's per step (floor)"),
        "lyapunov / simulate mu": r("lyapunov_spectrum k=64", "simulate mu"),
        "dense jacfwd / lyapunov (same batch)": r(
            "dense jacfwd QR k=64", "lyapunov_spectrum k=64 (dense batch)"
        ),
    }
    if not args.no_torch:
        ratios["torch / lyapunov"] = r("torch.func.jvp loop k=64", "lyapunov_spectrum k=64")
    report = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "device": device_name(),
        "cores": cores(),
        "versions": versions(),
        "quick": args.quick,
        "sizes": sz,
        "load_before": load0,
        "load_after": load1,
        "loaded": loaded(load0),
        "rows": rows,
        "ratios": ratios,
        "dtype": str(jnp.float32.dtype),
    }
    for key, v in ratios.items():
        print(f"  {key:40s} {v:8.3f}")
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))
    if not args.no_readme and (not report["loaded"] or args.force_readme):
        write_readme(HERE / "README.md", table(report))
    return 0


def table(rep) -> str:
    head = (
        f"`python benchmarks/lyapunov_speed.py{' --quick' if rep['quick'] else ''}` on {rep['device']}, "
        f"{rep['date']}, load {rep['load_before']:.2f} -> {rep['load_after']:.2f}"
        + (" (**loaded machine, not comparable**)" if rep["loaded"] else "")
        + f"; sizes {rep['sizes']}; float32, medians of {next(iter(rep['rows'].values()))['repeats']} runs."
    )
    lines = [head, "", "| contender | wall s (min-max) | ms per trajectory-layer |", "|---|---|---|"]
    for name, r in rep["rows"].items():
        lines.append(
            f"| {name} | {r['wall_s']:.3f} ({r['wall_min_s']:.3f}-{r['wall_max_s']:.3f}) "
            f"| {r['per_traj_layer_ms']:.3f} |"
        )
    lines += ["", "| ratio | value |", "|---|---|"]
    lines += [f"| {k} | {v:.3f} |" for k, v in rep["ratios"].items()]
    return "\n".join(lines)


def write_readme(path: Path, text: str) -> None:
    begin, end = MARKERS
    src = path.read_text()
    block = f"{begin}\n{text}\n{end}"
    if begin in src:
        pre, rest = src.split(begin, 1)
        src = pre + block + rest.split(end, 1)[1]
    else:
        src = src.rstrip("\n") + "\n\n## Lyapunov spectra (`lyapunov_speed.py`)\n\n" + block + "\n"
    path.write_text(src)


if __name__ == "__main__":
    raise SystemExit(main())
