"""A sweep's chunk files: where chunk ``i`` lives and how it is read back (or found unusable).

Shared by the store (which writes and resumes chunks) and the assembly (which reads them), so
neither imports the other's module for it.
"""

from __future__ import annotations

import sys
import zipfile
import zlib
from pathlib import Path

import numpy as np

from ._schema import SweepConfig

__all__ = ["_chunk_path", "_load_chunk"]


def _chunk_path(out: Path, i: int) -> Path:
    return out / "chunks" / f"chunk_{i:05d}.npz"


#: What reading a damaged chunk file raises: a truncated or empty zip, a bad CRC, a bad member.
_DAMAGED = (OSError, ValueError, EOFError, KeyError, zipfile.BadZipFile, zlib.error)


def _load_chunk(path: Path, cfg: SweepConfig, *, report: bool = False) -> dict[str, np.ndarray] | None:
    """The arrays of a chunk file, or None if it is missing, damaged or of another sweep.

    With ``report``, a file that exists but cannot be used is named on stderr (it is recomputed).
    """
    if not path.exists():
        return None
    try:
        with np.load(path, allow_pickle=False) as z:
            data = {k: z[k] for k in z.files}
        ok = str(data["config_hash"]) == cfg.hash
        why = "it belongs to another configuration"
        names = ("cells", "num_devices", "nonfinite", "degenerate")
        names += tuple(f"series/{k}" for k in (*cfg.per_layer, "eps_min")) + tuple(
            f"final/{k}" for k in cfg.final
        )
        missing = [k for k in names if k not in data]
        if ok and missing:
            ok, why = False, f"it is damaged (no {missing[0]!r})"
    except _DAMAGED as err:
        ok, why = False, f"it is damaged ({type(err).__name__}: {err})"
    if not ok:
        if report:
            print(f"{path}: {why}; recomputing this chunk", file=sys.stderr, flush=True)
        return None
    return data
