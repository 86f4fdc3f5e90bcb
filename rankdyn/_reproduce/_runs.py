r"""Simulation helpers of the reproduce targets: stacks of layers run through `rankdyn.simulate`.

- `with_masks`: one layer's weights with several masks (a `MaskStack`): only the mask is
  vmapped, so the weights are held once (a 128-layer d = 768 stack is ~350 MB in float32) and
  every mask sees the same weights and inputs (common random numbers).
- `stack`: equal-structure layers stacked along a leading axis (every leaf vmapped).
- `simulate_many`: several stacks (differing in static switches: norm, skip, MLP, dropout) as
  ONE compiled program; compile time, not run time, dominates the quick runs on CPU.
- `san_layer` / `rebuild`: the Theorem 1-2 SAN (drawn by one jitted call) and the same weights
  with other switches.
- `band`: mean and std over samples.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .._run._simulate import simulate
from ._layer_observers import cheap_observe

__all__ = [
    "MaskStack",
    "stack",
    "with_masks",
    "simulate_many",
    "simulate_stacked",
    "san_layer",
    "rebuild",
    "band",
]


class MaskStack(NamedTuple):
    """One layer and a ``(masks, n, n)`` array: simulated once per mask with shared weights."""

    layer: object
    masks: jax.Array


def stack(modules):
    """Stack equal-structure modules (same static fields) along a new leading axis, for vmap."""
    return jax.tree.map(lambda *xs: jnp.stack(xs), *modules)


def with_masks(layer, masks: dict[str, np.ndarray]) -> MaskStack:
    """The layer once per mask (order of ``masks``), with the SAME weights (not copied)."""
    return MaskStack(layer, jnp.stack([jnp.asarray(m) for m in masks.values()]))


def simulate_many(
    stacks,
    x0,
    num_layers: int,
    *,
    observe=cheap_observe,
    keys=None,
    save_every: int = 1,
    x0_per_config: bool = False,
):
    """Several stacks of layers, each vmapped over its configs, compiled as ONE program.

    One XLA program instead of one per stack roughly halves the compile time on CPU, which
    dominates the quick runs (a program costs seconds to compile and milliseconds to run).

    Arguments:
        stacks: list of `MaskStack` (`with_masks`) or layers stacked along a leading config axis
            (`stack`).
        x0: ``(batch, n, d)`` shared by every config, or ``(configs, batch, n, d)`` with
            ``x0_per_config=True`` (the same for every stack).
        observe: one observation function for every stack, or a list (one per stack).
        keys: None or a list (one PRNG key or None per stack; a key is needed for dropout). The
            configs of one stack share the key: the same dropout masks (common random numbers).

    Returns:
        A list, per stack, of ``(layers, metrics, nonfinite, degenerate)`` as NumPy arrays;
        metrics are ``(configs, batch, saved_layers)``, ``nonfinite`` ``(configs, batch)`` and
        ``degenerate`` ``(configs,)`` (how many trajectories of each config had a zero token).
    """
    keys = [None] * len(stacks) if keys is None else list(keys)
    observes = list(observe) if isinstance(observe, (list, tuple)) else [observe] * len(stacks)
    try:
        run = _many_program(tuple(observes), num_layers, save_every, x0_per_config)
    except TypeError:  # an unhashable observer: a program of its own, as before
        run = _many_program.__wrapped__(tuple(observes), num_layers, save_every, x0_per_config)
    layers = np.arange(0, num_layers + 1, save_every)
    result = []
    for metrics, nonfinite, degenerate in run(list(stacks), x0, keys):
        metrics = {k: np.asarray(v, dtype=np.float64) for k, v in metrics.items()}
        result.append((layers, metrics, np.asarray(nonfinite), np.asarray(degenerate)))
    return result


@functools.lru_cache(maxsize=32)
def _many_program(observes: tuple, num_layers: int, save_every: int, x0_per_config: bool):
    """The jitted program of `simulate_many`, one per static setting: calls with equal settings
    (e.g. the chunks of a pretrained target's full run) reuse its compilation instead of each
    compiling its own (a new function object is a new jit cache)."""

    @eqx.filter_jit
    def run(stacks, x0, keys):
        outs = []
        for item, key, obs in zip(stacks, keys, observes):

            def one(layer, x, key=key, obs=obs):
                tr = simulate(
                    layer, x, num_layers, observe=obs, key=key, save_every=save_every, per_trajectory=True
                )
                # The count of the raw flag (a trajectory can also be non-finite; its status says nonfinite).
                return tr.metrics, tr.nonfinite, tr.summary.degenerate

            x_axis = 0 if x0_per_config else None
            if isinstance(item, MaskStack):

                def masked(mask, x, layer=item.layer, one=one):
                    return one(eqx.tree_at(lambda l: l.mask, layer, mask), x)

                outs.append(eqx.filter_vmap(masked, in_axes=(0, x_axis))(item.masks, x0))
            else:
                outs.append(eqx.filter_vmap(one, in_axes=(0, x_axis))(item, x0))
        return outs

    return run


def simulate_stacked(
    stacked,
    x0,
    num_layers: int,
    *,
    observe=cheap_observe,
    key=None,
    save_every: int = 1,
    x0_per_config: bool = False,
):
    """`simulate_many` for a single stack: ``(layers, metrics, nonfinite, degenerate)``."""
    return simulate_many(
        [stacked],
        x0,
        num_layers,
        observe=observe,
        keys=[key],
        save_every=save_every,
        x0_per_config=x0_per_config,
    )[0]


@functools.cache
def _jit_make_layer(make_layer):
    """``eqx.filter_jit(make_layer)``, created once so equal configurations reuse the compilation."""
    return eqx.filter_jit(make_layer)


def jit_make_layer():
    """`rankdyn.make_layer` compiled once (one program instead of dozens of eager ops)."""
    from .._model._build import make_layer

    return _jit_make_layer(make_layer)


def san_layer(key, n: int, d: int, num_layers: int, *, placement: str = "none", dtype=None):
    """The single-head SAN of the Theorem 1 targets: per-layer Haar-orthogonal W_V (A3 with
    equality), BERT-uniform W_Q, W_K (A2), complete mask (replace it with `with_masks`)."""
    return jit_make_layer()(
        key,
        n=n,
        d=d,
        mask="complete",
        placement=placement,
        value="orthogonal",
        qk="bert",
        num_layers=num_layers,
        dtype=dtype,
    )


def rebuild(layer, **changes):
    """The same weights, mask and temperature with other switches (placement, norm, skip, MLP,
    dropouts, ...): static fields cannot be changed with ``eqx.tree_at``, so the layer is rebuilt
    from every constructor argument it holds. ``mlp=None`` drops the MLP block."""
    from .._model._layer import SelfAttentionLayer

    w = layer.weights
    kw = {
        "dqk": layer.dqk,
        "norm": layer.norm,
        "placement": layer.placement,
        "w_o": w.w_o,
        "mlp": w.mlp,
        "skip": layer.skip,
        "attn_dropout": layer.attn_dropout,
        "hidden_dropout": layer.hidden_dropout,
        "attention_from_normalized": layer.attention_from_normalized,
        "fixed_attention": layer.fixed_attention,
        "precision": layer.precision,
        "b_q": w.b_q,
        "b_k": w.b_k,
        "b_v": w.b_v,
        "b_o": w.b_o,
        "norm_attn": w.norm_attn,
        "norm_mlp": w.norm_mlp,
        "cycle": layer.cycle,
        "rotary": layer.rotary,
        "logit_bias": layer.logit_bias,
        "attention": layer.attention_path,
        # The blocked path's own block; the dense path has none (and refuses one).
        "block_size": getattr(layer.path, "block_size", None),
        "mix_layers": layer.mix_layers,
        "ngpt_alpha": layer.ngpt_alpha,
        "qk_norm": layer.qk_norm,
    }
    kw.update(changes)
    return SelfAttentionLayer(layer.mask, w.w_q, w.w_k, w.w_v, **kw)


def band(v: np.ndarray, ok: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """Mean and std over samples of ``v (batch, S)``, ignoring non-finite trajectories."""
    if ok is not None and ok.any():
        v = v[ok]
    return {"mean": np.mean(v, axis=0), "std": np.std(v, axis=0)}
