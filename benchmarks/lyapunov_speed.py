"""rankdyn.lyapunov_spectrum against a dense-Jacobian QR by hand and a PyTorch torch.func.jvp loop.

    python benchmarks/lyapunov_speed.py [--quick] [--json OUT] [--repeats N>=3] [--no-torch]
                                        [--no-readme] [--force-readme]

On the ``small`` configuration (n 32, d 64, causal mask, post-LN, orthogonal W_V, BERT-uniform
W_Q/W_K, float32; `speed/_configs.py`), same layer and inputs for every contender, k = 64:

* ``lyapunov_spectrum`` (defaults: ``qr_every="auto"``, the default chunk);
* "k jvp's per layer": a jitted ``lax.scan`` that only pushes k tangent vectors through one
  ``jax.jvp`` each per layer (``vmap`` over the k; no projection, no QR): the cost the issue's
  target is stated against, lyapunov_spectrum <= 1.2 x this;
* "one linearize per layer": the same k tangents through ``jax.linearize`` + ``vmap`` of the
  linear map, which is how lyapunov_spectrum propagates them: lyapunov / this is the cost of
  everything else (projection, QR, bookkeeping);
* PyTorch: the same method with ``torch.func.vmap(torch.func.jvp)`` over the k tangents, batched
  over trajectories, ``torch.linalg.qr`` per layer, ``torch.set_num_threads(cores)``;
* ``simulate`` with ``metrics="mu"`` on the same batch and depth: the cost of one forward run;
* the QR method by hand with a dense Jacobian per layer (``jax.jacfwd``, then ``J @ Q``, QR),
  at a small batch (the Jacobian is nd x nd = 2048^2), next to lyapunov_spectrum on that batch;
* the full k = n(d - 1) = 2016 at a small batch (its tangent vectors alone take ~17 GB at
  batch 1024): lyapunov_spectrum, the dense QR and the PyTorch loop with k = 2016.

Without ``--quick`` it adds the full size, 1024 trajectories x 128 layers: lyapunov_spectrum once
(after a warm-up on its first chunk, which compiles the program the chunks share), ``simulate``,
and the two floors on one 64-trajectory chunk x 128 layers (lyapunov_spectrum's default chunk
on CPU: the full batch is that chunk 16 times over). The PyTorch loop (~2 ms per
trajectory-layer) would take ~4.5 minutes at full size and is timed at 32 x 32 only.

Every small-size figure is the median of ``--repeats`` runs (>= 3) with its spread
(`speed/_repeat.py`), per trajectory-layer, with the load before and after and the CPU model.
The table goes into ``benchmarks/HISTORY.md`` between the ``lyapunov_speed`` markers (the README
quotes its headline), unless the machine was loaded at the start (then only with
``--force-readme``, and the table says so); ``--no-readme`` never writes it.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from speed._configs import build, config  # noqa: E402
from speed._hardware import Clock, cores, device_name, versions  # noqa: E402
from speed._repeat import load, loaded, repeat  # noqa: E402

MARKERS = ("<!-- BEGIN lyapunov_speed -->", "<!-- END lyapunov_speed -->")
K = 64
#: lyapunov_spectrum's default chunk for `small` at k = 64 on CPU (`rankdyn._lyapunov._budget`).
FULL_CHUNK = 64


def sizes(quick: bool) -> dict:
    s = {"batch": 32, "layers": 32, "dense_batch": 2, "dense_layers": 4, "full_batch": 2, "full_layers": 4}
    if not quick:
        s |= {"dense_batch": 4, "dense_layers": 8, "big_batch": 1024, "big_layers": 128}
    if os.environ.get("RANKDYN_BENCH_TINY") == "1":  # checks the script itself, in about a minute
        s = {
            key: min(v, 2 if "full" in key else 4 if key != "big_batch" else 2 * FULL_CHUNK)
            for key, v in s.items()
        }
    return s


def _block(x):
    import jax

    jax.block_until_ready(x)
    return x


def _tangent_floor(layer, x0, num_layers, k, how: str):
    """k tangent vectors per layer and trajectory, nothing else: ``how`` = "jvp" (vmap of k
    ``jax.jvp``) or "linearize" (one ``jax.linearize``, its linear map vmapped over the k)."""
    import equinox as eqx
    import jax
    import jax.numpy as jnp
    from jax import lax

    n, d = layer.num_tokens, layer.dim

    @eqx.filter_jit
    def run(layer, x0, q0):
        def one(x, q):
            f = lambda z: layer(z, 0)[0]  # noqa: E731
            if how == "jvp":
                y, ty = jax.vmap(
                    lambda v: jax.jvp(f, (x,), (v.reshape(n, d),)), in_axes=1, out_axes=(None, -1)
                )(q)
            else:
                y, lin = jax.linearize(f, x)
                ty = jax.vmap(lin, in_axes=-1, out_axes=-1)(q.reshape(n, d, -1))
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
    import jax

    import rankdyn as rd

    return lambda: _block(rd.lyapunov_spectrum(layer, x0, num_layers, k=k, key=jax.random.key(0)).exponents)


def simulate_run(layer, x0, num_layers):
    import rankdyn as rd

    return lambda: _block(rd.simulate(layer, x0, num_layers, metrics="mu", chunk=None).summary)


def timed(name, fn, repeats, work) -> dict:
    fn()  # compile and warm up
    r = repeat(fn, repeats)
    r["per_traj_layer_ms"] = 1e3 * r["wall_s"] / work
    r["work"] = work
    print(
        f"  {name:46s} {r['wall_s']:8.3f} s  ({r['per_traj_layer_ms']:.3f} ms per trajectory-layer, "
        f"load {r['load_before']:.1f})",
        flush=True,
    )
    return r


def once(name, warm, fn, work) -> dict:
    """One timed run after ``warm()`` (which compiles what ``fn`` runs)."""
    warm()
    l0 = load()
    with Clock() as c:
        fn()
    r = {"wall_s": c.wall, "wall_min_s": c.wall, "wall_max_s": c.wall, "cpu_s": c.cpu, "repeats": 1}
    r |= {"load_before": l0, "load_after": load(), "per_traj_layer_ms": 1e3 * c.wall / work, "work": work}
    print(
        f"  {name:46s} {c.wall:8.3f} s  ({r['per_traj_layer_ms']:.3f} ms per trajectory-layer, once, "
        f"load {l0:.1f})",
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
    cfg = config("small", False)
    layer, xs = build(cfg | {"batch": sz.get("big_batch", sz["batch"]), "layers": sz["layers"]})
    n, d, reps = cfg["n"], cfg["d"], args.repeats
    full = n * (d - 1)
    load0 = load()
    print(f"{device_name()}; load {load0:.2f} (1-minute average) at the start", flush=True)
    rows = {}
    b, L = sz["batch"], sz["layers"]
    x0 = xs[:b]
    print(f"== small, k={K}: batch {b} x {L} layers", flush=True)
    rows["lyapunov_spectrum k=64"] = timed(
        "lyapunov_spectrum k=64", rankdyn_run(layer, x0, L, K), reps, b * L
    )
    for how, name in (("jvp", "k jvp's per layer"), ("linearize", "k tangents, one linearize per layer")):
        rows[name] = timed(name, _tangent_floor(layer, x0, L, K, how), reps, b * L)
    rows["simulate mu"] = timed("simulate metrics=mu", simulate_run(layer, x0, L), reps, b * L)
    if not args.no_torch:
        rows["torch.func.jvp loop k=64"] = timed(
            "torch.func.jvp loop k=64", torch_qr(layer, x0, L, K), reps, b * L
        )
    db, dl = sz["dense_batch"], sz["dense_layers"]
    print(f"== dense Jacobian, k={K}: batch {db} x {dl} layers", flush=True)
    rows["lyapunov_spectrum k=64 (dense batch)"] = timed(
        "lyapunov_spectrum k=64", rankdyn_run(layer, xs[:db], dl, K), reps, db * dl
    )
    rows["dense jacfwd QR k=64"] = timed(
        "dense jax.jacfwd QR k=64", dense_qr(layer, xs[:db], dl, K), reps, db * dl
    )
    fb, fl = sz["full_batch"], sz["full_layers"]
    print(f"== full spectrum, k={full}: batch {fb} x {fl} layers", flush=True)
    xf = xs[:fb]
    rows[f"lyapunov_spectrum k={full}"] = timed(
        f"lyapunov_spectrum k={full}", rankdyn_run(layer, xf, fl, full), reps, fb * fl
    )
    rows[f"dense jacfwd QR k={full}"] = timed(
        f"dense jax.jacfwd QR k={full}", dense_qr(layer, xf, fl, full), reps, fb * fl
    )
    if not args.no_torch:
        rows[f"torch.func.jvp loop k={full}"] = timed(
            f"torch.func.jvp loop k={full}", torch_qr(layer, xf, fl, full), reps, fb * fl
        )
    if not args.quick:
        bb, bl = sz["big_batch"], sz["big_layers"]
        print(f"== full size, k={K}: batch {bb} x {bl} layers", flush=True)
        rows["full size: lyapunov_spectrum k=64"] = once(
            "lyapunov_spectrum k=64",
            rankdyn_run(layer, xs[:FULL_CHUNK], bl, K),
            rankdyn_run(layer, xs, bl, K),
            bb * bl,
        )
        rows["full size: simulate mu"] = timed(
            "simulate metrics=mu", simulate_run(layer, xs, bl), reps, bb * bl
        )
        chunk = xs[:FULL_CHUNK]
        for how, name in (("jvp", "k jvp's per layer"), ("linearize", "k tangents, one linearize per layer")):
            rows[f"full size: {name} (one {FULL_CHUNK}-trajectory chunk)"] = timed(
                name, _tangent_floor(layer, chunk, bl, K, how), reps, FULL_CHUNK * bl
            )
    load1 = load()
    r = lambda a, b: rows[a]["per_traj_layer_ms"] / rows[b]["per_traj_layer_ms"]  # noqa: E731
    ratios = {
        "lyapunov / k jvp's (target <= 1.2)": r("lyapunov_spectrum k=64", "k jvp's per layer"),
        "lyapunov / one linearize per layer": r(
            "lyapunov_spectrum k=64", "k tangents, one linearize per layer"
        ),
        "lyapunov / simulate mu": r("lyapunov_spectrum k=64", "simulate mu"),
        "dense jacfwd / lyapunov (k=64, same batch)": r(
            "dense jacfwd QR k=64", "lyapunov_spectrum k=64 (dense batch)"
        ),
        f"dense jacfwd / lyapunov (k={full})": r(f"dense jacfwd QR k={full}", f"lyapunov_spectrum k={full}"),
    }
    if not args.no_torch:
        ratios["torch / lyapunov (k=64)"] = r("torch.func.jvp loop k=64", "lyapunov_spectrum k=64")
        ratios[f"torch / lyapunov (k={full})"] = r(
            f"torch.func.jvp loop k={full}", f"lyapunov_spectrum k={full}"
        )
    if not args.quick:
        big = "full size: lyapunov_spectrum k=64"
        ratios["full size: lyapunov / k jvp's (target <= 1.2)"] = r(
            big, f"full size: k jvp's per layer (one {FULL_CHUNK}-trajectory chunk)"
        )
        ratios["full size: lyapunov / simulate mu"] = r(big, "full size: simulate mu")
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
        print(f"  {key:50s} {v:8.3f}")
    print(f"load {load0:.2f} -> {load1:.2f}; {device_name()}")
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))
    if not args.no_readme and (not report["loaded"] or args.force_readme):
        write_readme(HERE / "HISTORY.md", table(report))
    return 0


def table(rep) -> str:
    head = (
        f"`python benchmarks/lyapunov_speed.py{' --quick' if rep['quick'] else ''}` on {rep['device']}, "
        f"{rep['date']}, load {rep['load_before']:.2f} -> {rep['load_after']:.2f}"
        + (" (**loaded machine, not comparable**)" if rep["loaded"] else "")
        + f"; sizes {rep['sizes']}; float32; small rows: medians of {rep['rows']['simulate mu']['repeats']} "
        "runs; the full-size lyapunov_spectrum row: one run."
    )
    lines = [head, "", "| contender | work (traj x layers) | wall s (min-max) | ms per trajectory-layer |"]
    lines.append("|---|---|---|---|")
    for name, r in rep["rows"].items():
        lines.append(
            f"| {name} | {r['work']} | {r['wall_s']:.3f} ({r['wall_min_s']:.3f}-{r['wall_max_s']:.3f}) "
            f"| {r['per_traj_layer_ms']:.3f} |"
        )
    lines += ["", "| ratio (of ms per trajectory-layer) | value |", "|---|---|"]
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
