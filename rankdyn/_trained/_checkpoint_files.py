"""The refusals of a checkpoint that need only the names of its files: no weights, no JAX, no
NumPy. The command line calls `check_files` before anything loads; `read_checkpoint`
(`rankdyn/_trained/_read.py`) calls it first too, so both give the same messages."""

from __future__ import annotations

from pathlib import Path

from .._errors import UsageError

_WEIGHTS = "model.safetensors"
_CONFIG = "config.json"
CHECKPOINT_FIX = (
    "give a folder or .zip holding config.json and model.safetensors (as save_pretrained writes them), "
    "a Llama .gguf file, or a name that `rankdyn checkpoints` lists"
)


def check_files(path) -> None:
    """The refusals of `read_checkpoint` that need only the names of a folder's files (no weights,
    no JAX): a path that does not exist, a folder holding both ``model.safetensors`` and a ``.gguf``,
    a folder without ``config.json`` or ``model.safetensors``. A zip, a ``.gguf`` file and a folder
    of zip slices are checked when read (their names are inside the bytes).

    Raises:
        UsageError: naming the checkpoint and the fix.
    """
    from ._slices import _SLICE, _WHEEL

    p = Path(path)
    if not p.exists():
        raise UsageError(f"checkpoint {p} does not exist; {CHECKPOINT_FIX}.")
    if not p.is_dir():
        return
    names = {q.name for q in p.iterdir() if q.is_file()}
    ggufs = sorted(n for n in names if n.endswith(".gguf"))
    if ggufs and _WEIGHTS in names:  # two checkpoints in one folder: running either silently is a guess
        raise UsageError(
            f"checkpoint {p} holds both {_WEIGHTS} and {', '.join(ggufs)}: two checkpoints; pass the .gguf "
            "file itself, or a folder that holds one of them."
        )
    if _CONFIG not in names and any(_SLICE.search(n) or _WHEEL.search(n) for n in names):
        return  # the slices of a zip: assembled and checked when read
    missing = [n for n in (_CONFIG, _WEIGHTS) if n not in names]
    if missing:
        raise UsageError(f"checkpoint {p} has no {' or '.join(missing)}; {CHECKPOINT_FIX}.")
