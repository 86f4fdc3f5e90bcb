r"""Iterate a layer over depth with ``lax.scan`` and record statistics (SPEC §7 "Core dynamics").

$X^{(t+1)} = F_t(X^{(t)})$ for $t = 0..T-1$, with $F_t$ a `SelfAttentionLayer` (weights of depth
$t$ when they differ per layer). By default only scalar metrics are saved, at layers
$0, k, 2k, \dots, T$, so memory does not grow with depth; full states are opt-in.

The core maps one trajectory; leading batch axes of ``x0`` are ``jax.vmap``-ed at the edge, so
thousands of trajectories run as one compiled program.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
from jax import lax
from jaxtyping import Array, ArrayLike, Bool, Float, Int, PRNGKeyArray

from ._layer import SelfAttentionLayer
from ._metrics import collapse_metrics
from ._sharding import map_sharded, resolve_mesh

__all__ = ["simulate", "Trajectory"]


class Trajectory(eqx.Module):
    """What `simulate` returns.

    Attributes:
        layers: the saved layer indices ``0, k, ..., T`` (``k = save_every``).
        metrics: name -> array ``(*batch, len(layers), ...)`` (trailing axes for non-scalar
            observations). Includes ``eps_min``: at saved layer
            ``t > 0`` the smallest attention weight on mask edges over the layers since the
            previous save; at ``t = 0`` that of $A^{(0)}$ (Theorem 1's epsilon).
        states: ``(*batch, len(layers), n, d)`` if ``save_states=True``, else None.
        degenerate: ``(*batch,)`` True where a normalisation met a zero row (e.g. opposite
            tokens averaged); such trajectories are kept but should be read with care.
        nonfinite: ``(*batch,)`` True where a state became NaN or infinite.
    """

    layers: Int[Array, " s"]
    metrics: dict[str, Float[Array, "..."]]
    states: Float[Array, "*batch s n d"] | None
    degenerate: Bool[Array, "*batch"]
    nonfinite: Bool[Array, "*batch"]

    def summary(self) -> dict[str, dict[str, np.ndarray]]:
        """Mean and standard deviation over all batch axes of each metric, per saved layer.

        Trajectories that became non-finite are excluded (they are counted in ``nonfinite``).
        """
        out = {}
        ok = ~np.asarray(self.nonfinite).reshape(-1)
        nb = int(np.prod(np.shape(self.nonfinite)))
        for name, v in self.metrics.items():
            v = np.asarray(v, dtype=np.float64)
            v = v.reshape((nb,) + v.shape[np.ndim(self.nonfinite):])[ok]
            if v.shape[0] == 0:
                nan = np.full(v.shape[1:], np.nan)
                out[name] = {"mean": nan, "std": nan}
            else:
                out[name] = {"mean": v.mean(axis=0), "std": v.std(axis=0)}
        return out


def _strong(v):
    return v.astype(v.dtype) if isinstance(v, jax.Array) and getattr(v, "weak_type", False) else v


def _observe_default(rank_tol):
    # A pytree (not a fresh lambda) so that a second call, or another rank_tol, reuses the
    # compiled program: the function is static, rank_tol is a traced leaf.
    return jax.tree_util.Partial(collapse_metrics, rank_tol=jnp.asarray(rank_tol))


def _run_blocks(layer, observe, save_states, save_every, x, key, block0, num_blocks):
    """Advance one trajectory by ``num_blocks * save_every`` layers from block ``block0``."""

    def one_layer(carry, t):
        x, bad = carry
        k = None if key is None else jr.fold_in(key, t)
        y, aux = layer(x, t, key=k)
        return (y, bad | aux.degenerate), aux.eps_min

    def one_block(carry, b):
        ts = b * save_every + jnp.arange(save_every)
        (x, bad), eps = lax.scan(one_layer, carry, ts)
        saved = {"metrics": observe(x), "eps_block": jnp.min(eps), "eps_first": eps[0]}
        if save_states:
            saved["state"] = x
        return (x, bad), saved

    blocks = block0 + jnp.arange(num_blocks)
    return lax.scan(one_block, (x, jnp.array(False)), blocks)


#: On CPU, trajectories per vmapped chunk are chosen so that one chunk's token matrices take
#: about this many bytes: a chunk's working set then stays in a core's cache across the ~10
#: passes of a layer, which measured 1.3x (CPU time) to 3x (wall, busy machine) faster than one
#: batch of 4096 (n=32, d=64). A chunk keeps at least _CHUNK_ROWS token rows so that the
#: projections stay wide GEMMs (n=128, d=768: chunks below 32 trajectories were slower).
_CHUNK_BYTES = 2**21
_CHUNK_ROWS = 4096


def _auto_chunk(num, n, d, itemsize, backend):
    if backend != "cpu":
        return num  # accelerators want the widest batch
    per_cache = _CHUNK_BYTES // (n * d * itemsize)
    return max(1, min(num, max(per_cache, -(-_CHUNK_ROWS // n))))


def _map_batch(fn, xs, chunk):
    """``vmap(fn)`` over the leading axis, run sequentially in chunks of ``chunk`` members."""
    num = jax.tree.leaves(xs)[0].shape[0]
    if chunk >= num:
        return jax.vmap(fn)(xs)
    return lax.map(fn, xs, batch_size=chunk)


@eqx.filter_jit
def _chunk(layer, observe, save_states, save_every, x, keys, block0, num_blocks, chunk, mesh):
    def local(model, batched):
        layer_, observe_, block0_ = model
        run = lambda x1, k1: _run_blocks(layer_, observe_, save_states, save_every, x1, k1, block0_, num_blocks)
        if len(batched) == 1:
            (xf, bad), saved = _map_batch(lambda x1: run(x1[0], None), batched, chunk)
        else:
            (xf, bad), saved = _map_batch(lambda xk: run(*xk), batched, chunk)
        finite = jax.vmap(lambda s: jnp.all(jnp.isfinite(s)))(xf)
        return xf, bad, finite, saved

    flat = (x.reshape((-1,) + x.shape[-2:]),)
    if keys is not None:
        flat = flat + (keys.reshape((-1,) + keys.shape[-1:]) if keys.ndim > 1 else keys[None],)
    model = (layer, observe, block0)
    if mesh is None:
        xf, bad, finite, saved = local(model, flat)
    else:
        xf, bad, finite, saved = map_sharded(local, mesh, model, flat)
    return xf.reshape(x.shape), bad.reshape(x.shape[:-2]), finite.reshape(x.shape[:-2]), saved


@eqx.filter_jit
def _observe_batch(observe, x):
    flat = x.reshape((-1,) + x.shape[-2:])
    return jax.tree.map(lambda v: v.reshape(x.shape[:-2] + v.shape[1:]), jax.vmap(observe)(flat))


def _validate(layer, x0, num_layers, save_every):
    if not isinstance(layer, SelfAttentionLayer):
        raise ValueError(f"simulate expects a rankdyn.SelfAttentionLayer, got {type(layer).__name__}.")
    x0 = jnp.asarray(x0)
    n, d = layer.num_tokens, layer.dim
    if x0.ndim < 2 or x0.shape[-2:] != (n, d):
        raise ValueError(
            f"x0 must have shape (..., n, d) = (..., {n}, {d}) to match the layer's mask and weights, "
            f"got {x0.shape}."
        )
    if not jnp.issubdtype(x0.dtype, jnp.floating):
        raise ValueError(f"x0 must be a floating-point array, got dtype {x0.dtype}.")
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
    x0: Float[ArrayLike, "*batch n d"],
    num_layers: int,
    *,
    save_every: int = 1,
    save_states: bool = False,
    observe: Callable[[Array], dict[str, Array]] | None = None,
    rank_tol: float = 1e-6,
    key: PRNGKeyArray | None = None,
    progress: bool = False,
    chunk_size: int | None = None,
    devices=None,
) -> Trajectory:
    r"""Iterate ``layer`` for ``num_layers`` layers from ``x0`` and record metrics.

    $X^{(t+1)} = F_t(X^{(t)})$ with $F_t$ = ``layer`` at depth $t$ (eqs. 2-3), compiled as one
    ``lax.scan`` over depth, ``vmap``-ed over every leading axis of ``x0``.

    Arguments:
        layer: a `SelfAttentionLayer` (shared or per-layer weights).
        x0: initial tokens ``(n, d)`` or ``(*batch, n, d)``.
        num_layers: depth T; must be a multiple of ``save_every``.
        save_every: record metrics (and states) every k layers (layer 0 is always recorded).
        save_states: also return the token matrices at the saved layers (memory grows with T).
        observe: ``x -> dict of arrays`` computed at saved layers; default: every metric of
            `rankdyn.collapse_metrics` (mu, cosines, singular values, ranks ...). Pass the same
            function object on repeated calls: a new lambda each time means a new compilation.
        rank_tol: relative tolerance of the numerical rank in the default metrics.
        key: PRNG key, required when the layer uses dropout (one stream per trajectory).
        progress: show a progress bar (the run is split into ~20 compiled chunks).
        chunk_size: trajectories advanced together (vmapped) at a time; the batch is walked in
            chunks of this size. Default: about 2 MiB of tokens per chunk on CPU (cache-sized),
            the whole batch on accelerators. Results do not depend on it beyond rounding.
        devices: split the batch over devices (`jax.sharding`, mesh axis ``"batch"``): None
            (default) runs on the default device; ``"all"``, an int k (first k devices), a list
            of devices or a `rankdyn.batch_mesh`. Any batch size works (padded internally).

    Returns:
        A `Trajectory`.

    Raises:
        ValueError: on shapes that do not match the layer, non-finite x0, bad depths, or a
            dropout layer without a key.
    """
    x0 = _validate(layer, x0, num_layers, save_every)
    # A weakly typed leaf (e.g. dqk from a Python float) and a strong one of the same dtype are
    # different programs to jit: make every array leaf strong so both reuse one compilation.
    layer, x0 = jax.tree.map(_strong, (layer, x0))
    if layer.dropout > 0 and key is None:
        raise ValueError("the layer uses dropout: pass `key=` to simulate.")
    observe = _observe_default(rank_tol) if observe is None else observe
    batch_shape = x0.shape[:-2]
    keys = None
    if key is not None:
        keys = jr.split(key, math.prod(batch_shape)) if batch_shape else key
    num_blocks = num_layers // save_every
    mesh = resolve_mesh(devices)
    num = math.prod(batch_shape)
    if chunk_size is None:
        share = -(-num // (1 if mesh is None else mesh.devices.size))
        backend = jax.default_backend() if mesh is None else mesh.devices.flat[0].platform
        chunk_size = _auto_chunk(max(share, 1), layer.num_tokens, layer.dim, x0.dtype.itemsize, backend)
    elif isinstance(chunk_size, bool) or not isinstance(chunk_size, (int, np.integer)) or chunk_size < 1:
        raise ValueError(f"chunk_size must be a positive integer or None, got {chunk_size!r}.")

    first = _observe_batch(observe, x0)
    x, bad = x0, jnp.zeros(batch_shape, bool)
    finite = jnp.ones(batch_shape, bool)
    pieces = []
    chunk = max(1, math.ceil(num_blocks / 20)) if progress else max(num_blocks, 1)
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=num_layers, desc="simulate", unit="layer")
    b = 0
    while b < num_blocks:
        nb = min(chunk, num_blocks - b)
        x, bad_c, fin_c, saved = _chunk(
            layer, observe, save_states, save_every, x, keys, jnp.asarray(b), nb, int(chunk_size), mesh
        )
        bad, finite = bad | bad_c, finite & fin_c
        pieces.append(saved)
        b += nb
        if bar is not None:
            bar.update(nb * save_every)
    if bar is not None:
        bar.close()

    ax = len(batch_shape)  # the saved-layer axis sits right after the batch axes

    def cat(get):
        parts = [get(p) for p in pieces]
        if not parts:
            return None
        flat = jnp.concatenate(parts, axis=1)  # (prod(batch), blocks, ...)
        return flat.reshape(batch_shape + flat.shape[1:])

    metrics = {}
    for name, v0 in first.items():
        rest = cat(lambda p: p["metrics"][name])
        v0 = jnp.expand_dims(v0, ax)
        metrics[name] = v0 if rest is None else jnp.concatenate([v0, rest], axis=ax)
    if pieces:
        eps_first = pieces[0]["eps_first"][:, :1].reshape(batch_shape + (1,))
        metrics["eps_min"] = jnp.concatenate([eps_first, cat(lambda p: p["eps_block"])], axis=ax)
    else:
        a = jax.vmap(lambda x1: layer.attention(x1, 0))(x0.reshape((-1,) + x0.shape[-2:]))
        eps = jnp.min(jnp.where(layer.mask, a, jnp.inf), axis=(1, 2, 3))
        metrics["eps_min"] = eps.reshape(batch_shape + (1,))
    states = None
    if save_states:
        rest = cat(lambda p: p["state"])
        x0s = jnp.expand_dims(x0, ax)
        states = x0s if rest is None else jnp.concatenate([x0s, rest], axis=ax)
    mu_bad = jnp.any(~jnp.isfinite(metrics["mu"]), axis=-1) if "mu" in metrics else jnp.zeros(batch_shape, bool)
    return Trajectory(
        layers=jnp.arange(0, num_layers + 1, save_every),
        metrics=metrics,
        states=states,
        degenerate=bad,
        nonfinite=~finite | mu_bad,
    )
