r"""Lyapunov spectra of the self-attention flow: the variational equation integrated with Diffrax.

Next to the state $\dot X = F_\beta(X)$ (`rankdyn.flow.FlowField`) the $k$ tangent vectors obey
the variational equation $\dot Y = DF_\beta(X)\, Y$ (``jax.jvp`` of the field, one per column).
The pair is integrated over each of the intervals $[t_s, t_s + h]$, $h = T / S$; at the end of
each the tokens are projected back to the sphere, the tangent vectors onto
$T_X(\mathbb S^{d-1})^n$, and re-orthonormalised by QR:
$\lambda_i = \frac{1}{(S - S_0)h} \sum \log |R_{ii}|$ (per unit time). The exact flow maps tangent
vectors to tangent vectors ($\langle x_i, F_i(X)\rangle = 0$ for all $X$), so the projection only
removes the integrator's error. At the single cluster of the complete-mask SA flow with
$Q = K = V = I$ the linearisation is $\dot v_i = \bar v - v_i$: exponent 0 on the $d - 1$
directions of the rotation orbit and $-1$ on the other $(n-1)(d-1)$ (docs/theory.md).
"""

from __future__ import annotations

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .._arguments import check_count
from .._errors import UsageError
from .._flow._field import FlowField
from .._flow._solve import ADAPTIVE_SOLVERS, DEFAULT_ATOL, DEFAULT_RTOL, RK4, SOLVERS
from ._budget import check_tangent_memory, default_chunk
from ._layer import _project_columns
from ._plan import check_counts, make_plan
from ._qr import assemble, check_key, gaussian_start, jvp_columns, run_qr
from ._result import LyapunovResult

__all__ = ["lyapunov_spectrum_flow"]


class _FlowStep(eqx.Module):
    """Integrate state and tangent vectors over one interval, then project both to the spheres."""

    field: FlowField
    beta: jax.Array
    h: float = eqx.field(static=True)
    solver: str = eqx.field(static=True)
    rtol: float = eqx.field(static=True)
    atol: float = eqx.field(static=True)
    dt: float | None = eqx.field(static=True)
    max_steps: int = eqx.field(static=True)

    def __call__(self, x, q, t):
        def rhs(_, y, beta):
            xs, qs = y
            return jvp_columns(lambda z: self.field(z, beta), xs, qs)

        if self.solver in ADAPTIVE_SOLVERS:
            solver = {"tsit5": diffrax.Tsit5, "dopri5": diffrax.Dopri5}[self.solver]()
            ctrl, dt0 = diffrax.PIDController(rtol=self.rtol, atol=self.atol), None
        else:
            solver = diffrax.Euler() if self.solver == "euler" else RK4()
            ctrl, dt0 = diffrax.ConstantStepSize(), self.dt
        sol = diffrax.diffeqsolve(
            diffrax.ODETerm(rhs),
            solver,
            0.0,
            self.h,
            dt0,
            (x, q),
            args=self.beta,
            stepsize_controller=ctrl,
            max_steps=self.max_steps,
            throw=False,
        )
        xs, qs = (v[-1] for v in sol.ys)
        # A failed solve (max_steps) gives NaN, which the QR step flags as non-finite.
        bad = sol.result != diffrax.RESULTS.successful
        xs = jnp.where(bad, jnp.nan, xs / jnp.linalg.norm(xs, axis=-1, keepdims=True))
        return xs, _project_columns(xs, qs)

    def project(self, x, y):
        # Done at the end of every interval in __call__, with the tokens' renormalisation.
        return y


class _FlowStart(eqx.Module):
    k: int = eqx.field(static=True)

    def __call__(self, x, key):
        return gaussian_start(key, x.size, self.k, x.dtype, lambda g: _project_columns(x, g))


def lyapunov_spectrum_flow(
    field: FlowField,
    x0,
    t1: float,
    *,
    beta,
    k: int | None = None,
    intervals: int = 100,
    discard: int = 0,
    solver: str = "tsit5",
    rtol: float | None = None,
    atol: float | None = None,
    dt: float | None = None,
    max_steps: int = 4096,
    key,
    chunk: int | None = None,
    progress: bool = False,
) -> LyapunovResult:
    r"""Lyapunov spectrum of the flow $\dot X = F_\beta(X)$ on $(\mathbb S^{d-1})^n$, per unit time.

    The variational equation $\dot Y = DF_\beta(X) Y$ is integrated next to the state over
    ``intervals`` equal intervals of $[0, T]$, with a QR re-orthonormalisation after each
    (module docstring); the first ``discard`` intervals are not averaged.

    Arguments:
        field: a `rankdyn.flow.FlowField`.
        x0: ``(n, d)`` or ``(batch, n, d)`` initial tokens (rows normalised to the sphere).
        t1: the horizon $T > 0$.
        beta: the inverse temperature (a number >= 0).
        k: exponents computed, 1 <= k <= n(d - 1) (default: all).
        intervals: QR steps $S$ over $[0, T]$; discard: intervals $S_0 < S$ left out.
        solver, rtol, atol, dt, max_steps: as `rankdyn.flow.solve_flow` (max_steps per interval).
        key: PRNG key of the initial tangent vectors (required); chunk: trajectories vmapped together.
        progress: show a progress bar.

    Returns:
        A `LyapunovResult` (``space="tangent"``, ``unit="per unit time"``; ``depths`` are times).

    Raises:
        UsageError: for a bad field, ``x0``, horizon, temperature, solver settings, ``k``,
            ``intervals`` or ``discard``.
    """
    key = check_key(key, "lyapunov_spectrum_flow")
    if not isinstance(field, FlowField):
        raise UsageError(f"field must be a rankdyn.flow.FlowField, got {type(field).__name__}.")
    if field.placement != "post":
        raise UsageError(
            f"lyapunov_spectrum_flow takes the post-LN flow on the sphere only, not placement="
            f"{field.placement!r}: the other schemes' fields depend on time or move the radius, which this "
            "integrator (autonomous, projected to the sphere) does not follow."
        )
    if solver not in SOLVERS:
        raise UsageError(f"solver must be one of {SOLVERS}, got {solver!r}.")
    adaptive = solver in ADAPTIVE_SOLVERS
    if adaptive and dt is not None:
        raise UsageError(f"dt applies to the fixed-step solvers (euler, rk4) only, not {solver}.")
    if not adaptive and (dt is None or not dt > 0):
        raise UsageError(f"the fixed-step solver {solver} needs a step dt > 0 (e.g. dt=0.05), got {dt!r}.")
    if not adaptive and (rtol is not None or atol is not None):
        raise UsageError(f"rtol/atol apply to the adaptive solvers (tsit5, dopri5) only, not {solver}.")
    if t1 is None or not np.isfinite(t1) or not t1 > 0:
        raise UsageError(f"t1 (the time horizon T) must be finite and > 0, got {t1!r}.")
    if np.ndim(beta) != 0 or not np.isfinite(beta) or beta < 0:
        raise UsageError(f"beta must be a finite number >= 0 (one inverse temperature), got {beta!r}.")
    x0 = jnp.asarray(x0)
    n, d = field.num_tokens, field.dim
    if x0.ndim not in (2, 3) or x0.shape[-2:] != (n, d) or 0 in x0.shape:
        raise UsageError(f"x0 must be ({n}, {d}) or (batch, {n}, {d}) for this field, got shape {x0.shape}.")
    if not jnp.issubdtype(x0.dtype, jnp.floating) or not bool(jnp.all(jnp.isfinite(x0))):
        raise UsageError("x0 must hold finite floats.")
    nrm = jnp.linalg.norm(x0, axis=-1, keepdims=True)
    if bool(jnp.any(nrm == 0)):
        raise UsageError("x0 has a zero token, which has no direction on the sphere; pass non-zero tokens.")
    dim = n * (d - 1)
    k = dim if k is None else k
    check_counts(intervals, k, dim, discard, 1, what="intervals")
    batch_shape = x0.shape[:-2]
    flat = (x0 / nrm).reshape((-1, n, d))
    h = float(t1) / intervals
    step = _FlowStep(
        field,
        jnp.asarray(beta, flat.dtype),
        h,
        solver,
        DEFAULT_RTOL if rtol is None else float(rtol),
        DEFAULT_ATOL if atol is None else float(atol),
        None if dt is None else float(dt),
        int(max_steps),
    )
    plan = make_plan(intervals, discard, 1, step_size=h)
    chunk = (
        default_chunk(flat.shape[0], n * d, k, flat.dtype.itemsize)
        if chunk is None
        else check_count(chunk, "chunk")
    )
    check_tangent_memory(flat.shape[0], chunk, n * d, k, flat.dtype.itemsize, len(plan.records))
    exps, flags, acc = run_qr(
        step,
        _FlowStart(k),
        flat,
        k,
        plan,
        key=key,
        chunk=chunk,
        progress=progress,
        desc="lyapunov flow",
    )
    return assemble(
        exps,
        flags,
        acc,
        batch_shape,
        plan,
        space="tangent",
        dim=dim,
        unit="per unit time",
        num_steps=float(t1),
        discard=discard * h,
    )
