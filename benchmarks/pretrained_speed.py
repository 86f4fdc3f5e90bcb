"""rankdyn against HF transformers on trained checkpoints: per-layer mu through each, in one run.

    python benchmarks/pretrained_speed.py [--excerpts 1024] [--n 128] [--batch 64] [--repeats 2]
                                          [--first 8] [--cached-tuning]
                                          [--checkpoint DIR|ZIP|GGUF|NAME ...] [--quick] [--json OUT]

Default checkpoints: SmolLM2 (``smollm2``, Llama GGUF) and MPNet-base (``mpnet``) where installed
(`rankdyn checkpoints`), else MiniLM. ``--quick``: 16 excerpts, HF batch 8, one repeat.

Both sides compute mu (eq. 4) of every hidden state (layers 0..L) of ``--excerpts`` excerpts of
``--n`` tokens of the default corpus (`rankdyn.checkpoints.default_corpus`), float32, eval mode:

* rankdyn: ``rankdyn.simulate(ckpt.layers(n, "full"), ckpt.embed(ids), L, metrics="mu")``, the
  whole batch in one call (the scan streams per-layer statistics), warm;
* HF: ``BertModel`` / ``GPT2Model`` / ``MPNetModel`` / ``LlamaModel`` (PyTorch, ``eval()``,
  ``torch.no_grad()``) in batches of ``--batch`` with ``output_hidden_states=True``, mu from the
  hidden states; warm (one batch first, its time reported as HF's first batch).

rankdyn's first-call costs are reported apart from the steady run (issue 31, "Speed"), in order:

1. ``rankdyn_first_call_s``: the cold first call on a few excerpts, the first ``--first`` (below
   the tuning threshold: the compile of the depth scan + a short run); ``rankdyn_compile_s`` is it
   minus the same call warm (``rankdyn_first_chunk_warm_s``). This is the "first call" of the
   issue's target.
2. ``rankdyn_first_full_call_s``: the first call on the whole batch. A run of at least
   ``rankdyn._run._autotune.TUNE_MIN_FLOPS`` model FLOPs first times a few chunk sizes (one
   compile each; once per machine and shape, remembered in ``$RANKDYN_CACHE_DIR/chunks.json``),
   so ``rankdyn_first_full_overhead_s`` = it minus the best steady run is that one-time tuning
   plus the chosen chunk's compile. By default the benchmark points ``RANKDYN_CACHE_DIR`` at a
   fresh temporary folder, so the tuning is measured as on a new machine;
   ``--cached-tuning`` keeps the user's remembered choices (then no tuning runs).
3. ``rankdyn``: the best of ``--repeats`` steady runs of the whole batch.

The two results are compared (max relative difference of the per-layer mean mu), the time ratio
is taken in the same run, and the float32 matmul peak of JAX and PyTorch is measured in the same
run (`speed/_hardware.py`), so each side is reported as a fraction of its own library's peak by
model FLOPs (Q, K, V, O projections, QK^T, AV, the MLP; softmax, LN and GELU not counted). The
load average before and after and the CPU model are recorded: on a shared machine the absolute
figures mean little (compare the ratio, or CPU seconds).

Smoke test: ``python benchmarks/pretrained_speed.py --excerpts 16 --batch 8 --repeats 1``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from speed._hardware import Clock, cores, cpu_name, matmul_peak  # noqa: E402


def model_flops(ckpt, n: int, excerpts: int) -> float:
    """FLOPs of the forward pass as the model defines it: per layer the Q, O projections 2 n d (2 d),
    K, V 2 n d (2 kv d_h) (grouped-query attention), the MLP 2 n d f times 2 (3 for SwiGLU), and
    QK^T, AV 2 (2 n^2 H d_h)."""
    d, heads = ckpt.d, ckpt.heads
    dh = int(ckpt.blocks.w_q.shape[-1])
    kv = ckpt.kv_heads or heads
    f = ckpt.blocks.mlp.w1.shape[-1]
    mats = 3 if ckpt.arch == "llama" else 2
    per_layer = 2 * n * d * (2 * heads * dh + 2 * kv * dh) + 2 * n * d * mats * f + 4 * n * n * heads * dh
    return float(per_layer * ckpt.num_layers * excerpts)


def hf_model(path: Path, arch: str):
    """The HF model of a checkpoint folder, zip, MPNet slices folder (assembled and extracted to a
    temporary folder) or Llama GGUF file (HF reads and dequantises it itself)."""
    import io

    import torch
    import transformers

    if arch == "llama" and path.suffix == ".gguf":
        m = transformers.LlamaForCausalLM.from_pretrained(
            path.parent, gguf_file=path.name, dtype=torch.float32
        )
        return m.model.eval()
    folder = path
    if path.is_dir() and not (path / "config.json").is_file():
        from rankdyn._trained._slices import assemble_slices

        folder = Path(tempfile.mkdtemp())
        zipfile.ZipFile(io.BytesIO(assemble_slices(path))).extractall(folder)
        folder = sorted((p.parent for p in folder.rglob("config.json")), key=lambda p: len(p.parts))[0]
    elif path.is_file():
        folder = Path(tempfile.mkdtemp())
        with zipfile.ZipFile(path) as z:
            z.extractall(folder)
        inner = [p.parent for p in folder.rglob("config.json")]
        folder = inner[0] if inner else folder
    cls = {"bert": transformers.BertModel, "mpnet": transformers.MPNetModel, "llama": transformers.LlamaModel}
    return cls.get(arch, transformers.GPT2Model).from_pretrained(folder).eval()


def hf_mu(model, ids, batch: int):
    """Per-excerpt, per-layer mu ``(excerpts, L + 1)`` from HF's hidden states."""
    import numpy as np
    import torch

    out = []
    with torch.no_grad():
        for s in range(0, len(ids), batch):
            hs = model(torch.as_tensor(ids[s : s + batch], dtype=torch.long), output_hidden_states=True)
            h = torch.stack(hs.hidden_states, dim=1)  # (b, L + 1, n, d)
            out.append(torch.linalg.vector_norm(h - h.mean(dim=2, keepdim=True), dim=(2, 3)).numpy())
    return np.concatenate(out)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--excerpts", type=int, default=1024)
    p.add_argument("--n", type=int, default=128)
    p.add_argument("--batch", type=int, default=64, help="HF batch size (rankdyn takes all excerpts at once)")
    p.add_argument("--repeats", type=int, default=2, help="timed repeats per side (best is kept)")
    p.add_argument(
        "--checkpoint",
        action="append",
        default=None,
        help="repeatable; default: smollm2 and mpnet, else MiniLM",
    )
    p.add_argument("--first", type=int, default=8, help="excerpts of rankdyn's timed first call (default 8)")
    p.add_argument(
        "--cached-tuning",
        action="store_true",
        help="keep the chunk sizes remembered in $RANKDYN_CACHE_DIR (default: a fresh folder, so the "
        "one-time chunk tuning is timed as on a new machine)",
    )
    p.add_argument("--quick", action="store_true", help="16 excerpts, HF batch 8, one repeat")
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args(argv)
    if args.quick:
        args.excerpts, args.batch, args.repeats = 16, 8, 1
    if not 1 <= args.first <= args.excerpts:
        p.error(f"--first {args.first}: use 1 <= --first <= --excerpts ({args.excerpts})")
    if not args.cached_tuning:
        # Read at each call by rankdyn._run._autotune: a fresh folder, so tuning runs as on a new machine.
        os.environ["RANKDYN_CACHE_DIR"] = tempfile.mkdtemp(prefix="rankdyn-bench-")

    import torch

    from rankdyn._trained._installed import KNOWN

    names = args.checkpoint or [k for k in ("smollm2", "mpnet") if KNOWN[k][1]() is not None] or ["minilm"]
    top = {"cpu": cpu_name(), "cores": cores(), "torch_threads": torch.get_num_threads()}
    top["chunk_cache"] = "cached" if args.cached_tuning else "fresh"
    top["peak"] = matmul_peak(2048, 3)
    top["models"] = {}
    for name in names:
        res = one(name, args, top["peak"])
        if res is None:
            return 2
        top["models"][name] = res
    top["date"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    text = json.dumps(top, indent=1, default=float)
    print(text)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(text)
    return 0


def one(name, args, peak):
    """The rankdyn-vs-HF figures of one checkpoint (None, with an error line, if it is missing)."""
    import jax
    import numpy as np

    import rankdyn as rd
    from rankdyn._trained._installed import resolve_checkpoint
    from rankdyn.checkpoints import default_corpus, load_checkpoint

    try:
        path = resolve_checkpoint(name)
    except Exception as err:  # a known name that is not installed
        print(f"error: {err}", file=sys.stderr)
        return None
    load_before = os.getloadavg()
    t0 = time.perf_counter()
    ckpt = load_checkpoint(path)
    load_s = time.perf_counter() - t0
    ids = ckpt.tokenize_text(default_corpus().text, min(args.n, ckpt.max_positions), args.excerpts)
    n = ids.shape[1]
    flops = model_flops(ckpt, n, args.excerpts)
    res = {
        "checkpoint": {
            "path": str(path),
            "sha256": ckpt.sha256,
            "arch": ckpt.arch,
            "layers": ckpt.num_layers,
        },
        "load_s": load_s,
        "excerpts": args.excerpts,
        "n": n,
        "hf_batch": args.batch,
        "model_gflop": flops / 1e9,
        "load_before": load_before,
        "peak": peak,
    }

    # rankdyn. (1) The first call, on a few excerpts: compile + a short run, then the same warm.
    layer = ckpt.layers(n, "full")
    x0 = ckpt.embed(ids)
    run = lambda x: rd.simulate(layer, x, ckpt.num_layers, metrics="mu", per_trajectory=True)
    first = x0[: args.first]
    with Clock() as c:
        jax.block_until_ready(run(first).metrics["mu"])
    with Clock() as w:
        jax.block_until_ready(run(first).metrics["mu"])
    res["rankdyn_first_call_s"], res["rankdyn_first_call_cpu_s"] = c.wall, c.cpu
    res["rankdyn_first_chunk_warm_s"], res["rankdyn_first_chunk_warm_cpu_s"] = w.wall, w.cpu
    # CPU seconds too: on a shared machine they tell the compile from time-slicing.
    res["rankdyn_compile_s"], res["rankdyn_compile_cpu_s"] = c.wall - w.wall, c.cpu - w.cpu
    # (2) The first call on the whole batch: the one-time chunk tuning (if the run is large enough
    # and no choice is remembered) and the chosen chunk's compile, on top of one run.
    tuned = _remembered_chunks()
    with Clock() as c:
        jax.block_until_ready(run(x0).metrics["mu"])
    res["rankdyn_first_full_call_s"], res["rankdyn_first_full_call_cpu_s"] = c.wall, c.cpu
    res["chunk_tuning_ran"] = _remembered_chunks() > tuned
    # (3) The steady run.
    best = None
    for _ in range(args.repeats):
        with Clock() as c:
            mu_rd = np.asarray(jax.block_until_ready(run(x0).metrics["mu"]))
        best = c if best is None or c.wall < best.wall else best
    res["rankdyn"] = {"wall_s": best.wall, "cpu_s": best.cpu, "gflops": flops / best.wall / 1e9}
    res["rankdyn_first_full_overhead_s"] = res["rankdyn_first_full_call_s"] - best.wall

    model = hf_model(Path(path), ckpt.arch)
    with Clock() as c:
        hf_mu(model, ids[: args.batch], args.batch)  # warm-up
    res["hf_first_batch_s"] = c.wall
    best = None
    for _ in range(args.repeats):
        with Clock() as c:
            mu_hf = hf_mu(model, ids, args.batch)
        best = c if best is None or c.wall < best.wall else best
    res["hf"] = {"wall_s": best.wall, "cpu_s": best.cpu, "gflops": flops / best.wall / 1e9}
    if ckpt.final_norm is not None:
        mu_hf = mu_hf[:, :-1]  # HF's last GPT-2 state includes ln_f
        mu_rd = mu_rd[:, :-1]
    res["max_rel_diff_mean_mu"] = float(np.max(np.abs(mu_rd.mean(0) - mu_hf.mean(0)) / mu_hf.mean(0)))
    res["ratio_hf_over_rankdyn_wall"] = res["hf"]["wall_s"] / res["rankdyn"]["wall_s"]
    res["rankdyn"]["fraction_of_jax_peak"] = res["rankdyn"]["gflops"] / res["peak"]["jax_gflops"]
    if res["peak"].get("torch_gflops"):
        res["hf"]["fraction_of_torch_peak"] = res["hf"]["gflops"] / res["peak"]["torch_gflops"]
    res["load_after"] = os.getloadavg()
    return res


def _remembered_chunks() -> int:
    """How many chunk choices ``$RANKDYN_CACHE_DIR/chunks.json`` holds (it grows when tuning runs)."""
    root = os.environ.get("RANKDYN_CACHE_DIR") or Path.home() / ".cache" / "rankdyn"
    try:
        return len(json.loads((Path(root) / "chunks.json").read_text()))
    except (OSError, ValueError):
        return 0


if __name__ == "__main__":
    sys.exit(main())
