"""The checkpoint files inside a zip: found unambiguously, size-capped, read with clear errors.

A zip may hold the files in one sub-folder (as a downloaded model folder zipped). A zip holding
two checkpoints (two ``config.json`` or two ``model.safetensors`` in different folders) is
refused with the list of what it holds: taking "the shallowest" of each would mix one model's
config with the other's weights. Encrypted members, unknown compression methods and corrupt
data are each one error naming the zip and the member. A member larger than `MAX_MEMBER_BYTES`
(uncompressed, as the zip's directory states) is refused before it is decompressed into memory.
"""

from __future__ import annotations

import posixpath
import zipfile
import zlib
from pathlib import Path

from .._errors import UsageError

__all__ = ["MAX_MEMBER_BYTES", "zip_members"]

#: Largest member read into memory: admits MPNet-base's 440 MB model.safetensors with room.
MAX_MEMBER_BYTES = 2 * 1024**3


def zip_members(
    path: Path, wanted: tuple[str, ...], fix: str, *, max_bytes: int = MAX_MEMBER_BYTES, source=None
) -> dict:
    """Name -> bytes of the ``wanted`` files of the zip ``path``, all from one folder of it.

    Arguments:
        path: the zip file.
        wanted: the file names to look for (e.g. config.json, model.safetensors, tokenizer.json).
        fix: what to give instead, appended to the messages.
        max_bytes: the largest uncompressed member read.
        source: the zip's bytes as a file object, when ``path`` names where they came from (a
            folder of slices); ``None`` reads ``path``.

    Raises:
        UsageError: not a zip, encrypted, an unknown compression method, corrupt data, a member
            over ``max_bytes``, or more than one weights file (two checkpoints) in the zip.
    """
    where = f"checkpoint {path}"
    try:
        with zipfile.ZipFile(path if source is None else source) as z:
            infos = [i for i in z.infolist() if not i.is_dir()]
            by_name = {i.filename: i for i in infos}
            # The checkpoint's folder is the one holding the weights (wanted[1]); a second such
            # folder makes the zip ambiguous. Other files named like ours elsewhere (a
            # sentence-transformers 1_Pooling/config.json) are not part of it.
            weights = [i for i in infos if posixpath.basename(i.filename) == wanted[1]]
            if len(weights) > 1:
                listing = ", ".join(i.filename for i in weights)
                raise UsageError(
                    f"{where} holds more than one checkpoint ({wanted[1]}: {listing}); "
                    "zip one checkpoint folder per file."
                )
            folder = posixpath.dirname(weights[0].filename) if weights else ""
            hits = {w: [by_name[n]] if (n := posixpath.join(folder, w)) in by_name else [] for w in wanted}
            out = {}
            for w, found in hits.items():
                if not found:
                    continue
                info = found[0]
                if info.flag_bits & 0x1:
                    raise UsageError(
                        f"{where}: {info.filename} is encrypted; unzip it yourself and give the folder."
                    )
                if info.file_size > max_bytes:
                    raise UsageError(
                        f"{where}: {info.filename} is {info.file_size / 1024**3:.1f} GiB uncompressed, over "
                        f"the {max_bytes / 1024**3:.1f} GiB read into memory; unzip it and give the folder."
                    )
                out[w] = z.read(info)
            return out
    except UsageError:
        raise
    except NotImplementedError as err:  # an unknown compression method
        raise UsageError(
            f"{where}: {err}; re-zip it with the standard deflate method, or give the folder."
        ) from None
    except RuntimeError as err:  # encrypted without the flag zipfile expects, or a password needed
        raise UsageError(f"{where}: {err}; unzip it yourself and give the folder.") from None
    except (zipfile.BadZipFile, zipfile.LargeZipFile, zlib.error, OSError, EOFError) as err:
        raise UsageError(f"{where}: not a readable folder or zip file ({err}); {fix}.") from None
