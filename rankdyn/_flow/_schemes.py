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

from .._errors import UsageError
from ._scheme_arguments import FLOW_PLACEMENTS, RADIAL_PLACEMENTS, check_scheme_arguments

__all__ = [
    "FLOW_PLACEMENTS",
    "RADIAL_PLACEMENTS",
    "check_scheme_arguments",
    "scheme_solver",
    "scheme_velocity",
]


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
