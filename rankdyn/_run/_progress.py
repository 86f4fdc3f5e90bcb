"""Progress bars for long runs (simulate chunks, sweeps, censuses, basins, reproduce targets).

Inside a reproduce target the bar moves per step of real work (one search, one simulation, one
census), not per target: a target calls `plan_steps` once with the number of steps it will do
and `step_done` after each. Its ETA comes from the steps measured so far (`eta_seconds`), so a
target that takes minutes says so after its first step instead of guessing from other targets.
Without an active bar (`target_progress`), both calls do nothing: library code can call them
unconditionally.
"""

from __future__ import annotations

import contextlib
import contextvars
import time

__all__ = ["progress_bar", "target_progress", "plan_steps", "step_done", "eta_seconds", "StepProgress"]


def progress_bar(*args, **kwargs):
    """A ``tqdm`` bar: the notebook widget where ipywidgets is installed, plain text otherwise.

    ``tqdm.auto`` picks the widget in Jupyter even without ipywidgets and then warns
    (``TqdmWarning: IProgress not found``) into every notebook's output; the text bar does not.
    """
    try:
        import ipywidgets  # noqa: F401  (only probed)
        from tqdm.auto import tqdm
    except ImportError:
        from tqdm import tqdm
    return tqdm(*args, **kwargs)


def eta_seconds(step_seconds, remaining: int) -> float | None:
    r"""Time left from the measured steps: $\bar s \cdot r$, the mean measured step time times the
    steps remaining; None before any step is measured (no guess).

    The mean, not the last step: steps of one target differ (the first one compiles), and the
    mean of all of them is the rate the remaining steps will average if they look alike.
    """
    step_seconds = list(step_seconds)
    if not step_seconds:
        return None
    return sum(step_seconds) / len(step_seconds) * max(remaining, 0)


def _clock(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    m, s = divmod(round(seconds), 60)
    h, m = divmod(m, 60)
    return f"{h:d}:{m:02d}:{s:02d}" if h else f"{m:02d}:{s:02d}"


class StepProgress:
    """One target's steps: a text bar ``desc: k/total step-label, ETA mm:ss``.

    Arguments:
        desc: what runs (the target's name).
        enabled: draw the bar (False: only count, for tests and ``--no-progress``).
        clock: the time source (``time.perf_counter``; tests pass a fake one).
    """

    def __init__(self, desc: str, *, enabled: bool = True, clock=time.perf_counter):
        self.desc, self.clock = desc, clock
        self.total: int | None = None
        self.done = 0
        self.step_seconds: list[float] = []
        self._last = clock()
        self._bar = None
        if enabled:
            self._bar = progress_bar(
                total=None, desc=desc, unit="step", leave=False, bar_format="{desc}: running{postfix}"
            )

    def plan(self, total: int) -> None:
        """Declare the number of steps (once the target knows its sizes); restarts the step clock."""
        self.total = int(total)
        self._last = self.clock()
        if self._bar is not None:
            self._bar.bar_format = "{desc}: step {n}/{total}{postfix}"
            self._bar.reset(total=self.total)
            self._bar.set_postfix_str("ETA after the first step")

    def step(self, label: str = "") -> None:
        """One step finished: record its duration and redraw with the ETA of the rest."""
        now = self.clock()
        self.step_seconds.append(now - self._last)
        self._last = now
        self.done += 1
        if self._bar is not None:
            self._bar.set_postfix_str(f"{label}, ETA {_clock(self.eta())}".lstrip(", "), refresh=False)
            self._bar.update(1)

    def eta(self) -> float | None:
        """Seconds left (`eta_seconds`), None without a plan or a measured step."""
        if self.total is None:
            return None
        return eta_seconds(self.step_seconds, self.total - self.done)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()


_CURRENT: contextvars.ContextVar[StepProgress | None] = contextvars.ContextVar("rankdyn_step", default=None)


@contextlib.contextmanager
def target_progress(desc: str, *, enabled: bool = True, clock=time.perf_counter):
    """Make a `StepProgress` the one `plan_steps` and `step_done` report to, for the block."""
    steps = StepProgress(desc, enabled=enabled, clock=clock)
    token = _CURRENT.set(steps)
    try:
        yield steps
    finally:
        _CURRENT.reset(token)
        steps.close()


def plan_steps(total: int) -> None:
    """The running target will do ``total`` steps of real work (no-op without `target_progress`)."""
    if (steps := _CURRENT.get()) is not None:
        steps.plan(total)


def step_done(label: str = "") -> None:
    """One step of the running target is done (no-op without `target_progress`)."""
    if (steps := _CURRENT.get()) is not None:
        steps.step(label)
