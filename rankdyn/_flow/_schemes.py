r"""The normalisation schemes of the flow: speed regulation of the attention dynamics.

Karagodin, Ge, Polyanskiy and Rigollet ("Normalization in Attention Dynamics", arXiv 2510.22026v2)
write every scheme as the *normalised attention dynamics* (their eq. (NA)) with a per-token
speed-regulation factor $s_j(t) > 0$ (their Table 2):

$$\dot\theta_j = \frac{1}{s_j(t)}\, P_{\theta_j} A_j(\Theta),\qquad
A_j(\Theta) = \sum_k w_{jk} V\theta_k,\quad w_{jk} \propto e^{\beta\langle Q\theta_j, K\theta_k\rangle},$$

with $\theta_j = x_j / |x_j|$ the direction and $r_j = |x_j|$ the radius of token $j$. The
paper's text beyond its introduction is not reachable from here; the factors below are those of
its Table 2 as transcribed, with its radial equation, in the Lean formalisation
``fxeqxmulfx/transformer``, ``src/Transformer/Normalization/Basic.lean`` (docs/theory.md says
which parts are quoted and which are not):

| ``placement`` | $s_j(t)$ | $\dot r_j$ | ambient velocity $\dot x_j = \dot r_j\theta_j + r_j\dot\theta_j$ |
|---|---|---|---|
| ``post`` | $1$ | $0$ | $r_j P_{\theta_j} A_j$ |
| ``pre`` | $r_j$ | $\langle\theta_j, A_j\rangle$ | $A_j$ |
| ``mix`` | $1$ for $t \le \tau$, $r_j$ after | $0$, then $\langle\theta_j, A_j\rangle$ | post, then pre |
| ``peri`` | $r_j |A_j|$ | $\langle\theta_j, A_j\rangle / |A_j|$ | $A_j / |A_j|$ |
| ``ngpt`` | $|A_j| / \alpha$ | $0$ | $\alpha\, r_j P_{\theta_j} A_j / |A_j|$ |
| ``lns`` | $\sqrt{t + 1}$ | $0$ | $r_j P_{\theta_j} A_j / \sqrt{t + 1}$ |

(``lns`` is the paper's LN-Scaling row, "CoD" in the transcription: the radius does not move, unlike
the discrete ``lns`` placement $y = x + F(N(x)/\sqrt{t+1})$ of `rankdyn.make_layer`.) The scalar
$\alpha$ is the paper's $\alpha_t$ held constant. ``pre``, ``mix`` and ``peri`` move the radius, so
their state is the ambient $x_j = r_j\theta_j$; the other three stay on the sphere.
"""

from __future__ import annotations

import diffrax
import jax.numpy as jnp
import numpy as np

from .._errors import UsageError

__all__ = [
    "FLOW_PLACEMENTS",
    "RADIAL_PLACEMENTS",
    "check_scheme_arguments",
    "scheme_solver",
    "scheme_velocity",
]

#: The schemes of `FlowField`'s ``placement``, Table 2 of arXiv 2510.22026 (module docstring).
FLOW_PLACEMENTS = ("post", "pre", "mix", "peri", "ngpt", "lns")
#: The schemes whose radius moves ($\dot r_j \ne 0$): their state is not projected to the sphere.
RADIAL_PLACEMENTS = ("pre", "mix", "peri")


def _positive(name: str, value, *, zero: bool) -> float:
    ok = (
        isinstance(value, (int, float, np.integer, np.floating))
        and not isinstance(value, bool)
        and np.isfinite(value)
        and (value >= 0 if zero else value > 0)
    )
    if not ok:
        raise UsageError(f"{name} must be a finite number {'>= 0' if zero else '> 0'}, got {value!r}.")
    return float(value)


def check_scheme_arguments(placement, ngpt_alpha, mix_time) -> tuple[str, float, float]:
    """``(placement, alpha, tau)`` checked: ``ngpt_alpha`` with ``ngpt`` only, ``mix_time`` with ``mix``.

    Raises:
        UsageError: an unknown placement, a missing or non-positive ``ngpt_alpha`` for ``ngpt``, a
            missing or negative ``mix_time`` for ``mix``, or either one given to another placement.
    """
    if placement not in FLOW_PLACEMENTS:
        raise UsageError(f"placement must be one of {FLOW_PLACEMENTS}, got {placement!r}.")
    if placement != "ngpt" and ngpt_alpha is not None:
        raise UsageError(f"ngpt_alpha applies to placement='ngpt' only, not {placement!r}.")
    if placement != "mix" and mix_time is not None:
        raise UsageError(f"mix_time applies to placement='mix' only, not {placement!r}.")
    alpha, tau = 1.0, 0.0
    if placement == "ngpt":
        if ngpt_alpha is None:
            raise UsageError(
                "placement='ngpt' needs ngpt_alpha, the rate alpha > 0 of its speed |A_j| / alpha."
            )
        alpha = _positive("ngpt_alpha", ngpt_alpha, zero=False)
    if placement == "mix":
        if mix_time is None:
            raise UsageError(
                "placement='mix' needs mix_time, the time tau >= 0 at which post-LN turns pre-LN."
            )
        tau = _positive("mix_time", mix_time, zero=True)
    return placement, alpha, tau


def _norm(a):
    return jnp.sqrt(jnp.sum(a * a, axis=-1, keepdims=True))


def scheme_velocity(placement: str, x, attend, t, alpha, tau):
    r"""$\dot x$ of one scheme at ambient tokens ``x`` (module docstring's table).

    Arguments:
        placement: one of `FLOW_PLACEMENTS` other than ``post`` (whose field is `FlowField`'s own).
        x: ``(n, d)`` ambient tokens $x_j = r_j\theta_j$.
        attend: ``theta -> A(Theta)``, ``(n, d) -> (n, d)``: the attention vectors at the directions.
        t: the time (``mix`` and ``lns`` depend on it).
        alpha, tau: nGPT's rate and Mix-LN's switching time (arrays).

    Returns:
        ``(n, d)`` velocities. A zero token, or a zero $A_j$ under ``peri``/``ngpt``, gives a
        non-finite velocity, which `solve_flow` reports as ``RESULTS.nonfinite``.
    """
    r = _norm(x)
    theta = x / r
    a = attend(theta)
    tangent = a - jnp.sum(theta * a, axis=-1, keepdims=True) * theta  # P_theta A
    if placement == "pre":
        return a
    if placement == "mix":
        # Post-LN (radius fixed) up to tau, pre-LN after: solve_flow steps to tau (a jump time).
        return jnp.where(jnp.asarray(t) <= tau, r * tangent, a)
    if placement == "peri":
        return a / _norm(a)
    if placement == "ngpt":
        return alpha * r * tangent / _norm(a)
    if placement == "lns":
        return r * tangent / jnp.sqrt(jnp.asarray(t, x.dtype) + 1)
    raise RuntimeError(f"no scheme velocity for placement {placement!r}")


def scheme_solver(field, name, solver, controller):
    """The solver and controller `solve_flow` uses for ``field``'s scheme.

    A scheme that moves the radius is never projected to the sphere: a fixed-step name runs its
    solver bare, and a `ProjectedSolver` object is refused. ``mix`` jumps at ``mix_time``: an
    adaptive controller is clipped to step to just before and just after it (Diffrax's
    ``jump_ts``), and a constant step, which would evaluate the field on the wrong side of the
    jump, is refused.

    Raises:
        UsageError: a projected solver object with ``pre``/``mix``/``peri``, or a constant step
            with ``mix``.
    """
    from ._solvers import ProjectedSolver

    if field.radial and isinstance(solver, ProjectedSolver):
        if not isinstance(name, str):
            raise UsageError(
                f"placement={field.placement!r} moves the radius of each token, which a ProjectedSolver "
                "would reset to 1 after every step; pass its inner solver (e.g. RK4()) instead."
            )
        solver = solver.inner
    if field.placement == "mix":
        if isinstance(controller, diffrax.ConstantStepSize):
            raise UsageError(
                "placement='mix' switches the field at mix_time, and a constant step evaluates it on both "
                "sides of the switch; use an adaptive solver (tsit5, dopri5), which steps to the switch."
            )
        if isinstance(controller, diffrax.AbstractAdaptiveStepSizeController):
            controller = diffrax.ClipStepSizeController(controller, jump_ts=[float(field.mix_time)])
    return solver, controller
