r"""The controls of the attention-sink targets (``attention-sinks``, ``long-context-sinks``): one
module both import, so the two targets test the same thing.

- `scale_matched_init` (the scored control, rule fixed before the run, docs/theory.md "Verdict
  rules fixed before the run"): every weight matrix redrawn from a gaussian and rescaled, per
  layer, to the trained matrix's Frobenius norm; trained norm gains and biases kept. Its logits
  have the trained model's scale, so its attention is far from uniform and the causal mask and the
  depth could concentrate it on token 0 by themselves (Theorem 1's tokens move toward the centre,
  token 0): a sink in this control would mean the causal mask and the weights' scale suffice, so
  the control can fail.
- `random_init`: $\mathcal N(0, 0.02^2)$ weights (HF's ``initializer_range``), gains 1. Its logits
  are near 0, so its attention is nearly uniform and it could hardly show a sink: reported, not
  scored.
"""

from __future__ import annotations

import dataclasses

import equinox as eqx
import jax.numpy as jnp
import numpy as np

__all__ = ["INIT_STD", "random_init", "scale_matched_init"]

#: Random-init weights' standard deviation (HF's initializer_range for Llama and SmolLM2).
INIT_STD = 0.02


def _redrawn(ckpt, seed: int, std: float | None, keep_gains: bool):
    """The checkpoint's stack with every matrix redrawn (K/V heads shared by their query groups as
    in the checkpoint): from N(0, std^2), or (``std=None``) rescaled per layer to the trained
    matrix's Frobenius norm; norm gains set to 1 unless ``keep_gains``."""
    rng = np.random.default_rng(seed)
    b = ckpt.blocks
    group = ckpt.heads // (ckpt.kv_heads or ckpt.heads)

    def draw(a, grouped=False):
        shape = list(a.shape)
        if grouped:  # (layers, heads, d, dh): draw the K/V heads, then repeat them per group
            shape[1] //= group
            w = np.repeat(rng.normal(0.0, std or 1.0, shape), group, axis=1)
        else:
            w = rng.normal(0.0, std or 1.0, shape)
        if std is None:  # per layer (axis 0), the trained matrix's Frobenius norm
            axes = tuple(range(1, w.ndim))
            trained = np.sqrt(np.sum(np.square(np.asarray(a, float)), axis=axes, keepdims=True))
            w = w * trained / np.sqrt(np.sum(np.square(w), axis=axes, keepdims=True))
        return jnp.asarray(w, a.dtype)

    new = eqx.tree_at(
        lambda w: (w.w_q, w.w_k, w.w_v, w.w_o),
        b,
        (draw(b.w_q), draw(b.w_k, True), draw(b.w_v, True), draw(b.w_o)),
    )
    arrays = [x for x in (new.mlp.w1, new.mlp.w2, getattr(new.mlp, "w3", None)) if x is not None]
    new = eqx.tree_at(
        lambda w: [x for x in (w.mlp.w1, w.mlp.w2, getattr(w.mlp, "w3", None)) if x is not None],
        new,
        [draw(x) for x in arrays],
    )
    if not keep_gains:
        gains = [n.gain for n in (new.norm_attn, new.norm_mlp) if n is not None and n.gain is not None]
        new = eqx.tree_at(
            lambda w: [n.gain for n in (w.norm_attn, w.norm_mlp) if n is not None and n.gain is not None],
            new,
            [jnp.ones_like(g) for g in gains],
        )
    return dataclasses.replace(ckpt, blocks=new)


def random_init(ckpt, seed: int, std: float = INIT_STD):
    r"""The checkpoint's stack with every matrix redrawn from $\mathcal N(0, \mathrm{std}^2)$ (K/V
    heads shared by their query groups as in the checkpoint) and every norm gain set to 1."""
    return _redrawn(ckpt, seed, std, keep_gains=False)


def scale_matched_init(ckpt, seed: int):
    """The checkpoint's stack with every matrix redrawn from a gaussian and rescaled, per layer, to
    the trained matrix's Frobenius norm (K/V heads shared by their query groups as in the
    checkpoint); the trained norm gains and biases kept. The control both sink targets score."""
    return _redrawn(ckpt, seed, None, keep_gains=True)
