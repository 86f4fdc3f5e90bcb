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

__all__ = ["_chunk_path", "_load_chunk", "chunk_problem"]


def _chunk_path(out: Path, i: int) -> Path:
    return out / "chunks" / f"chunk_{i:05d}.npz"


#: What reading a damaged chunk file raises: a truncated or empty zip, a bad CRC, a bad member.
_DAMAGED = (OSError, ValueError, EOFError, KeyError, zipfile.BadZipFile, zlib.error)


def chunk_problem(path: Path, cfg: SweepConfig, cells) -> tuple[dict[str, np.ndarray] | None, str]:
    """``(arrays, "")`` for a usable chunk file, else ``(None, why)``: ``"missing"``, or why the
    file on disk cannot be used (damaged, of another configuration, or holding other cells).

    ``cells`` are the flat cell indices the plan gives this chunk: a file is placed by the cells
    it holds, never by its name alone (a copy of chunk 0 saved as chunk 1 filled chunk 0's cells
    twice and left chunk 1's all NaN, with exit 0).
    """
    if not path.exists():
        return None, "missing"
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
        held = np.asarray(data.get("cells", [])).ravel().tolist()
        if ok and held != [int(c) for c in cells]:
            shown = lambda c: str(c[:6])[:-1] + (", ...]" if len(c) > 6 else "]")  # noqa: E731
            ok, why = (
                False,
                f"it holds cells {shown(held)}, not this chunk's {shown(list(cells))} (a copied file?)",
            )
    except _DAMAGED as err:
        ok, why = False, f"it is damaged ({type(err).__name__}: {err})"
    return (data, "") if ok else (None, why)


def _load_chunk(path: Path, cfg: SweepConfig, cells, *, report: bool = False) -> dict[str, np.ndarray] | None:
    """The arrays of a chunk file, or None if it is missing, damaged, of another sweep or holds
    other ``cells`` than the plan's for this chunk (`chunk_problem`).

    With ``report``, a file that exists but cannot be used is named on stderr (it is recomputed).
    """
    data, why = chunk_problem(path, cfg, cells)
    if data is None and why != "missing" and report:
        print(f"{path}: {why}; recomputing this chunk", file=sys.stderr, flush=True)
    return data
