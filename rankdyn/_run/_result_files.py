"""The result manifest of a single-result command: which files of a folder make up its result.

Each file is written atomically (`rankdyn._run._io.atomic_path`), but a result is several files
(``metrics.json``, figures, arrays). A full disk or a signal between two of them would leave the
new ``metrics.json`` next to the previous run's figure. So the single-result commands (simulate,
flow, equilibria, continue, lyapunov) record every file they write, and write
``rankdyn-result.json`` last: the names of this result's files and their SHA-256. Readers
(``rankdyn plot``) trust only what it lists, with matching hashes. (The sweep's own
``manifest.json`` is a different file, with its own rules.)

A reused ``--out``: once the new manifest is written, the files the previous manifest listed and
this run did not write are removed (a stale ``per_trajectory.npz`` or ``states.npy`` from an
earlier run). Files that no manifest lists are never touched: rankdyn did not write them.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections.abc import Iterator
from pathlib import Path

from .._errors import UsageError
from ._io import _recorded, write_json

__all__ = ["RESULT_MANIFEST", "recording_result", "result_files", "verified_result_file"]

#: The manifest's file name (not ``manifest.json``: that is the sweep's).
RESULT_MANIFEST = "rankdyn-result.json"


def file_sha256(path: Path) -> str:
    """The sha256 of a file, read in 1 MiB blocks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def result_files(folder) -> dict[str, str] | None:
    """The files ``folder``'s manifest lists (name -> SHA-256), or None without a manifest.

    Raises:
        UsageError: the manifest exists but is not a valid one.
    """
    manifest = _manifest(folder)
    return None if manifest is None else manifest[1]


def _manifest(folder) -> tuple[str, dict[str, str]] | None:
    """``(command, files)`` of ``folder``'s manifest, or None without one (see `result_files`)."""
    path = Path(folder) / RESULT_MANIFEST
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        files, command = data["files"], str(data.get("command", ""))
        ok = isinstance(files, dict) and all(isinstance(v, str) for v in files.values())
    except (OSError, ValueError, KeyError, TypeError):
        ok = False
    if not ok:
        raise UsageError(
            f"{path}: not a valid rankdyn result manifest; re-run the command that wrote {folder}."
        )
    # Only plain names inside the folder: a manifest never points elsewhere.
    return command, {k: v for k, v in files.items() if Path(k).name == k and k not in (".", "..")}


@contextlib.contextmanager
def recording_result(folder, command: str) -> Iterator[None]:
    """Record the files written in ``folder`` during the block; on success write the manifest.

    Then remove the files the previous manifest listed that this run did not write. On an error
    or an interrupt no manifest is written: the previous one stays, and its hashes no longer
    match the files that were replaced, so a reader refuses the folder instead of mixing runs.
    """
    folder = Path(folder)
    try:
        previous = result_files(folder) or {}
    except UsageError:
        previous = {}  # a damaged manifest: nothing to clear from it
    _recorded["paths"] = set()
    try:
        yield
        written = sorted(p.name for p in _recorded["paths"] if p.parent == folder.absolute() and p.is_file())
    finally:
        _recorded["paths"] = None
    if not written:
        return
    files = {name: file_sha256(folder / name) for name in written}
    write_json(folder / RESULT_MANIFEST, {"command": command, "files": files})
    for name in sorted(set(previous) - set(files) - {RESULT_MANIFEST}):
        with contextlib.suppress(OSError):  # listed by the previous result: rankdyn wrote it
            (folder / name).unlink()


def verified_result_file(folder, name: str, flag: str = "DIR") -> Path:
    """``folder / name``, checked against the folder's manifest when there is one.

    Folders written before manifests existed (no ``rankdyn-result.json``) are read as they are.

    Raises:
        UsageError: the manifest does not list ``name``, or the file's hash differs (a run that
            was interrupted or hit a full disk halfway through replacing the result).
    """
    folder, manifest = Path(folder), _manifest(folder)
    path = folder / name
    if manifest is None:
        return path
    command, files = manifest
    if name not in files and command and not path.is_file():  # another command's folder
        raise UsageError(
            f"{flag} {folder} holds the result of `rankdyn {command}`, which writes no {name}; give a "
            "folder written by the command that writes it."
        )
    if name not in files:
        raise UsageError(
            f"{flag} {folder}: {name} is not part of the result listed in {RESULT_MANIFEST}; "
            "re-run the command that wrote the folder."
        )
    if not path.is_file() or file_sha256(path) != files[name]:
        raise UsageError(
            f"{flag} {folder}: {name} does not match {RESULT_MANIFEST} (a run was interrupted or ran "
            "out of space while replacing this result); re-run the command that wrote the folder."
        )
    return path
