r"""The solvers of the flow: Diffrax solver and step-size-controller objects, or the CLI's names.

``tsit5`` / ``dopri5`` are adaptive (a PID controller from ``rtol``, ``atol``); ``euler`` / ``rk4``
take a fixed step ``dt`` and project back to the sphere after every step (`ProjectedSolver`),
$x_i \leftarrow x_i / |x_i|$, as the peers' scripts integrate. `solve_flow` also takes any
`diffrax.AbstractSolver` with any `diffrax.AbstractStepSizeController`, as `diffrax.diffeqsolve`
does. The status of one trajectory is a member of the one `rankdyn.RESULTS` (rankdyn/_results.py):
``successful`` when every interval was integrated within ``max_steps`` and every saved state and
metric is finite with no zero token, ``nonfinite`` when not, Diffrax's own outcomes promoted.
"""

from __future__ import annotations

import contextlib
from typing import ClassVar

import diffrax
import jax.numpy as jnp
import numpy as np

from .._errors import UsageError

__all__ = ["SOLVERS", "ADAPTIVE_SOLVERS", "RK4", "ProjectedSolver"]

SOLVERS = ("tsit5", "dopri5", "euler", "rk4")
ADAPTIVE_SOLVERS = ("tsit5", "dopri5")
DEFAULT_RTOL, DEFAULT_ATOL = 1e-6, 1e-8


class RK4(diffrax.AbstractERK):
    """The classical fourth-order Runge-Kutta method (fixed step only: no error estimate)."""

    tableau: ClassVar[diffrax.ButcherTableau] = diffrax.ButcherTableau(
        c=np.array([0.5, 0.5, 1.0]),
        b_sol=np.array([1 / 6, 1 / 3, 1 / 3, 1 / 6]),
        b_error=np.zeros(4),
        a_lower=(np.array([0.5]), np.array([0.0, 0.5]), np.array([0.0, 0.0, 1.0])),
    )
    interpolation_cls: ClassVar = diffrax.ThirdOrderHermitePolynomialInterpolation.from_k

    def order(self, terms):
        return 4


class ProjectedSolver(diffrax.AbstractSolver):
    r"""A fixed-step solver followed by the projection $x_i \leftarrow x_i / |x_i|$ after every step.

    The peers' explicit Euler with renormalisation is ``ProjectedSolver(diffrax.Euler())``; the
    saved values between steps are the linear interpolation of the projected steps.
    """

    inner: diffrax.AbstractSolver
    term_structure: ClassVar = diffrax.AbstractTerm
    interpolation_cls: ClassVar = diffrax.LocalLinearInterpolation

    def order(self, terms):
        return self.inner.order(terms)

    def init(self, terms, t0, t1, y0, args):
        return self.inner.init(terms, t0, t1, y0, args)

    def step(self, terms, t0, t1, y0, args, solver_state, made_jump):
        y1, y_error, _, solver_state, result = self.inner.step(
            terms, t0, t1, y0, args, solver_state, made_jump
        )
        y1 = y1 / jnp.linalg.norm(y1, axis=-1, keepdims=True)
        return y1, y_error, dict(y0=y0, y1=y1), solver_state, result

    def func(self, terms, t0, y0, args):
        return self.inner.func(terms, t0, y0, args)


def _solver(name: str):
    """The Diffrax solver of a name; the fixed-step ones project to the sphere after every step."""
    if name in ADAPTIVE_SOLVERS:
        return {"tsit5": diffrax.Tsit5, "dopri5": diffrax.Dopri5}[name]()
    return ProjectedSolver({"euler": diffrax.Euler, "rk4": RK4}[name]())


def _check_positive(name, value, *, allow_zero=False):
    ok = value is not None and np.isfinite(value) and (value >= 0 if allow_zero else value > 0)
    if not ok:
        rule = ">= 0" if allow_zero else "> 0"
        raise UsageError(f"{name} must be finite and {rule}, got {value!r}.")
    return float(value)


def _solver_and_controller(solver, controller, rtol, atol, dt):
    """The Diffrax solver and step-size controller, from names or objects; refuses ignored options.

    A name (``SOLVERS``) builds today's pair: the adaptive ones a PID controller from ``rtol``,
    ``atol``; the fixed-step ones `ProjectedSolver` with a constant step ``dt``. An object is used
    as given, with ``stepsize_controller`` (default: a constant step with ``dt``, else the PID
    controller), the way `diffrax.diffeqsolve` takes them.
    """
    if controller is not None and not isinstance(controller, diffrax.AbstractStepSizeController):
        raise UsageError(
            "stepsize_controller must be a diffrax step-size controller (e.g. diffrax.PIDController(...)), "
            f"got {type(controller).__name__}."
        )
    if isinstance(solver, str):
        if solver not in SOLVERS:
            raise UsageError(f"solver must be one of {SOLVERS} or a diffrax solver, got {solver!r}.")
        if controller is not None:
            raise UsageError(
                f"stepsize_controller goes with a diffrax solver object; the name {solver!r} builds its own "
                "(rtol/atol for tsit5/dopri5, dt for euler/rk4)."
            )
        adaptive = solver in ADAPTIVE_SOLVERS
        if adaptive and dt is not None:
            raise UsageError(
                f"dt applies to the fixed-step solvers (euler, rk4) only; {solver} chooses its own steps."
            )
        if not adaptive:
            if dt is None:
                raise UsageError(f"the fixed-step solver {solver} needs a step dt > 0 (e.g. dt=0.1).")
            if rtol is not None or atol is not None:
                raise UsageError(
                    f"rtol/atol apply to the adaptive solvers (tsit5, dopri5) only, not {solver}."
                )
        solver = _solver(solver)
    elif not isinstance(solver, diffrax.AbstractSolver):
        raise UsageError(f"solver must be one of {SOLVERS} or a diffrax solver, got {type(solver).__name__}.")
    elif controller is not None and (rtol is not None or atol is not None):
        raise UsageError("rtol/atol would be ignored: set them on the stepsize_controller you pass.")
    elif controller is None and dt is not None and (rtol is not None or atol is not None):
        raise UsageError("rtol/atol apply to an adaptive controller; with dt the step is constant.")
    if dt is not None:
        _check_positive("dt", dt)
    if controller is None:
        if dt is not None:
            controller = diffrax.ConstantStepSize()
        else:
            rtol = DEFAULT_RTOL if rtol is None else _check_positive("rtol", rtol)
            atol = DEFAULT_ATOL if atol is None else _check_positive("atol", atol)
            controller = diffrax.PIDController(rtol=rtol, atol=atol, pcoeff=0.3, icoeff=0.3)
    if isinstance(controller, diffrax.ConstantStepSize) and dt is None:
        raise UsageError("a constant step size needs a step dt > 0 (e.g. dt=0.1).")
    return solver, controller


#: Diffrax's runtime checks that `solve_flow` has already made on the host (`_validate`: the saved
#: times increase from 0, so every piece's ``ts`` lies in ``[ts[0], ts[-1]]``; ``dt > 0``; and the
#: noisy flow's Brownian tree spans ``[0, times[-1]]``, which holds every piece's steps, since
#: Diffrax clips them to the piece's end). They are identified by the start of their message.
_HOST_CHECKED = (
    "saveat.ts must",
    "Must have (t1 - t0) * dt0 >= 0",
    "Cannot evaluate VirtualBrownianTree outside of its range",
)

#: The Equinox lines (major, minor) whose private ``equinox._errors.branched_error_if_impl_jit``
#: `host_checked_times` was checked against: Equinox has no public per-check switch (its
#: ``EQX_ON_ERROR`` is read once, at import, for every check). On another line nothing is replaced
#: (the program is then only not cached); tests/test_compile_cache.py fails there, so that the
#: hook is checked again and this tuple extended.
EQUINOX_CHECKED = ((0, 13),)


def equinox_line() -> tuple[int, ...]:
    """The installed Equinox's (major, minor)."""
    import equinox

    return tuple(int(p) for p in equinox.__version__.split(".")[:2])


@contextlib.contextmanager
def host_checked_times():
    """While tracing: Diffrax's re-checks of the (host-checked) saved times and step are left out.

    Why: the times are traced arguments (one program for every piece), so Diffrax's
    ``eqx.error_if`` checks on them become runtime branches holding host callbacks, and JAX never
    writes a program with host callbacks to the persistent compilation cache: the flow's largest
    program was compiled afresh on every run. `_validate` made the same checks before any compute,
    so only these checks (`_HOST_CHECKED`) are dropped (``on_error="off"``: the values pass through
    unchanged); every other check keeps Equinox's setting. Equinox's private hook is replaced only
    on the Equinox lines it was checked against (`EQUINOX_CHECKED`); elsewhere, or without it,
    nothing changes (the program is then only not cached).
    """
    from equinox import _errors

    jitted = getattr(_errors, "branched_error_if_impl_jit", None)
    impl = getattr(_errors, "branched_error_if_impl", None)
    if jitted is None or impl is None or equinox_line() not in EQUINOX_CHECKED:
        yield
        return

    def checked(x, pred, index, msgs, *, on_error):
        if all(str(m).startswith(_HOST_CHECKED) for m in msgs):
            return impl(x, pred, index, msgs, on_error="off")
        return jitted(x, pred, index, msgs, on_error=on_error)

    _errors.branched_error_if_impl_jit = checked
    try:
        yield
    finally:
        _errors.branched_error_if_impl_jit = jitted
