r"""A trained checkpoint as a rankdyn layer stack (docs/theory.md#trained-checkpoints).

`load_checkpoint` reads a BERT or GPT-2 checkpoint into a `Checkpoint`; ``ckpt.layers(n)`` gives a
`SelfAttentionLayer` with the trained per-layer weights, which `rankdyn.simulate` iterates:
$X^{(t+1)} = F_{t \bmod L}(X^{(t)})$, the trained stack cycled beyond its depth $L$. The five
variants of the paper's ablation take each layer's trained weights:

| variant | layer $t$ |
|---|---|
| ``full`` | the trained block (attention, MLP, both LayerNorms, skips) |
| ``san`` | $A(X) X W_V W_O$ with every bias, no LN, no skip, no MLP |
| ``san-skip`` | $X + \mathrm{SA}(X)$ |
| ``san-ln`` | LN in place: $\mathrm{LN}_1(\mathrm{SA}(X))$ (BERT), $\mathrm{SA}(\mathrm{ln}_1 X)$ (GPT-2) |
| ``san-skip-ln`` | $\mathrm{LN}_1(X + \mathrm{SA}(X))$ (BERT), $X + \mathrm{SA}(\mathrm{ln}_1 X)$ (GPT-2) |
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
from .._model._norms import LayerNorm
from ._arch import read_bert, read_gpt2
from ._parts import SUPPORTED, Embeddings
from ._read import read_checkpoint
from ._text import check_ids, excerpts

__all__ = ["Checkpoint", "load_checkpoint", "VARIANTS"]

VARIANTS = ("full", "san", "san-skip", "san-ln", "san-skip-ln")
_READERS = {"bert": read_bert, "gpt2": read_gpt2}
#: Each architecture's own mask and norm placement (what it was trained with).
_OWN_MASK = {"bert": "complete", "gpt2": "causal"}
_PLACEMENT = {"bert": "post", "gpt2": "pre"}


@dataclasses.dataclass(frozen=True, eq=False)
class Checkpoint:
    """A trained BERT or GPT-2 checkpoint, read by `load_checkpoint`.

    Attributes:
        arch: ``"bert"`` or ``"gpt2"``; config: ``config.json`` as a dict; path; sha256 of the
            weights file; dtype of every array.
        num_layers, d, heads, max_positions, vocab_size: sizes from the config.
        activation: the MLP's activation (rankdyn name: ``gelu`` exact, ``gelu_tanh``, ``relu``).
        eps: the LayerNorms' epsilon.
        embeddings: the `Embeddings` (hidden state 0).
        blocks: per-layer `AttentionWeights` (leading axis ``num_layers``) with biases, MLP and
            the two LayerNorms of each layer.
        final_norm: GPT-2's ``ln_f`` (None for BERT), applied by `readout`.
        tokenizer_json: the text of ``tokenizer.json``, or None when the checkpoint has none.
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
    final_norm: LayerNorm | None
    tokenizer_json: str | None

    @property
    def own_mask(self) -> str:
        """The mask the model was trained with: ``complete`` (BERT) or ``causal`` (GPT-2)."""
        return _OWN_MASK[self.arch]

    @property
    def placement(self) -> str:
        """Where its LayerNorms sit: ``post`` (BERT) or ``pre`` (GPT-2)."""
        return _PLACEMENT[self.arch]

    def provenance(self) -> dict:
        """What identifies the weights in a result: path, sha256, architecture and sizes."""
        return {
            "path": self.path,
            "sha256": self.sha256,
            "arch": self.arch,
            "num_layers": self.num_layers,
            "d": self.d,
            "heads": self.heads,
            "activation": self.activation,
        }

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

        Raises:
            UsageError: for an unknown variant or mask, or ``n`` outside ``[1, max_positions]``.
        """
        if variant not in VARIANTS:
            raise UsageError(f"variant {variant!r} is unknown; expected one of {', '.join(VARIANTS)}.")
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or not 1 <= n <= self.max_positions:
            raise UsageError(
                f"n={n!r}: the checkpoint has {self.max_positions} positions (max_position_embeddings); "
                f"use 1 <= n <= {self.max_positions}."
            )
        m = self._mask(int(n), mask, window)
        w = self.blocks
        full = variant == "full"
        with_ln = full or variant.endswith("-ln")
        return SelfAttentionLayer(
            m,
            w.w_q,
            w.w_k,
            w.w_v,
            dqk=float(self.d // self.heads) if dqk is None else dqk,
            placement=self.placement if with_ln else "none",
            w_o=w.w_o,
            mlp=w.mlp if full else None,
            skip=full or "skip" in variant,
            precision=precision,
            b_q=w.b_q,
            b_k=w.b_k,
            b_v=w.b_v,
            b_o=w.b_o,
            norm_attn=w.norm_attn if with_ln else None,
            norm_mlp=w.norm_mlp if full else None,
            cycle=True,
        )

    def _mask(self, n: int, mask, window: int):
        if mask is None:
            mask = self.own_mask
        if isinstance(mask, str):
            if mask not in MASK_NAMES:
                raise UsageError(f"mask {mask!r} is unknown; expected one of {', '.join(MASK_NAMES)}.")
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
        self, ids, variant: str = "full", mask=None, *, window: int = 1
    ) -> Float[Array, "batch s n d"]:
        """All ``num_layers + 1`` hidden states as HF's ``output_hidden_states`` (eval mode): the
        embeddings, then each layer's output; for GPT-2 the last one has ``ln_f`` applied."""
        ids = self.check_ids(ids)
        layer = self.layers(ids.shape[1], variant, mask, window=window)
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
            raise UsageError(
                f"checkpoint {self.path} has no tokenizer.json; tokenise yourself and pass ids (--input-ids)."
            )
        if not 1 <= n <= self.max_positions:
            raise UsageError(
                f"n={n}: the checkpoint has {self.max_positions} positions (max_position_embeddings); "
                f"use at most {self.max_positions}."
            )
        if batch < 1:
            raise UsageError(f"batch={batch}: ask for at least one excerpt.")
        return excerpts(self.tokenizer_json, text, n, batch, self._specials(), where)

    def _specials(self):
        if self.arch != "bert":
            return None
        from tokenizers import Tokenizer

        tok = Tokenizer.from_str(self.tokenizer_json)
        ids = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
        if None in ids:
            raise UsageError(f"checkpoint {self.path}: tokenizer.json has no [CLS] or [SEP] token.")
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
    """Read a BERT or GPT-2 checkpoint: a folder or ``.zip`` with ``config.json`` and ``model.safetensors``.

    Arguments:
        path: the folder or zip (``tokenizer.json`` next to them is read too, for `Checkpoint.tokenize_text`).
        dtype: the arrays' dtype; default JAX's default float (float32, or float64 with x64).
            fp16 and bf16 weights are converted to it.

    Returns:
        A `Checkpoint`.

    Raises:
        UsageError: for a missing or corrupt file, an unsupported ``model_type`` (the message
            lists the supported ones), or weights whose shapes do not match ``config.json``.
    """
    raw = read_checkpoint(path)
    arch = raw.config.get("model_type")
    if arch not in SUPPORTED:
        raise UsageError(
            f"checkpoint {raw.path}: model_type {arch!r} is not supported; supported architectures: "
            f"{', '.join(SUPPORTED)}."
        )
    dt = jnp.zeros((), dtype if dtype is not None else float).dtype
    parts = _READERS[arch](raw, dt)
    return Checkpoint(
        arch=arch,
        config=raw.config,
        path=raw.path,
        sha256=raw.sha256,
        dtype=dt,
        **parts.pop("sizes"),
        **parts,
        tokenizer_json=raw.tokenizer_json,
    )
