"""The ``rankdyn`` command line: each command parses its flags, refuses bad input before JAX is
imported (through the JAX-free plans of `rankdyn.plans` and the package's JAX-free checking and
file modules, which is why commands import private modules), then runs the library code behind
the public API and writes its result files.

Each subcommand lives in ``rankdyn/_commands/<name>.py`` and exposes ``add_parser(subparsers)``
(which sets ``func``, and ``before_jax`` for process-wide XLA flags). This module only
dispatches. ``--devices`` (default: one CPU device per core, `rankdyn.use_cpu_devices`), a
command's ``before_jax`` and ``--x64`` are applied here, before any array is created: library
code never changes JAX's global configuration.

Exit codes: 0 success; 2 a problem the user can fix (`rankdyn.UsageError`, raised for bad input
in every folder of the package: one ``error:`` line, no traceback); 1 an internal error (any other
exception, a plain ``ValueError`` included: a traceback and a request to report it); 130 Ctrl-C (one line
saying what was saved and how to resume; no traceback).
"""

from __future__ import annotations

import argparse
import gc
import importlib
import os
import signal
import sys
import time
import traceback
from pathlib import Path

from ._errors import UsageError
from ._run._interrupt import (
    check_interrupt,
    install_interrupt_handlers,
    interrupt_received,
    restore_interrupt_handlers,
)

#: Subcommand modules under rankdyn._commands, in the order shown by --help.
COMMANDS = (
    "simulate",
    "reproduce",
    "sweep",
    "equilibria",
    "continue",
    "basins",
    "plot",
    "flow",
    "lyapunov",
    "checkpoints",
)
#: A command whose module name differs from it (``continue`` is a Python keyword).
_MODULES = {"continue": "continuation"}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rankdyn",
        description="Token dynamics of masked self-attention with LayerNorm (Wu et al., NeurIPS 2024).",
        allow_abbrev=False,
    )
    from ._version import __version__

    parser.add_argument("--version", action="version", version=f"rankdyn {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMANDS:
        importlib.import_module(f"rankdyn._commands.{_MODULES.get(name, name)}").add_parser(sub)
    # A prefix of a flag is never taken for the flag (a bare --attention would turn on
    # --attention-sinks). allow_abbrev does not pass from a parser to its subcommands' parsers, and
    # argparse reads the attribute at parse time, so it is set on each one here.
    for command in sub.choices.values():
        command.allow_abbrev = False
    return parser


def _saved_since(out, t0: float) -> list[str]:
    """Files in ``out`` (not temp files) written since ``t0``."""
    try:
        return sorted(
            p.name
            for p in Path(out).iterdir()
            if p.is_file() and not p.name.startswith(".") and p.stat().st_mtime >= t0 - 1
        )
    except OSError:
        return []


def interrupt_message(args, t0: float) -> str:
    """One line: what an interrupted command saved, and how to resume or redo it."""
    out = getattr(args, "out", None)
    if args.command == "sweep" and out is not None:
        chunks = Path(out) / "chunks"
        done = len(list(chunks.glob("chunk_*.npz"))) if chunks.is_dir() else 0
        flags = " --x64" if getattr(args, "x64", False) else ""
        # A task (--task, or a SLURM array's) joins and resumes by itself: the same command again.
        share = getattr(args, "task_share", None)
        flags = f" --task {share.index}/{share.count}{flags}" if share else f" --resume{flags}"
        return (
            f"rankdyn sweep: interrupted; {done} chunk(s) are saved in {chunks}; continue with: "
            f"rankdyn sweep {args.config} --out {out}{flags}"
        )
    if args.command == "reproduce" and out is not None:
        # The workers (--jobs) die with this process; finished targets' JSON and figures stay.
        done = sorted(p.stem for p in Path(out).glob("*.json") if p.stat().st_mtime >= t0 - 1)
        argv = " ".join(a for a in sys.argv[1:] if a != "--resume") if sys.argv[1:2] == ["reproduce"] else ""
        again = f"rankdyn {argv} --resume" if argv else "the same command with --resume"
        return (
            f"rankdyn reproduce: interrupted; {len(done)} target(s) finished and saved in {out}"
            + (f" ({', '.join(done)})" if done else "")
            + f"; continue with: {again}"
        )
    saved = _saved_since(out, t0) if out is not None else []
    what = (
        f"saved {', '.join(saved)} in {out}"
        if saved
        else "nothing was saved (results are written at the end)"
    )
    return f"rankdyn {args.command}: interrupted; {what}; run the same command again to redo it."


def _error(args, err) -> int:
    print(f"rankdyn {args.command}: error: {err}", file=sys.stderr)
    return 2


#: The cyclic garbage collector's thresholds when rankdyn runs as the program: the first 10x
#: Python's 700. Tracing makes many short-lived objects, and each full collection walks every
#: object of JAX's and matplotlib's modules (benchmarks/DEVNOTES.md, "The garbage collector"). The
#: test run's processes and notebook kernels use the same (tests/conftest.py, notebooks/conftest.py).
GC_THRESHOLD = (7000, 10, 10)


def main(argv: list[str] | None = None) -> int:
    # First thing, before any command module (and JAX) is imported: Ctrl-C and SIGTERM only set
    # a flag, checked between chunks and after compiles (rankdyn._run._interrupt explains why).
    installed = False
    if argv is None:  # the program's own process; a caller's (``main(argv)``) keeps its settings
        gc.set_threshold(*GC_THRESHOLD)
    try:
        installed = install_interrupt_handlers()
        return _main(argv)
    except KeyboardInterrupt:  # Ctrl-C before the handlers were in place: nothing was started
        print("\nrankdyn: interrupted; nothing was saved.", file=sys.stderr, flush=True)
        return 128 + signal.SIGINT
    finally:
        if installed:
            restore_interrupt_handlers()
        if argv is None:
            # Called as the program (`rankdyn`, `python -m rankdyn`): the process ends next. Frozen
            # objects are skipped by the collections of the interpreter's shutdown, which otherwise
            # walk JAX's and matplotlib's objects for 0.4-0.7 s after the results are written.
            gc.freeze()


def _interrupted(args, t0: float, signum: int) -> int:
    print(f"\n{interrupt_message(args, t0)}", file=sys.stderr, flush=True)
    return 128 + int(signum)


#: Commands that write one result into the folder ``--out``: it gets a result manifest.
RESULT_COMMANDS = ("simulate", "flow", "equilibria", "continue", "basins", "lyapunov")


def _run_command(args):
    """``args.func(args)``; for a single-result command, with its files recorded in a manifest."""
    out = getattr(args, "out", None)
    if args.command not in RESULT_COMMANDS or out is None:
        return args.func(args)
    from ._run._result_files import recording_result

    with recording_result(out, args.command):
        return args.func(args)


def _empty_out(argv) -> bool:
    """Whether the command line gives ``--out ""`` (or ``--out=``)."""
    argv = list(argv)
    return "--out=" in argv or any(a == "--out" and b == "" for a, b in zip(argv, argv[1:]))


def _renamed_flag(argv) -> str | None:
    """The error line for an old flag name (``--layers``, ``--norm``), naming its new name; or None."""
    from ._model._params import RENAMED

    command = next((a for a in argv if a in COMMANDS), None)
    for token in argv:
        name = token.split("=", 1)[0]
        old = name[2:].replace("-", "_") if name.startswith("--") else None
        if old in RENAMED:
            new = RENAMED[old]
            return (
                f"rankdyn{'' if command is None else ' ' + command}: error: {name} is now "
                f"--{new.replace('_', '-')} (the name of the Python argument and of the sweep key {new!r})."
            )
    return None


def _main(argv: list[str] | None) -> int:
    t0 = time.time()
    try:
        parser = build_parser()
        renamed = _renamed_flag(sys.argv[1:] if argv is None else argv)
        if renamed is not None:
            print(renamed, file=sys.stderr)
            return 2
        args = parser.parse_args(argv)
    except KeyboardInterrupt:  # while the command modules import: nothing was started
        print("\nrankdyn: interrupted; nothing was saved.", file=sys.stderr, flush=True)
        return 128 + (interrupt_received() or signal.SIGINT)
    if _empty_out(sys.argv[1:] if argv is None else argv):  # type=Path reads "" as "."
        return _error(args, "--out is empty; name an output folder (for the current one, --out .).")
    if hasattr(args, "devices"):
        from ._commands._devices import apply_devices_flag

        try:  # before any array exists: JAX reads the device count once, at initialisation
            apply_devices_flag(args)
        except UsageError as err:
            return _error(args, err)
    if hasattr(args, "before_jax"):  # process-wide XLA configuration, also before JAX starts
        args.before_jax(args)
    if getattr(args, "x64", False):
        _enable_x64()
    try:
        check_interrupt()
        code = int(_run_command(args) or 0)
        check_interrupt()  # a signal after the last check: the results are written; say so
        return code
    except UsageError as err:  # user errors: a clear message, no traceback
        return _error(args, err)
    except KeyboardInterrupt as err:  # `Interrupted` (SIGINT / SIGTERM), or a plain Ctrl-C
        return _interrupted(args, t0, getattr(err, "signum", signal.SIGINT))
    except Exception:
        if interrupt_received() is not None:  # a signal broke a blocking call: not a bug
            return _interrupted(args, t0, interrupt_received())
        return _internal(args)


def _enable_x64() -> None:
    """``--x64``: float64 in JAX. Through ``JAX_ENABLE_X64``, read when JAX is imported, while JAX is
    not loaded yet: a refusal of the flags that follow then answers without importing JAX (and
    the ``--jobs`` workers, which inherit the environment, compute in float64 too)."""
    if "jax" in sys.modules:
        sys.modules["jax"].config.update("jax_enable_x64", True)
    else:
        os.environ["JAX_ENABLE_X64"] = "1"


def _internal(args) -> int:
    traceback.print_exc()
    print(
        f"rankdyn {args.command}: internal error (a bug in rankdyn, not in your command). Please report it "
        "with the command line and the traceback above.",
        file=sys.stderr,
    )
    return 1


if __name__ == "__main__":
    sys.exit(main())
