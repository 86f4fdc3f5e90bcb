"""Writing results: JSON with the config, seed and versions that produced them (atomic writes)."""

from __future__ import annotations

import datetime
import json
import os
import platform
import tempfile
from pathlib import Path

import numpy as np

__all__ = ["to_jsonable", "write_json", "provenance"]


def to_jsonable(obj):
    """Convert NumPy/JAX arrays and scalars (nested in dicts/lists) to JSON types; NaN/inf -> None."""
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_jsonable(v) for v in obj]
    if hasattr(obj, "__array__") and not isinstance(obj, (str, bytes)):
        arr = np.asarray(obj)
        if arr.ndim == 0:
            return to_jsonable(arr.item())
        return [to_jsonable(v) for v in arr.tolist()]
    if isinstance(obj, float):
        return obj if np.isfinite(obj) else None
    if isinstance(obj, (np.integer,)):
        return int(obj)
    if isinstance(obj, (np.floating,)):
        return to_jsonable(float(obj))
    if isinstance(obj, (np.bool_,)):
        return bool(obj)
    return obj


#: Packages whose versions are stored with every result (the ones that change its numbers).
_VERSIONED = ("rankdyn", "jax", "jaxlib", "equinox", "optimistix", "lineax", "optax", "numpy", "scipy")


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
    from ._version import __version__

    return __version__


def versions() -> dict[str, str]:
    """Versions of the packages that determine a result's numbers."""
    return {name: package_version(name) for name in _VERSIONED}


def provenance() -> dict:
    """Versions, device and time: stored next to every result."""
    import jax

    return {
        "rankdyn": _rankdyn_version(),
        "versions": versions(),
        "jax": jax.__version__,
        "backend": jax.default_backend(),
        "devices": [str(d) for d in jax.devices()],
        "x64": bool(jax.config.jax_enable_x64),
        "python": platform.python_version(),
        "machine": platform.machine(),
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }


def write_json(path, obj) -> Path:
    """Write ``obj`` as indented JSON atomically (temp file + rename), creating parent folders."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        json.dump(to_jsonable(obj), f, indent=1)
        f.write("\n")
    os.replace(tmp, path)
    return path


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
