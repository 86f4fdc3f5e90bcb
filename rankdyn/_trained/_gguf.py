r"""Reading a GGUF file (llama.cpp's format) as a Llama-family `RawCheckpoint` (docs/theory.md#modern-blocks).

`_Reader` parses the file (the GGUF layout: header, metadata, tensor infos, aligned data) and the
``gguf`` package dequantises its tensors; this module maps the metadata
to HF config names and the tensor names to HF's (``blk.{i}.attn_q`` -> ``layers.{i}.self_attn.q_proj``),
so that one reader (`rankdyn._trained._modern.read_llama`) serves GGUF and safetensors.

- llama.cpp's converter permutes the rows of ``attn_q`` and ``attn_k`` of each head from HF's
  half-split rotary layout to interleaved pairs; the inverse permutation is applied here
  (as HF's GGUF loader does), so the rotation is HF's ``rotate_half`` on both paths.
- Quantised tensors are dequantised to float32 (exact for the block formats below: a float16
  scale times a small integer, plus a float16 minimum) and then cast to the run's dtype.
  Only the GGML types in `GGML_TYPES` are read; any other is refused by name.
- The tokenizer is rebuilt from ``tokenizer.ggml.*`` (byte-level BPE, as ``tokenizer.json``).
"""

from __future__ import annotations

import collections
import hashlib
import json
import struct
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from .._errors import UsageError
from ._read import CONFIG_ORIGIN, RawCheckpoint

__all__ = ["read_gguf", "GGML_TYPES", "gguf_name", "gguf_tokenizer", "open_gguf"]

#: GGML tensor types that are read (SmolLM2-135M-Instruct.Q4_1 uses F32, Q4_1 and Q8_0).
GGML_TYPES = ("F32", "F16", "BF16", "Q4_0", "Q4_1", "Q8_0")
#: GGUF metadata (after the ``llama.`` prefix) -> HF config name.
_CONFIG = {
    "embedding_length": "hidden_size",
    "block_count": "num_hidden_layers",
    "attention.head_count": "num_attention_heads",
    "attention.head_count_kv": "num_key_value_heads",
    "feed_forward_length": "intermediate_size",
    "context_length": "max_position_embeddings",
    "attention.layer_norm_rms_epsilon": "rms_norm_eps",
    "rope.freq_base": "rope_theta",
    "vocab_size": "vocab_size",
}
_BLOCK = {
    "attn_norm": "input_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_norm": "post_attention_layernorm",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}
_TOP = {
    "token_embd.weight": "embed_tokens.weight",
    "output_norm.weight": "norm.weight",
    "output.weight": "lm_head.weight",
}
#: Pre-tokenizers whose rule is known: byte-level GPT-2 splitting, SmolLM's with single digits.
_PRE = ("gpt2", "smollm", "default")


#: GGUF metadata value types (the format's numbering): scalars, and 8 string, 9 array.
_SCALARS = {
    0: "<u1",
    1: "<i1",
    2: "<u2",
    3: "<i2",
    4: "<u4",
    5: "<i4",
    6: "<f4",
    7: "?",
    10: "<u8",
    11: "<i8",
    12: "<f8",
}
#: Unquantised tensor types read as numbers (the others as bytes, `gguf.quants` dequantises them).
_PLAIN = {"F16": np.float16, "F32": np.float32, "F64": np.float64, "I8": np.int8, "I16": np.int16}
_PLAIN |= {"I32": np.int32, "I64": np.int64}


class _Tensor(NamedTuple):
    name: str
    tensor_type: Any  # gguf.GGMLQuantizationType
    data: np.ndarray


class _Reader:
    """A little-endian GGUF file (versions 2 and 3): ``fields`` (key -> Python value, as
    ``gguf.GGUFReader``'s ``contents()``) and ``tensors`` (views of a read-only memory map).

    The metadata is read with `struct` from one `memoryview`: ``gguf.GGUFReader`` makes a memory
    map slice per string, most of SmolLM2's loading time for its 100k tokenizer strings
    (measured: benchmarks/HISTORY.md).

    Raises:
        UsageError, ValueError, struct.error: a file that is not GGUF, truncated or corrupt
            (`read_gguf` turns each into one message naming the file).
    """

    def __init__(self, path):
        import gguf

        data = np.memmap(path, mode="r")
        self._mv, self._o = memoryview(data), 4
        if self._mv[:4].tobytes() != b"GGUF":
            raise UsageError("GGUF magic invalid")
        version, num_tensors, num_kv = self._unpack("<I"), self._unpack("<Q"), self._unpack("<Q")
        if version not in (2, 3):
            raise UsageError(f"GGUF version {version} (big-endian or unknown); versions 2 and 3 are read")
        self.fields = {}
        for _ in range(num_kv):
            key = self._string()
            if key in self.fields:
                raise UsageError(f"duplicate metadata key {key!r}")
            self.fields[key] = self._value(self._unpack("<I"))
        infos = []
        for _ in range(num_tensors):
            name = self._string()
            dims = [self._unpack("<Q") for _ in range(self._unpack("<I"))]
            infos.append((name, dims, gguf.GGMLQuantizationType(self._unpack("<I")), self._unpack("<Q")))
        align = self.fields.get("general.alignment", 32)
        start = -(-self._o // align) * align
        self.tensors = []
        for name, dims, kind, offset in infos:
            shape, n = tuple(reversed(dims)), int(np.prod(dims))
            if kind.name in _PLAIN:
                arr = np.frombuffer(data, _PLAIN[kind.name], n, start + offset)
            else:
                block, size = gguf.GGML_QUANT_SIZES[kind]
                shape = gguf.quants.quant_shape_to_byte_shape(shape, kind)
                arr = np.frombuffer(data, np.uint8, n * size // block, start + offset)
            self.tensors.append(_Tensor(name, kind, arr.reshape(shape)))
        if len({t.name for t in self.tensors}) != len(self.tensors):
            raise UsageError("duplicate tensor names")

    def _unpack(self, fmt: str):
        (v,) = struct.unpack_from(fmt, self._mv, self._o)
        self._o += struct.calcsize(fmt)
        return v

    def _string(self) -> str:
        n = self._unpack("<Q")
        if self._o + n > len(self._mv):
            raise UsageError("string past the end of the file")
        self._o += n
        return self._mv[self._o - n : self._o].tobytes().decode("utf-8")

    def _strings(self, count: int) -> list:
        """``count`` strings as `_string` reads them, one after the other."""
        mv, o, end, out = self._mv, self._o, len(self._mv), []
        for _ in range(count):
            (n,) = struct.unpack_from("<Q", mv, o)
            o += 8
            if o + n > end:
                raise UsageError("string past the end of the file")
            out.append(mv[o : o + n].tobytes().decode("utf-8"))
            o += n
        self._o = o
        return out

    def _value(self, kind: int):
        if kind == 8:
            return self._string()
        if kind == 9:
            item, count = self._unpack("<I"), self._unpack("<Q")
            if item in _SCALARS:  # numbers: one frombuffer
                arr = np.frombuffer(self._mv, _SCALARS[item], count, self._o)
                self._o += arr.nbytes
                return arr.tolist()
            if item == 8:  # strings (a tokenizer's 100k): one loop, not three method calls each
                return self._strings(count)
            return [self._value(item) for _ in range(count)]
        if kind not in _SCALARS:
            raise UsageError(f"unknown GGUF metadata type {kind}")
        arr = np.frombuffer(self._mv, _SCALARS[kind], 1, self._o)
        self._o += arr.nbytes
        return arr[0].item()


def _field(reader, key: str, where: str, required: bool = True):
    value = reader.fields.get(key)
    if value is None and required:
        raise UsageError(
            f"{where}: GGUF metadata has no key {key!r}; the file is incomplete (re-download it)."
        )
    return value


def _hf_name(name: str) -> str | None:
    if name in _TOP:
        return _TOP[name]
    parts = name.split(".")
    if len(parts) == 4 and parts[0] == "blk" and parts[2] in _BLOCK and parts[3] == "weight":
        return f"layers.{parts[1]}.{_BLOCK[parts[2]]}.weight"
    return None


def gguf_name(hf: str) -> str:
    """The GGUF tensor name of an HF name (`_hf_name` inverted), for messages about a GGUF file."""
    if hf in _TOP.values():
        return next(k for k, v in _TOP.items() if v == hf)
    parts = hf.split(".", 2)
    if len(parts) == 3 and parts[0] == "layers":
        block = parts[2].removesuffix(".weight")
        short = next((k for k, v in _BLOCK.items() if v == block), None)
        if short is not None:
            return f"blk.{parts[1]}.{short}.weight"
    return hf


def _unpermute(w: np.ndarray, heads: int) -> np.ndarray:
    """Undo llama.cpp's per-head row permutation of ``attn_q`` / ``attn_k`` (interleaved -> halves)."""
    dim = w.shape[0] // heads // 2
    return w.reshape(heads, dim, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def gguf_tokenizer(reader, where: str) -> tuple[str | None, str]:
    """``(tokenizer.json text, "")`` built from the GGUF tokenizer metadata, or ``(None, why not)``:
    a rule rankdyn does not know, or metadata the ``tokenizers`` package cannot build (a merge that is
    not two tokens, a token out of the vocabulary). Token ids (``--input-ids``) need no tokenizer, so
    such a file is refused only when text is tokenised."""
    model = _field(reader, "tokenizer.ggml.model", where, required=False)
    if model != "gpt2":
        return None, f"GGUF tokenizer.ggml.model is {model!r} (rankdyn rebuilds 'gpt2', byte-level BPE)"
    pre = _field(reader, "tokenizer.ggml.pre", where, required=False) or "default"
    if pre not in _PRE:
        return None, f"GGUF tokenizer.ggml.pre is {pre!r} (rankdyn knows {', '.join(_PRE)})"
    try:
        return _tokenizer_json(reader, where, pre), ""
    except UsageError as err:
        return None, str(err).removeprefix(f"{where}: ")
    except Exception as err:  # the tokenizers package raises plain Exception and TypeError alike
        why = str(err).splitlines()[0] if str(err) else type(err).__name__
        return None, f"GGUF tokenizer.ggml.* metadata cannot be built into a tokenizer ({why})"


def _tokenizer_json(reader, where: str, pre: str) -> str:
    """A ``tokenizer.json`` text built from the GGUF tokenizer metadata (byte-level BPE)."""
    from tokenizers import Tokenizer, decoders, pre_tokenizers
    from tokenizers.models import BPE

    tokens = _field(reader, "tokenizer.ggml.tokens", where)
    merges = _field(reader, "tokenizer.ggml.merges", where)
    bad = next((i for i, m in enumerate(merges) if not isinstance(m, str) or " " not in m), None)
    if bad is not None:
        raise UsageError(
            f"{where}: GGUF tokenizer.ggml.merges[{bad}] is {merges[bad]!r}, not two tokens separated by "
            "a space"
        )
    merges = [tuple(m.split(" ", 1)) for m in merges]
    tok = Tokenizer(BPE({t: i for i, t in enumerate(tokens)}, merges, fuse_unk=False))
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    if pre == "smollm":
        tok.pre_tokenizer = pre_tokenizers.Sequence(
            [pre_tokenizers.Digits(individual_digits=True), byte_level]
        )
    else:
        tok.pre_tokenizer = byte_level
    tok.decoder = decoders.ByteLevel()
    types = _field(reader, "tokenizer.ggml.token_type", where, required=False)
    if types is not None:  # type 3 = control tokens (<|im_start|> ...): matched whole, never split
        from tokenizers import AddedToken

        tok.add_special_tokens([AddedToken(t, special=True) for t, k in zip(tokens, types) if k == 3])
    return tok.to_str()


def open_gguf(path, where: str) -> _Reader:
    """A `_Reader` of ``path``: the metadata is parsed, the tensors are mapped, not read."""
    try:
        return _Reader(path)
    except (ValueError, KeyError, IndexError, OSError, UnicodeDecodeError, struct.error) as err:
        raise UsageError(
            f"{where}: not a readable GGUF file (truncated or corrupt: {err}); re-download it."
        ) from None


def read_gguf(path: Path) -> RawCheckpoint:
    """Read a Llama-architecture ``.gguf`` file: an HF-style config, dequantised tensors, tokenizer.

    Raises:
        UsageError: for an unreadable or truncated file, an architecture other than ``llama``, a
            GGML type outside `GGML_TYPES`, an unknown tensor, or a rope scaling rule; the
            message names the file and the key or tensor.
    """
    import gguf

    where = f"checkpoint {path}"
    reader = open_gguf(path, where)
    arch = _field(reader, "general.architecture", where)
    if arch != "llama":
        raise UsageError(
            f"{where}: GGUF general.architecture is {arch!r}; rankdyn reads GGUF files of architecture "
            "'llama'."
        )
    # CONFIG_ORIGIN: the config readers' messages name the GGUF key, not a config.json there is not.
    origin = {name: f"llama.{key}" for key, name in _CONFIG.items()}
    origin["head_dim"] = "llama.rope.dimension_count"
    config = {"model_type": "llama", "hidden_act": "silu", CONFIG_ORIGIN: origin}
    for key, name in _CONFIG.items():
        value = _field(reader, f"llama.{key}", where, required=name not in ("vocab_size", "rope_theta"))
        if value is not None:
            config[name] = value
    scaling = _field(reader, "llama.rope.scaling.type", where, required=False)
    if scaling not in (None, "none"):
        raise UsageError(
            f"{where}: GGUF key 'llama.rope.scaling.type' is {scaling!r}; rankdyn implements only the "
            "default rotary rule (no scaling)."
        )
    rope_dim = _field(reader, "llama.rope.dimension_count", where, required=False)
    if rope_dim is not None:
        config["head_dim"] = rope_dim
    heads, kv = (
        config["num_attention_heads"],
        config.get("num_key_value_heads", config["num_attention_heads"]),
    )
    if not (isinstance(heads, int) and isinstance(kv, int) and heads > 0 and kv > 0 and heads % kv == 0):
        raise UsageError(
            f"{where}: GGUF keys 'llama.attention.head_count' {heads!r} and 'llama.attention.head_count_kv' "
            f"{kv!r} are inconsistent (the first must be a positive multiple of the second)."
        )
    tensors, types = {}, collections.Counter()
    for t in reader.tensors:
        kind = t.tensor_type.name
        if kind not in GGML_TYPES:
            raise UsageError(
                f"{where}: tensor {t.name!r} has GGML type {kind}, which rankdyn does not dequantise; "
                f"supported: {', '.join(GGML_TYPES)}."
            )
        name = _hf_name(t.name)
        if name is None:
            raise UsageError(
                f"{where}: tensor {t.name!r} is not part of the llama architecture rankdyn reads."
            )
        try:
            w = np.asarray(gguf.quants.dequantize(t.data, t.tensor_type), dtype=np.float32)
        except (ValueError, NotImplementedError) as err:
            raise UsageError(
                f"{where}: tensor {t.name!r} cannot be dequantised ({err}); re-download it."
            ) from None
        if name.endswith("q_proj.weight"):
            w = _unpermute(w, heads)
        elif name.endswith("k_proj.weight"):
            w = _unpermute(w, kv)
        tensors[name] = w
        types[kind] += 1
    if "embed_tokens.weight" not in tensors:  # the vocabulary's size is read from it
        raise UsageError(
            f"{where}: the GGUF file has no tensor 'token_embd.weight' (the token embeddings); re-convert "
            "the file with llama.cpp's convert_hf_to_gguf.py."
        )
    config.setdefault("vocab_size", int(tensors["embed_tokens.weight"].shape[0]))
    config["tie_word_embeddings"] = "lm_head.weight" not in tensors
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 24), b""):
            digest.update(block)
    return RawCheckpoint(
        path=str(path),
        config=json.loads(json.dumps(config)),
        tensors=tensors,
        sha256=digest.hexdigest(),
        tokenizer_json=gguf_tokenizer(reader, where)[0],
        quantization=dict(sorted(types.items())),
    )
