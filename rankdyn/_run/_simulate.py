r"""`simulate`: iterate a layer over depth and record metrics, as a thin layer over `rankdyn._run._scan`.

$X^{(t+1)} = F_t(X^{(t)})$ for $t = 0..T-1$, with $F_t$ a `SelfAttentionLayer` (weights of depth
$t$ when they differ per layer), eqs. (2)-(3). Metrics are saved at layers $0, k, 2k, \dots, T$.
By default only their batch statistics are kept (streamed inside the compiled scan, so memory
grows with neither the batch nor, beyond one number per saved layer, the depth);
per-trajectory values and full states are opt-in.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any

import equinox as eqx
import jax
import numpy as np
from jaxtyping import Array, ArrayLike, Bool, Float, Int, PRNGKeyArray

from .._errors import UsageError
from .._model._layer import SelfAttentionLayer
from .._model._tokens import TokenSampler
from .._observe._metric_observer import MetricObserver, check_observer, parse_metrics
from .._observe._stats import Summary, summarize
from .._observe._tolerances import RANK_TOL
from ._autotune import tuned_chunk
from ._input_checks import check_logits, check_options, strong, validate_run
from ._memory import check_memory
from ._plan import SimulatePlan
from ._scan import run_batch
from ._sharding import resolve_mesh
from ._sizing import auto_chunk

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
        result: ``(*batch,)`` the status of each trajectory, a member of the one
            `rankdyn.RESULTS` (`status_of`), whatever was kept: ``nonfinite`` where a state or a
            recorded metric became NaN or infinite; else, where a token became zero (its
            direction metrics NaN there), ``underflow`` for a layer without a normalisation
            (``placement="none"``: the token underflowed or cancelled exactly) and ``degenerate``
            for one with (a normalisation met a zero row, e.g. opposite tokens averaged; such
            trajectories are kept); ``successful`` otherwise.

    Properties ``degenerate`` and ``nonfinite`` read ``result`` as ``(*batch,)`` booleans.
    """

    layers: Int[Array, " s"]
    summary: Summary
    metrics: dict[str, Float[Array, "..."]] | None
    states: Float[Array, "*batch s n d"] | None
    # A `rankdyn.RESULTS` member (Any: rankdyn/_results.py imports Optimistix and Diffrax, which
    # this module loads only when a run ends, so that importing it stays light).
    result: Any

    @property
    def degenerate(self) -> Bool[ArrayLike, "*batch"]:
        """``(*batch,)`` True where ``result`` is ``degenerate`` or ``underflow`` (a token became
        zero); False where it is ``nonfinite``, which takes precedence."""
        from .._results import RESULTS, results_in

        return results_in(self.result, RESULTS.degenerate, RESULTS.underflow)

    @property
    def nonfinite(self) -> Bool[ArrayLike, "*batch"]:
        """``(*batch,)`` True where ``result`` is ``nonfinite``."""
        from .._results import RESULTS, results_in

        return results_in(self.result, RESULTS.nonfinite)


def status_of(nonfinite, degenerate, placement: str):
    """Each trajectory's `rankdyn.RESULTS` member from its flags (the rule of `Trajectory.result`).

    ``degenerate`` folds two causes the scan records together: a normalisation that met a zero row
    and a zero token at a saved layer. Without a normalisation (``placement="none"``) no
    normalisation runs, so every degenerate trajectory is a zero token: ``underflow`` (the CLI's
    ``underflow`` count, `rankdyn._commands.simulate`); with one, ``degenerate``. No number of the
    run is recomputed.
    """
    from .._results import RESULTS, results_where  # Optimistix and Diffrax load only when used

    zero = RESULTS.underflow if placement == "none" else RESULTS.degenerate
    return results_where(nonfinite, RESULTS.nonfinite, results_where(degenerate, zero, RESULTS.successful))


def simulate(
    layer: SelfAttentionLayer,
    x0: Float[ArrayLike, "*batch n d"] | TokenSampler,
    num_layers: int,
    *,
    save_every: int = 1,
    save_states: bool = False,
    per_trajectory: bool = False,
    metrics: str | Iterable[str] | None = None,
    observe: Callable[[Array, Array, SelfAttentionLayer], dict[str, Array]] | None = None,
    rank_tol: float = RANK_TOL,
    key: PRNGKeyArray | None = None,
    progress: bool = False,
    chunk: int | None = None,
    devices=None,
    plan: SimulatePlan | None = None,
) -> Trajectory:
    r"""Iterate ``layer`` for ``num_layers`` layers from ``x0`` and record metrics.

    $X^{(t+1)} = F_t(X^{(t)})$ with $F_t$ = ``layer`` at depth $t$ (eqs. 2-3), compiled as one
    ``lax.scan`` over depth (`rankdyn._run._scan`), the batch walked in chunks of ``chunk``.

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
        observe: ``(t, x, args) -> dict of arrays`` computed at saved layers instead of the
            default metrics (``eps_min`` is always added), after Diffrax's ``SaveAt(fn=...)``:
            ``t`` is the layer index of the record, ``x`` one trajectory's ``(n, d)`` tokens,
            ``args`` the layer (the signature of `rankdyn.flow.solve_flow`'s observers too).
            Pass the same function object on repeated calls: a new lambda each time means a
            new compilation.
        rank_tol: relative tolerance of the numerical rank in the default metrics.
        key: PRNG key, required when the layer uses dropout (trajectory i uses ``fold_in(key, i)``).
        progress: show a progress bar (each chunk's depth is split into ~20 compiled pieces).
        chunk: trajectories advanced together (vmapped) by one compiled program, on each
            device. Default on CPU: the rule (about 2 MiB of tokens per chunk), or on one device
            the fastest of a few cache-sized candidates that compute every trajectory to the
            same bits as the rule, measured at the first sizeable run of a shape and remembered
            per machine (`rankdyn._run._autotune`; ``RANKDYN_CHUNK_TUNING=0`` keeps the rule);
            the whole batch on accelerators. The batch statistics are folded in batch order,
            so for a given chunk the results are the same bits on any number of devices.
        devices: spread the chunks over devices (`jax.sharding`, mesh axis ``"batch"``; each
            device runs whole chunks): None (default) runs on the default device; ``"all"``, an
            int k (first k devices), a list of devices or a `rankdyn.sweep.batch_mesh`.
        plan: the run's `rankdyn.plans.SimulatePlan` when its caller built it beforehand
            (the command line builds it before JAX loads, and refuses from it); it must describe
            this run (the same sizes, options, attention path and block as the layer's), and its
            memory estimate (with the weights, when it counts them) is the one checked. None:
            built here from the arguments.

    Returns:
        A `Trajectory`.

    Raises:
        UsageError: (a ValueError) naming the argument: shapes that do not match the layer,
            non-finite or non-float32/64 x0, bad depths, unknown metric names, ``rank_tol``
            outside (0, 1), bad ``devices``, an ``observe`` that does not return a dict of arrays,
            weights whose attention logits can overflow the dtype, a dropout layer without a
            key, a run whose estimated memory exceeds the available memory, a batch beyond 2^31
            trajectories drawn by a sampler or with dropout, or a ``plan`` of another run.
    """
    x0 = validate_run(layer, x0, num_layers, save_every)
    check_options(rank_tol, devices)
    check_logits(layer, x0, np.dtype(x0.dtype))
    if observe is not None:
        x = jax.ShapeDtypeStruct((layer.num_tokens, layer.dim), x0.dtype)
        t = jax.ShapeDtypeStruct((), np.int32)
        check_observer(observe, t, x, layer, what="simulate", args_name="the layer")
    # A weakly typed leaf (e.g. dqk from a Python float) and a strong one of the same dtype are
    # different programs to jit: make every array leaf strong so both reuse one compilation.
    layer, x0 = jax.tree.map(strong, (layer, x0))
    if layer.dropout > 0 and key is None:
        raise UsageError("the layer uses dropout: pass `key=` to simulate.")
    names = parse_metrics(metrics)
    if observe is None:
        observe = MetricObserver(names, rank_tol)
    eps = metrics is None or "eps_min" in names
    per_trajectory = per_trajectory or save_states
    sampler = isinstance(x0, TokenSampler)
    batch_shape = (x0.batch,) if sampler else x0.shape[:-2]
    num = math.prod(batch_shape)
    n, d = layer.num_tokens, layer.dim
    itemsize = x0.dtype.itemsize
    own = SimulatePlan.for_layer(
        layer,
        batch=max(num, 1),
        itemsize=itemsize,
        num_layers=num_layers,
        save_every=save_every,
        rank_tol=rank_tol,
        chunk=chunk,
        metrics=names,
        per_trajectory=per_trajectory,
        save_states=save_states,
    )
    if plan is None:
        plan = own
    elif (why := plan.differs(own) if isinstance(plan, SimulatePlan) else type(plan).__name__) is not None:
        raise UsageError(
            f"plan= describes another run ({why}); "
            "build it with SimulatePlan.for_layer from this layer and these arguments, or pass none."
        )
    mesh = resolve_mesh(devices)
    if chunk is None:
        # Trajectories per compiled program, whatever the device count (each device runs whole
        # chunks): the numbers do not depend on how many devices share the batch.
        backend = jax.default_backend() if mesh is None else mesh.devices.flat[0].platform
        chunk = auto_chunk(max(num, 1), n, d, itemsize, backend)
        if mesh is None and backend == "cpu" and not isinstance(x0, jax.core.Tracer):
            # Measured once per machine and shape (rankdyn._run._autotune), as XLA autotunes.
            flat0 = x0 if sampler else x0.reshape((num, n, d))
            drop = key if layer.dropout > 0 else None
            chunk = tuned_chunk(
                layer, observe, flat0, num, num_layers, save_every=save_every, eps=eps, drop_key=drop
            )
    chunk = min(int(chunk), num)
    if jax.default_backend() == "cpu":
        check_memory(
            plan.memory(chunk=chunk),
            what="simulate",
            fix="use a smaller chunk, a larger save_every, "
            "or per_trajectory=False and save_states=False (then only statistics are kept).",
        )
    if sampler or layer.dropout > 0:  # trajectory i's tokens or key come from fold_in(key, i), i 32-bit
        plan.check_indices()
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
    layers = jax.device_put(np.arange(0, num_layers + 1, save_every))  # no eager program to compile
    summary = summarize(stats, layers, num, nonfinite, degenerate)
    shape = lambda v: v.reshape(batch_shape + v.shape[1:])  # noqa: E731
    result = status_of(shape(per["nonfinite"]), shape(per["degenerate"]), layer.placement)
    return Trajectory(
        layers=layers,
        summary=summary,
        metrics={k: shape(v) for k, v in per["values"].items()} if "values" in per else None,
        states=shape(per["states"]) if save_states else None,
        result=result,
    )
