"""The error classes: what a user can fix, and everything else.

A `UsageError` is a problem the user can act on: a bad flag, key or argument, a path that cannot
be written, a disk that is full, a run whose estimated memory exceeds what is available. It
subclasses `ValueError`, so API callers that catch `ValueError` keep working. The command line
turns it into one ``error:`` line and exit code 2; any other exception is an internal error and
is shown with its traceback and a request to report it.

A `SolveError` is a solve asked for one answer (``throw=True``: `find_equilibria`,
`continue_branch`) that did not reach it. Ensembles (`simulate`, `solve_flow`, the Lyapunov
spectra, sweeps) report a `rankdyn.RESULTS` member per trajectory instead and raise nothing by
default: a degenerate trajectory is a legitimate result in a collapse study.
"""

from __future__ import annotations

__all__ = ["UsageError", "SolveError"]


class UsageError(ValueError):
    """A problem the user can fix (the message names the flag, key or argument and the fix)."""


class SolveError(RuntimeError):
    """A solve with ``throw=True`` did not succeed (the message says which status and how many)."""
