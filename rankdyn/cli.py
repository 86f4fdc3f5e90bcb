"""The ``rankdyn`` command line: thin wrappers that parse flags and call the public API.

Each subcommand lives in ``rankdyn/commands/<name>.py`` and exposes ``add_parser(subparsers)``
(which sets ``func``). This module only dispatches. ``--devices`` (default: one CPU device per
core, `rankdyn.use_cpu_devices`) and ``--x64`` are applied here, before any array is created:
library code never changes JAX's global configuration.
"""

from __future__ import annotations

import argparse
import importlib
import sys

#: Subcommand modules under rankdyn.commands, in the order shown by --help.
COMMANDS = ("simulate", "reproduce", "sweep", "equilibria", "plot")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rankdyn",
        description="Token dynamics of masked self-attention with LayerNorm (Wu et al., NeurIPS 2024).",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMANDS:
        importlib.import_module(f"rankdyn.commands.{name}").add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if hasattr(args, "devices"):
        from .commands._devices import apply_devices_flag

        try:  # before any array exists: JAX reads the device count once, at initialisation
            apply_devices_flag(args)
        except ValueError as err:
            print(f"rankdyn {args.command}: error: {err}", file=sys.stderr)
            return 2
    if getattr(args, "x64", False):
        import jax

        jax.config.update("jax_enable_x64", True)
    try:
        return int(args.func(args) or 0)
    except ValueError as err:  # user errors: a clear message, no traceback
        print(f"rankdyn {args.command}: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
