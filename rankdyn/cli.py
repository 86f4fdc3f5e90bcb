"""The ``rankdyn`` command line: thin wrappers that parse flags and call the public API.

Each subcommand lives in ``rankdyn/commands/<name>.py`` and exposes ``add_parser(subparsers)``
(which sets ``func``, and ``before_jax`` for process-wide XLA flags). This module only
dispatches. ``--devices`` (default: one CPU device per core, `rankdyn.use_cpu_devices`), a
command's ``before_jax`` and ``--x64`` are applied here, before any array is created: library
code never changes JAX's global configuration.

Exit codes: 0 success; 2 a problem the user can fix (`rankdyn._errors.UsageError`, or a
``ValueError`` raised while the arguments are checked, before compute: one ``error:`` line, no
traceback); 1 an internal error (traceback and a request to report it); 130 Ctrl-C (one line
saying what was saved and how to resume; no traceback).
"""

from __future__ import annotations

import argparse
import importlib
import os
import signal
import sys
import threading
import time
import traceback
from pathlib import Path

from ._errors import UsageError
from .commands._phase import _phase, begin_compute  # noqa: F401 - begin_compute: the old home

#: Subcommand modules under rankdyn.commands, in the order shown by --help.
COMMANDS = ("simulate", "reproduce", "sweep", "equilibria", "plot", "flow", "lyapunov")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rankdyn",
        description="Token dynamics of masked self-attention with LayerNorm (Wu et al., NeurIPS 2024).",
    )
    from ._version import __version__

    parser.add_argument("--version", action="version", version=f"rankdyn {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMANDS:
        importlib.import_module(f"rankdyn.commands.{name}").add_parser(sub)
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
        return (
            f"rankdyn sweep: interrupted; {done} chunk(s) are saved in {chunks}; continue with: "
            f"rankdyn sweep {args.config} --out {out} --resume{flags}"
        )
    saved = _saved_since(out, t0) if out is not None else []
    what = (
        f"saved {', '.join(saved)} in {out}"
        if saved
        else "nothing was saved (results are written at the end)"
    )
    return f"rankdyn {args.command}: interrupted; {what}; run the same command again to redo it."


def _install_sigint(args, t0: float):
    """On Ctrl-C: the one-line message and exit 130 at once (after any file write in progress).

    `os._exit` skips the interpreter's teardown: a KeyboardInterrupt raised inside JAX's compile
    or dispatch machinery could be swallowed there, and tearing the interpreter down while XLA's
    threads run could crash. Nothing is lost: every output file is written atomically.
    """
    if threading.current_thread() is not threading.main_thread():
        return None
    if signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        return None  # someone else (a notebook, a test runner) handles Ctrl-C: leave it to them

    from ._run._io import when_no_write

    def leave():
        sys.stdout.flush()
        print(f"\n{interrupt_message(args, t0)}", file=sys.stderr, flush=True)
        os._exit(130)

    def handler(signum, frame):
        when_no_write(leave)

    return signal.signal(signal.SIGINT, handler)


def _error(args, err) -> int:
    print(f"rankdyn {args.command}: error: {err}", file=sys.stderr)
    return 2


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    _phase["computing"] = False
    t0 = time.time()
    if hasattr(args, "devices"):
        from .commands._devices import apply_devices_flag

        try:  # before any array exists: JAX reads the device count once, at initialisation
            apply_devices_flag(args)
        except ValueError as err:
            return _error(args, err)
    if hasattr(args, "before_jax"):  # process-wide XLA configuration, also before JAX starts
        args.before_jax(args)
    if getattr(args, "x64", False):
        import jax

        jax.config.update("jax_enable_x64", True)
    previous = _install_sigint(args, t0)
    try:
        return int(args.func(args) or 0)
    except UsageError as err:  # user errors: a clear message, no traceback
        return _error(args, err)
    except ValueError as err:
        if not _phase["computing"]:  # raised while the arguments were checked: the user's to fix
            return _error(args, err)
        return _internal(args)
    except KeyboardInterrupt:
        print(f"\n{interrupt_message(args, t0)}", file=sys.stderr)
        return 130
    except Exception:
        return _internal(args)
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)


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
