r"""`covariant_vectors_map` (any JAX map) and `covariant_vectors` (the layer map): checks, the
memory refusal before compute, and Ginelli's algorithm (`rankdyn._lyapunov._clv`)."""

from __future__ import annotations

from collections.abc import Callable

import equinox as eqx
import jax
import numpy as np

from .._arguments import check_count
from .._errors import UsageError
from .._model._layer import SelfAttentionLayer
from .._model._norms import SphereNorm
from .._model._tokens import TokenSampler
from .._run._input_checks import check_logits, strong, validate_run
from ._budget import check_clv_memory
from ._clv import assemble_clv, check_clv_counts, ginelli
from ._clv_result import CovariantVectors
from ._layer import _LayerStart, _LayerStep, spectrum_dim, uses_tangent_space
from ._qr import _map_start, _MapStep, check_key, check_map, jvp_columns

__all__ = ["covariant_vectors_map", "covariant_vectors"]


class _TimedMapStep(eqx.Module):
    """``propagate`` for a map ``step(x, t)`` of the state and the step index (non-autonomous)."""

    step: Callable

    def __call__(self, x, q, t):
        return jvp_columns(lambda z: self.step(z, t), x, q)

    def project(self, x, y):
        return y


def _chunk_of(chunk, num: int) -> int:
    return num if chunk is None else min(check_count(chunk, "chunk"), num)


def covariant_vectors_map(
    step: Callable,
    x0,
    num_steps: int,
    *,
    k: int | None = None,
    discard: int = 100,
    discard_backward: int = 100,
    num_unstable: int | None = None,
    time_dependent: bool = False,
    key,
    chunk: int | None = None,
) -> CovariantVectors:
    r"""Covariant Lyapunov vectors of a map ``step: (m,) -> (m,)`` on $\mathbb R^m$ (Ginelli).

    Forward QR $J_t Q_t = Q_{t+1} R_{t+1}$ for ``discard + num_steps + discard_backward`` steps,
    backward $C_t = R_{t+1}^{-1} C_{t+1} D_t^{-1}$, $V_t = Q_t C_t$ at the ``num_steps``
    recorded steps (`rankdyn._lyapunov._clv`). E.g. for Hénon ($a = 1.4$, $b = 0.3$) the
    exponents are about $0.419$ and $-1.623$, and $J_t V_t \parallel V_{t+1}$ column by column.

    Arguments:
        step: a JAX function of one state ``(m,)`` (``(x, t)`` with ``time_dependent``, ``t`` the
            int32 step index counted from the start of the run, so a fixed sequence of maps
            $f_t$ can be followed); pass the same function object on repeated calls.
        x0: ``(m,)`` or ``(batch, m)`` initial states.
        num_steps: recorded steps $T$ (vectors stored at each).
        k: covariant vectors computed (1 <= k <= m; default m). With k < m they are those of the
            k largest exponents.
        discard: forward transient (steps before the first recorded one), so that $Q_t$ has
            converged to the backward Lyapunov vectors.
        discard_backward: backward transient (steps after the last recorded one), so that $C$ has
            converged. Both converge like $e^{-t \min_j(\lambda_j - \lambda_{j+1})}$.
        num_unstable: the dimension of the unstable subspace for ``angles`` (default: each
            trajectory's number of positive exponents).
        key: PRNG key of the random starts (the initial $Q$ and the final $C$; required).
        chunk: trajectories computed together (default: all).

    Returns:
        A `CovariantVectors` (``space="map"``, ``unit="per step"``).

    Raises:
        UsageError: as `rankdyn.lyapunov_spectrum_map` for ``step`` and ``x0``; ``k``, the step
            counts or ``num_unstable`` out of range; a run whose stored factors do not fit in
            memory (before any compute).
    """
    key = check_key(key, "covariant_vectors_map")
    x0 = check_map(step, x0, time_dependent)
    m = x0.shape[-1]
    k = m if k is None else k
    check_clv_counts(num_steps, k, m, discard, discard_backward, num_unstable)
    flat = x0.reshape(-1, m)
    chunk = _chunk_of(chunk, flat.shape[0])
    check_clv_memory(flat.shape[0], chunk, m, k, num_steps, discard_backward, flat.dtype.itemsize, m)
    prop = _TimedMapStep(step) if time_dependent else _MapStep(step)
    out = ginelli(
        prop,
        _map_start(k),
        flat,
        k,
        num_steps,
        discard,
        discard_backward,
        key=key,
        chunk=chunk,
        num_unstable=num_unstable,
    )
    return assemble_clv(
        *out,
        x0.shape[:-1],
        space="map",
        dim=m,
        unit="per step",
        num_steps=num_steps,
        discard=discard,
        discard_backward=discard_backward,
    )


def covariant_vectors(
    layer: SelfAttentionLayer,
    x0,
    num_layers: int,
    *,
    k: int | None = None,
    discard: int = 100,
    discard_backward: int = 100,
    num_unstable: int | None = None,
    key,
    chunk: int | None = None,
) -> CovariantVectors:
    r"""Covariant Lyapunov vectors of the layer map $X^{(t+1)} = F_t(X^{(t)})$ (eqs. 2-3; Ginelli).

    The tangent vectors live where `rankdyn.lyapunov_spectrum`'s do: the tangent space of
    $(\mathbb S^{d-1})^n$ with post sphere-LN (projected after every layer), else
    $\mathbb R^{nd}$; one QR per layer, then the backward pass (`covariant_vectors_map`).

    Arguments:
        layer: a `SelfAttentionLayer` (shared, per-layer or cycled weights; no dropout).
        x0: ``(n, d)`` or ``(*batch, n, d)`` initial tokens (scaled onto the spheres there).
        num_layers: recorded layers $T$; the run has ``discard + num_layers + discard_backward``.
        k: covariant vectors, 1 <= k <= `rankdyn.lyapunov.spectrum_dim` (default: all).
        discard, discard_backward, num_unstable, key, chunk: as `covariant_vectors_map`.

    Returns:
        A `CovariantVectors` (``space`` ``"tangent"`` or ``"full"``, vectors ``(..., T, n*d, k)``,
        states ``(..., T, n, d)``).

    Raises:
        UsageError: as `rankdyn.lyapunov_spectrum` for the layer and ``x0``; ``k``, the depths
            or ``num_unstable`` out of range; a run whose stored factors do not fit in memory.
    """
    key = check_key(key, "covariant_vectors")
    if isinstance(x0, TokenSampler):
        raise UsageError("x0 must be an array of tokens here; draw one with rankdyn.initial_tokens.")
    depth = (
        discard + num_layers + discard_backward
        if all(isinstance(v, (int, np.integer)) and v >= 0 for v in (discard, num_layers, discard_backward))
        else 0  # check_clv_counts names a bad one below
    )
    x0 = validate_run(layer, x0, depth, 1)
    if layer.has_dropout:
        raise UsageError(
            "the layer has dropout, a random map with no covariant vectors; build it with dropout 0."
        )
    tangent = uses_tangent_space(layer)
    dim = spectrum_dim(layer)
    k = dim if k is None else k
    check_clv_counts(num_layers, k, dim, discard, discard_backward, num_unstable, what="num_layers")
    check_logits(layer, x0, np.dtype(x0.dtype))
    if isinstance(layer.norm, SphereNorm) and np.any(np.all(np.asarray(x0) == 0, axis=-1)):
        raise UsageError(
            "x0 has a zero token: the sphere LayerNorm x/|x| is undefined there; pass nonzero tokens."
        )
    layer, x0 = (strong(v) for v in (layer, x0))
    n, d = layer.num_tokens, layer.dim
    flat = x0.reshape((-1, n, d))
    chunk = _chunk_of(chunk, flat.shape[0])
    scores = layer.num_heads * n * n
    check_clv_memory(
        flat.shape[0], chunk, n * d, k, num_layers, discard_backward, flat.dtype.itemsize, n * d, scores
    )
    if tangent:
        flat = jax.vmap(lambda z: layer.norm(z)[0])(flat)
    out = ginelli(
        _LayerStep(layer, tangent),
        _LayerStart(k, tangent),
        flat,
        k,
        num_layers,
        discard,
        discard_backward,
        key=key,
        chunk=chunk,
        num_unstable=num_unstable,
    )
    return assemble_clv(
        *out,
        x0.shape[:-2],
        space="tangent" if tangent else "full",
        dim=dim,
        unit="per layer",
        num_steps=num_layers,
        discard=discard,
        discard_backward=discard_backward,
    )
