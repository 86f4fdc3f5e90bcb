r"""`rankdyn.flow.solve_flow`: the deterministic flow (`rankdyn._flow._solve`) or, with ``noise=``,
the noisy one (`rankdyn._flow._sde`), behind one signature."""

from __future__ import annotations

from collections.abc import Callable

import diffrax
import numpy as np
from jaxtyping import Array

from .._errors import UsageError
from . import _solve
from ._arguments import check_flow_arguments, check_flow_memory
from ._field import FlowField
from ._noise import NOISE_SOLVERS, check_noise, noise_solver
from ._solve import FlowSolution, _validate

__all__ = ["solve_flow"]

_NOISE_DOC = r"""        noise: the noise level $\sigma \ge 0$: integrate instead the Stratonovich SDE
            $dx_i = F_i(X)\,dt + \sigma P_{x_i}\circ dW^i_t$ (docs/theory.md#the-noisy-flow) with
            ``solver`` ``"heun"`` (fixed step ``dt``; the default with ``dt``),
            ``"geodesic_heun"`` (`GeodesicHeun`: fixed step ``dt``, along the sphere's geodesics,
            every $|x_i|$ kept to round-off) or ``"spark"`` (adaptive, space-time Lévy area; the
            default without), or a Diffrax Stratonovich solver object; ``euler`` (Itô in
            Diffrax), ``rk4``, ``tsit5``, ``dopri5`` and `ProjectedSolver` are refused. The state
            is never renormalised: the metric ``radius_drift`` and ``drift`` report
            $\max_i ||x_i| - 1|$. The default observer is
            `rankdyn.flow.DensityObserver` ($O(n d)$), and above 1024 tokens the field is computed
            in blocks of query rows (memory $O(n \cdot 256)$ per trajectory).
        key: with ``noise``, the PRNG key of the Brownian paths; trajectory ``b`` (its index in
            ``x0``) uses ``jax.random.fold_in(key, b)`` through a `diffrax.VirtualBrownianTree`,
            so its path does not depend on ``chunk``; every inverse temperature shares it.
        common_noise: with ``noise``, one $d \times d$ matrix Brownian motion $W_t$ (entries of
            variance $t/d$) shared by every token, $dx_i = F_i\,dt + \sigma P_{x_i}(\circ dW_t A_i(X))$
            with $A_i$ the attention vector (arXiv 2601.21942's common noise), instead of
            independent noise per token.
"""


def solve_flow(
    field: FlowField,
    x0,
    t1: float | None = None,
    *,
    beta,
    times=None,
    saves: int | None = None,
    solver: str | diffrax.AbstractSolver | None = None,
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
    noise: float | int | None = None,
    key=None,
    common_noise: bool = False,
) -> FlowSolution:
    if noise is None:
        if key is not None or common_noise:
            raise UsageError("key= and common_noise= go with noise= (the noise level sigma); pass noise=.")
        if isinstance(solver, str) and solver in NOISE_SOLVERS:
            raise UsageError(
                f"solver {solver!r} is the noisy flow's (pass noise=); for the flow without noise use one "
                "of tsit5, dopri5, euler, rk4, or the Diffrax object (e.g. diffrax.Heun())."
            )
        # Looked up on the module at call time: a test's stand-in for it is seen.
        return _solve.solve_flow(
            field,
            x0,
            t1,
            beta=beta,
            times=times,
            saves=saves,
            solver="tsit5" if solver is None else solver,
            stepsize_controller=stepsize_controller,
            rtol=rtol,
            atol=atol,
            dt=dt,
            max_steps=max_steps,
            observe=observe,
            metrics=metrics,
            save_states=save_states,
            per_trajectory=per_trajectory,
            chunk=chunk,
            progress=progress,
            throw=throw,
        )
    from .._errors import SolveError
    from .._results import RESULTS
    from ._sde import solve_noisy

    check_flow_arguments(x0, t1, times, saves, chunk, max_steps)
    if not isinstance(field, FlowField):
        raise UsageError(f"field must be a rankdyn.flow.FlowField, got {type(field).__name__}.")
    sigma = check_noise(noise, key, field.placement)
    if metrics is not None:
        raise UsageError(
            "metrics= names FlowObserver's metrics, which the noisy flow does not record (they form n x n "
            "matrices); pass observe=rankdyn.flow.DensityObserver(...) or your own observer."
        )
    solver_obj, controller = noise_solver(solver, stepsize_controller, rtol, atol, dt)
    x0, betas, times = _validate(field, x0, t1, beta, times, 101 if saves is None else saves)
    check_flow_memory(
        batch=x0.shape[0], n=field.num_tokens, d=field.dim, saves=times.size, betas=betas.size,
        itemsize=x0.dtype.itemsize, chunk=chunk, per_trajectory=per_trajectory,
        save_states=save_states, what="solve_flow", noise=True,
    )  # fmt: skip
    sol = solve_noisy(
        field,
        x0,
        betas,
        times,
        sigma=sigma,
        key=key,
        common=bool(common_noise),
        solver=solver_obj,
        controller=controller,
        dt=dt,
        max_steps=max_steps,
        observe=observe,
        save_states=save_states,
        per_trajectory=per_trajectory,
        chunk=chunk,
        progress=progress,
    )
    if throw and not bool(np.all(np.asarray(sol.result == RESULTS.successful))):
        raise SolveError(
            "solve_flow: some noisy trajectory did not succeed (max_steps reached or a non-finite state); "
            "pass throw=False to read FlowSolution.result instead."
        )
    return sol


def _doc() -> str:
    """`rankdyn._flow._solve.solve_flow`'s docstring with ``noise``, ``key``, ``common_noise``."""
    doc = _solve.solve_flow.__doc__
    anchor = "\n    Returns:"
    head, tail = doc.split(anchor, 1)
    head = head.replace(
        "solver: a Diffrax solver object (e.g. ``diffrax.Tsit5()``, ``ProjectedSolver(RK4())``), or\n"
        '            a name: ``"tsit5"``',
        "solver: a Diffrax solver object (e.g. ``diffrax.Tsit5()``, ``ProjectedSolver(RK4())``), or\n"
        '            a name (default ``"tsit5"``; with ``noise`` see there): ``"tsit5"``',
    )
    return (
        head.rstrip("\n")
        + "\n"
        + _NOISE_DOC
        + anchor
        + tail.replace(
            "UsageError: on a bad solver,",
            "UsageError: on a negative or non-finite ``noise``, a non-Stratonovich solver with it, "
            "a bad solver,",
        )
    )


solve_flow.__doc__ = _doc()
