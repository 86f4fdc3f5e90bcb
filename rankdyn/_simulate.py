r"""`simulate`: iterate a layer over depth and record metrics, as a thin layer over `rankdyn._scan`.

$X^{(t+1)} = F_t(X^{(t)})$ for $t = 0..T-1$, with $F_t$ a `SelfAttentionLayer` (weights of depth
$t$ when they differ per layer), eqs. (2)-(3). Metrics are saved at layers $0, k, 2k, \dots, T$.
By default only their batch statistics are kept (streamed inside the compiled scan, so memory
grows with neither the batch nor, beyond one number per saved layer, the depth);
per-trajectory values and full states are opt-in.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Bool, Float, Int, PRNGKeyArray

from ._autotune import tuned_chunk
from ._init import TokenSampler
from ._layer import SelfAttentionLayer
from ._memory import MemoryEstimate, check_memory
from ._observe import MetricObserver, parse_metrics
from ._scan import auto_chunk, estimate_parts, run_batch
from ._sharding import resolve_mesh
from ._stats import Summary, summarize

__all__ = ["simulate", "Trajectory"]


class Trajectory(eqx.Module):
    """What `simulate` returns.

    Attributes:
        layers: the saved layer indices ``0, k, ..., T`` (``k = save_every``).
        summary: a `rankdyn.Summary`: per saved layer, the mean, std, min and max over the
            trajectories finite at that layer, and the counts of non-finite and degenerate ones.
        metrics: with ``per_trajectory=True`` (or ``save_states=True``), name -> array
            ``(*batch, len(layers), ...)`` (trailing axes for non-scalar observations), including
            ``eps_min``: at saved layer ``t > 0`` the smallest attention weight on mask edges over
            the layers since the previous save; at ``t = 0`` that of $A^{(0)}$ (Theorem 1's
            epsilon). None otherwise.
        states: ``(*batch, len(layers), n, d)`` if ``save_states=True``, else None.
        degenerate: ``(*batch,)`` True where a normalisation met a zero row (e.g. opposite
            tokens averaged; such trajectories are kept), or None without per-trajectory values.
        nonfinite: ``(*batch,)`` True where a state or a recorded metric became NaN or infinite,
            or None without per-trajectory values.
    """

    layers: Int[Array, " s"]
    summary: Summary
    metrics: dict[str, Float[Array, "..."]] | None
    states: Float[Array, "*batch s n d"] | None
    degenerate: Bool[Array, "*batch"] | None
    nonfinite: Bool[Array, "*batch"] | None


def _strong(v):
    return v.astype(v.dtype) if isinstance(v, jax.Array) and getattr(v, "weak_type", False) else v


def _validate(layer, x0, num_layers, save_every):
    if not isinstance(layer, SelfAttentionLayer):
        raise ValueError(f"simulate expects a rankdyn.SelfAttentionLayer, got {type(layer).__name__}.")
    n, d = layer.num_tokens, layer.dim
    if isinstance(x0, TokenSampler):
        if (x0.num_tokens, x0.dim) != (n, d):
            raise ValueError(
                f"the TokenSampler draws (n, d) = ({x0.num_tokens}, {x0.dim}) tokens but the layer "
                f"maps ({n}, {d}); build the sampler with the layer's n and d."
            )
    else:
        x0 = jnp.asarray(x0)
        if x0.ndim < 2 or x0.shape[-2:] != (n, d):
            raise ValueError(
                f"x0 must have shape (..., n, d) = (..., {n}, {d}) to match the layer's mask and weights, "
                f"got {x0.shape}."
            )
        if not jnp.issubdtype(x0.dtype, jnp.floating):
            raise ValueError(f"x0 must be a floating-point array, got dtype {x0.dtype}.")
        if 0 in x0.shape:
            raise ValueError(f"x0 has an empty batch axis (shape {x0.shape}); pass at least one trajectory.")
        if not isinstance(x0, jax.core.Tracer) and not bool(jnp.all(jnp.isfinite(x0))):
            raise ValueError("x0 contains NaN or infinite values; pass finite initial tokens.")
    if isinstance(num_layers, bool) or not isinstance(num_layers, (int, np.integer)) or num_layers < 0:
        raise ValueError(f"num_layers must be a non-negative integer, got {num_layers!r}.")
    if not isinstance(save_every, (int, np.integer)) or save_every < 1:
        raise ValueError(f"save_every must be a positive integer, got {save_every!r}.")
    if num_layers % save_every:
        raise ValueError(
            f"num_layers={num_layers} is not a multiple of save_every={save_every}; choose a divisor."
        )
    if layer.num_layers is not None and layer.num_layers < num_layers:
        raise ValueError(
            f"the layer holds per-layer weights for {layer.num_layers} layers but num_layers={num_layers}; "
            "draw weights for every layer or use shared weights."
        )
    return x0


def simulate(
    layer: SelfAttentionLayer,
    x0: Float[ArrayLike, "*batch n d"] | TokenSampler,
    num_layers: int,
    *,
    save_every: int = 1,
    save_states: bool = False,
    per_trajectory: bool = False,
    metrics: str | Iterable[str] | None = None,
    observe: Callable[[Array], dict[str, Array]] | None = None,
    rank_tol: float = 1e-6,
    key: PRNGKeyArray | None = None,
    progress: bool = False,
    chunk: int | None = None,
    devices=None,
) -> Trajectory:
    r"""Iterate ``layer`` for ``num_layers`` layers from ``x0`` and record metrics.

    $X^{(t+1)} = F_t(X^{(t)})$ with $F_t$ = ``layer`` at depth $t$ (eqs. 2-3), compiled as one
    ``lax.scan`` over depth (`rankdyn._scan`), the batch walked in chunks of ``chunk``.

    Arguments:
        layer: a `SelfAttentionLayer` (shared or per-layer weights).
        x0: initial tokens ``(n, d)`` or ``(*batch, n, d)``, or a `rankdyn.TokenSampler` that
            draws each chunk inside the compiled program (no array holds the whole batch).
        num_layers: depth T; must be a multiple of ``save_every``.
        save_every: record metrics (and states) every k layers (layer 0 is always recorded).
        save_states: also return the token matrices at the saved layers (memory grows with T
            and the batch); implies ``per_trajectory``.
        per_trajectory: also return every trajectory's metrics (memory grows with the batch
            times the saved layers); by default only the batch statistics are kept.
        metrics: the metrics recorded by the default observer: None or ``"all"`` for every
            name of `rankdyn.metrics.METRIC_NAMES` and ``eps_min``, or a subset (a list or a
            comma-separated string). Spectral metrics cost an SVD per trajectory and layer.
        observe: ``x -> dict of arrays`` computed at saved layers instead of the default
            metrics (``eps_min`` is always added). Pass the same function object on repeated
            calls: a new lambda each time means a new compilation.
        rank_tol: relative tolerance of the numerical rank in the default metrics.
        key: PRNG key, required when the layer uses dropout (trajectory i uses ``fold_in(key, i)``).
        progress: show a progress bar (each chunk's depth is split into ~20 compiled pieces).
        chunk: trajectories advanced together (vmapped) at a time. Default on one CPU device:
            the fastest of a few cache-sized candidates, measured at the first sizeable run of
            a shape and remembered per machine (`rankdyn._autotune`; ``RANKDYN_CHUNK_TUNING=0``
            keeps the rule: about 2 MiB of tokens per chunk); the whole batch on accelerators.
            Results do not depend on it beyond rounding (at most 4 ulps per metric).
        devices: split each chunk over devices (`jax.sharding`, mesh axis ``"batch"``): None
            (default) runs on the default device; ``"all"``, an int k (first k devices), a list
            of devices or a `rankdyn.internal.batch_mesh`.

    Returns:
        A `Trajectory`.

    Raises:
        ValueError: on shapes that do not match the layer, non-finite x0, bad depths, unknown
            metric names, a dropout layer without a key, or a run whose estimated memory
            exceeds the available memory.
    """
    x0 = _validate(layer, x0, num_layers, save_every)
    # A weakly typed leaf (e.g. dqk from a Python float) and a strong one of the same dtype are
    # different programs to jit: make every array leaf strong so both reuse one compilation.
    layer, x0 = jax.tree.map(_strong, (layer, x0))
    if layer.dropout > 0 and key is None:
        raise ValueError("the layer uses dropout: pass `key=` to simulate.")
    names = parse_metrics(metrics)
    if observe is None:
        observe = MetricObserver(names, rank_tol)
    eps = metrics is None or "eps_min" in names
    per_trajectory = per_trajectory or save_states
    sampler = isinstance(x0, TokenSampler)
    batch_shape = (x0.batch,) if sampler else x0.shape[:-2]
    num = math.prod(batch_shape)
    mesh = resolve_mesh(devices)
    n, d = layer.num_tokens, layer.dim
    itemsize = x0.dtype.itemsize
    if chunk is None:
        share = -(-num // (1 if mesh is None else mesh.devices.size))
        backend = jax.default_backend() if mesh is None else mesh.devices.flat[0].platform
        chunk = auto_chunk(max(share, 1), n, d, itemsize, backend)
        if mesh is None and backend == "cpu" and not isinstance(x0, jax.core.Tracer):
            # Measured once per machine and shape (rankdyn._autotune), as XLA autotunes.
            flat0 = x0 if sampler else x0.reshape((num, n, d))
            drop = key if layer.dropout > 0 else None
            chunk = tuned_chunk(
                layer, observe, flat0, num, num_layers, save_every=save_every, eps=eps, drop_key=drop
            )
    elif isinstance(chunk, bool) or not isinstance(chunk, (int, np.integer)) or chunk < 1:
        raise ValueError(f"chunk must be a positive integer or None, got {chunk!r}.")
    chunk = min(int(chunk), num)
    num_saved = num_layers // save_every + 1
    if jax.default_backend() == "cpu":
        parts = estimate_parts(
            num=num,
            chunk=chunk,
            n=n,
            d=d,
            heads=layer.num_heads,
            itemsize=itemsize,
            num_saved=num_saved,
            num_metrics=len(names),
            per_trajectory=per_trajectory,
            save_states=save_states,
        )
        check_memory(
            MemoryEstimate(parts),
            what="simulate",
            fix="use a smaller chunk, a larger save_every, "
            "or per_trajectory=False and save_states=False (then only statistics are kept).",
        )
    flat = x0 if sampler else x0.reshape((num, n, d))
    stats, (nonfinite, degenerate), per = run_batch(
        layer,
        flat,
        num,
        num_layers,
        observe=observe,
        save_every=save_every,
        chunk=chunk,
        drop_key=key if layer.dropout > 0 else None,
        per_trajectory=per_trajectory,
        save_states=save_states,
        eps=eps,
        mesh=mesh,
        progress=progress,
    )
    layers = jnp.arange(0, num_layers + 1, save_every)
    summary = summarize(stats, layers, num, nonfinite, degenerate)
    if per is None:
        return Trajectory(
            layers=layers, summary=summary, metrics=None, states=None, degenerate=None, nonfinite=None
        )
    shape = lambda v: v.reshape(batch_shape + v.shape[1:])  # noqa: E731
    return Trajectory(
        layers=layers,
        summary=summary,
        metrics={k: shape(v) for k, v in per["values"].items()} if "values" in per else None,
        states=shape(per["states"]) if save_states else None,
        degenerate=shape(per["degenerate"]),
        nonfinite=shape(per["nonfinite"]),
    )
