"""Writing results: JSON with the config, seed and versions that produced them (atomic writes).

Every output file is written atomically (`atomic_path`): into a temp file in the same folder,
then renamed over the target, so a reader, a full disk or an interrupt never sees a half-written
file. The final file gets the mode a plain ``open()`` would give (0666 minus the umask). A full
disk or a folder that cannot be written raises `rankdyn._errors.UsageError` naming the file; the
temp file is removed and files already complete stay as they were.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import errno
import functools
import hashlib
import json
import os
import platform
import tempfile
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import numpy as np

from .._errors import UsageError

__all__ = [
    "cpu_model",
    "to_jsonable",
    "write_json",
    "provenance",
    "source_digest",
    "atomic_path",
    "atomic_write",
    "savez",
    "savefig",
]


#: Paths written by `atomic_path` while a result is being recorded (else None): the single-result
#: commands' manifest (`rankdyn._run._result_files.recording_result`) lists them.
_recorded: dict = {"paths": None}


def cache_root() -> Path:
    """The folder of every cache rankdyn keeps: ``$RANKDYN_CACHE_DIR``, else ``~/.cache/rankdyn``.

    The compile cache (``compile/``), the chunk autotuner (``chunks.json``) and the fetched
    checkpoints (one folder per name, unless ``$RANKDYN_CHECKPOINTS`` moves them alone) live here,
    so one variable moves them all.

    Raises:
        UsageError: when the variable names something that is not a folder.
    """
    root = Path(os.environ.get("RANKDYN_CACHE_DIR") or Path.home() / ".cache" / "rankdyn")
    if root.exists() and not root.is_dir():
        raise UsageError(f"RANKDYN_CACHE_DIR={root} is not a folder; point it at a folder (or unset it).")
    return root


def note_written(path: Path) -> None:
    """Called by the atomic writer after each rename: remember ``path`` if a result is recorded."""
    if _recorded["paths"] is not None:
        _recorded["paths"].add(Path(path).absolute())


def to_jsonable(obj):
    """``obj`` as plain JSON values: the one serialiser of every result rankdyn writes.

    - mappings become dicts with ``str`` keys, lists and tuples become lists;
    - arrays (NumPy, JAX, anything with ``__array__``) become nested lists, NumPy scalars Python ones;
    - a typed result becomes its ``to_dict()`` (which may drop fields, e.g. a target's `off_json`
      ones), any other dataclass the dict of its fields;
    - NaN and +-inf become ``None`` (JSON has no such numbers; a reader sees ``null``).

    Values are converted recursively, so the output of ``to_dict()`` is converted too, and
    ``to_jsonable(to_jsonable(x)) == to_jsonable(x)``.
    """
    if type(obj) in (str, bytes, bool, int) or obj is None:
        return obj
    if isinstance(obj, float) and not isinstance(obj, np.generic):
        return float(obj) if np.isfinite(obj) else None
    if isinstance(obj, Mapping):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_jsonable(v) for v in obj]
    if isinstance(obj, np.generic) or (hasattr(obj, "__array__") and not isinstance(obj, (str, bytes))):
        arr = np.asarray(obj)
        if arr.ndim == 0:
            return to_jsonable(arr.item())
        return [to_jsonable(v) for v in arr.tolist()]
    if isinstance(obj, type):
        return obj
    if callable(getattr(obj, "to_dict", None)):
        return to_jsonable(obj.to_dict())
    if dataclasses.is_dataclass(obj):
        return {f.name: to_jsonable(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    return obj


#: Packages whose versions are stored with every result (the ones that change its numbers).
_VERSIONED = ("rankdyn", "jax", "jaxlib", "equinox", "optimistix", "lineax", "optax", "numpy", "scipy")


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``; the platform's processor string elsewhere): recorded
    next to every speed figure and part of the chunk-autotune cache key, since machines differ."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def package_version(name: str) -> str:
    """The installed version of ``name`` from the package metadata ("unknown" if not installed).

    Read from ``importlib.metadata`` so that no rankdyn module imports the package itself.
    """
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return "unknown"


def _rankdyn_version() -> str:
    from .._version import __version__

    return __version__


def versions() -> dict[str, str]:
    """Versions of the packages that determine a result's numbers."""
    return {name: package_version(name) for name in _VERSIONED}


@functools.lru_cache(maxsize=1)
def source_digest() -> str:
    """SHA-256 of the files of the rankdyn package that runs (each file's path in the package and
    its bytes, in path order; no ``__pycache__``): which source made a result, finer than the
    version (two checkouts of one commit agree; any edit changes it). The test suite reuses a
    ``rankdyn reproduce --quick`` result only when it names this digest."""
    root = Path(__file__).resolve().parents[1]
    files = sorted(p for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
    digest = hashlib.sha256()
    for f in files:
        data = f.read_bytes()
        digest.update(f"{f.relative_to(root).as_posix()}\0{len(data)}\0".encode() + data)
    return digest.hexdigest()


def provenance() -> dict:
    """Versions, device and time: stored next to every result."""
    import jax

    return {
        "rankdyn": _rankdyn_version(),
        # The package's files (`source_digest`): results from two sources differ here.
        "source": source_digest(),
        "versions": versions(),
        "jax": jax.__version__,
        "backend": jax.default_backend(),
        "devices": [str(d) for d in jax.devices()],
        "x64": bool(jax.config.jax_enable_x64),
        # The compiler flags of the process (the CLI's --quick adds an optimisation level).
        "xla_flags": os.environ.get("XLA_FLAGS", ""),
        # The persistent compilation cache in effect (`rankdyn reproduce` sets one by default).
        "compile_cache": jax.config.jax_compilation_cache_dir or None,
        # Its state when the command started (set by `rankdyn reproduce`): cold or warm.
        "compile_cache_state": os.environ.get("RANKDYN_COMPILE_CACHE_STATE") or None,
        "cpu": cpu_model(),
        "python": platform.python_version(),
        "machine": platform.machine(),
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }


#: Errors of a write the user can fix (space, quota, permissions), with the fix to suggest.
_USER_WRITE_ERRORS = {
    errno.ENOSPC: "free some space or choose another output folder",
    errno.EDQUOT: "free some space or choose another output folder",
    errno.EFBIG: "raise the file-size limit (ulimit -f) or choose another output folder",
    errno.EACCES: "choose a folder you can write to",
    errno.EPERM: "choose a folder you can write to",
    errno.EROFS: "choose a folder on a writable file system",
}

#: Interrupt deferral: a Ctrl-C handler (the CLI's) calls `when_no_write` so that it does not stop
#: the process halfway through a write; the deferred action runs when the write is done.
_writes = {"depth": 0, "pending": None}


def when_no_write(action: Callable[[], None]) -> None:
    """Run ``action`` now, or, if an atomic write is in progress, right after it finishes."""
    if _writes["depth"]:
        _writes["pending"] = action
    else:
        action()


def _file_mode() -> int:
    """The mode ``open()`` gives a new file: 0o666 minus the process umask."""
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


def _write_error(path: Path, err: OSError) -> Exception:
    fix = _USER_WRITE_ERRORS.get(err.errno)
    if fix is None:
        return err
    return UsageError(
        f"cannot write {str(path)!r}: {err.strerror or os.strerror(err.errno)}; {fix} "
        "(nothing half-written was left; files already complete were kept)."
    )


@contextlib.contextmanager
def atomic_path(path, *, fsync: bool = False) -> Iterator[Path]:
    """A temp path next to ``path``; when the block succeeds it is renamed to ``path``.

    The block writes the temp file (by name: for writers that need a path, e.g. netCDF). On any
    error the temp file is removed. Parent folders are created.

    Raises:
        UsageError: the disk is full, the quota exceeded or the folder not writable.
    """
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        os.close(fd)
    except OSError as err:
        raise _write_error(path, err) from None
    tmp = Path(name)
    _writes["depth"] += 1
    try:
        yield tmp
        if fsync:
            with open(tmp, "rb") as f:
                os.fsync(f.fileno())
        os.chmod(tmp, _file_mode())
        os.replace(tmp, path)
        note_written(path)  # part of the result being recorded (rankdyn._run._result_files)
    except BaseException as err:
        with contextlib.suppress(OSError):
            tmp.unlink()
        if isinstance(err, OSError) and err.errno in _USER_WRITE_ERRORS:
            raise _write_error(path, err) from None
        raise
    finally:
        _writes["depth"] -= 1
        pending = _writes["pending"]
        if pending is not None and not _writes["depth"]:
            _writes["pending"] = None
            pending()


def atomic_write(path, write: Callable, *, binary: bool = True, fsync: bool = False) -> Path:
    """Write ``path`` atomically: ``write(f)`` on an open temp file, then rename (`atomic_path`)."""
    path = Path(path)
    with atomic_path(path, fsync=fsync) as tmp, open(tmp, "wb" if binary else "w") as f:
        write(f)
    return path


def savez(path, arrays: dict, *, fsync: bool = False) -> Path:
    """``np.savez`` of ``arrays`` to ``path``, atomically (no corrupt zip after a full disk)."""
    return atomic_write(path, lambda f: np.savez(f, **arrays), fsync=fsync)


def savefig(fig, path, **kwargs) -> Path:
    """``fig.savefig(path, **kwargs)``, atomically (the format from the file's suffix)."""
    path = Path(path)
    return atomic_write(path, lambda f: fig.savefig(f, format=path.suffix.lstrip(".") or "png", **kwargs))


def write_json(path, obj) -> Path:
    """Write ``obj`` as indented JSON atomically (temp file + rename), creating parent folders.

    Streamed into the file (``json.dump``, the same text as ``json.dumps``): the whole text, and
    the list of its pieces that ``json.dumps`` joins, held a few hundred bytes per number, which
    at 10,000 saved layers was the largest part of a run's peak memory that grew with depth.
    """

    def write(f):
        # Arrays are converted one at a time, as the encoder reaches them (``default``): their
        # Python lists (32 bytes a number) are not all held at once. The text is to_jsonable's.
        json.dump(_arrays_deferred(obj), f, indent=1, default=to_jsonable)
        f.write("\n")

    return atomic_write(path, write, binary=False)


def _arrays_deferred(obj):
    """`to_jsonable` of ``obj``, except that arrays of one or more dimensions are left as they are,
    for the JSON encoder's ``default`` (`to_jsonable`) to convert when it writes them."""
    if isinstance(obj, Mapping):
        return {str(k): _arrays_deferred(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_arrays_deferred(v) for v in obj]
    if (
        hasattr(obj, "__array__")
        and not isinstance(obj, (str, bytes, np.generic, type))
        and np.ndim(obj) >= 1
    ):
        return obj
    return to_jsonable(obj)


class CompileTimer:
    """Context manager measuring wall time and the part of it JAX spent tracing and compiling.

    Uses ``jax.monitoring`` duration events, so compile time is measured inside the real call
    (same shapes, no separate warm-up run). ``run_s = total_s - compile_s``; ``compiles``
    counts the XLA programs built (one ``backend_compile`` event each, eager helpers included).
    """

    _EVENTS = (
        "/jax/core/compile/jaxpr_trace_duration",
        "/jax/core/compile/jaxpr_to_mlir_module_duration",
        "/jax/core/compile/backend_compile_duration",
    )
    _active: list = []
    _registered = False

    def __enter__(self):
        import time

        import jax

        if not CompileTimer._registered:
            jax.monitoring.register_event_duration_secs_listener(CompileTimer._listen)
            CompileTimer._registered = True
        self.compile_s = 0.0
        self.compiles = 0
        self._t0 = time.perf_counter()
        CompileTimer._active.append(self)
        return self

    def __exit__(self, *exc):
        import time

        self.total_s = time.perf_counter() - self._t0
        self.run_s = max(self.total_s - self.compile_s, 0.0)
        CompileTimer._active.remove(self)
        return False

    @staticmethod
    def _listen(name, duration, **_):
        if name in CompileTimer._EVENTS:
            for timer in CompileTimer._active:
                timer.compile_s += duration
                timer.compiles += name.endswith("backend_compile_duration")
