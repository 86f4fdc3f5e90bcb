"""Pieces shared by the architecture readers: the embedding module and a checked tensor getter."""

from __future__ import annotations

import equinox as eqx
import numpy as np
from jaxtyping import Array, Float, Int

from .._errors import UsageError
from .._model._norms import LayerNorm
from ._read import RawCheckpoint

__all__ = ["Embeddings", "Tensors", "config_value", "SUPPORTED"]

#: Architectures (``config.json``'s ``model_type``) that `rankdyn.checkpoints.load_checkpoint` reads.
SUPPORTED = ("bert", "gpt2")


class Embeddings(eqx.Module):
    r"""Token ids ``(n,)`` -> hidden state 0 ``(n, d)``: $E_{\mathrm{word}}[i] + E_{\mathrm{pos}}[0..n)$
    ($+ E_{\mathrm{type}}[0]$, then LayerNorm, for BERT).

    Attributes:
        word: ``(vocab, d)``; position: ``(max_positions, d)``.
        token_type: ``(d,)`` the type-0 row (BERT, single sentences), or None (GPT-2).
        norm: the embedding `LayerNorm` (BERT), or None (GPT-2).
    """

    word: Float[Array, "vocab d"]
    position: Float[Array, "positions d"]
    token_type: Float[Array, " d"] | None
    norm: LayerNorm | None

    def __call__(self, ids: Int[Array, " n"]) -> Float[Array, "n d"]:
        x = self.word[ids] + self.position[: ids.shape[0]]
        if self.token_type is not None:
            x = x + self.token_type[None, :]
        if self.norm is not None:
            x, _ = self.norm(x)
        return x


def config_value(config: dict, where: str, *names: str, default=None, required: bool = True):
    """The first of ``names`` present in ``config`` (``default`` if none; a UsageError if required)."""
    for name in names:
        if config.get(name) is not None:
            return config[name]
    if default is not None or not required:
        return default
    raise UsageError(
        f"{where}: config.json has no {' / '.join(names)}; re-save the checkpoint with its config."
    )


class Tensors:
    """Tensors of a checkpoint by name below a prefix (e.g. ``bert.``), shape-checked and cast."""

    def __init__(self, raw: RawCheckpoint, prefix: str, dtype, implied: str):
        self.raw, self.prefix, self.dtype, self.implied = raw, prefix, np.dtype(dtype), implied

    def __call__(self, name: str, shape: tuple[int, ...]) -> np.ndarray:
        key = self.prefix + name
        where = f"checkpoint {self.raw.path}"
        if key not in self.raw.tensors:
            raise UsageError(
                f"{where}: model.safetensors has no tensor {key!r}, which config.json's architecture needs; "
                "the weights do not belong to this config.json (re-save both with save_pretrained)."
            )
        t = self.raw.tensors[key]
        if tuple(t.shape) != tuple(shape):
            raise UsageError(
                f"{where}: tensor {key!r} has shape {tuple(t.shape)} but config.json ({self.implied}) "
                f"implies {tuple(shape)}; the weights and config.json do not match (re-save both with "
                "save_pretrained)."
            )
        if not np.issubdtype(t.dtype, np.floating) and t.dtype.name != "bfloat16":
            raise UsageError(f"{where}: tensor {key!r} has dtype {t.dtype}, expected floating-point weights.")
        # fp16 / bf16 weights become the run's dtype here, once.
        return t.astype(self.dtype)

    def stack(self, names: list[str], shape: tuple[int, ...]) -> np.ndarray:
        """One tensor per layer, stacked along a new leading layer axis (NumPy: reshaping the
        weights on the host avoids compiling a JAX program per transpose)."""
        return np.stack([self(n, shape) for n in names])


def find_prefix(raw: RawCheckpoint, anchor: str) -> str:
    """The prefix before the architecture's keys, found from ``anchor``.

    E.g. ``""``, ``bert.``, ``transformer.``.
    """
    hits = sorted((k[: -len(anchor)] for k in raw.tensors if k.endswith(anchor)), key=len)
    if not hits:
        raise UsageError(
            f"checkpoint {raw.path}: model.safetensors has no tensor ending in {anchor!r}; the weights do "
            "not belong to config.json's model_type (re-save both with save_pretrained)."
        )
    return hits[0]
