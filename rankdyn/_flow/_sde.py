r"""The noisy flow: `solve_flow`'s ``noise=`` path, a Stratonovich SDE integrated with Diffrax.

Trajectory $b$ of the batch (its index in ``x0``) draws its Brownian path from
``jax.random.fold_in(key, b)`` through a `diffrax.VirtualBrownianTree` on $[0, T]$: the path of a
(trajectory, token) is one function of the key, whatever the chunk, the number of pieces or the
device, and every piece reads the part of it that it integrates. The same key serves every
inverse temperature of a vector of them (common random numbers across the phase diagram).

The state is **never renormalised** (no `ProjectedSolver`, no projection between pieces): the exact
Stratonovich solution keeps every $|x_i|$, so $\max_i \big||x_i| - 1\big|$ at the saved times is the
scheme's own error, reported as `FlowSolution.drift` (it accumulates over $[0, T]$; with ``heun``
it falls with ``dt``, with ``spark`` the controller bounds it with the rest of the local error, and
``geodesic_heun`` steps along the sphere's geodesics, so only round-off moves it).
Observers read the directions $x_i / |x_i|$. The default observer is `DensityObserver`, $O(n d)$.
"""

from __future__ import annotations

import math

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np

from .._observe._metric_observer import check_observer
from .._results import RESULTS
from .._run._fold import fold_in_order
from .._run._interrupt import check_interrupt
from ._arguments import piece_length, resolve_chunk
from ._flow_metrics import join_chunks
from ._noise import noise_terms
from ._observables import DensityObserver
from ._solve import FlowSolution, _by_member, _counted, _first_failure, host_chunk, host_piece
from ._solvers import host_checked_times

__all__ = ["solve_noisy", "VBT_LEVELS"]

#: A fixed step is resolved by the Brownian tree to ``dt / 2**VBT_LEVELS`` (``tol``): the
#: increments over a step are then those of the tree's dyadic points, exact in law.
VBT_LEVELS = 4


class _WithClustered(eqx.Module):
    """A user's observer, with `DensityObserver`'s ``clustered`` ($O(n d)$) added if missing."""

    observe: object

    def __call__(self, t, x, beta):
        out = dict(self.observe(t, x, beta))
        if "clustered" not in out:
            out["clustered"] = DensityObserver(degree=1)(t, x, beta)["clustered"]
        return out


def _levy_area(solver):
    """The concrete Lévy area a solver needs (SPaRK: space-time; Heun: the increment alone)."""
    need = getattr(solver, "minimal_levy_area", diffrax.BrownianIncrement)
    for abstract, concrete in (
        (diffrax.AbstractSpaceTimeTimeLevyArea, diffrax.SpaceTimeTimeLevyArea),
        (diffrax.AbstractSpaceTimeLevyArea, diffrax.SpaceTimeLevyArea),
    ):
        if issubclass(need, abstract):
            return concrete
    return diffrax.BrownianIncrement


@eqx.filter_jit
def _noisy_piece(field, observer, x, beta, sigma, keys, ts, real, cfg):
    """`rankdyn._flow._solve._piece` for the SDE: ``keys`` ``(c,)`` one per trajectory; ``sigma`` is
    traced (one program for every noise level, zero included)."""
    solver, controller, dt0, max_steps, keep_states, common, tol, horizon = cfg
    levy = _levy_area(solver)

    def one(x, b, key):
        terms, _ = noise_terms(field, sigma, key, 0.0, horizon, tol, x.dtype, common=common, levy=levy)
        with host_checked_times():
            sol = diffrax.diffeqsolve(
                terms,
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
        drift = jnp.max(jnp.abs(nrm - 1), axis=(1, 2))
        # The radius drift is recorded like a metric: per saved time, per trajectory.
        saved = {
            "obs": {**jax.vmap(observer, in_axes=(0, 0, None))(ts, u, b), "radius_drift": drift},
            "drift": drift,
            "zero": jnp.any(nrm == 0, axis=(1, 2)),
        }
        if keep_states:
            saved["x"] = ys
        finite = jnp.all(jnp.stack([jnp.all(jnp.isfinite(v)) for v in saved["obs"].values()]))
        broken = jnp.any(saved["zero"]) | ~finite | ~jnp.all(jnp.isfinite(u))
        result = RESULTS.promote(sol.result)
        result = RESULTS.where(
            result == RESULTS.successful,
            RESULTS.where(broken, RESULTS.nonfinite, RESULTS.successful),
            result,
        )
        # The unprojected state goes on to the next piece: no silent renormalisation.
        return ys[-1], saved, result, sol.stats["num_steps"]

    inner = jax.vmap(one, in_axes=(0, None, 0))
    x_end, saved, result, steps = jax.vmap(inner, in_axes=(0, 0, None))(x, beta, keys)
    vals = saved["obs"]
    ok = _counted(vals, real)
    res = dict(
        values=vals,
        ok=ok,
        clustered=vals["clustered"] > 0,
        drift=jnp.where(real[None, :, None], jnp.nan_to_num(saved["drift"], nan=0.0), 0),
        hit=(result == RESULTS.max_steps_reached) & real[None, :],
        steps=jnp.sum(jnp.where(real[None, :], steps, 0)),
        bad=jnp.any(~ok, axis=-1) & real[None, :],
        zero=jnp.any(saved["zero"], axis=-1) & real[None, :],
        result=result,
    )
    if keep_states:
        res["states"] = saved["x"]
    return x_end, res


def solve_noisy(
    field,
    x0,
    betas,
    times,
    *,
    sigma: float,
    key,
    common: bool,
    solver,
    controller,
    dt,
    max_steps: int,
    observe,
    save_states: bool,
    per_trajectory: bool,
    chunk,
    progress: bool,
) -> FlowSolution:
    r"""The noisy flow from checked arguments (`rankdyn._flow._sde_api.solve_flow` checks them).

    Returns:
        The `FlowSolution`: its ``drift`` the largest over the batch, and the metric
        ``radius_drift`` ($\max_i ||x_i| - 1|$ at each saved time) among the observer's.
    """
    dtype = x0.dtype
    if observe is None:
        observer = DensityObserver()
    else:
        x = jax.ShapeDtypeStruct((field.num_tokens, field.dim), dtype)
        t = jax.ShapeDtypeStruct((), dtype)
        check_observer(observe, t, x, t, what="solve_flow", args_name="the inverse temperature beta")
        observer = observe if isinstance(observe, DensityObserver) else _WithClustered(observe)
    batch = x0.shape[0]
    chunk = resolve_chunk(chunk, batch)
    intervals = times.size - 1
    p = piece_length(intervals)
    horizon = float(times[-1])
    dt0 = None if dt is None else float(dt)
    if isinstance(controller, diffrax.ConstantStepSize):
        span = float(np.max(times[p::p] - times[:-p:p]))
        steps_cap = min(int(max_steps), int(math.ceil(span / dt0 + 1e-9)) + 1)
        tol = dt0 / 2**VBT_LEVELS
    else:
        steps_cap = int(max_steps)
        tol = horizon / 2**16
    cfg = (solver, controller, dt0, steps_cap, save_states, bool(common), tol, horizon)
    bj = jnp.asarray(np.reshape(betas, -1), dtype)
    # Host slicing and padding between pieces, as in `rankdyn._flow._solve.solve_flow`.
    ts, x0_host = np.asarray(times, dtype), np.asarray(x0)
    sj = jnp.asarray(sigma, dtype)
    nb = bj.size
    # One key per trajectory, by its index in the batch: the same path whatever the chunk.
    all_keys = jax.vmap(lambda i: jr.fold_in(key, i))(jnp.arange(batch))
    num_chunks = math.ceil(batch / chunk)
    bar = None
    if progress:
        from .._run._progress import progress_bar

        bar = progress_bar(total=num_chunks * (intervals // p), desc="noisy flow", unit="piece")
    total = [None] * (intervals // p)
    counts = {k: np.zeros(nb, int) for k in ("hit", "bad", "zero")}
    ttc, drifts, steps, values, states, results = [], [], 0, [], [], []
    for c in range(num_chunks):
        x, real, n_real = host_chunk(x0_host, c, chunk, nb)
        keys = all_keys[c * chunk : (c + 1) * chunk]
        if n_real < chunk:  # padded as the tokens are (`host_chunk`): copies of the first member
            fill = chunk - n_real
            keys = jnp.concatenate([keys, jnp.broadcast_to(keys[:1], (fill,) + keys.shape[1:])])
        clustered, vals_c, states_c, drift_c = [], [], [], np.zeros((nb, n_real))
        result_c = None
        flags = {k: np.zeros((nb, chunk), bool) for k in counts}
        for k in range(intervals // p):
            piece_ts = jax.device_put(ts[k * p : (k + 1) * p + 1])
            x, r = _noisy_piece(field, observer, x, bj, sj, keys, piece_ts, real, cfg)
            r = host_piece(r)
            check_interrupt()
            cut = slice(0 if k == 0 else 1, None)
            piece_vals, piece_ok = {m: v[..., cut] for m, v in r["values"].items()}, r["ok"][..., cut]
            own = {m: _by_member(v, n_real) for m, v in piece_vals.items()}
            total[k] = fold_in_order(total[k], own, _by_member(piece_ok, n_real))
            clustered.append(r["clustered"][..., cut])
            drift_c = np.maximum(drift_c, np.asarray(r["drift"]).max(axis=-1)[:, :n_real])
            for name in flags:
                flags[name] |= np.asarray(r[name])
            steps += int(r["steps"])
            result_c = r["result"] if result_c is None else _first_failure(result_c, r["result"])
            if per_trajectory:
                vals_c.append(piece_vals)
            if save_states:
                states_c.append(r["states"][:, :, cut])
            if bar is not None:
                bar.update(1)
        for name in counts:
            counts[name] += flags[name].sum(axis=1)
        drifts.append(drift_c)
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
    drift_all = np.concatenate(drifts, axis=1)
    return FlowSolution(
        times=jnp.asarray(times),
        beta=jnp.asarray(betas),
        summary=summary,
        time_to_cluster=jnp.asarray(pick(np.concatenate(ttc, axis=1))),
        drift=jnp.asarray(pick(drift_all.max(axis=1))),
        steps_limit_hit=jnp.asarray(pick(counts["hit"])),
        num_steps=jnp.asarray(steps),
        result=jax.tree.map(lambda *a: pick(jnp.concatenate(a, axis=1)), *results),
        metrics=vals_out,
        states=None if states_out is None else jnp.asarray(states_out),
    )
