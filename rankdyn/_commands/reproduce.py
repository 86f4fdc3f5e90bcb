"""``rankdyn reproduce``: regenerate the paper's claims as figures, JSON and one ``report.md``.

Target names are a contract (issue "rankdyn reproduce"); see `rankdyn._reproduce.TARGETS`.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from ._checks import HelpFormatter, check_out_dir, check_seed_flag
from ._devices import add_devices_flag


def add_parser(sub) -> None:
    from .._reproduce import CHECKPOINT_TARGETS, EXTENDED_TARGETS, TARGETS

    main = [n for n in TARGETS if n not in EXTENDED_TARGETS]
    tier = f" Extended tier (beyond the paper; --extended or by name): {', '.join(EXTENDED_TARGETS)}."

    p = sub.add_parser(
        "reproduce",
        help="regenerate every claim of the paper (figures, JSON, report.md)",
        description="Run reproduction targets and write DIR/<target>.json, PNG figures and DIR/report.md "
        "with the claim, setting, measurements and a computed verdict per target. Targets: "
        + ", ".join(main)
        + "."
        + (tier if EXTENDED_TARGETS else ""),
        formatter_class=HelpFormatter,
    )
    p.add_argument("targets", nargs="*", metavar="TARGET", default=["all"], help="target names, or 'all'")
    p.add_argument(
        "--extended",
        action="store_true",
        help="with 'all': also run the extended tier, the targets beyond the paper that do not fit the "
        "main job's budget (refused with named targets)",
    )
    p.add_argument("--out", type=Path, default=Path("out/reproduce"), help="output folder")
    p.add_argument(
        "--quick",
        action="store_true",
        help="reduced sizes, compiled at XLA backend optimisation level 1 (compiling dominates; an "
        "optimisation level in XLA_FLAGS wins): the paper's targets within 150 s cold and 60 s warm on a "
        "2-core CPU, the budget (measured: benchmarks/README.md)",
    )
    p.add_argument("--seed", type=int, default=0, help="base PRNG seed, in [0, 2**32 - 1]")
    p.add_argument("--x64", action="store_true", help="float64 end to end")
    p.add_argument(
        "--checkpoint",
        type=Path,
        default=None,
        metavar="NAME|PATH",
        help="trained checkpoint for the targets "
        + ", ".join(CHECKPOINT_TARGETS)
        + ": a name from `rankdyn checkpoints` (minilm, smollm2, mpnet) or a BERT, GPT-2, MPNet or "
        "Llama checkpoint (HF folder or zip with tokenizer.json, or a Llama .gguf) (default: "
        "all-MiniLM-L6-v2, or SmolLM2 for attention-sinks, from `rankdyn checkpoints --get`; full mode "
        "prefers MPNet-base when fetched)",
    )
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    p.add_argument(
        "--compile-cache",
        type=Path,
        default=None,
        metavar="DIR",
        help="persistent JAX compilation cache (default: $RANKDYN_CACHE_DIR/compile, $RANKDYN_CACHE_DIR "
        "defaulting to ~/.cache/rankdyn): compile time dominates --quick runs, so a second run with the "
        "same cache is several times faster, with identical numbers",
    )
    p.add_argument(
        "--no-compile-cache",
        action="store_true",
        help="compile everything afresh, reading and writing no compilation cache (also: "
        "RANKDYN_NO_COMPILE_CACHE=1)",
    )
    p.add_argument(
        "--jobs",
        type=int,
        default=None,
        metavar="N",
        help="worker processes, in 1..cores (default: one per core; 1 with --devices): the targets are "
        "dealt to N workers, "
        "each pinned to its own share of the cores with one device; --jobs 1 runs them one after another "
        "in this process",
    )
    p.add_argument(
        "--resume",
        action="store_true",
        help="keep the targets whose results in --out are complete (same --quick, --seed, --x64, "
        "--checkpoint) and run the others; the report covers them all",
    )
    add_devices_flag(
        p,
        "Targets run on the first device: their batches are small and compile time dominates "
        "(with --jobs N > 1 every worker has one device; --devices is refused then).",
    )
    p.set_defaults(func=run, before_jax=quick_compile_flags)


#: XLA's backend (LLVM) optimisation level of ``--quick`` runs. Compiling is 50-90% of every
#: quick target, and level 1 compiles ~20% faster than XLA's default while every quick target's
#: measured numbers stayed bit-identical (all 16 targets; the timings: `benchmarks/README.md`,
#: "`rankdyn reproduce --quick`, per target").
QUICK_XLA_FLAG = "--xla_backend_optimization_level=1"


def quick_compile_flags(args: argparse.Namespace) -> None:
    """``--quick``: compile at `QUICK_XLA_FLAG`, by adding it to ``XLA_FLAGS`` before JAX creates
    its backend (XLA reads the variable once, then). A level the user set in ``XLA_FLAGS`` wins,
    and a JAX that is already running (``main()`` called from Python) keeps its flags; every
    result records the ``XLA_FLAGS`` it was compiled with (`rankdyn._run._io.provenance`)."""
    from .._run._devices import backends_initialized

    flags = os.environ.get("XLA_FLAGS", "")
    if not args.quick or "xla_backend_optimization_level" in flags or backends_initialized():
        return
    os.environ["XLA_FLAGS"] = f"{flags} {QUICK_XLA_FLAG}".strip()


#: The environment variable that carries the compilation cache's state at the start of the run to
#: the report (`rankdyn._run._io.provenance`).
CACHE_STATE_ENV = "RANKDYN_COMPILE_CACHE_STATE"


def default_compile_cache() -> Path:
    """``$RANKDYN_CACHE_DIR/compile`` (``~/.cache/rankdyn/compile`` by default), beside the
    autotuner's ``chunks.json``."""
    from .._run._io import cache_root

    return cache_root() / "compile"


def use_compile_cache(args: argparse.Namespace) -> Path | None:
    """Turn on JAX's persistent compilation cache for this process; returns its folder or None.

    Quick targets compile hundreds of small programs (most in well under a second, many under
    JAX's default 1 s / minimum-size thresholds), so every program is cached:
    ``jax_persistent_cache_min_compile_time_secs = 0`` and
    ``jax_persistent_cache_min_entry_size_bytes = -1``. A cache hit loads the executable XLA
    built before (the key covers the program, the XLA flags, the jaxlib version and the
    device), so the numbers are the same as a fresh compile's.

    ``--compile-cache DIR`` is used as given; without it, the default cache
    (`default_compile_cache`) is used when this is a fresh process (JAX reads the cache setting
    at its first compile, so a process that has compiled before keeps what it has) and neither
    ``--no-compile-cache`` nor ``RANKDYN_NO_COMPILE_CACHE=1`` turns it off. A default folder that
    cannot be written is skipped with a note; an explicit one is an error.

    Raises:
        UsageError: ``--compile-cache`` with ``--no-compile-cache``, or a ``--compile-cache`` folder
            that is a file or cannot be written.
    """
    from .._errors import UsageError
    from .._run._devices import backends_initialized

    if args.no_compile_cache and args.compile_cache is not None:
        raise UsageError("--compile-cache and --no-compile-cache contradict each other: give one of them.")
    folder = args.compile_cache
    if folder is not None:
        check_out_dir(folder, "--compile-cache")
    elif args.no_compile_cache or os.environ.get("RANKDYN_NO_COMPILE_CACHE", "") not in ("", "0"):
        return None
    elif backends_initialized():
        return None  # main() called from Python after JAX work: its compile setting stays
    else:
        folder = default_compile_cache()
        try:
            check_out_dir(folder, "the compilation cache")
        except UsageError as err:
            print(f"rankdyn reproduce: no compilation cache ({err})", flush=True)
            return None
    import jax

    # CLI-level configuration (library code never touches jax.config).
    folder.mkdir(parents=True, exist_ok=True)
    # What the cache held when this run started, for the report (a run that found it empty compiled
    # everything: a cold run). The workers of --jobs inherit it with the environment.
    held = sum(1 for f in folder.iterdir() if not f.name.endswith("-atime"))
    os.environ[CACHE_STATE_ENV] = f"{folder}: {held} programs at the start ({'warm' if held else 'cold'})"
    jax.config.update("jax_compilation_cache_dir", str(folder))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)
    return folder


def run(args: argparse.Namespace) -> int:
    from .._reproduce import resolve_targets, run_targets

    names = resolve_targets(args.targets, args.extended)  # UsageError listing valid names -> exit 2
    check_seed_flag(args.seed)
    check_out_dir(args.out)
    jobs = _jobs_flag(args)
    # The refusals that need no JAX come before the compilation cache, which imports it.
    _checkpoint_targets(args.checkpoint, names)
    _resume_record(args)
    cache = use_compile_cache(args)
    checkpoint = _checkpoint_flag(args.checkpoint, names)  # loads and checks before any compute
    kept, todo = _resume(args, names, checkpoint)

    res = {"results": {}, "failed": [], "runtime_s": 0.0, "report": args.out / "report.md"}
    if todo:
        res = _run(args, todo, checkpoint, jobs, cache, run_targets)
    if kept:  # the report covers the kept targets too, in the order of TARGETS
        from .._reproduce import TARGETS, write_report

        merged = kept | res["results"]
        res["results"] = {n: merged[n] for n in TARGETS if n in merged}
        res["report"] = write_report(
            args.out, res["results"], runtime_s=res["runtime_s"], quick=args.quick, seed=args.seed
        )
        print(f"kept {len(kept)} complete target(s) from {args.out}: {', '.join(kept)}")
    from .._reproduce._verdict import partially_why

    width = max([len("verdict"), *(len(r["verdict"]) for r in res["results"].values())])
    print(f"{'target':24s} {'verdict':{width}s} {'time (s)':>9s}")
    for name, r in res["results"].items():
        why = partially_why(r.get("checks", ())) if r["verdict"] == "partially" else ""
        t = r.get("runtime_s", float("nan"))
        print(f"{name:24s} {r['verdict']:{width}s} {t:9.1f}" + (f"  ({why})" if why else ""))
    print(f"total {res['runtime_s']:.1f} s; report: {res['report']}")
    if res["failed"]:
        print(f"failed targets: {', '.join(res['failed'])} (see report)")
        return 1
    return 0


def _jobs_flag(args) -> int:
    """``--jobs``: an integer in 1..cores (default: the cores, or 1 with ``--devices``); refused
    above 1 with ``--devices`` (every worker has one device)."""
    from .._errors import UsageError
    from .._run._devices import available_cores

    cores = available_cores()
    if args.jobs is None:  # default: one worker per core, unless --devices asks for this process
        return 1 if args.devices is not None else cores
    jobs = args.jobs
    if not 1 <= jobs <= cores:
        raise UsageError(
            f"--jobs {args.jobs}: the number of worker processes must be in 1..{cores} (this machine's "
            f"cores; each worker gets its own share of them), e.g. --jobs {cores}; --jobs 1 runs the "
            "targets one after another in this process."
        )
    if jobs > 1 and args.devices is not None:
        raise UsageError(
            f"--devices {args.devices} with --jobs {jobs}: every worker has one device on its own cores, "
            "so --devices would be ignored; drop it, or pass --jobs 1 to run in this process on "
            f"{args.devices} device(s)."
        )
    return jobs


#: The flags that make a reproduce folder's results what they are; ``--resume`` keeps a
#: target only if the folder's record of them equals this run's.
_RUN_RECORD = ".reproduce-flags"  # JSON; no .json suffix, so no reader takes it for a target


def _run_key(args) -> dict:
    return {
        "quick": bool(args.quick),
        "seed": int(args.seed),
        "x64": bool(args.x64),
        "checkpoint": None if args.checkpoint is None else str(Path(args.checkpoint).resolve()),
    }


def _resume_record(args) -> None:
    """``--resume``: refused, before JAX loads, on a folder with no record of an earlier run or one
    written with other flags (`_resume` reads the record again to keep the targets).

    Raises:
        UsageError: naming the folder and what differs.
    """
    import json

    from .._errors import UsageError

    if not args.resume:
        return
    record, key = args.out / _RUN_RECORD, _run_key(args)
    try:
        old = json.loads(record.read_text())
    except (OSError, ValueError):
        raise UsageError(
            f"--resume: {str(args.out)!r} holds no record of an earlier reproduce run ({_RUN_RECORD}); "
            "drop --resume to run every target."
        ) from None
    if old != key:
        diff = ", ".join(f"{k} {old.get(k)!r} there, {v!r} now" for k, v in key.items() if old.get(k) != v)
        raise UsageError(
            f"--resume: {str(args.out)!r} was written with other flags ({diff}); resume with the same "
            "--quick, --seed, --x64 and --checkpoint, or choose another --out."
        )


def _resume(args, names, checkpoint=None):
    """``(kept results, targets to run)``: with ``--resume``, the complete targets of ``--out`` are
    kept (a ``<target>.json`` with a verdict other than "error", every figure it lists, and its
    own record of the flags it was computed with equal to this run's: `_own_flags_differ`);
    without it, everything runs. The folder's record of the run's flags is written either way.

    Raises:
        UsageError: ``--resume`` on a folder with no record, or one written with other flags.
    """
    import json

    from .._reproduce import VERDICTS
    from .._run._io import write_json

    record, key = args.out / _RUN_RECORD, _run_key(args)
    kept = {}
    if args.resume:
        _resume_record(args)
        for n in names:
            try:
                r = json.loads((args.out / f"{n}.json").read_text())
            except (OSError, ValueError):
                continue
            figures = r.get("figures", []) if isinstance(r, dict) else []
            if (
                isinstance(r, dict)
                and r.get("verdict") in VERDICTS
                and all((args.out / str(f)).exists() for f in figures)
            ):
                differ = _own_flags_differ(r, args, checkpoint)
                if differ:
                    print(f"--resume: recomputing {n}: {differ}")
                else:
                    kept[n] = r
    write_json(record, key)
    return kept, [n for n in names if n not in kept]


def _own_flags_differ(result: dict, args, checkpoint) -> str:
    """Why a target's result was computed with other flags than this run's ("" if it was not),
    from the flags it records itself (`rankdyn._reproduce.run_flags`)."""
    from .._reproduce import weights_sha256

    own = result.get("run_flags")
    if not isinstance(own, dict):
        return "its result records no flags (an older folder)"
    now = {
        "quick": bool(args.quick),
        "seed": int(args.seed),
        "x64": bool(args.x64),
        "checkpoint": None if checkpoint is None else weights_sha256(checkpoint),
    }
    names = {"quick": "--quick", "seed": "--seed", "x64": "--x64", "checkpoint": "--checkpoint (sha256)"}
    diff = [f"{names[k]} {own.get(k)!r} there, {v!r} now" for k, v in now.items() if own.get(k) != v]
    return f"it was computed with other flags ({', '.join(diff)})" if diff else ""


def _run(args, names, checkpoint, jobs, cache, run_targets) -> dict:
    """Run ``names``: in this process (``--jobs 1``, or one work item), else in ``jobs`` workers."""
    from .._reproduce._jobs import run_parallel, work_items

    if jobs == 1 or len(work_items(names)) == 1:
        return run_targets(
            names,
            args.out,
            quick=args.quick,
            seed=args.seed,
            progress=not args.no_progress,
            checkpoint=checkpoint,
        )
    print(
        f"rankdyn reproduce: {len(names)} target(s) in {min(jobs, len(work_items(names)))} worker processes"
    )
    return run_parallel(
        names,
        args.out,
        jobs=jobs,
        quick=args.quick,
        seed=args.seed,
        progress=not args.no_progress,
        checkpoint=args.checkpoint,
        x64=bool(args.x64),
        compile_cache=None if cache is None else str(cache),
    )


def _checkpoint_targets(path, names) -> None:
    """``--checkpoint``: refused, before JAX loads, unless every target reads it, and when it names
    a checkpoint that is not installed or a path that does not exist (the loader's messages)."""
    if path is None:
        return
    from .._errors import UsageError
    from .._reproduce import CHECKPOINT_TARGETS

    unused = [n for n in names if n not in CHECKPOINT_TARGETS]
    if unused:
        raise UsageError(
            f"--checkpoint is used only by the targets {', '.join(CHECKPOINT_TARGETS)}; the target(s) "
            f"{', '.join(unused)} would ignore it: drop --checkpoint or run those targets separately."
        )
    from ._excerpts import check_files_before_loading

    # A known name not installed, a path that does not exist, a folder without config.json: the
    # loader's messages, from the file names alone.
    check_files_before_loading(path)


def _checkpoint_flag(path, names):
    """``--checkpoint``: refused unless every target reads it; loaded once here, before any compute,
    so that a missing or bad file is one error line (UsageError) instead of failed targets."""
    if path is None:
        return None
    from .._errors import UsageError

    _checkpoint_targets(path, names)
    from ..checkpoints import load_checkpoint

    ckpt = load_checkpoint(path)
    if ckpt.tokenizer_json is None:
        raise UsageError(
            f"--checkpoint {path}: no tokenizer.json; the reproduce targets tokenise their corpus with it, "
            "so add the checkpoint's tokenizer.json next to config.json."
        )
    return ckpt
