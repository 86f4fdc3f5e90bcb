"""What full mode of the pretrained targets costs on MPNet-base and SmolLM2: fractions, extrapolated.

    python benchmarks/pretrained_full_cost.py [--checkpoint mpnet|smollm2 ...] [--json OUT]

Full mode (``rankdyn reproduce TARGET --checkpoint NAME``, without ``--quick``) runs each target's
``sizes(False)``: up to 1000 excerpts of 128 tokens in chunks of 25 (``pretrained-ablation`` also
cycles the trained stack to 128 layers). On a 2-core CPU that is hours, so the whole run is not
timed; each target's ``compute`` (the numbers; figures are not drawn) is timed on fractions of it
that share its per-chunk program (their excerpts tokenised beforehand, as the full run tokenises
once), and the cost is extrapolated from a linear fit:

* ``pretrained-ablation`` (5 variants x 4 masks, one chunk of 25 excerpts): depth 8 cold, depth 8
  warm, depth 32 cold. compile = cold(8) - warm(8); per chunk-layer r = (cold(32) - cold(8)) / 24
  (each cold run compiles its own program of the same body, so the compile cancels); fixed cost
  per chunk f = warm(8) - 8 r. Full: compile + chunks (f + 128 r).
* ``pretrained-temperature`` (3 temperatures x 4 masks) and ``geometry`` (own depth): one chunk
  cold, one chunk warm, two chunks warm. compile = cold(1) - warm(1) (for geometry it includes the
  one-time chunk tuning of `rankdyn.simulate`), per chunk r = warm(2) - warm(1), fixed
  f = warm(1) - r. Full: compile + f + chunks r.
* ``attention-sinks`` (32 excerpts, every variant, random layers): run whole.

chunks = ceil(excerpts / 25), excerpts = min(1000, what the default corpus holds at 128 tokens).
The cost is linear in depth (a ``lax.scan`` of identical steps) and in chunks (one program run
chunk after chunk), which is what the fit assumes. Wall and process-CPU seconds are both fitted: on
a shared machine CPU seconds are the robust figure (quiet wall is about CPU / the cores kept busy).

The GPU figure is an estimate, not a measurement: the model FLOPs of the full run (per
trajectory-layer as in `pretrained_speed.model_flops`: the full block for ``full``, attention only
for the SAN variants) over a float32 peak given by ``--gpu-tflops`` (default 66.9, the H200's
non-tensor FP32 rate: the layers run at ``precision="highest"``, so no TF32), at 100% and at 40%
of it. Memory traffic, the host-side SVDs of ``geometry`` and compile time are not in it.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from pretrained_speed import model_flops  # noqa: E402
from speed._hardware import Clock, cores, cpu_name  # noqa: E402

CHUNK = 25
FULL_EXCERPTS = 1000
DEEP = 128


def timed(fn) -> dict:
    with Clock() as c:
        fn()
    return {"wall_s": c.wall, "cpu_s": c.cpu, "load": os.getloadavg()[0]}


def fit(kind: str, runs: dict, chunks: int, depth: int) -> dict:
    """The full run's cost from the timed fractions (module docstring), for wall and CPU seconds."""
    out = {}
    for key in ("wall_s", "cpu_s"):
        t = {k: v[key] for k, v in runs.items()}
        if kind == "depth":
            r = (t["cold_d32"] - t["cold_d8"]) / 24
            compile_, fixed = t["cold_d8"] - t["warm_d8"], t["warm_d8"] - 8 * r
            full = compile_ + chunks * (fixed + depth * r)
            out[key] = {"compile": compile_, "per_chunk_layer": r, "fixed_per_chunk": fixed, "full": full}
        elif kind == "chunks":
            r = t["warm_2"] - t["warm_1"]
            compile_, fixed = t["cold_1"] - t["warm_1"], t["warm_1"] - r
            out[key] = {
                "compile": compile_,
                "per_chunk": r,
                "fixed": fixed,
                "full": compile_ + fixed + chunks * r,
            }
        else:
            out[key] = {"full": t["whole"]}
    return out


def flops_per_layer(ckpt, n: int) -> tuple[float, float]:
    """Model FLOPs of one trajectory-layer: the full block, and attention only (the SAN variants)."""
    full = model_flops(ckpt, n, 1) / ckpt.num_layers
    mats = 3 if ckpt.arch == "llama" else 2
    mlp = 2 * n * ckpt.d * mats * ckpt.blocks.mlp.w1.shape[-1]
    return full, full - mlp


def plan(name: str, ckpt, cache: dict, excerpts: int, only=None) -> dict:
    """Time the fractions of each target on ``ckpt`` and extrapolate (module docstring)."""
    from rankdyn._reproduce.pretrained import (
        attention_sinks,
        geometry,
        pretrained_ablation,
        pretrained_temperature,
    )

    chunks = math.ceil(excerpts / CHUNK)
    full_l, attn_l = flops_per_layer(ckpt, 128)
    res = {}
    targets = (
        [("pretrained-ablation", pretrained_ablation, "depth"), ("attention-sinks", attention_sinks, "whole")]
        if name == "smollm2"
        else [
            ("pretrained-ablation", pretrained_ablation, "depth"),
            ("pretrained-temperature", pretrained_temperature, "chunks"),
            ("geometry", geometry, "chunks"),
        ]
    )
    from rankdyn._reproduce.pretrained.pretrained_common import excerpt_ids

    for batch in (CHUNK, 2 * CHUNK):  # tokenise the fractions' excerpts first: no run pays for it
        excerpt_ids(ckpt, 128, batch, cache)
    for target, mod, kind in targets:
        if only and target not in only:
            continue
        kw = {} if mod is attention_sinks else {"cache": cache}  # it tokenises its own excerpts
        run = lambda sz: timed(lambda: mod.compute(sz, 0, ckpt=ckpt, **kw))  # noqa: E731
        if kind == "depth":
            sz = lambda d: {"n": 128, "batch": CHUNK, "depth": d, "chunk": CHUNK}  # noqa: E731
            runs = {"cold_d8": run(sz(8)), "warm_d8": run(sz(8)), "cold_d32": run(sz(32))}
            # 5 variants x 4 masks: the full block once, four attention-only variants.
            work = excerpts * DEEP * 4 * (full_l + 4 * attn_l)
        elif kind == "chunks":
            sz = lambda k: {"n": 128, "batch": k * CHUNK, "chunk": CHUNK}  # noqa: E731
            runs = {"cold_1": run(sz(1)), "warm_1": run(sz(1)), "warm_2": run(sz(2))}
            per = 3 * 4 * attn_l if target == "pretrained-temperature" else full_l
            work = excerpts * ckpt.num_layers * per
        else:
            sizes = mod.sizes(False)
            runs = {"whole": run(sizes)}
            v, r = len(sizes["variants"]), len(sizes["random"])
            work = sizes["batch"] * ckpt.num_layers * (v + r) * full_l  # an upper bound: SANs cost less
        res[target] = {"runs": runs, "fit": fit(kind, runs, chunks, DEEP), "model_flops": work}
        print(name, target, json.dumps({k: res[target][k] for k in ("runs", "fit")}), flush=True)
    return res


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--checkpoint", action="append", choices=("mpnet", "smollm2"), default=None)
    p.add_argument("--targets", default=None, help="comma-separated subset of the targets (default: all)")
    p.add_argument("--gpu-tflops", type=float, default=66.9, help="float32 peak for the GPU estimate")
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args(argv)
    # geometry's first chunk tunes simulate's chunk size once per machine: time it as on a new one.
    os.environ["RANKDYN_CACHE_DIR"] = tempfile.mkdtemp(prefix="rankdyn-full-cost-")

    from rankdyn._reproduce.pretrained.pretrained_common import checkpoint_or_none, excerpt_ids

    top = {"cpu": cpu_name(), "cores": cores(), "load_before": os.getloadavg(), "models": {}}
    top["start"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    for name in args.checkpoint or ["mpnet", "smollm2"]:
        cache: dict = {}
        load = {}
        with Clock() as c:
            ckpt = checkpoint_or_none(name, cache, name)
        if ckpt is None:
            print(
                f"error: checkpoint {name} is not installed (rankdyn checkpoints says how to get it)",
                file=sys.stderr,
            )
            return 2
        load["load_s"] = c.wall
        _, record = excerpt_ids(ckpt, 128, FULL_EXCERPTS, cache)
        excerpts = record["excerpts"]
        only = None if args.targets is None else set(args.targets.split(","))
        res = plan(name, ckpt, cache, excerpts, only)
        for r in res.values():
            r["gpu_estimate_s"] = {
                "at_peak": r["model_flops"] / (args.gpu_tflops * 1e12),
                "at_40pct": r["model_flops"] / (0.4 * args.gpu_tflops * 1e12),
            }
        top["models"][name] = {
            "excerpts": excerpts,
            "chunks": math.ceil(excerpts / CHUNK),
            **load,
            "targets": res,
        }
    top["load_after"] = os.getloadavg()
    top["end"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    top["gpu_tflops"] = args.gpu_tflops
    text = json.dumps(top, indent=1, default=float)
    print(text)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
