r"""BERT and GPT-2 weights -> rankdyn's per-layer `AttentionWeights` (docs/theory.md#trained-checkpoints).

Both map one layer to rankdyn's `SelfAttentionLayer` with heads, $W_O$, biases, one LayerNorm
per sub-block and the MLP:

- BERT (post-LN): $H = \mathrm{LN}_1(X + \mathrm{SA}(X))$, $X' = \mathrm{LN}_2(H + \mathrm{MLP}(H))$;
  ``nn.Linear`` weights are ``(out, in)`` ($y = x W^\top + b$), so rankdyn's ``(in, out)`` is the transpose.
- GPT-2 (pre-LN): $H = X + \mathrm{SA}(\mathrm{ln}_1 X)$, $X' = H + \mathrm{MLP}(\mathrm{ln}_2 H)$; ``Conv1D``
  weights are already ``(in, out)`` ($y = x W + b$); ``c_attn`` holds $W_Q, W_K, W_V$ side by side.

Heads are consecutive blocks of ``d / heads`` output features (HF's ``view(n, heads, d_h)``).
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from .._errors import UsageError
from .._model._layer import AttentionWeights
from .._model._mlp import MLPWeights
from .._model._norms import LayerNorm
from ._parts import (
    Embeddings,
    Tensors,
    check_layer_count,
    config_eps,
    config_int,
    config_value,
    find_prefix,
    on_device,
)

__all__ = ["read_bert", "read_gpt2", "HF_ACTIVATIONS"]

J = on_device

#: HF activation names -> rankdyn's (`rankdyn._model._mlp.ACTIVATIONS`): "gelu" is the exact erf form.
HF_ACTIVATIONS = {
    "gelu": "gelu",
    "gelu_new": "gelu_tanh",
    "gelu_pytorch_tanh": "gelu_tanh",
    "gelu_fast": "gelu_tanh",
    "relu": "relu",
    "silu": "silu",
}


def _activation(config: dict, where: str, key: str, default: str) -> str:
    """The MLP activation named by ``config[key]``, as rankdyn's name."""
    name = config_value(config, where, key, default=default)
    if not isinstance(name, str) or name not in HF_ACTIVATIONS:  # a list crashed the lookup
        raise UsageError(
            f"{where}: config.json has {key}={name!r}, which rankdyn does not implement; supported: "
            f"{', '.join(HF_ACTIVATIONS)}."
        )
    return HF_ACTIVATIONS[name]


def _refuse(config: dict, where: str, rules: dict) -> None:
    """Refuse config switches that change the map in ways rankdyn's layer does not implement."""
    for key, (ok, default) in rules.items():
        value = config.get(key, default)
        if value != ok:
            raise UsageError(f"{where}: config.json has {key}={value!r}; rankdyn reads only {key}={ok!r}.")


def _heads(w: np.ndarray, heads: int) -> jnp.ndarray:
    """``(layers, d, heads * k)`` -> ``(layers, heads, d, k)``.

    Biases: ``(layers, heads * k)`` -> ``(layers, heads, k)``.
    """
    # Reshaped on the host: NumPy avoids compiling a JAX program per transpose.
    if w.ndim == 2:
        return J(w.reshape(w.shape[0], heads, -1))
    return J(np.moveaxis(w.reshape(w.shape[0], w.shape[1], heads, -1), 2, 1))


def _layer_norms(t: Tensors, names: list[str], d: int, eps: float) -> LayerNorm:
    return LayerNorm(
        t.stack([n + ".weight" for n in names], (d,)), t.stack([n + ".bias" for n in names], (d,)), eps
    )


def encoder_blocks(t: Tensors, num_layers: int, *, d, f, heads, act, eps, q, k, v, o, norm_attn):
    """The stacked post-LN encoder blocks of BERT's layout (``encoder.layer.{i}.``), whose
    attention tensors are named ``q``, ``k``, ``v``, ``o`` and ``norm_attn`` (BERT and MPNet differ
    only there); the MLP is ``intermediate.dense`` / ``output.dense`` / ``output.LayerNorm``."""
    check_layer_count(t, "encoder.layer.{i}.", num_layers, "num_hidden_layers")
    layer = [f"encoder.layer.{i}." for i in range(num_layers)]

    def linear(name, shape):  # nn.Linear (out, in) -> (in, out)
        return t.stack([p + name + ".weight" for p in layer], shape).swapaxes(-1, -2)

    def bias(name, size):
        return t.stack([p + name + ".bias" for p in layer], (size,))

    w_q, w_k, w_v = (linear(name, (d, d)) for name in (q, k, v))
    return AttentionWeights(
        w_q=_heads(w_q, heads),
        w_k=_heads(w_k, heads),
        w_v=_heads(w_v, heads),
        w_o=J(linear(o, (d, d))),
        mlp=MLPWeights(
            J(linear("intermediate.dense", (f, d))),
            J(bias("intermediate.dense", f)),
            J(linear("output.dense", (d, f))),
            J(bias("output.dense", d)),
            activation=act,
        ),
        b_q=_heads(bias(q, d), heads),
        b_k=_heads(bias(k, d), heads),
        b_v=_heads(bias(v, d), heads),
        b_o=J(bias(o, d)),
        norm_attn=_layer_norms(t, [p + norm_attn for p in layer], d, eps),
        norm_mlp=_layer_norms(t, [p + "output.LayerNorm" for p in layer], d, eps),
    )


def read_bert(raw, dtype) -> dict:
    """The parts of a BERT checkpoint (``model_type`` "bert"): sizes, embeddings, blocks, no final norm."""
    c, where = raw.config, f"checkpoint {raw.path}"
    d = config_int(c, where, "hidden_size")
    heads = config_int(c, where, "num_attention_heads")
    num_layers = config_int(c, where, "num_hidden_layers")
    f = config_int(c, where, "intermediate_size")
    positions = config_int(c, where, "max_position_embeddings")
    vocab = config_int(c, where, "vocab_size")
    types = config_int(c, where, "type_vocab_size", default=2)
    eps = config_eps(c, where, "layer_norm_eps", default=1e-12)
    act = _activation(c, where, "hidden_act", "gelu")
    _refuse(c, where, {"position_embedding_type": ("absolute", "absolute"), "is_decoder": (False, False)})
    if d % heads:
        raise UsageError(
            f"{where}: config.json has hidden_size {d}, not a multiple of num_attention_heads {heads}; "
            "fix config.json."
        )
    implied = f"hidden_size={d}, num_attention_heads={heads}, intermediate_size={f}, vocab_size={vocab}"
    t = Tensors(raw, find_prefix(raw, "embeddings.word_embeddings.weight"), dtype, implied)
    emb = Embeddings(
        word=J(t("embeddings.word_embeddings.weight", (vocab, d))),
        position=J(t("embeddings.position_embeddings.weight", (positions, d))),
        token_type=J(t("embeddings.token_type_embeddings.weight", (types, d))[0]),
        norm=LayerNorm(
            J(t("embeddings.LayerNorm.weight", (d,))),
            J(t("embeddings.LayerNorm.bias", (d,))),
            eps,
        ),
    )
    names = dict(q="attention.self.query", k="attention.self.key", v="attention.self.value")
    names |= dict(o="attention.output.dense", norm_attn="attention.output.LayerNorm")
    blocks = encoder_blocks(t, num_layers, d=d, f=f, heads=heads, act=act, eps=eps, **names)
    sizes = dict(num_layers=num_layers, d=d, heads=heads, max_positions=positions, vocab_size=vocab)
    return dict(sizes=sizes, activation=act, eps=eps, embeddings=emb, blocks=blocks, final_norm=None)


def read_gpt2(raw, dtype) -> dict:
    """The parts of a GPT-2 checkpoint (``model_type`` "gpt2"): sizes, embeddings, blocks, ``ln_f``."""
    c, where = raw.config, f"checkpoint {raw.path}"
    d = config_int(c, where, "n_embd", "hidden_size")
    heads = config_int(c, where, "n_head", "num_attention_heads")
    num_layers = config_int(c, where, "n_layer", "num_hidden_layers")
    f = config_int(c, where, "n_inner", default=4 * d)
    positions = config_int(c, where, "n_positions", "max_position_embeddings")
    vocab = config_int(c, where, "vocab_size")
    eps = config_eps(c, where, "layer_norm_epsilon", default=1e-5)
    act = _activation(c, where, "activation_function", "gelu_new")
    _refuse(
        c,
        where,
        {
            "scale_attn_weights": (True, True),
            "scale_attn_by_inverse_layer_idx": (False, False),
            "add_cross_attention": (False, False),
        },
    )
    if d % heads:
        raise UsageError(
            f"{where}: config.json has n_embd {d}, not a multiple of n_head {heads}; fix config.json."
        )
    implied = f"n_embd={d}, n_head={heads}, n_inner={f}, n_positions={positions}, vocab_size={vocab}"
    t = Tensors(raw, find_prefix(raw, "wte.weight"), dtype, implied)
    emb = Embeddings(
        word=J(t("wte.weight", (vocab, d))),
        position=J(t("wpe.weight", (positions, d))),
        token_type=None,
        norm=None,
    )
    check_layer_count(t, "h.{i}.", num_layers, "n_layer")
    block = [f"h.{i}." for i in range(num_layers)]

    def conv(name, shape):  # Conv1D weights are (in, out) already
        return t.stack([p + name + ".weight" for p in block], shape)

    def bias(name, size):
        return t.stack([p + name + ".bias" for p in block], (size,))

    w_qkv, b_qkv = conv("attn.c_attn", (d, 3 * d)), bias("attn.c_attn", 3 * d)
    w_q, w_k, w_v = np.split(w_qkv, 3, axis=-1)
    b_q, b_k, b_v = np.split(b_qkv, 3, axis=-1)
    blocks = AttentionWeights(
        w_q=_heads(w_q, heads),
        w_k=_heads(w_k, heads),
        w_v=_heads(w_v, heads),
        w_o=J(conv("attn.c_proj", (d, d))),
        mlp=MLPWeights(
            J(conv("mlp.c_fc", (d, f))),
            J(bias("mlp.c_fc", f)),
            J(conv("mlp.c_proj", (f, d))),
            J(bias("mlp.c_proj", d)),
            act,
        ),
        b_q=_heads(b_q, heads),
        b_k=_heads(b_k, heads),
        b_v=_heads(b_v, heads),
        b_o=J(bias("attn.c_proj", d)),
        norm_attn=_layer_norms(t, [p + "ln_1" for p in block], d, eps),
        norm_mlp=_layer_norms(t, [p + "ln_2" for p in block], d, eps),
    )
    final = LayerNorm(J(t("ln_f.weight", (d,))), J(t("ln_f.bias", (d,))), eps)
    sizes = dict(num_layers=num_layers, d=d, heads=heads, max_positions=positions, vocab_size=vocab)
    return dict(sizes=sizes, activation=act, eps=eps, embeddings=emb, blocks=blocks, final_norm=final)
