r"""Llama-family and MPNet weights -> rankdyn's per-layer `AttentionWeights` (docs/theory.md#modern-blocks).

- Llama (pre-RMSNorm, no biases): $H = X + \mathrm{SA}_{\mathrm{rope}}(\mathrm{rms}_1 X)$,
  $X' = H + (\mathrm{silu}(\tilde H W_1) \odot \tilde H W_3) W_2$ with $\tilde H = \mathrm{rms}_2 H$, and
  the final ``norm`` as read-out. Queries and keys are rotated (`rankdyn._model._positions.Rotary`) with
  the config's ``rope_theta``. Grouped-query attention: query head $h$ reads key/value head
  $\lfloor h / g \rfloor$, $g = $ ``num_attention_heads / num_key_value_heads`` (HF's ``repeat_kv``);
  the shared K/V projections are repeated per query head here, which is exact.
- MPNet: BERT's post-LN block, plus the relative-position bias (``relative_attention_bias``,
  buckets x heads, shared by the layers) added to the scaled logits, no token-type rows, and
  positions counted from ``padding_idx + 1 = 2``.

``nn.Linear`` weights are ``(out, in)``; rankdyn's ``(in, out)`` is the transpose.
"""

from __future__ import annotations

import numpy as np

from .._errors import UsageError
from .._model._layer import AttentionWeights
from .._model._mlp import GatedMLPWeights
from .._model._norms import LayerNorm, RMSNorm
from ._arch import _activation, _heads, _refuse, encoder_blocks
from ._parts import Embeddings, Tensors, check_layer_count, config_eps, config_int, find_prefix, on_device

__all__ = ["read_llama", "read_mpnet", "rope_theta"]

J = on_device
#: MPNet (as RoBERTa) numbers positions from padding_idx + 1.
MPNET_POSITION_OFFSET = 2


def rope_theta(c: dict, where: str) -> float:
    """``rope_theta`` of a Llama config (HF 4 ``rope_theta`` / ``rope_scaling`` or HF 5 ``rope_parameters``).

    Raises:
        UsageError: for a scaling rule other than the default (linear, dynamic, yarn, llama3, ...
            change the angles in ways rankdyn does not implement), naming it.
    """
    params = c.get("rope_parameters") or {}
    scaling = c.get("rope_scaling") or {}
    if not isinstance(params, dict) or not isinstance(scaling, dict):
        raise UsageError(f"{where}: config rope_parameters / rope_scaling must be objects; fix the config.")
    for key, table in (("rope_parameters", params), ("rope_scaling", scaling)):
        rule = table.get("rope_type", table.get("type", "default"))
        if rule not in ("default", None):
            raise UsageError(
                f"{where}: config {key} has rope_type {rule!r}; rankdyn implements only the default "
                "rotary rule (no scaling). Use a checkpoint without rope scaling."
            )
    theta = params.get("rope_theta", c.get("rope_theta", 10000.0))
    if isinstance(theta, bool) or not isinstance(theta, (int, float)) or not theta > 0:
        raise UsageError(f"{where}: config rope_theta={theta!r} must be a positive number; fix the config.")
    return float(theta)


def read_llama(raw, dtype) -> dict:
    """The parts of a Llama-family checkpoint (``model_type`` "llama"): embeddings, blocks, final norm."""
    c, where = raw.config, f"checkpoint {raw.path}"
    d = config_int(c, where, "hidden_size")
    heads = config_int(c, where, "num_attention_heads")
    kv = config_int(c, where, "num_key_value_heads", default=heads)
    num_layers = config_int(c, where, "num_hidden_layers")
    f = config_int(c, where, "intermediate_size")
    vocab = config_int(c, where, "vocab_size")
    positions = config_int(c, where, "max_position_embeddings")
    dh = config_int(c, where, "head_dim", default=d // heads)
    eps = config_eps(c, where, "rms_norm_eps", default=1e-6)
    act = _activation(c, where, "hidden_act", "silu")
    theta = rope_theta(c, where)
    _refuse(c, where, {"attention_bias": (False, False), "mlp_bias": (False, False)})
    if heads % kv:
        raise UsageError(
            f"{where}: num_attention_heads {heads} is not a multiple of num_key_value_heads {kv}; the head "
            "counts are inconsistent (fix the config)."
        )
    if dh % 2:
        raise UsageError(f"{where}: head_dim {dh} is odd; rotary embeddings need an even head width.")
    implied = (
        f"hidden_size={d}, num_attention_heads={heads}, num_key_value_heads={kv}, head_dim={dh}, "
        f"intermediate_size={f}, vocab_size={vocab}"
    )
    t = Tensors(raw, find_prefix(raw, "embed_tokens.weight"), dtype, implied)
    emb = Embeddings(word=J(t("embed_tokens.weight", (vocab, d))), position=None, token_type=None, norm=None)
    check_layer_count(t, "layers.{i}.", num_layers, "num_hidden_layers")
    layer = [f"layers.{i}." for i in range(num_layers)]

    def linear(name, shape):  # nn.Linear (out, in) -> (in, out)
        return t.stack([p + name + ".weight" for p in layer], shape).swapaxes(-1, -2)

    def rms(name):
        return RMSNorm(J(t.stack([p + name + ".weight" for p in layer], (d,))), eps)

    group = heads // kv
    # repeat_kv: query head h uses K/V head h // group (np.repeat, not np.tile).
    kv_heads = lambda w: np.repeat(w.reshape(num_layers, d, kv, dh), group, axis=2).reshape(num_layers, d, -1)
    blocks = AttentionWeights(
        w_q=_heads(linear("self_attn.q_proj", (heads * dh, d)), heads),
        w_k=_heads(kv_heads(linear("self_attn.k_proj", (kv * dh, d))), heads),
        w_v=_heads(kv_heads(linear("self_attn.v_proj", (kv * dh, d))), heads),
        w_o=J(linear("self_attn.o_proj", (d, heads * dh))),
        mlp=GatedMLPWeights(
            J(linear("mlp.gate_proj", (f, d))),
            J(linear("mlp.up_proj", (f, d))),
            J(linear("mlp.down_proj", (d, f))),
            activation=act,
        ),
        norm_attn=rms("input_layernorm"),
        norm_mlp=rms("post_attention_layernorm"),
    )
    final = RMSNorm(J(t("norm.weight", (d,))), eps)
    tied = bool(c.get("tie_word_embeddings", False))
    sizes = dict(num_layers=num_layers, d=d, heads=heads, max_positions=positions, vocab_size=vocab)
    extra = dict(kv_heads=kv, head_dim=dh, rope_theta=theta, tied_embeddings=tied)
    return dict(
        sizes=sizes, activation=act, eps=eps, embeddings=emb, blocks=blocks, final_norm=final, extra=extra
    )


def read_mpnet(raw, dtype) -> dict:
    """The parts of an MPNet checkpoint (``model_type`` "mpnet"): embeddings, blocks, position bias."""
    c, where = raw.config, f"checkpoint {raw.path}"
    d = config_int(c, where, "hidden_size")
    heads = config_int(c, where, "num_attention_heads")
    num_layers = config_int(c, where, "num_hidden_layers")
    f = config_int(c, where, "intermediate_size")
    table_positions = config_int(c, where, "max_position_embeddings")
    vocab = config_int(c, where, "vocab_size")
    buckets = config_int(c, where, "relative_attention_num_buckets", default=32)
    eps = config_eps(c, where, "layer_norm_eps", default=1e-12)
    act = _activation(c, where, "hidden_act", "gelu")
    if d % heads:
        raise UsageError(
            f"{where}: hidden_size {d} is not a multiple of num_attention_heads {heads}; the head counts "
            "are inconsistent (fix the config)."
        )
    if table_positions <= MPNET_POSITION_OFFSET:
        raise UsageError(
            f"{where}: max_position_embeddings {table_positions} leaves no position; fix the config."
        )
    implied = f"hidden_size={d}, num_attention_heads={heads}, intermediate_size={f}, vocab_size={vocab}"
    t = Tensors(raw, find_prefix(raw, "embeddings.word_embeddings.weight"), dtype, implied)
    emb = Embeddings(
        word=J(t("embeddings.word_embeddings.weight", (vocab, d))),
        position=J(t("embeddings.position_embeddings.weight", (table_positions, d))),
        token_type=None,
        norm=LayerNorm(
            J(t("embeddings.LayerNorm.weight", (d,))), J(t("embeddings.LayerNorm.bias", (d,))), eps
        ),
        offset=MPNET_POSITION_OFFSET,
    )
    names = dict(q="attention.attn.q", k="attention.attn.k", v="attention.attn.v", o="attention.attn.o")
    blocks = encoder_blocks(
        t, num_layers, d=d, f=f, heads=heads, act=act, eps=eps, norm_attn="attention.LayerNorm", **names
    )
    table = t("encoder.relative_attention_bias.weight", (buckets, heads))
    positions = table_positions - MPNET_POSITION_OFFSET
    sizes = dict(num_layers=num_layers, d=d, heads=heads, max_positions=positions, vocab_size=vocab)
    extra = dict(position_bias=table)
    return dict(
        sizes=sizes, activation=act, eps=eps, embeddings=emb, blocks=blocks, final_norm=None, extra=extra
    )
