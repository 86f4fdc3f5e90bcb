"""Text inputs of a checkpoint run, decoded strictly: UTF-8 or a clear refusal.

Decoding with replacement characters would run on text that is not what the user thinks it is
(a Latin-1 file, a binary given by mistake) and tokenise the U+FFFD marks. So a byte sequence
that is not UTF-8 is refused, naming the file and the byte offset; ``tokenizer.json`` must also
be one the ``tokenizers`` library can load.
"""

from __future__ import annotations

from .._errors import UsageError

__all__ = ["utf8_text", "checked_tokenizer_json"]


def utf8_text(data: bytes, where: str) -> str:
    """``data`` decoded as UTF-8 (a leading byte-order mark dropped).

    Raises:
        UsageError: naming ``where`` and the offset of the first byte that is not UTF-8.
    """
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        raise UsageError(
            f"{where}: not UTF-8 text (byte {err.start}: {data[err.start : err.start + 4]!r}); "
            "convert it, e.g. iconv -f latin1 -t utf-8 FILE > FILE.utf8."
        ) from None


def checked_tokenizer_json(data: bytes, where: str) -> str:
    """The text of a ``tokenizer.json``, checked to load in ``tokenizers``.

    Raises:
        UsageError: not UTF-8, or a file the ``tokenizers`` library cannot load.
    """
    text = utf8_text(data, where)
    from tokenizers import Tokenizer

    try:
        Tokenizer.from_str(text)
    except Exception as err:  # noqa: BLE001 - the Rust library raises its own exception types
        raise UsageError(
            f"{where}: not a tokenizer.json that tokenizers can load ({err}); re-save it."
        ) from None
    return text
