"""The ``--devices N|all`` flag shared by every subcommand, and what it means for each.

`rankdyn.cli.main` calls `apply_devices_flag` before any JAX array exists: it validates the
flag and calls `rankdyn.use_cpu_devices` (one XLA host device per core by default, with XLA's
thread pool sized so that sharded LAPACK calls cannot deadlock). Commands then ask
`sharding_devices` what to pass as ``devices=``.
"""

from __future__ import annotations

import argparse

from .._errors import UsageError


def add_devices_flag(parser: argparse.ArgumentParser, use: str) -> None:
    """Add ``--devices``; ``use`` says in the help what this command does with the devices."""
    parser.add_argument(
        "--devices",
        default=None,
        metavar="N|all",
        help=f"CPU devices: 'all' (default: one per core) or N in [1, cores]. {use}",
    )


def apply_devices_flag(args: argparse.Namespace) -> None:
    """Validate ``--devices`` and configure JAX's CPU devices; sets ``args.num_devices``.

    Without the flag, a fresh process gets one device per core. When JAX is already running
    (``main()`` called from Python after JAX work), its device count is kept instead: only an
    explicit ``--devices`` that differs from it is an error.

    Raises:
        ValueError: for a bad value or a value JAX can no longer take (the CLI prints it).
    """
    from .._run._devices import backends_initialized, resolve_num_devices, use_cpu_devices

    if args.devices is None and backends_initialized():
        import jax

        args.num_devices = len(jax.devices("cpu"))
        return
    n = resolve_num_devices("all" if args.devices is None else args.devices, flag="--devices")
    try:
        args.num_devices = use_cpu_devices(n)
    except RuntimeError as err:  # already initialised with another count: a usage error here
        raise UsageError(f"--devices {args.devices}: {err}") from None


def sharding_devices(args: argparse.Namespace):
    """``devices=`` for `rankdyn.simulate`: None on one device, else every device."""
    return "all" if getattr(args, "num_devices", 1) > 1 else None
