"""Pieces shared by the architecture readers: the embedding module and a checked tensor getter."""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Callable

import equinox as eqx
import jax
import numpy as np
from jaxtyping import Array, Float, Int

from .._errors import UsageError
from .._model._norms import LayerNorm
from ._read import CONFIG_ORIGIN, RawCheckpoint

__all__ = [
    "Embeddings",
    "Tensors",
    "config_value",
    "config_int",
    "config_eps",
    "check_layer_count",
    "SUPPORTED",
    "on_device",
]


def on_device(a: np.ndarray) -> Array:
    """A host weight as a JAX array, with `jnp.asarray`'s dtype (float64 kept only under x64).

    A transfer: `jnp.asarray` of a NumPy array compiles an identity program per shape and dtype
    (about 25 per checkpoint), `jax.device_put` compiles none; the values are the same bits."""
    return jax.device_put(a)


#: Architectures (``config.json``'s ``model_type``) that `rankdyn.checkpoints.load_checkpoint` reads.
SUPPORTED = ("bert", "gpt2", "llama", "mpnet")


class Embeddings(eqx.Module):
    r"""Token ids ``(n,)`` -> hidden state 0 ``(n, d)``: $E_{\mathrm{word}}[i] + E_{\mathrm{pos}}[o..o+n)$
    ($+ E_{\mathrm{type}}[0]$, then LayerNorm, for BERT; LayerNorm for MPNet; the word rows alone
    for Llama, whose positions enter through the rotary embeddings).

    Attributes:
        word: ``(vocab, d)``; position: ``(max_positions, d)`` or None (Llama).
        offset: the first position row used, $o$ (2 for MPNet, as RoBERTa; else 0).
        token_type: ``(d,)`` the type-0 row (BERT, single sentences), or None (GPT-2).
        norm: the embedding `LayerNorm` (BERT), or None (GPT-2).
    """

    word: Float[Array, "vocab d"]
    position: Float[Array, "positions d"] | None
    token_type: Float[Array, " d"] | None
    norm: LayerNorm | None
    offset: int = eqx.field(static=True, default=0)

    def __call__(self, ids: Int[Array, " n"]) -> Float[Array, "n d"]:
        x = self.word[ids]
        if self.position is not None:
            x = x + self.position[self.offset : self.offset + ids.shape[0]]
        if self.token_type is not None:
            x = x + self.token_type[None, :]
        if self.norm is not None:
            x, _ = self.norm(x)
        return x


def _source(config: dict, name: str) -> tuple[str, str, str]:
    """``(file, key, fix)`` for a message about config key ``name``: config.json's own key, or the
    GGUF metadata key it was read from."""
    origin = config.get(CONFIG_ORIGIN) or {}
    if name in origin:
        return "the GGUF metadata", origin[name], _GGUF_FIX
    return "config.json", name, "fix config.json (or re-save the checkpoint with save_pretrained)"


#: The fix of a GGUF file whose metadata or tensors do not fit together.
_GGUF_FIX = "re-convert the file with llama.cpp's convert_hf_to_gguf.py"


@dataclasses.dataclass(frozen=True)
class _Files:
    """How messages name a checkpoint's weights, its config, the fix and a tensor (HF or GGUF words)."""

    weights: str
    config: str
    fix: str
    tensor: Callable[[str], str]


def _files(raw: RawCheckpoint) -> _Files:
    """A GGUF file has no config.json or model.safetensors, and is not re-saved with save_pretrained:
    its messages name the file, its metadata keys and its own tensor names."""
    origin = raw.config.get(CONFIG_ORIGIN) or {}
    if origin:
        from ._gguf import gguf_name

        return _Files("the GGUF file", "the GGUF metadata", _GGUF_FIX, gguf_name)
    return _Files("model.safetensors", "config.json", "re-save both with save_pretrained", lambda k: k)


def config_value(config: dict, where: str, *names: str, default=None, required: bool = True):
    """The first of ``names`` present in ``config`` (``default`` if none; a UsageError if required)."""
    for name in names:
        if config.get(name) is not None:
            return config[name]
    if default is not None or not required:
        return default
    file, _, fix = _source(config, names[0])
    keys = " / ".join(_source(config, n)[1] for n in names)
    raise UsageError(f"{where}: {file} has no {keys}; {fix}.")


def _found(config: dict, names: tuple[str, ...]) -> str:
    """The key of ``names`` that ``config_value`` read (the first one present), for messages."""
    return next((n for n in names if config.get(n) is not None), names[0])


def config_int(config: dict, where: str, *names: str, default=None, minimum: int = 1) -> int:
    """An integer field of ``config.json`` (the first of ``names`` present), at least ``minimum``.

    A count or width read with ``int()`` turned 8.7 into 8 and "8" into 8, and a list or 0
    crashed later (``ZeroDivisionError``, NumPy's "need at least one array to stack"): each is
    refused here, naming the file and the key.

    Raises:
        UsageError: for a missing key without default, a bool, string, list, fraction or value
            below ``minimum``.
    """
    v = config_value(config, where, *names, default=default)
    if (
        isinstance(v, bool)
        or not isinstance(v, (int, float))
        or not math.isfinite(v)
        or int(v) != v
        or v < minimum
    ):
        what = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
        file, key, fix = _source(config, _found(config, names))
        raise UsageError(f"{where}: {file} has {key}={v!r}, which must be {what}; {fix}.")
    return int(v)


def config_eps(config: dict, where: str, name: str, default: float) -> float:
    """A normalisation epsilon of ``config.json``: a finite number >= 0 (a negative eps made the
    first LayerNorm NaN, which was then reported as "x0 contains NaN").

    Raises:
        UsageError: naming the file and the key.
    """
    v = config_value(config, where, name, default=default)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
        file, key, fix = _source(config, name)
        raise UsageError(
            f"{where}: {file} has {key}={v!r}, which must be a finite number >= 0 (e.g. {default}); {fix}."
        )
    return float(v)


class Tensors:
    """Tensors of a checkpoint by name below a prefix (e.g. ``bert.``), shape-checked and cast."""

    def __init__(self, raw: RawCheckpoint, prefix: str, dtype, implied: str):
        self.raw, self.prefix, self.dtype, self.implied = raw, prefix, np.dtype(dtype), implied

    def __call__(self, name: str, shape: tuple[int, ...]) -> np.ndarray:
        key = self.prefix + name
        where, f = f"checkpoint {self.raw.path}", _files(self.raw)
        if key not in self.raw.tensors:
            raise UsageError(
                f"{where}: {f.weights} has no tensor {f.tensor(key)!r}, which the architecture of {f.config} "
                f"needs; the weights do not belong to {f.config} ({f.fix})."
            )
        t = self.raw.tensors[key]
        if tuple(t.shape) != tuple(shape):
            raise UsageError(
                f"{where}: tensor {f.tensor(key)!r} has shape {tuple(t.shape)} but {f.config} "
                f"({self.implied}) implies {tuple(shape)}; the weights and {f.config} do not match ({f.fix})."
            )
        if not np.issubdtype(t.dtype, np.floating) and t.dtype.name != "bfloat16":
            raise UsageError(
                f"{where}: tensor {f.tensor(key)!r} has dtype {t.dtype}, expected floating-point weights."
            )
        # fp16 / bf16 weights become the run's dtype here, once.
        out = t.astype(self.dtype)
        if not np.isfinite(out).all():  # was reported downstream as "x0 contains NaN"
            at = np.unravel_index(int(np.argmin(np.isfinite(out))), out.shape)
            raise UsageError(
                f"{where}: tensor {key!r} holds NaN or infinite values (first at index "
                f"{tuple(map(int, at))}); the weights are corrupt, re-download or re-save them."
            )
        return out

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
        f = _files(raw)
        raise UsageError(
            f"checkpoint {raw.path}: {f.weights} has no tensor {f.tensor(anchor)!r}; the weights do not "
            f"belong to the model type of {f.config} ({f.fix})."
        )
    return hits[0]


def check_layer_count(t: Tensors, block: str, num_layers: int, key: str) -> None:
    """Refuse a ``config.json`` whose layer count differs from the blocks ``model.safetensors`` holds.

    ``block`` is the tensors' layer prefix below ``t.prefix`` with ``{i}`` for the index
    (``encoder.layer.{i}.``, ``h.{i}.``, ``layers.{i}.``). A config claiming fewer layers than the
    weights hold ran the smaller stack silently; one claiming more failed on the first missing tensor.

    Raises:
        UsageError: naming both counts, the key and the fix.
    """
    head, tail = block.split("{i}")
    pattern = re.compile(re.escape(t.prefix + head) + r"(\d+)" + re.escape(tail))
    found = {int(m.group(1)) for k in t.raw.tensors if (m := pattern.match(k))}
    if found != set(range(num_layers)):
        gaps = "" if found == set(range(len(found))) else f" (indices {sorted(found)})"
        f, key = _files(t.raw), _source(t.raw.config, key)[1]
        raise UsageError(
            f"checkpoint {t.raw.path}: {f.config} has {key}={num_layers} but {f.weights} holds "
            f"{len(found)} layers{gaps}; the config does not belong to these weights (set {key} to the "
            f"weights' count, or {f.fix})."
        )
