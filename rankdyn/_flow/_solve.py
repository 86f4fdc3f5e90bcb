r"""Integrating the flow with Diffrax: batched over trajectories and temperatures, statistics streamed.

The saved times $0 = t_0 < t_1 < \dots < t_{S-1} = T$ split $[0, T]$ into intervals. Each interval
is one `diffrax.diffeqsolve` from the state of the previous one, and the state at its end is
projected back to the sphere, $x_i \leftarrow x_i / |x_i|$ (the field is tangent, so the exact flow
never leaves it). The largest $\big||x_i| - 1\big|$ met before a projection is reported as the
``drift``: the integrator's own error, never silently absorbed. Solvers:

- ``tsit5`` / ``dopri5``: adaptive, with a PID step-size controller (``rtol``, ``atol``);
- ``euler`` / ``rk4``: fixed step ``dt`` (the last step of an interval is shortened to land on
  the saved time), as the peers' scripts integrate.

Trajectories are vmapped in chunks; temperatures are vmapped too (one compiled program for the
whole phase diagram). As each piece of a chunk finishes, its `FlowObserver` metrics at its saved
times are folded into running batch statistics one trajectory at a time, in batch order
(`rankdyn._run._fold`, as `rankdyn.simulate` does), so the statistics do not depend on ``chunk``
to the bit, and memory does not grow with the batch unless states or per-trajectory values are
asked for.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array

from .._errors import SolveError, UsageError
from .._observe._metric_observer import check_observer
from .._observe._stats import Summary
from .._results import RESULTS
from .._run._fold import fold_in_order
from .._run._interrupt import check_interrupt
from ._arguments import SOLVE_FLOW_FIXES, check_flow_arguments, check_flow_memory, piece_length, resolve_chunk
from ._field import FlowField
from ._flow_metrics import FlowObserver, WithClustered, join_chunks
from ._schemes import scheme_solver
from ._solvers import (
    ADAPTIVE_SOLVERS as ADAPTIVE_SOLVERS,
    DEFAULT_ATOL as DEFAULT_ATOL,
    DEFAULT_RTOL as DEFAULT_RTOL,
    RK4 as RK4,
    SOLVERS as SOLVERS,
    ProjectedSolver as ProjectedSolver,
    _check_positive,
    _solver_and_controller,
    host_checked_times,
)

__all__ = ["solve_flow", "FlowSolution", "uniform_times"]


class FlowSolution(eqx.Module):
    """The result of `solve_flow`. With a vector of inverse temperatures every field has a leading beta axis.

    Attributes:
        times: ``(S,)`` the saved times.
        beta: the inverse temperature(s).
        summary: batch statistics per saved time (`rankdyn.Summary`; its ``layers`` are the
            saved-time indices); for a vector of inverse temperatures, one `Summary` whose
            arrays have a leading beta axis.
        time_to_cluster: ``(batch,)`` first saved time at which the diameter is <= ``eps``
            (inf if never).
        drift: largest $||x_i| - 1|$ before a projection, over all trajectories and intervals.
        steps_limit_hit: trajectories in which some interval stopped at ``max_steps`` (their
            later values are NaN and left out of the statistics).
        num_steps: solver steps taken, summed over trajectories and intervals.
        result: ``(batch,)`` a `RESULTS` member per trajectory (the name and type of
            `rankdyn.equilibria.EquilibriumSolution.result`).
        metrics: metric name -> ``(batch, S)`` per-trajectory values, or None (the name of
            `rankdyn.Trajectory.metrics`).
        states: ``(batch, S, n, d)`` states from t = 0 (the layout of
            `rankdyn.Trajectory.states`), or None; on the sphere, except under the schemes that
            move the radius (``pre``, ``mix``, ``peri``), whose states are the tokens $r_j\theta_j$.
    """

    times: Array
    beta: Array
    summary: Summary
    time_to_cluster: Array
    drift: Array
    steps_limit_hit: Array
    num_steps: Array
    result: RESULTS
    metrics: dict | None
    states: Array | None

    @property
    def successful(self) -> Array:
        """``(batch,)`` True where the trajectory's `result` is ``RESULTS.successful``."""
        return self.result == RESULTS.successful

    def summary_at(self, i: int) -> Summary:
        """The `Summary` of the ``i``-th inverse temperature of a vector of them."""
        if self.beta.ndim == 0:
            raise UsageError("summary_at(i) indexes a vector of inverse temperatures; this solution has one.")
        return jax.tree.map(lambda a: a[i], self.summary)

    def stat(self, name: str, which: str = "mean") -> np.ndarray:
        """One statistic of one metric, ``(S,)``, or ``(beta, S)`` for a vector of temperatures."""
        return np.asarray(getattr(self.summary, which)[name])


def uniform_times(t1: float, saves: int) -> np.ndarray:
    """``saves`` times uniform on ``[0, t1]`` (both ends included)."""
    return np.linspace(0.0, float(t1), int(saves))


def _validate(field, x0, t1, beta, times, saves):
    if not isinstance(field, FlowField):
        raise UsageError(f"field must be a rankdyn.flow.FlowField, got {type(field).__name__}.")
    b = np.asarray(beta, dtype=float)
    if b.ndim > 1 or b.size == 0 or not np.all(np.isfinite(b)) or np.any(b < 0):
        raise UsageError(f"beta must be a finite number >= 0 or a 1-D array of them, got {beta!r}.")
    if times is None:
        t1 = _check_positive("t1 (the time horizon T)", t1)
        if isinstance(saves, bool) or not isinstance(saves, (int, np.integer)) or saves < 2:
            raise UsageError(f"saves (the number of saved times) must be an integer >= 2, got {saves!r}.")
        times = uniform_times(t1, saves)
    else:
        times = np.asarray(times, dtype=float)
        if times.ndim != 1 or times.size < 2 or times[0] != 0 or np.any(np.diff(times) <= 0):
            raise UsageError("times must be an increasing 1-D array starting at 0 with at least 2 entries.")
    x0 = jnp.asarray(x0)
    if x0.ndim == 2:
        x0 = x0[None]
    n, d = field.num_tokens, field.dim
    if x0.ndim != 3 or x0.shape[1:] != (n, d) or x0.shape[0] < 1:
        raise UsageError(f"x0 must be ({n}, {d}) or (batch, {n}, {d}) for this field, got shape {x0.shape}.")
    if not np.all(np.isfinite(np.asarray(x0))):  # host copies: eager JAX compiles a program per op
        raise UsageError("x0 has non-finite entries; pass finite tokens.")
    nrm = jnp.linalg.norm(x0, axis=-1, keepdims=True)
    if np.any(np.asarray(nrm) == 0):
        raise UsageError("x0 has a zero token, which has no direction on the sphere; pass non-zero tokens.")
    # A scheme that moves the radius starts from x0's own radii; the others from the sphere.
    return (x0 if field.radial else x0 / nrm), b, times


@eqx.filter_jit
def _piece(field, observer, x, beta, ts, real, cfg):
    """Integrate ``x`` (``(nb, c, n, d)``) over ``ts`` (saving at each): every trajectory's metrics
    at the saved times, which of them count, and the flags (the statistics are folded outside).

    One `diffrax.diffeqsolve` per trajectory; the observer sees the state projected to the
    sphere, and the drift is measured on the unprojected state at the saved times.
    """
    solver, controller, dt0, max_steps, keep_states = cfg
    term = diffrax.ODETerm(lambda t, y, b: field(y, b, t))

    def one(x, b):
        # Plain states at the saved times: an observer inside Diffrax's loop would be evaluated
        # at every step under vmap (the save branch becomes a select), so it runs afterwards.
        with host_checked_times():  # no host callback: the program goes to the compile cache
            sol = diffrax.diffeqsolve(
                term,
                solver,
                ts[0],
                ts[-1],
                dt0,
                x,
                args=b,
                stepsize_controller=controller,
                saveat=diffrax.SaveAt(ts=ts),
                max_steps=max_steps,
                throw=False,
            )
        ys = sol.ys
        nrm = jnp.linalg.norm(ys, axis=-1, keepdims=True)
        u = ys / nrm
        # A scheme that moves the radius keeps it (the observer reads the directions): no drift.
        off = jnp.zeros_like(nrm) if field.radial else nrm - 1
        saved = {
            "obs": jax.vmap(observer, in_axes=(0, 0, None))(ts, u, b),
            "drift": jnp.max(jnp.abs(off), axis=(1, 2)),
            "zero": jnp.any(nrm == 0, axis=(1, 2)),
        }
        if keep_states:
            saved["x"] = ys if field.radial else u
        finite = jnp.all(jnp.stack([jnp.all(jnp.isfinite(v)) for v in saved["obs"].values()]))
        broken = jnp.any(saved["zero"]) | ~finite | ~jnp.all(jnp.isfinite(u))
        result = RESULTS.promote(sol.result)
        result = RESULTS.where(
            result == RESULTS.successful,
            RESULTS.where(broken, RESULTS.nonfinite, RESULTS.successful),
            result,
        )
        return (ys if field.radial else u)[-1], saved, result, sol.stats["num_steps"]

    x_end, saved, result, steps = jax.vmap(jax.vmap(one, in_axes=(0, None)), in_axes=(0, 0))(x, beta)
    hit = result == RESULTS.max_steps_reached
    vals = saved["obs"]
    ok = _counted(vals, real)
    res = dict(
        values=vals,
        ok=ok,
        clustered=vals["clustered"] > 0,
        drift=jnp.max(
            jnp.where(real[None, :, None], jnp.nan_to_num(saved["drift"], nan=0.0), 0), axis=(1, 2)
        ),
        hit=hit & real[None, :],
        steps=jnp.sum(jnp.where(real[None, :], steps, 0)),
        bad=jnp.any(~ok, axis=-1) & real[None, :],
        zero=jnp.any(saved["zero"], axis=-1) & real[None, :],
    )
    res["result"] = result
    if keep_states:
        res["states"] = saved["x"]
    return x_end, res


@jax.jit
@jax.vmap
@jax.vmap
def _first_failure(earlier, later):
    """Per trajectory, the earlier piece's `RESULTS` unless it succeeded, else the later one's."""
    return RESULTS.where(earlier == RESULTS.successful, later, earlier)


def host_piece(r: dict) -> dict:
    """A piece's outputs as NumPy arrays, but ``result`` (a `RESULTS` item, joined on the device)."""
    return {k: v if k == "result" else jax.tree.map(np.asarray, v) for k, v in r.items()}


def host_chunk(x0_host: np.ndarray, c: int, chunk: int, nb: int):
    """Chunk ``c`` of ``x0_host`` padded with copies of its first member (one shape, one compile),
    repeated for the ``nb`` temperatures, on the device; the mask of its real members; their count."""
    xs = x0_host[c * chunk : (c + 1) * chunk]
    n_real = xs.shape[0]
    xs = np.concatenate([xs, np.broadcast_to(xs[:1], (chunk - n_real,) + xs.shape[1:])])
    x = jax.device_put(np.ascontiguousarray(np.broadcast_to(xs, (nb,) + xs.shape)))
    return x, jax.device_put(np.arange(chunk) < n_real), n_real


def _by_member(a, n_real: int) -> np.ndarray:
    """``(nb, c, p)`` -> ``(n_real, nb * p)``: the real members first, temperature x time as records."""
    return np.swapaxes(np.asarray(a)[:, :n_real], 0, 1).reshape(n_real, -1)


def _counted(vals, real):
    """Which members count at each saved time (``(nb, c, p)``): real, with every metric finite."""
    ok = jnp.ones(next(iter(vals.values())).shape, bool) & real[None, :, None]
    for v in vals.values():
        ok = ok & jnp.isfinite(v)
    return ok


def solve_flow(
    field: FlowField,
    x0,
    t1: float | None = None,
    *,
    beta,
    times=None,
    saves: int | None = None,
    solver: str | diffrax.AbstractSolver = "tsit5",
    stepsize_controller: diffrax.AbstractStepSizeController | None = None,
    rtol: float | None = None,
    atol: float | None = None,
    dt: float | None = None,
    max_steps: int = 4096,
    observe: Callable[[Array, Array, Array], dict[str, Array]] | None = None,
    metrics=None,
    save_states: bool = False,
    per_trajectory: bool = False,
    chunk: int | None = None,
    progress: bool = False,
    throw: bool = False,
) -> FlowSolution:
    r"""Integrate the flow $\dot X = F_\beta(X)$ of ``field`` from ``x0`` and record its metrics.

    Arguments:
        field: a `FlowField` (SA or USA, mask, $Q, K, V$, normalisation scheme).
        x0: ``(n, d)`` or ``(batch, n, d)`` initial tokens (rows are normalised to the sphere,
            except for the schemes that move the radius, ``pre``, ``mix`` and ``peri``, which
            start from ``x0`` as given and are never projected: their ``drift`` is 0).
        t1: the horizon $T$ (> 0), with ``saves`` saved times uniform on $[0, T]$.
        beta: the inverse temperature (>= 0), or a 1-D array of them (vmapped; same starts for each).
        times: instead of ``t1``/``saves``, an increasing array of saved times starting at 0.
        saves: number of saved times (>= 2, default 101), t = 0 included; not with ``times``.
        solver: a Diffrax solver object (e.g. ``diffrax.Tsit5()``, ``ProjectedSolver(RK4())``), or
            a name: ``"tsit5"``, ``"dopri5"`` (adaptive) or ``"euler"``, ``"rk4"`` (fixed step,
            projected to the sphere after every step, except under ``pre``, ``mix`` and
            ``peri``), as on the command line. ``mix`` needs an adaptive controller, which is
            made to step to its switching time (a jump of the field).
        stepsize_controller: with a solver object, a Diffrax step-size controller (default:
            ``diffrax.ConstantStepSize()`` with ``dt``, else a PID controller from ``rtol``,
            ``atol``). Refused with a solver name, which builds its own.
        rtol, atol: PID controller tolerances (adaptive only; default 1e-6, 1e-8); refused
            alongside a ``stepsize_controller`` (set them there).
        dt: the step of a fixed-step solver (required there, refused for adaptive solver names;
            with a solver object and an adaptive controller, the first step).
        max_steps: solver steps allowed per compiled piece (about a twentieth of the saved
            intervals; `rankdyn._flow._arguments.piece_length`); reaching it is reported in
            ``steps_limit_hit``, never raised.
        observe: ``(t, x, beta) -> dict of arrays`` recorded at the saved times, the observer
            signature of `rankdyn.simulate` (after Diffrax's ``SaveAt(fn=...)``): ``t`` the time,
            ``x`` one trajectory's ``(n, d)`` state on the sphere, ``beta`` its inverse
            temperature. Default `FlowObserver()`. ``clustered`` (diameter <= 1e-2, which
            `FlowSolution.time_to_cluster` reads) is added when the observer does not return it.
        metrics: the names recorded by the default observer, as in `rankdyn.simulate`: None or
            ``"all"`` for every one of `rankdyn.flow.FLOW_METRICS`, or a subset (a list or a
            comma-separated string); ``clustered`` is always recorded. Refused with ``observe``.
        save_states: also return the states, ``(batch, S, n, d)`` (the layout of `rankdyn.simulate`).
        per_trajectory: also return every trajectory's metrics.
        chunk: trajectories vmapped together (default: all, at most 1024, ``_arguments.MAX_CHUNK``).
        progress: show a progress bar.
        throw: raise if any trajectory's `RESULTS` is not ``successful`` (default False: read
            ``FlowSolution.result``, as the statistics leave failed trajectories out).

    Returns:
        A `FlowSolution`.

    Raises:
        UsageError: on a bad solver, controller, tolerance, step, horizon, temperature, time
            grid or ``x0``.
        SolveError: with ``throw=True``, when some trajectory did not succeed.
    """
    check_flow_arguments(x0, t1, times, saves, chunk, max_steps)
    saves = 101 if saves is None else saves
    solver_obj, controller = _solver_and_controller(solver, stepsize_controller, rtol, atol, dt)
    x0, betas, times = _validate(field, x0, t1, beta, times, saves)
    solver_obj, controller = scheme_solver(field, solver, solver_obj, controller)
    if metrics is not None and observe is not None:
        raise UsageError(
            "solve_flow(metrics=..., observe=...): pass the metrics to the observer, "
            "FlowObserver(metrics=...), or drop observe."
        )
    dtype = x0.dtype
    if observe is None:
        observer = FlowObserver(metrics=metrics)
    else:
        x = jax.ShapeDtypeStruct((field.num_tokens, field.dim), dtype)
        t = jax.ShapeDtypeStruct((), dtype)
        check_observer(observe, t, x, t, what="solve_flow", args_name="the inverse temperature beta")
        observer = observe if isinstance(observe, FlowObserver) else WithClustered(observe)
    batch = x0.shape[0]
    chunk = resolve_chunk(chunk, batch)  # chunk >= 1: checked
    check_flow_memory(
        batch=batch,
        n=field.num_tokens,
        d=field.dim,
        saves=times.size,
        betas=betas.size,
        itemsize=dtype.itemsize,
        chunk=chunk,
        per_trajectory=per_trajectory,
        save_states=save_states,
        fixes=SOLVE_FLOW_FIXES,
        what="solve_flow",
    )
    intervals = times.size - 1
    p = piece_length(intervals)
    dt0 = None if dt is None else float(dt)
    if isinstance(controller, diffrax.ConstantStepSize):
        span = float(np.max(times[p::p] - times[:-p:p]))
        steps_cap = min(int(max_steps), int(math.ceil(span / dt0 + 1e-9)) + 1)
    else:
        steps_cap = int(max_steps)
    cfg = (solver_obj, controller, dt0, steps_cap, save_states)
    bj = jnp.asarray(betas.reshape(-1), dtype)
    # The slicing and padding between pieces is NumPy's (`host_piece`): the same numbers, and not
    # one small compiled program per shape for each slice, pad and broadcast.
    ts, x0_host = np.asarray(times, dtype), np.asarray(x0)
    num_chunks = math.ceil(batch / chunk)
    bar = None
    if progress:
        from .._run._progress import progress_bar

        bar = progress_bar(total=num_chunks * (intervals // p), desc="flow", unit="piece")
    nb = bj.size
    # Per piece (only one piece's values are held): its statistics, records temperature x time,
    # folded one trajectory at a time in batch order, each record on its own (the same bits).
    total = [None] * (intervals // p)
    counts = {k: np.zeros(nb, int) for k in ("hit", "bad", "zero")}
    ttc, drift, steps, values, states, results = [], np.zeros(nb), 0, [], [], []
    for c in range(num_chunks):
        x, real, n_real = host_chunk(x0_host, c, chunk, nb)
        clustered, vals_c, states_c = [], [], []
        result_c = None
        flags = {k: np.zeros((nb, chunk), bool) for k in counts}
        for k in range(intervals // p):
            x, r = _piece(field, observer, x, bj, jax.device_put(ts[k * p : (k + 1) * p + 1]), real, cfg)
            r = host_piece(r)
            check_interrupt()  # after the compile and between pieces (CLI signals only)
            # Every piece saves at its start too (one program for all); only the first keeps it.
            cut = slice(0 if k == 0 else 1, None)
            piece_vals, piece_ok = {m: v[..., cut] for m, v in r["values"].items()}, r["ok"][..., cut]
            own = {m: _by_member(v, n_real) for m, v in piece_vals.items()}
            total[k] = fold_in_order(total[k], own, _by_member(piece_ok, n_real))
            clustered.append(r["clustered"][..., cut])
            drift = np.maximum(drift, np.asarray(r["drift"]))
            for name in flags:
                flags[name] |= np.asarray(r[name])
            steps += int(r["steps"])
            # The first failure along a trajectory is kept (later pieces start from its NaNs).
            result_c = r["result"] if result_c is None else _first_failure(result_c, r["result"])
            if per_trajectory:
                vals_c.append(piece_vals)
            if save_states:
                states_c.append(r["states"][:, :, cut])
            if bar is not None:
                bar.update(1)
        for name in counts:
            counts[name] += flags[name].sum(axis=1)
        cl = np.concatenate([np.asarray(a) for a in clustered], axis=-1)[:, :n_real]
        ttc.append(np.where(cl.any(-1), times[np.argmax(cl, axis=-1)], np.inf))
        results.append(jax.tree.map(lambda a: a[:, :n_real], result_c))
        if per_trajectory:
            values.append(
                {m: np.concatenate([np.asarray(v[m]) for v in vals_c], -1)[:, :n_real] for m in vals_c[0]}
            )
        if save_states:
            states.append(np.concatenate([np.asarray(s) for s in states_c], axis=2)[:, :n_real])
    if bar is not None:
        bar.close()
    pick, summary, vals_out, states_out = join_chunks(
        total,
        counts,
        nb,
        times,
        batch,
        betas,
        values if per_trajectory else None,
        states if save_states else None,
    )
    result = jax.tree.map(lambda *a: pick(jnp.concatenate(a, axis=1)), *results)
    if throw and not bool(jnp.all(result == RESULTS.successful)):
        failed = int(np.sum(~np.asarray(result == RESULTS.successful)))
        raise SolveError(
            f"solve_flow: {failed} trajectory(ies) did not succeed (max_steps reached or a non-finite "
            "state); pass throw=False to get the per-trajectory status in FlowSolution.result instead."
        )
    return FlowSolution(
        times=jnp.asarray(times),
        beta=jnp.asarray(betas),
        summary=summary,
        time_to_cluster=jnp.asarray(pick(np.concatenate(ttc, axis=1))),
        drift=jnp.asarray(pick(drift)),
        steps_limit_hit=jnp.asarray(pick(counts["hit"])),
        num_steps=jnp.asarray(steps),
        result=result,
        metrics=vals_out,
        states=None if states_out is None else jnp.asarray(states_out),
    )
