r"""The safetensors header, validated as the format specifies (before any tensor is read).

A safetensors file is ``N`` (8 bytes, little-endian u64), a JSON object of ``N`` bytes, then the
byte buffer. The reference library (``safetensors``) refuses a header unless:

- every key is unique (JSON itself allows a repeated key; the later one would win silently);
- ``__metadata__``, if present, maps strings to strings;
- each tensor entry has exactly ``dtype`` (a known name), ``shape`` (non-negative integers) and
  ``data_offsets`` ``[begin, end]`` (integers; ``2.0`` is not one);
- sorted by ``begin``, the tensors tile the buffer with no gap and no overlap: the first begins
  at 0, each begins where the previous ended, and the last ends at the buffer's end (no trailing
  bytes);
- ``end - begin`` is the tensor's size, $\text{itemsize} \cdot \prod \text{shape}$.
"""

from __future__ import annotations

import json
import math

from .._errors import UsageError

__all__ = ["checked_header"]


def _unique_keys(pairs):
    out = {}
    for k, v in pairs:
        if k in out:
            raise UsageError(f"the key {k!r} appears twice")
        out[k] = v
    return out


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def checked_header(raw: bytes, body_size: int, itemsizes: dict, where: str) -> dict:
    """The header's tensor entries, after every check the format states (module docstring).

    Arguments:
        raw: the header's bytes.
        body_size: the size of the byte buffer after the header.
        itemsizes: dtype name -> bytes per element (the dtypes rankdyn reads).
        where: the file, for the messages.

    Returns:
        name -> ``{"dtype", "shape", "data_offsets"}`` (``__metadata__`` left out).

    Raises:
        UsageError: naming the file, the tensor and what is wrong.
    """
    bad = f"{where}: not a valid safetensors file"
    try:
        header = json.loads(raw, object_pairs_hook=_unique_keys)
    except (UnicodeDecodeError, ValueError) as err:
        raise UsageError(f"{bad} (header: {err}); re-save it.") from None
    if not isinstance(header, dict):
        raise UsageError(f"{bad} (header is not a JSON object); re-save it.")
    meta = header.pop("__metadata__", {})
    if not isinstance(meta, dict) or not all(isinstance(v, str) for v in meta.values()):
        raise UsageError(f"{bad} (__metadata__ must map strings to strings); re-save it.")
    spans = []
    for name, info in header.items():
        what = f"{bad} (tensor {name!r}"
        if not isinstance(info, dict) or set(info) != {"dtype", "shape", "data_offsets"}:
            raise UsageError(f"{what}: an entry needs exactly dtype, shape and data_offsets); re-save it.")
        if info["dtype"] not in itemsizes:
            raise UsageError(f"{what}: dtype {info['dtype']!r} is not one of {', '.join(itemsizes)}).")
        shape, offsets = info["shape"], info["data_offsets"]
        if not isinstance(shape, list) or not all(_is_int(s) and s >= 0 for s in shape):
            raise UsageError(f"{what}: shape {shape!r} is not a list of non-negative integers); re-save it.")
        if not (isinstance(offsets, list) and len(offsets) == 2 and all(_is_int(o) for o in offsets)):
            raise UsageError(f"{what}: data_offsets {offsets!r} are not two integers); re-save it.")
        if offsets[1] - offsets[0] != itemsizes[info["dtype"]] * math.prod(shape):
            raise UsageError(
                f"{what}: data_offsets {offsets} hold {offsets[1] - offsets[0]} bytes, shape {shape} "
                f"needs {itemsizes[info['dtype']] * math.prod(shape)}); re-download or re-save it."
            )
        spans.append((offsets[0], offsets[1], name))
    end = 0
    for begin, stop, name in sorted(spans):
        if begin != end:
            kind = "overlaps the previous tensor" if begin < end else f"leaves a gap at byte {end}"
            raise UsageError(f"{bad} (tensor {name!r} at bytes {begin}..{stop} {kind}); re-save it.")
        end = stop
    if end != body_size:
        raise UsageError(
            f"{bad} (the tensors end at byte {end} of a {body_size}-byte buffer: "
            f"{'trailing bytes' if end < body_size else 'truncated'}); re-download or re-save it."
        )
    return header
