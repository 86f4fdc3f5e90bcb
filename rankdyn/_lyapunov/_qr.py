r"""The QR (Benettin) method for Lyapunov spectra, batched over trajectories with ``vmap``.

For a map $x_{s+1} = f_s(x_s)$ on a space of dimension $m$ and $k \le m$ tangent vectors
$Q_0 \in \mathbb R^{m\times k}$ with orthonormal columns,

$$Y_{s+1} = Df_s(x_s)\, Y_s \quad(\text{``jax.linearize``, vmapped over columns, no dense Jacobian}),\qquad
Y = Q R \ \text{every } q \text{ steps},\qquad
\lambda_i \approx \frac{1}{(S - S_0)\,h} \sum_{\text{QR steps after } S_0} \log |R_{ii}|,$$

with $S$ steps, $S_0$ of them discarded (the transient: propagated and re-orthonormalised but
not accumulated), $q$ = ``qr_every`` (fixed, or adapted to the spread of the exponents:
`rankdyn._lyapunov._plan`) and $h$ the time per step (1 for maps). The running estimate is
recorded at a few depths (in the compiled loop's carry, so memory does not grow with depth),
each trajectory's values sorted, and reduced to batch statistics (`rankdyn._observe._stats`, Chan's
merge) chunk by chunk. A trajectory whose $|R_{ii}|$ fell below the
smallest normal number (underflow between two QR steps: lower ``qr_every``) or whose state or
tangent vectors became non-finite is flagged and left out of the statistics.

`lyapunov_spectrum_map` applies it to any JAX map ``step: (m,) -> (m,)`` (the oracles: Hénon,
logistic); `rankdyn.lyapunov_spectrum` to a layer map and `lyapunov_spectrum_flow` to the flow.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
from jax import lax

from .._arguments import check_count
from .._errors import UsageError
from .._observe._stats import chunk_stats, merge_stats
from .._run._interrupt import check_interrupt
from .._run._sharding import map_sharded, resolve_mesh
from ._budget import check_tangent_memory, default_chunk
from ._orthonormal import orthonormalise
from ._plan import QRPlan, check_counts, make_plan, next_every, piece_steps
from ._result import FLAG_NONFINITE, FLAG_UNDERFLOW, LyapunovResult, flags_result

__all__ = [
    "QRPlan",
    "run_qr",
    "lyapunov_spectrum_map",
    "check_key",
    "check_counts",
    "make_plan",
    "gaussian_start",
    "jvp_columns",
    "check_map",
]


class QRState(NamedTuple):
    """The carry of one trajectory: state, tangent vectors, sums of log |R_ii|, records, flags,
    and the current interval between factorisations (the same for a whole chunk)."""

    x: jax.Array
    q: jax.Array
    sums: jax.Array
    running: jax.Array
    flags: jax.Array
    every: jax.Array


def jvp_columns(f: Callable, x: jax.Array, q: jax.Array) -> tuple[jax.Array, jax.Array]:
    r"""$(f(x), Df(x)\,Q)$ for ``q`` of shape ``(x.size, k)``, matrix-free.

    ``jax.linearize`` evaluates $f$ (the attention, the norms) once and returns the linear map
    $v \mapsto Df(x)\,v$ alone, which is ``vmap``-ped over the k columns: one batched program on
    the tangents, the same floating-point operations as k ``jax.jvp``'s, about 15% faster on
    XLA:CPU than ``vmap`` of ``jax.jvp`` (benchmarks/lyapunov_speed.py).
    """
    shape, k = x.shape, q.shape[1]
    y, lin = jax.linearize(f, x)
    ty = jax.vmap(lin, in_axes=-1, out_axes=-1)(q.reshape(shape + (k,)))
    return y, ty.reshape(-1, k)


def gaussian_start(key, m: int, k: int, dtype, project: Callable | None = None) -> jax.Array:
    """``(m, k)`` gaussian columns (projected, e.g. onto a tangent space), orthonormalised by
    `_start` for the whole chunk at once."""
    g = jr.normal(key, (m, k), dtype)
    return g if project is None else project(g)


def _account(plan: QRPlan, st: QRState, x, q, diag, t) -> QRState:
    """One QR step of one trajectory ending at step ``t``: flags, sums of log |R_ii|, records."""
    dtype = diag.dtype
    tiny = jnp.finfo(dtype).tiny
    finite = jnp.all(jnp.isfinite(diag)) & jnp.all(jnp.isfinite(x))
    flags = (
        st.flags | jnp.where(finite, 0, FLAG_NONFINITE) | jnp.where(jnp.any(diag < tiny), FLAG_UNDERFLOW, 0)
    )
    # Clamped at the smallest normal number: the trajectory is flagged and its sums stay finite.
    logs = jnp.log(jnp.maximum(diag, tiny))
    # Intervals never straddle `discard` (a factorisation is forced there).
    sums = st.sums + jnp.where(t > plan.discard, logs, 0)
    kept = (t - plan.discard).astype(dtype) * plan.step_size
    hit = t == jnp.asarray(plan.records, jnp.int32)
    est = jnp.sort(sums / jnp.where(kept > 0, kept, 1))[::-1]
    running = jnp.where(hit[:, None], est[None, :], st.running)
    return QRState(x, q, sums, running, flags, st.every)


def _piece(propagate, state: QRState, t0, t1, plan: QRPlan) -> QRState:
    """Steps ``t0 .. t1`` of a chunk: intervals of ``every`` propagation steps (vmapped over
    trajectories), each closed by one batched QR; an interval also ends at ``discard``, at the
    records and at ``t1``."""
    steps = jax.vmap(propagate, in_axes=(0, 0, None))
    project = jax.vmap(propagate.project)
    account = jax.vmap(functools.partial(_account, plan), in_axes=(0, 0, 0, 0, None))
    ends = jnp.asarray(sorted({plan.discard, *plan.records} - {0}), jnp.int32)

    def interval(carry):
        st, t = carry
        stop = jnp.minimum(t1, jnp.min(jnp.where(ends > t, ends, t1)))
        n = jnp.minimum(st.every[0], stop - t)
        x, y = lax.fori_loop(0, n, lambda s, c: steps(c[0], c[1], t + s), (st.x, st.q))
        # The barrier keeps XLA from fusing the projection into the Gram matrix's product, which
        # then runs as a loop instead of a matrix multiply (2x slower at k = 2016).
        q, diag, fell_back = orthonormalise(lax.optimization_barrier(project(x, y)))
        st = account(st, x, q, diag, t + n)
        logs = jnp.log(diag)
        every = next_every(plan, logs, n, st.flags == 0, fell_back, st.every[0])
        return st._replace(every=jnp.full_like(st.every, every)), t + n

    with jax.default_matmul_precision("highest"):
        state, _ = lax.while_loop(lambda c: c[1] < t1, interval, (state, t0))
    return state


@eqx.filter_jit
def _start(init_q, x, key, index, k: int, num_records: int, every: int):
    r"""A chunk's initial `QRState`: tangent vectors drawn from ``fold_in(key, index)``.

    A gaussian (m, k) matrix has $\kappa_2 \approx (\sqrt m + \sqrt k)/(\sqrt m - \sqrt k)$, small for
    k << m, so CholeskyQR2 orthonormalises it (Householder, whose batched XLA:CPU kernel is slow
    (measured: benchmarks/README.md), only where it fails, e.g. k = m).
    """
    keys = jax.vmap(lambda i: jr.fold_in(key, i))(index)
    with jax.default_matmul_precision("highest"):
        q = orthonormalise(jax.vmap(init_q)(x, keys))[0]
    c, dtype = x.shape[0], x.dtype
    zeros = jnp.zeros((c, k), dtype)
    nan = jnp.full((c, num_records, k), jnp.nan, dtype)
    return QRState(x, q, zeros, nan, jnp.zeros(c, jnp.int32), jnp.full(c, every, jnp.int32))


@eqx.filter_jit
def _advance(propagate, state: QRState, t0, t1, plan: QRPlan, mesh):
    if mesh is None:
        return _piece(propagate, state, t0, t1, plan)
    return map_sharded(lambda p, s: _piece(p, s, t0, t1, plan), mesh, propagate, state)


@eqx.filter_jit
def _finish(state: QRState, valid, plan: QRPlan):
    kept = (plan.num_steps - plan.discard) * plan.step_size
    exps = jnp.sort(state.sums / kept, axis=-1)[:, ::-1]
    ok = valid & (state.flags == 0)
    # One flat vector per trajectory (exponents, then the running estimates), its statistics
    # vmapped over the entries: chunk_stats reduces scalars per member.
    flat = jnp.concatenate([exps, state.running.reshape(exps.shape[0], -1)], axis=1)
    return exps, jax.vmap(lambda v: chunk_stats({"v": v}, ok))(flat.T)


def run_qr(
    propagate,
    init_q: Callable,
    x0: jax.Array,
    k: int,
    plan: QRPlan,
    *,
    key,
    chunk: int,
    devices=None,
    progress: bool = False,
    desc: str = "lyapunov",
):
    r"""Run the QR method for a batch ``x0`` ``(num, *state)``; returns per-trajectory exponents,
    flags and merged `rankdyn._observe._stats.BatchStats` of exponents and running estimates.

    ``propagate(x, q, t) -> (x, y)`` advances one trajectory's state and ``(m, k)`` tangent
    vectors by one step and ``propagate.project(x, y)`` maps them into the state space before a
    factorisation (an `eqx.Module`); ``init_q(x, key)`` draws the (gaussian) start. The batch
    is walked in chunks of ``chunk`` (the last one padded with copies of its first member and
    masked out). With ``devices``, whole chunks run side by side, one per device, each
    with the program, the shapes and the QR schedule (decided over its own chunk) of a
    one-device run; their statistics are merged in chunk order. So the exponents and the
    statistics do not depend on the device count, to the bit (docs/sweep.md, the bitwise
    contract); chunks past the batch's end only fill the last group and are discarded.
    """
    mesh = resolve_mesh(devices)
    num = x0.shape[0]
    chunk = max(1, min(chunk, num))
    group = 1 if mesh is None else mesh.devices.size
    piece = piece_steps(plan, progress)
    bar = None
    if progress:
        from .._run._progress import progress_bar

        bar = progress_bar(total=num * plan.num_steps, desc=desc, unit="traj-step", unit_scale=True)
    # Slicing, padding and indices on the host when x0 is concrete: as eager JAX, each new shape
    # of each of these data moves compiled a small program of its own (same values either way).
    xp = jnp if isinstance(x0, jax.core.Tracer) else np
    x0 = x0 if xp is jnp else np.asarray(x0)
    index_dtype = jax.dtypes.canonicalize_dtype(int)
    exps, flags, acc = [], [], None
    for first in range(0, num, chunk * group):
        # The group's chunks, each started on its own (the one-device program and shapes).
        starts = [first + j * chunk for j in range(group)]
        reals = [max(0, min(chunk, num - start)) for start in starts]
        states = []
        for start, real in zip(starts, reals):
            xs = x0[start : start + real] if real else x0[first : first + 1]
            if xs.shape[0] < chunk:
                xs = xp.concatenate([xs, xp.broadcast_to(xs[:1], (chunk - xs.shape[0],) + xs.shape[1:])])
            index = np.arange(start, start + chunk, dtype=index_dtype)
            states.append(_start(init_q, xs, key, index, k, len(plan.records), plan.qr_every or 1))
        state = states[0] if group == 1 else jax.tree.map(lambda *v: jnp.concatenate(v), *states)
        for t0 in range(0, plan.num_steps, piece):
            t1 = min(t0 + piece, plan.num_steps)
            # t0, t1 are traced: every piece shares one compilation.
            state = _advance(propagate, state, np.int32(t0), np.int32(t1), plan, mesh)
            check_interrupt()  # after the compile and between pieces and chunks (CLI signals only)
            if bar is not None:
                bar.update(sum(reals) * (t1 - t0))
        for j, real in enumerate(reals):
            if not real:
                continue
            own = state if group == 1 else jax.tree.map(lambda v, j=j: v[j * chunk : (j + 1) * chunk], state)
            e, stats = _finish(own, np.arange(chunk) < real, plan)
            acc = stats if acc is None else merge_stats(acc, stats)
            exps.append((e if xp is jnp else np.asarray(e))[:real])
            flags.append((own.flags if xp is jnp else np.asarray(own.flags))[:real])
    if bar is not None:
        bar.close()
    return xp.concatenate(exps), xp.concatenate(flags), acc


def assemble(
    exps, flags, acc, batch_shape, plan: QRPlan, *, space: str, dim: int, unit: str, num_steps, discard
) -> LyapunovResult:
    """A `LyapunovResult` from `run_qr`'s outputs (std from M2; NaN where no trajectory counted).

    On the host (NumPy) when the outputs are concrete: each eager JAX operation here compiled a
    small program per new shape. The values are the same to the bit (where, slices, one
    reciprocal, one product and one square root per entry, each correctly rounded either way)."""
    xp = jnp if isinstance(exps, jax.core.Tracer) else np
    if xp is np:
        acc = jax.tree.map(np.asarray, acc)
    count = acc.count[0]
    empty = count == 0
    safe = xp.where(empty, 1, count)
    k = exps.shape[-1]

    def split(v):
        v = xp.where(empty, xp.nan, v)
        return {"exponents": v[:k], "running": v[k:].reshape(-1, k)}

    stat = {s: split(getattr(acc, s)["v"]) for s in ("mean", "min", "max")}
    # m2 times the reciprocal of the count: XLA compiles a division by a scalar so (its algebraic
    # simplifier), and the host path must give the numbers JAX gave (up to an ulp apart otherwise).
    std = split(xp.sqrt(acc.m2["v"] * (1 / safe)))
    depths = xp.asarray(plan.records, exps.dtype) * xp.asarray(plan.step_size, exps.dtype)
    exps, count = exps.reshape(batch_shape + (k,)), count.astype(jnp.int32)
    if xp is np:  # JAX arrays, as before: put on the device (jnp.asarray compiled a copy per shape)
        exps, depths, count, stat, std = jax.device_put((exps, depths, count, stat, std))
    return LyapunovResult(
        exponents=exps,
        depths=depths,
        running_mean=stat["mean"]["running"],
        running_std=std["running"],
        running_min=stat["min"]["running"],
        running_max=stat["max"]["running"],
        mean=stat["mean"]["exponents"],
        std=std["exponents"],
        min=stat["min"]["exponents"],
        max=stat["max"]["exponents"],
        count=count,
        result=flags_result(flags.reshape(batch_shape)),
        space=space,
        dim=int(dim),
        unit=unit,
        num_steps=float(num_steps),
        discard=float(discard),
        qr_every=plan.qr_every or "auto",
    )


class _MapStep(eqx.Module):
    """``propagate`` for an autonomous map ``step: (m,) -> (m,)``."""

    step: Callable

    def __call__(self, x, q, t):
        return jvp_columns(self.step, x, q)

    def project(self, x, y):
        return y


def _map_start(k: int):
    return lambda x, key: gaussian_start(key, x.shape[0], k, x.dtype)


def check_key(key, where: str):
    """The PRNG key of the initial tangent vectors, required: their draw is part of the result,
    so the caller names it. New-style ``jax.random.key`` keys and legacy ``PRNGKey`` arrays
    (uint32) both work."""
    if key is None:
        raise UsageError(
            f"{where}() needs key=, the PRNG key of the initial tangent vectors: pass e.g. "
            "key=jax.random.key(0)."
        )
    dtype = jnp.asarray(key).dtype
    if not (jnp.issubdtype(dtype, jax.dtypes.prng_key) or dtype == jnp.uint32):
        raise UsageError(f"{where}(): key= must be a jax.random.key (or a PRNGKey), got {key!r}.")
    return key


def check_map(step: Callable, x0, time_dependent: bool = False) -> jax.Array:
    """``x0`` as a float array ``(m,)`` or ``(batch, m)`` and ``step`` a function ``(m,) -> (m,)``
    (of ``(x, t)`` with ``time_dependent``), or a `UsageError` before any compute."""
    if not callable(step):
        raise UsageError(f"step must be a function (m,) -> (m,), got {type(step).__name__}.")
    x0 = jnp.asarray(x0)
    if x0.ndim not in (1, 2) or x0.shape[-1] < 1 or 0 in x0.shape:
        raise UsageError(f"x0 must be (m,) or (batch, m), got shape {x0.shape}.")
    if not jnp.issubdtype(x0.dtype, jnp.floating):
        raise UsageError(f"x0 must be a float array, got dtype {x0.dtype}; e.g. jnp.asarray(x0, float).")
    if not np.all(np.isfinite(np.asarray(x0))):  # on the host: no program per new shape
        raise UsageError("x0 contains NaN or infinite values; pass finite initial states.")
    m = x0.shape[-1]
    args = (jax.ShapeDtypeStruct((m,), x0.dtype),) + (
        (jax.ShapeDtypeStruct((), jnp.int32),) if time_dependent else ()
    )
    try:
        out = jax.eval_shape(step, *args)
    except Exception as err:
        raise UsageError(f"step failed on one ({m},) state ({type(err).__name__}: {err}).") from err
    if not isinstance(out, jax.ShapeDtypeStruct) or out.shape != (m,):
        raise UsageError(f"step must map an (m,) = ({m},) state to an ({m},) state, got {out}.")
    return x0


def lyapunov_spectrum_map(
    step: Callable,
    x0,
    num_steps: int,
    *,
    k: int | None = None,
    discard: int = 0,
    qr_every: int | str = "auto",
    key,
    chunk: int | None = None,
    devices=None,
    progress: bool = False,
) -> LyapunovResult:
    r"""Lyapunov spectrum of an autonomous map ``step: (m,) -> (m,)`` on $\mathbb R^m$ (QR method).

    $x_{s+1} = f(x_s)$, tangent vectors $Y_{s+1} = Df(x_s) Y_s$ (``jax.linearize``),
    re-orthonormalised every ``qr_every`` steps (`rankdyn._lyapunov._plan`),
    $\lambda_i = \frac{1}{S - S_0} \sum \log|R_{ii}|$ (module docstring).
    E.g. the Hénon map ($a = 1.4, b = 0.3$) gives about $0.419$ and $-1.623$, with
    $\lambda_1 + \lambda_2 = \log b$; the logistic map at $r = 4$ gives $\log 2$.

    Arguments:
        step: a JAX function of one state ``(m,)`` (not a batch); pass the same function
            object on repeated calls (a new lambda each time is a new compilation).
        x0: ``(m,)`` or ``(batch, m)`` initial states.
        num_steps: steps $S$ (a multiple of an integer ``qr_every``).
        k: exponents computed (1 <= k <= m; default m).
        discard: steps $S_0$ left out of the averages (< ``num_steps``; a multiple of an
            integer ``qr_every``).
        qr_every: steps between QR factorisations (an integer >= 1), or ``"auto"``: 1 to 8,
            chosen from the spread of the exponents as the run goes (`rankdyn._lyapunov._plan`).
        key: PRNG key of the initial tangent vectors (required; ``jax.random.key(0)`` or a
            legacy ``PRNGKey``).
        chunk: trajectories advanced together; devices: as `rankdyn.simulate` (whole chunks,
            one per device; see `rankdyn.lyapunov_spectrum`).
        progress: show a progress bar.

    Returns:
        A `LyapunovResult` (``space="map"``, per step).

    Raises:
        UsageError: for a ``step`` that is not callable or does not map ``(m,)`` to ``(m,)``,
            a non-float or non-finite ``x0``, ``k`` outside [1, m], ``discard >= num_steps``,
            ``qr_every`` neither ``"auto"`` nor >= 1, or depths that are not multiples of it.
    """
    key = check_key(key, "lyapunov_spectrum_map")
    x0 = check_map(step, x0)
    m = x0.shape[-1]
    k = m if k is None else k
    check_counts(num_steps, k, m, discard, qr_every)
    batch_shape = x0.shape[:-1]
    flat = x0.reshape(-1, m)
    plan = make_plan(num_steps, discard, qr_every)
    chunk = (
        default_chunk(flat.shape[0], m, k, flat.dtype.itemsize, devices)
        if chunk is None
        else check_count(chunk, "chunk")
    )
    check_tangent_memory(flat.shape[0], chunk, m, k, flat.dtype.itemsize, len(plan.records), devices)
    exps, flags, acc = run_qr(
        _MapStep(step),
        _map_start(k),
        flat,
        k,
        plan,
        key=key,
        chunk=chunk,
        devices=devices,
        progress=progress,
    )
    return assemble(
        exps,
        flags,
        acc,
        batch_shape,
        plan,
        space="map",
        dim=m,
        unit="per step",
        num_steps=num_steps,
        discard=discard,
    )
