"""Ctrl-C and SIGTERM for the command line: a flag set by the signal, checked between chunks.

A Python signal handler that raises (the default ``KeyboardInterrupt``) can fire anywhere,
including inside a garbage-collection callback of JAX (``_xla_gc_callback``), where Python
prints ``Exception ignored in ...`` and swallows it: the run then goes on to the end and exits 0.
So the handler here raises nothing. It records the signal and puts the default handler back
(a second Ctrl-C or SIGTERM ends the process at once), and the long loops call `check_interrupt`
between chunks and after each compile: that raises `Interrupted` in ordinary Python code, where
it cannot be swallowed. The CLI turns it into one line saying what was saved and exit
$128 + \text{signal}$: 130 for SIGINT, 143 for SIGTERM.

Library code calls `check_interrupt` unconditionally: outside the CLI no handler is installed
and the call does nothing.
"""

from __future__ import annotations

import signal
import threading

__all__ = ["Interrupted", "install_interrupt_handlers", "restore_interrupt_handlers", "check_interrupt"]

#: The signals handled: Ctrl-C and the polite kill of schedulers and ``timeout``.
SIGNALS = (signal.SIGINT, signal.SIGTERM)

#: The signal received (``None`` until one arrives) and the handlers to put back.
_state: dict = {"signum": None, "previous": {}}


class Interrupted(KeyboardInterrupt):
    """Raised by `check_interrupt` once SIGINT or SIGTERM has arrived.

    A subclass of ``KeyboardInterrupt``, so code that already stops cleanly on Ctrl-C stops on
    SIGTERM too. ``signum`` is the signal; ``exit_code`` is $128 + \\text{signum}$.
    """

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = int(signum)

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


def _handler(signum, frame) -> None:
    # Only record: raising here could land in a GC callback and be swallowed (module docstring).
    _state["signum"] = signum
    signal.signal(signum, signal.SIG_DFL)  # a second signal ends the process at once


def install_interrupt_handlers() -> bool:
    """Install the flag-setting handler for SIGINT and SIGTERM (main thread only).

    A signal whose handler is not Python's default (a notebook, a test runner, an embedding
    application) is left to its owner.

    Returns:
        True if at least one handler was installed (undo with `restore_interrupt_handlers`).
    """
    _state["signum"] = None
    _state["previous"] = {}
    if threading.current_thread() is not threading.main_thread():
        return False
    defaults = {signal.SIGINT: signal.default_int_handler, signal.SIGTERM: signal.SIG_DFL}
    for sig in SIGNALS:
        if signal.getsignal(sig) is defaults[sig]:
            _state["previous"][sig] = signal.signal(sig, _handler)
    return bool(_state["previous"])


def restore_interrupt_handlers() -> None:
    """Put back the handlers that `install_interrupt_handlers` replaced."""
    for sig, previous in _state["previous"].items():
        signal.signal(sig, previous)
    _state["previous"] = {}


def interrupt_received() -> int | None:
    """The signal number received since the handlers were installed, or None."""
    return _state["signum"]


def check_interrupt() -> None:
    """Raise `Interrupted` if SIGINT or SIGTERM arrived; otherwise do nothing (cheap).

    Raises:
        Interrupted: a signal was received since `install_interrupt_handlers`.
    """
    if _state["signum"] is not None:
        raise Interrupted(_state["signum"])
