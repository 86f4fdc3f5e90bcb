r"""A sweep split into independent tasks: which chunks a task owns, and the locks that keep it safe.

A grid's chunks $0, \dots, C-1$ (`rankdyn._sweep.sweep_plan`) are dealt round-robin to $N$ tasks:
task $I$ owns chunk $i$ iff $i \bmod N = I$. Round-robin spreads every structural group (the
chunks of one group are consecutive) over all tasks, so the tasks take about equal time. Each
chunk file is the same bytes whichever process computes it (one compiled program per group, a
fixed per-program batch shape), so any split gives the one-process dataset.

Two locks, both POSIX record locks (`fcntl.lockf`), which the kernel drops when the holding
process dies (``kill -9`` included) and which NFS (v3 with lockd, v4) and Lustre/GPFS mounted with
locking support share between hosts:

* ``DIR/.sweep.lock``: held for a moment while a process creates or checks the folder, and while
  the last task assembles the dataset, so that concurrent starts never race on the manifest.
* ``DIR/tasks/task_I_of_N.lock``: held for the whole life of the process computing task
  ``I/N``; a second process for the same task is refused at start, before any compute. The file
  names the holder (host, pid, start time), for the refusal message.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import re
import socket
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from .._errors import UsageError

__all__ = ["TaskShare", "parse_task", "task_from_env", "folder_lock", "TaskLock", "missing_report"]

#: The folder-wide lock file, and the folder of per-task lock files, inside a sweep's DIR.
FOLDER_LOCK = ".sweep.lock"
TASKS_DIR = "tasks"


@dataclass(frozen=True)
class TaskShare:
    """Task ``index`` of ``count``: it owns the chunks ``i`` with ``i % count == index``."""

    index: int
    count: int

    def owns(self, chunk: int) -> bool:
        return chunk % self.count == self.index

    @property
    def label(self) -> str:
        return f"task {self.index}/{self.count}"

    @property
    def lock_name(self) -> str:
        return f"task_{self.index}_of_{self.count}.lock"


def parse_task(text: str, *, flag: str = "--task") -> TaskShare:
    """``"I/N"`` -> `TaskShare`, with ``0 <= I < N``.

    Raises:
        UsageError: malformed text, ``N < 1`` or ``I`` outside ``0..N-1``.
    """
    m = re.fullmatch(r"\s*(-?\d+)\s*/\s*(-?\d+)\s*", str(text))
    if m is None:
        raise UsageError(
            f"{flag} {text!r}: expected I/N, task I of N tasks with 0 <= I < N (e.g. {flag} 0/4)."
        )
    index, count = int(m.group(1)), int(m.group(2))
    if count < 1:
        raise UsageError(f"{flag} {text}: the number of tasks N must be at least 1, got {count}.")
    if not 0 <= index < count:
        raise UsageError(
            f"{flag} {text}: the task index must be in 0..{count - 1} (tasks are numbered from 0), "
            f"got {index}."
        )
    return TaskShare(index, count)


_SLURM = ("SLURM_ARRAY_TASK_ID", "SLURM_ARRAY_TASK_MIN", "SLURM_ARRAY_TASK_COUNT")


def task_from_env(env: Mapping[str, str] | None = None) -> tuple[TaskShare | None, str]:
    """The task of a SLURM job array element, or None outside one; and a line saying so.

    ``I = SLURM_ARRAY_TASK_ID - SLURM_ARRAY_TASK_MIN``, ``N = SLURM_ARRAY_TASK_COUNT``: an array
    ``--array=0-7`` or ``--array=1-8`` gives tasks 0..7 of 8. (An array with a step, ``0-14:2``,
    has gaps in its ids: it is refused, since some chunks would have no task.)

    Raises:
        UsageError: a variable that is not an integer, or an index outside ``0..N-1``.
    """
    env = os.environ if env is None else env
    if "SLURM_ARRAY_TASK_ID" not in env or "SLURM_ARRAY_TASK_COUNT" not in env:
        return None, ""
    values = {}
    for name in _SLURM:
        raw = env.get(name, "0" if name == "SLURM_ARRAY_TASK_MIN" else "")
        try:
            values[name] = int(raw)
        except ValueError:
            raise UsageError(
                f"{name}={raw!r} is not an integer; pass --task I/N to choose the task explicitly."
            ) from None
    index = values["SLURM_ARRAY_TASK_ID"] - values["SLURM_ARRAY_TASK_MIN"]
    count = values["SLURM_ARRAY_TASK_COUNT"]
    shown = " ".join(f"{k}={env.get(k, '(unset: 0)')}" for k in _SLURM)
    try:
        share = parse_task(f"{index}/{count}", flag="the SLURM array task")
    except UsageError as err:
        raise UsageError(
            f"{err} ({shown}; an array with a step or gaps is not supported: use --array=0-{count - 1}, "
            "or pass --task I/N)"
        ) from None
    return share, f"{share.label} from the SLURM job array ({shown})"


def _no_locks(path: Path, err: OSError) -> UsageError:
    return UsageError(
        f"cannot lock {str(path)!r} ({os.strerror(err.errno or 0) or err}): the filesystem of the sweep "
        "folder does not support POSIX locks (NFS without lockd, Lustre without -o flock). Mount it "
        "with locking, or choose an --out on a filesystem that has it."
    )


#: What a lock request held by another process raises; anything else means no lock support.
_HELD = (errno.EAGAIN, errno.EACCES)


@contextlib.contextmanager
def folder_lock(out: Path) -> Iterator[None]:
    """Hold ``DIR/.sweep.lock`` (exclusive, blocking) for the duration of the block.

    Raises:
        UsageError: the filesystem does not support POSIX locks.
    """
    out.mkdir(parents=True, exist_ok=True)
    with open(out / FOLDER_LOCK, "a+b") as f:
        try:
            fcntl.lockf(f, fcntl.LOCK_EX)
        except OSError as err:
            raise _no_locks(out / FOLDER_LOCK, err) from None
        try:
            yield
        finally:
            fcntl.lockf(f, fcntl.LOCK_UN)


class TaskLock:
    """The lock of one task, held by this process until `release` (or its death).

    POSIX locks belong to the process and are dropped when any descriptor of the file is closed
    in it: the file is opened once, here, and never elsewhere in the holding process.
    """

    def __init__(self, out: Path, share: TaskShare, what: str):
        folder = out / TASKS_DIR
        folder.mkdir(parents=True, exist_ok=True)
        self.path = folder / share.lock_name
        self._file = open(self.path, "a+")  # noqa: SIM115 (held open for the lock's lifetime)
        try:
            fcntl.lockf(self._file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as err:
            if err.errno not in _HELD:
                self._file.close()
                raise _no_locks(self.path, err) from None
            self._file.seek(0)
            holder = self._file.read().strip() or "{}"
            self._file.close()
            try:
                info = json.loads(holder)
            except ValueError:
                info = {}
            who = f"pid {info.get('pid', '?')} on host {info.get('host', '?')}"
            who += f", since {info.get('started', '?')}"
            raise UsageError(
                f"{what} of the sweep in {str(out)!r} is already running in another process ({who}; lock "
                f"{str(self.path)!r}). Refusing to run it twice; wait for it, or stop it: its lock is "
                "released when it exits or dies."
            ) from None
        self._file.seek(0)
        self._file.truncate()
        info = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "started": time.strftime("%Y-%m-%dT%H:%M:%S"),
        }
        self._file.write(json.dumps(info | {"task": [share.index, share.count]}) + "\n")
        self._file.flush()

    def release(self) -> None:
        if not self._file.closed:
            fcntl.lockf(self._file, fcntl.LOCK_UN)
            self._file.close()


def _task_counts(out: Path) -> list[int]:
    """The task counts N of the ``--task I/N`` runs that have joined the folder."""
    counts = set()
    for p in (out / TASKS_DIR).glob("task_*_of_*.lock"):
        m = re.fullmatch(r"task_(\d+)_of_(\d+)\.lock", p.name)
        if m and int(m.group(2)) > 1:
            counts.add(int(m.group(2)))
    return sorted(counts)


def missing_report(out: Path, missing: list[int], num_chunks: int, command: str) -> str:
    """Which chunks are missing in ``out`` and which task owns each, with how to complete them.

    ``command`` is the sweep's command line without ``--task`` (``rankdyn sweep CONFIG --out DIR``).
    """
    counts = _task_counts(out)
    shown = missing[:12]
    more = f", ... ({len(missing) - len(shown)} more)" if len(missing) > len(shown) else ""
    if counts:
        owner = lambda i: " or ".join(f"task {i % n}/{n}" for n in counts)  # noqa: E731
        listed = ", ".join(f"{i} ({owner(i)})" for i in shown)
        tasks = sorted({f"{i % n}/{n}" for i in missing for n in counts}, key=lambda t: t.split("/")[::-1])
        fix = (
            f"run the owning task(s) again ({command} --task I/N; each resumes its own chunks): "
            + ", ".join(tasks[:12])
            + ("" if len(tasks) <= 12 else ", ...")
        )
    else:
        listed = ", ".join(str(i) for i in shown)
        fix = f"no task split has run here; complete it with {command} --resume"
    return f"{len(missing)} of {num_chunks} chunk(s) missing in {str(out)!r}: chunk {listed}{more}; {fix}."
