"""Which phase a command is in: checking its flags, or computing.

A plain ``ValueError`` raised while the flags are checked is a usage error (one ``error:`` line,
exit 2); after `begin_compute` it is an internal error (a traceback). The commands call
`begin_compute`, and `rankdyn.cli` reads (and resets) `_phase`: the state lives here, below both, so that no
command imports the entry point that loads it.
"""

from __future__ import annotations

__all__ = ["begin_compute"]

#: Set by `begin_compute`: a plain ValueError after it is an internal error, not a usage error.
_phase = {"computing": False}


def begin_compute() -> None:
    """Called by a command once its arguments are checked, right before it computes."""
    _phase["computing"] = True
