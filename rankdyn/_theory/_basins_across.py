r"""Basins across a parameter: where many starts of a map $f(x, p)$ end, at each of many $p$.

`basins_across` runs $x_{t+1} = f(x_t, p)$ for every start and every parameter value in one
batched program (``jax.vmap`` over both), then labels each trajectory's limit:

- its **period** $k \le$ ``max_period``: the smallest $k$ with
  $\|x_{T+k} - x_T\|_\infty \le$ ``settle_tol`` after the horizon $T$ (a fixed point is $k = 1$);
- its **status** (``result``, a `rankdyn.RESULTS` member): ``successful`` when it settled on
  such a cycle, ``not_settled`` when no $k$ is one (a longer cycle, a torus, chaos, or a
  transient longer than $T$), ``nonfinite`` when the trajectory left the finite numbers;
- and a user **label** of the limit (``label(x_T, p) -> int``, traced), e.g. the sign of a
  coordinate, or an equilibrium class up to the symmetries of the map.

The same function takes a layer family ``family(p) -> SelfAttentionLayer`` when the starts are
token matrices ``(S, n, d)``: the layers of every parameter value are built on the host, stacked,
and indexed inside the one program (the layer's arrays need not be traceable in $p$); the
default label is then the token class of `rankdyn.theory.token_class_label` (rank and coincidence
pattern, the identity permutation only: pass ``label=`` with the map's permutations).

An attractor is the pair (period, label), the same at every parameter value: attractors are
matched across $p$ by their labels, never by the distance between their points (which moves with
$p$ and mixes up attractors that pass near each other). Fractions come with Wilson 95% intervals
(`wilson_interval`), and the per-start labels serve basin maps over a grid of starts.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .._arguments import check_count
from .._errors import UsageError
from ._basins import wilson_interval

__all__ = ["BasinScan", "basins_across"]


@dataclasses.dataclass(frozen=True, eq=False)
class BasinScan:
    """Basins of a map at each parameter value (`basins_across`).

    Attributes:
        params: ``(P,)`` the parameter values.
        result: ``(P, S)`` each start's status, a `rankdyn.RESULTS` member: ``successful`` (it
            settled on a cycle of period at most ``max_period``), ``not_settled`` or
            ``nonfinite``; ``status`` gives the names.
        period: ``(P, S)`` each start's limit period where ``result`` is ``successful`` (0 elsewhere).
        label: ``(P, S)`` the user label of each start's limit where ``result`` is ``successful``
            (0 elsewhere).
        attractors: the attractors ``(period, label)``, sorted; ``attractor`` indexes them.
        attractor: ``(P, S)`` each start's attractor index (-1 where ``result`` is not
            ``successful``: no attractor).
        fractions, lo, hi: ``(P, A)`` basin fractions of each attractor and their Wilson 95%
            interval.
        not_settled: ``(P,)`` the fraction of starts whose ``result`` is not ``successful``.
        horizon: the number of steps before the limit was labelled.
    """

    params: np.ndarray
    result: Any  # a `rankdyn.RESULTS` member (P, S)
    period: np.ndarray
    label: np.ndarray
    attractors: tuple
    attractor: np.ndarray
    fractions: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    not_settled: np.ndarray
    horizon: int

    @property
    def status(self) -> np.ndarray:
        """``(P, S)`` the name of each start's ``result``: ``"successful"``, ``"not_settled"`` or
        ``"nonfinite"``."""
        from .._results import RESULTS, results_in

        out = np.full(self.period.shape, "successful", dtype=object)
        for name in ("not_settled", "nonfinite"):
            out[np.asarray(results_in(self.result, getattr(RESULTS, name)))] = name
        return out

    def fraction(self, period: int, label: int = 0) -> np.ndarray:
        """``(P,)`` the basin fraction of the attractor ``(period, label)`` (0 where it is absent)."""
        key = (int(period), int(label))
        if key not in self.attractors:
            return np.zeros(self.params.shape)
        return self.fractions[:, self.attractors.index(key)]


def basins_across(
    f: Callable,
    starts,
    params,
    *,
    horizon: int = 1000,
    max_period: int = 8,
    settle_tol: float = 1e-8,
    label: Callable | None = None,
) -> BasinScan:
    r"""Basin fractions of a map's attractors at every parameter value, attractors matched by label.

    Arguments:
        f: ``f(x, p) -> x``, a JAX map of an ``(m,)`` state; or, with ``(S, n, d)`` starts, a family
            ``f(p) -> SelfAttentionLayer`` (one structure at every value, shared weights, no dropout).
        starts: ``(S, m)`` or ``(S, n, d)`` the starts (the same at every parameter value, so
            fractions are paired).
        params: ``(P,)`` the parameter values.
        horizon: $T$, the steps before the limit is examined.
        max_period: the longest cycle looked for.
        settle_tol: $\|x_{T+k} - x_T\|_\infty$ below this makes $k$ a period.
        label: ``label(x_T, p) -> int`` (traced), what distinguishes attractors of one period
            (default: 0, the period alone; for a layer family, `token_class_label`).

    Returns:
        A `BasinScan`.

    Raises:
        UsageError: for starts that are not ``(S, m)`` or ``(S, n, d)``, non-finite starts or
            parameters, an empty parameter list, a horizon or ``max_period`` below 1, a map whose
            output shape differs, or layers of different structures, per-layer weights or dropout.
    """
    x0 = np.asarray(starts, dtype=float)
    ps = np.asarray(params, dtype=float).reshape(-1)
    if x0.ndim not in (2, 3) or x0.shape[0] == 0:
        raise UsageError(f"starts must be (S, m) or (S, n, d) with S >= 1, got shape {x0.shape}.")
    if ps.size == 0:
        raise UsageError("params is empty: give at least one parameter value.")
    if not (np.all(np.isfinite(x0)) and np.all(np.isfinite(ps))):
        raise UsageError("starts and params must be finite (NaN or inf found).")
    horizon, max_period = check_count(horizon, "horizon"), check_count(max_period, "max_period")
    if not (math.isfinite(settle_tol) and settle_tol > 0):
        raise UsageError(f"settle_tol must be finite and > 0, got {settle_tol}.")
    values = ps
    if x0.ndim == 3:  # a layer family: the map of the flattened tokens, indexed by parameter
        f, dt, label = _layer_map(f, ps, x0.shape[1:], label)
        x0, ps = x0.reshape(x0.shape[0], -1), np.arange(ps.size, dtype=float)
    else:
        dt = jnp.asarray(0.0).dtype
    out = jax.eval_shape(f, jax.ShapeDtypeStruct(x0.shape[1:], dt), jax.ShapeDtypeStruct((), dt))
    if getattr(out, "shape", None) != x0.shape[1:]:
        raise UsageError(
            f"the map must return a state of the shape it is given: f(x, p) with x of shape {x0.shape[1:]} "
            f"returned {getattr(out, 'shape', type(out).__name__)}."
        )
    lab = label if label is not None else (lambda x, p: jnp.zeros((), jnp.int32))
    period, labels = _run(f, lab, int(horizon), int(max_period), float(settle_tol))(
        jnp.asarray(x0, dt), jnp.asarray(ps, dt)
    )
    from .._results import RESULTS, results_where

    period = np.asarray(period)
    # The loop's codes: a period k >= 1, 0 for no period up to max_period, -1 for non-finite.
    result = results_where(
        period > 0, RESULTS.successful, results_where(period == 0, RESULTS.not_settled, RESULTS.nonfinite)
    )
    period, labels = np.maximum(period, 0), np.where(period > 0, np.asarray(labels), 0)
    keys = sorted({(int(k), int(v)) for k, v in zip(period.ravel(), labels.ravel(), strict=True) if k > 0})
    index = {key: i for i, key in enumerate(keys)}
    att = np.full(period.shape, -1)
    for key, i in index.items():
        att[(period == key[0]) & (labels == key[1])] = i
    total = x0.shape[0]
    counts = (
        np.stack([(att == i).sum(axis=1) for i in range(len(keys))], axis=1)
        if keys
        else np.zeros((ps.size, 0))
    )
    lo, hi = wilson_interval(counts, total)
    return BasinScan(
        params=values,
        result=result,
        period=period,
        label=labels,
        attractors=tuple(keys),
        attractor=att,
        fractions=counts / total,
        lo=lo,
        hi=hi,
        not_settled=(period == 0).mean(axis=1),
        horizon=int(horizon),
    )


def _layer_map(family, values, shape, label):
    """The layers at ``values`` stacked: ``(f(x, i), dtype, label)`` with ``f`` the layer of index
    ``i`` acting on flattened ``(n d,)`` tokens."""
    import equinox as eqx

    from ._token_classes import token_class_label

    layers = [family(float(v)) for v in values]
    tree = jax.tree.structure(layers[0])
    fixed = [
        np.asarray(a) for a in jax.tree.leaves(eqx.filter(layers[0], eqx.is_inexact_array, inverse=True))
    ]
    for layer in layers[1:]:
        same = jax.tree.structure(layer) == tree and all(
            np.shape(u) == np.shape(v) for u, v in zip(jax.tree.leaves(layer), jax.tree.leaves(layers[0]))
        )
        others = jax.tree.leaves(eqx.filter(layer, eqx.is_inexact_array, inverse=True)) if same else []
        if not (same and all(np.array_equal(np.asarray(a), b) for a, b in zip(others, fixed))):
            raise UsageError(
                "the family must build layers of one structure at every parameter value (same shapes, "
                "heads, blocks, masks and switches); only floating arrays may depend on the parameter."
            )
    first = layers[0]
    if first.num_layers is not None or first.has_dropout:
        raise UsageError(
            "basins of a layer family need one map iterated: shared weights (not a per-layer stack) "
            "and no dropout."
        )
    if (first.num_tokens, first.dim) != tuple(shape):
        raise UsageError(
            f"starts must be (S, {first.num_tokens}, {first.dim}) for these layers, got (S, {shape[0]}, "
            f"{shape[1]})."
        )
    parts = [eqx.partition(layer, eqx.is_inexact_array) for layer in layers]
    stacked = jax.tree.map(lambda *a: jnp.stack(a), *[a for a, _ in parts])
    static, at = parts[0][1], jnp.asarray(values, first.weights.w_v.dtype)
    n, d = shape

    def f(x, i):
        one = jax.tree.map(lambda a: a[i.astype(jnp.int32)], stacked)
        return eqx.combine(one, static)(x.reshape(n, d))[0].reshape(-1)

    lab = token_class_label(n) if label is None else label
    # The label reads the parameter's value, not its index.
    return f, first.weights.w_v.dtype, lambda x, i: lab(x.reshape(n, d), at[i.astype(jnp.int32)])


#: Seconds of map iterations between two checks for Ctrl-C / SIGTERM (a piece of the horizon).
PIECE_SECONDS = 1.0


def _run(f, label, horizon, max_period, tol):
    """The compiled batch: every start at every parameter value, ``(P, S)`` periods and labels.

    The horizon runs in pieces of about `PIECE_SECONDS` (the piece's length is a traced loop bound,
    so one program serves every piece), with a check for Ctrl-C and SIGTERM between pieces; the
    same iterations in the same order as one loop, so the same bits.
    """

    def advance(x, p, k):
        return jax.lax.fori_loop(0, k, lambda _, z: f(z, p), x)

    def classify(x_t, p):
        # The first k <= max_period with |f^k(x) - x| <= tol, carried alone (no array of length
        # max_period: memory does not depend on it), stopping once every start has settled.
        def step(carry):
            j, z, _ = carry
            z = f(z, p)
            return j + 1, z, jnp.where(jnp.max(jnp.abs(z - x_t)) <= tol, j + 1, 0)

        _, _, k = jax.lax.while_loop(lambda c: (c[0] < max_period) & (c[2] == 0), step, (0, x_t, 0))
        k = jnp.where(jnp.all(jnp.isfinite(x_t)), k, -1)
        return k, jnp.asarray(label(x_t, p), jnp.int32)

    def batched(fn, *rest):  # starts inside, parameter values outside: (P, S, ...)
        return jax.jit(jax.vmap(jax.vmap(fn, in_axes=(0, None, *rest)), in_axes=(0, 0, *rest)))

    program = _Pieces(batched(advance, None), batched(classify), horizon)
    return program


class _Pieces:
    """``(x0 (S, m), ps (P,)) -> (period, label)``: the horizon advanced piece by piece, then the
    period search (``classify``, one compiled program)."""

    def __init__(self, advance, classify, horizon: int):
        self.advance, self.classify, self.horizon = advance, classify, horizon

    def __call__(self, x0, ps):
        import time

        from .._run._interrupt import check_interrupt

        x = jnp.broadcast_to(x0, (ps.shape[0], *x0.shape))
        done, piece = 0, 1
        while done < self.horizon:
            check_interrupt()
            k = min(piece, self.horizon - done)
            t0 = time.perf_counter()
            x = self.advance(x, ps, jnp.int32(k))
            x.block_until_ready()
            spent = time.perf_counter() - t0
            done += k
            # The next piece takes about PIECE_SECONDS (the first one also paid the compile).
            piece = max(1, int(k * min(8.0, PIECE_SECONDS / max(spent, 1e-6))))
        check_interrupt()
        return self.classify(x, ps)
