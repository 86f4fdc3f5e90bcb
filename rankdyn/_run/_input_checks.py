r"""The checks of a run's layer, inputs and options, shared by `simulate` and the Lyapunov spectra.

`rankdyn.simulate` and `rankdyn.lyapunov_spectrum` iterate the same layer from the same kind of
inputs, so both refuse the same things with the same messages (a `rankdyn.UsageError` naming the
argument) before any compute: shapes that do not match the layer, non-finite or non-float inputs,
bad depths, ``rank_tol`` and ``devices``, and weights whose attention logits can overflow the
dtype (`check_logits`). `strong` makes weakly typed leaves strong, so that both reuse one
compilation whatever Python scalars built the layer.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh

from .._errors import UsageError
from .._model._layer import SelfAttentionLayer
from .._model._tokens import TokenSampler
from ._plan import check_depth, check_rank_tol

__all__ = ["check_logits", "check_options", "max_norm", "spectral_norm", "strong", "validate_run"]


def strong(v):
    """``v`` with a strong dtype if it is a weakly typed JAX array (e.g. from a Python float);
    any other value unchanged. Weak and strong leaves are different programs to ``jit``."""
    if not (isinstance(v, jax.Array) and getattr(v, "weak_type", False)):
        return v
    # A host round trip (no compile) for a concrete leaf; astype (traced) under jit.
    return v.astype(v.dtype) if isinstance(v, jax.core.Tracer) else jax.device_put(np.asarray(v))


def check_options(rank_tol, devices) -> None:
    """``rank_tol`` and ``devices`` as the docstring allows, or a UsageError naming them."""
    check_rank_tol(rank_tol)  # the plan's check (`rankdyn._run._plan`), one definition
    ok = (
        devices is None
        or devices == "all"
        or isinstance(devices, (Mesh, list, tuple))
        or (isinstance(devices, (int, np.integer)) and not isinstance(devices, bool) and devices >= 1)
    )
    if not ok or isinstance(devices, (list, tuple)) and not all(isinstance(d, jax.Device) for d in devices):
        raise UsageError(
            f"devices must be None, 'all', a positive int, a list of jax devices or a batch mesh, got "
            f"{devices!r}; e.g. devices='all'."
        )


def max_norm(a: np.ndarray, axes: int) -> float:
    """The largest 2-norm of ``a`` over its last ``axes`` axes (1: rows, 2: matrices).

    Summed in ``a``'s own dtype (no float64 copy; one BLAS dot per vector); on overflow, again
    in float64.
    """
    v = a.reshape(-1, math.prod(a.shape[a.ndim - axes :]))
    r = float(np.sqrt(np.max(v[:, None, :] @ v[:, :, None])))
    if not math.isfinite(r):
        v = v.astype(np.float64)
        r = float(np.sqrt(np.max(v[:, None, :] @ v[:, :, None])))
    return r


def spectral_norm(w) -> float:
    r"""$\max_t \|W_t\|_2$ over the leading axes of ``w`` ``(..., d, k)``.

    From the top eigenvalue of each float64 Gram matrix (of the smaller side).
    """
    a = np.asarray(w, np.float64)
    g = np.swapaxes(a, -1, -2) @ a if a.shape[-1] <= a.shape[-2] else a @ np.swapaxes(a, -1, -2)
    return float(np.sqrt(max(float(np.max(np.linalg.eigvalsh(g)[..., -1])), 0.0)))


def check_logits(layer, x0, dtype) -> None:
    r"""Refuse weights whose attention logits can overflow ``dtype`` (they would give all-NaN runs).

    $|R_{ij}| = |x_i^\top W_Q W_K^\top x_j| / \sqrt{d_{QK}} \le \|W_Q\|_2 \|W_K\|_2 r^2 / \sqrt{d_{QK}}$,
    with $r$ the largest norm of a token entering attention (the initial tokens, or the LN radius).
    """
    leaves = jax.tree.leaves((layer, x0))
    if layer.fixed_attention is not None or any(isinstance(v, jax.core.Tracer) for v in leaves):
        return  # no logits, or traced (simulate under jit): nothing concrete to bound
    fi = np.finfo(dtype)
    dqk = float(np.min(np.asarray(layer.dqk)))
    if dqk < fi.tiny:  # subnormal: flushed to zero on CPUs, so 1/sqrt(dqk) is infinite
        raise UsageError(
            f"dqk = {dqk:g} is below the smallest normal {dtype.name} ({fi.tiny:.3g}); its 1/sqrt(dqk) "
            f"overflows the attention logits. Use dqk >= {fi.tiny:.3g}"
            f"{' or float64' if dtype != np.float64 else ''}."
        )
    w = layer.weights
    if isinstance(x0, TokenSampler):
        r = 3.0 * math.sqrt(x0.dim) + 3.0 if x0.kind == "gaussian" else 1.0
    else:
        r = max_norm(np.asarray(x0), 1)
    radius = getattr(layer.norm, "radius", None)
    if layer.placement != "none" and radius is not None:
        r = max(r, float(np.max(np.asarray(radius))))
    scale = max(r * r, 1.0) / math.sqrt(dqk)
    # The Frobenius norm bounds the 2-norm from above and costs one pass over the weights (in
    # their own dtype: a float64 copy of BERT's 16 layers cost 0.25 s per call, the
    # run's own length); the exact 2-norm, from the float64 Gram of each layer, only when that bound is too
    # large to decide (or overflowed).
    bound = max_norm(np.asarray(w.w_q), 2) * max_norm(np.asarray(w.w_k), 2) * scale
    if not bound < fi.max / 16:
        bound = spectral_norm(w.w_q) * spectral_norm(w.w_k) * scale
    if not bound < fi.max / 16:  # /16: headroom for the folded product and the softmax's sums
        raise UsageError(
            f"the attention logits can reach about {bound:.3g} "
            f"(||W_Q|| ||W_K|| r^2 / sqrt(dqk), r = {r:.3g}), "
            f"beyond what {dtype.name} holds ({fi.max:.3g}): the run would be all NaN. Lower qk_std, "
            f"raise dqk{', or use float64' if dtype != np.float64 else ''}."
        )


def _all_finite(x) -> bool:
    """Whether every entry of the concrete array ``x`` is finite: in NumPy when ``x`` lives on the
    CPU (a view, no copy; eager ``jnp.isfinite`` compiled two small programs per new shape),
    else on its device (no transfer of a large batch to the host)."""
    if all(dev.platform == "cpu" for dev in getattr(x, "devices", lambda: ())()):
        return bool(np.isfinite(np.asarray(x)).all())
    return bool(jnp.all(jnp.isfinite(x)))


def validate_run(layer, x0, num_layers, save_every):
    """``x0`` as an array (a `TokenSampler` unchanged) after checking the layer, the inputs' shape,
    dtype and values, and the depths; a `rankdyn.UsageError` naming the argument otherwise."""
    if not isinstance(layer, SelfAttentionLayer):
        raise UsageError(f"simulate expects a rankdyn.SelfAttentionLayer, got {type(layer).__name__}.")
    n, d = layer.num_tokens, layer.dim
    if isinstance(x0, TokenSampler):
        if (x0.num_tokens, x0.dim) != (n, d):
            raise UsageError(
                f"the TokenSampler draws (n, d) = ({x0.num_tokens}, {x0.dim}) tokens but the layer "
                f"maps ({n}, {d}); build the sampler with the layer's n and d."
            )
    else:
        x0 = jnp.asarray(x0)
        if x0.ndim < 2 or x0.shape[-2:] != (n, d):
            raise UsageError(
                f"x0 must have shape (..., n, d) = (..., {n}, {d}) to match the layer's mask and weights, "
                f"got {x0.shape}."
            )
        if x0.dtype not in (jnp.float32, jnp.float64):
            raise UsageError(
                f"x0 must be a float32 or float64 array, got dtype {x0.dtype}; the metrics and the "
                "scan need float32 at least: pass x0.astype(jnp.float32)."
            )
        if 0 in x0.shape:
            raise UsageError(f"x0 has an empty batch axis (shape {x0.shape}); pass at least one trajectory.")
        if not isinstance(x0, jax.core.Tracer) and not _all_finite(x0):
            raise UsageError("x0 contains NaN or infinite values; pass finite initial tokens.")
    check_depth(num_layers, save_every)  # the plan's check (`rankdyn._run._plan`), one definition
    if layer.num_layers is not None and not layer.cycle and layer.num_layers < num_layers:
        raise UsageError(
            f"the layer holds per-layer weights for {layer.num_layers} layers but num_layers={num_layers}; "
            "draw weights for every layer or use shared weights."
        )
    return x0
