r"""Geodesic Heun: a Stratonovich solver that keeps every token on its sphere (the ``geodesic_heun`` name).

A Runge-Kutta-Munthe-Kaas (exponential-map) version of Heun's method for states $x_i$ on a sphere,
run by `diffrax.diffeqsolve` like Diffrax's own `diffrax.Heun` (same terms, Brownian tree, keys and
fixed step). With $v(x) = P_x\big(F(x)\,\Delta t + \sigma\,\Delta W\big)$ (the term's increment over
the step, made tangent) and $\mathrm{Exp}_x(u) = \cos\theta\,x + \frac{\sin\theta}{\theta}\,u$,
$\theta = |u| / |x|$ (the exponential map of the sphere of radius $|x|$, $u \perp x$), one step is

$$\tilde x = \mathrm{Exp}_x\big(v(x)\big),\qquad
x' = \mathrm{Exp}_x\Big(\tfrac12\big(v(x) + P_x\,v(\tilde x)\big)\Big),$$

token by token. $|\mathrm{Exp}_x(u)| = |x|$ exactly, so the radius moves by round-off only
(`FlowSolution.drift` still reports it). Why this solves the Stratonovich SDE (docs/theory.md,
"The noisy flow"): to $O(\Delta t^{3/2})$ a step equals Euclidean Heun's, whose radial term
$-\frac12|v|^2 x$ comes from the normal part of its second stage and here from the exponential
map's $-\frac12|u|^2 x$; its mean increment is $F\,\Delta t - \sigma^2\frac{d-1}{2}x\,\Delta t$ (the
Itô form of the Stratonovich SDE). With $\sigma = 0$ it is a second-order method for the ODE.
"""

from __future__ import annotations

from typing import ClassVar

import diffrax
import jax.numpy as jnp
from jaxtyping import ArrayLike

from ._field import tangent_project

__all__ = ["GeodesicHeun", "SphereInterpolation", "sphere_exp"]


def sphere_exp(x, u):
    r"""$\mathrm{Exp}_x(u) = \cos\theta\,x + \frac{\sin\theta}{\theta}u$, $\theta = |u|/|x|$, row by row.

    The geodesic of the sphere of radius $|x|$ through $x$ with velocity $u$ (tangent: $u \perp x$),
    at time 1; it keeps $|x|$. ``sinc`` is exact at $\theta = 0$ (no 0/0).
    """
    r = jnp.linalg.norm(x, axis=-1, keepdims=True)
    theta = jnp.linalg.norm(u, axis=-1, keepdims=True) / r
    return jnp.cos(theta) * x + jnp.sinc(theta / jnp.pi) * u


class SphereInterpolation(diffrax.AbstractLocalInterpolation):
    r"""Dense output between two steps: the chord's direction at the linearly interpolated radius.

    $y(s) = \big((1-s)|y_0| + s|y_1|\big)\,\frac{(1-s)y_0 + s y_1}{|(1-s)y_0 + s y_1|}$, token by
    token (the chord itself would cut inside the sphere by about $|y_1 - y_0|^2/8$, a radius error
    that is the interpolant's, not the scheme's). Saved times on the step grid are the steps.
    """

    t0: ArrayLike
    t1: ArrayLike
    y0: ArrayLike
    y1: ArrayLike

    def evaluate(self, t0, t1=None, left=True):
        del left
        if t1 is not None:
            return self.evaluate(t1) - self.evaluate(t0)
        s = (t0 - self.t0) / jnp.where(self.t1 == self.t0, 1, self.t1 - self.t0)
        chord = (1 - s) * self.y0 + s * self.y1
        r0 = jnp.linalg.norm(self.y0, axis=-1, keepdims=True)
        r1 = jnp.linalg.norm(self.y1, axis=-1, keepdims=True)
        c = jnp.linalg.norm(chord, axis=-1, keepdims=True)
        # A zero chord (antipodal ends at s = 1/2) cannot happen at a step of the flow; keep it finite.
        return jnp.where(c > 0, ((1 - s) * r0 + s * r1) / jnp.where(c > 0, c, 1), 1) * chord


class GeodesicHeun(diffrax.AbstractStratonovichSolver):
    r"""Heun's method along geodesics of the sphere (fixed step; a Stratonovich SDE solver).

    $$\tilde x = \mathrm{Exp}_x\big(v(x)\big),\qquad
    x' = \mathrm{Exp}_x\Big(\tfrac12\big(v(x) + P_x v(\tilde x)\big)\Big),\qquad
    v(y) = P_y\big(\text{the terms' increment at } y\big),$$

    row by row (each row of the state is a token on its sphere; `sphere_exp`). The terms are any
    Diffrax terms whose vector fields are tangent to the spheres (the drift of `FlowField` and the
    noise $\sigma P_x\,dW$); the same Brownian increment enters both stages, as in `diffrax.Heun`.
    Weak order 1 and strong order 1/2 for the noisy flow (its noise is not commutative), order 2
    for the ODE ($\sigma = 0$). No error estimate: use a constant step size.

    Why consistent (docs/theory.md, "The noisy flow"): with $u = \frac12(v(x) + P_x v(\tilde x))$,
    $\mathrm{Exp}_x(u) = x + u - \frac12|u|^2x + O(|u|^3)$, and this agrees with Euclidean Heun
    $x + \frac12(v(x) + v(x + v(x)))$ to $O(\Delta t^{3/2})$: the normal part of Heun's second
    stage is $-|v|^2 x$ (differentiate $\langle x, g(x)\rangle = 0$), which the exponential map
    supplies as $-\frac12|u|^2 x$.
    """

    term_structure: ClassVar = diffrax.AbstractTerm
    interpolation_cls: ClassVar = SphereInterpolation

    def order(self, terms):
        return 2

    def strong_order(self, terms):
        return 0.5

    def init(self, terms, t0, t1, y0, args):
        return None

    def step(self, terms, t0, t1, y0, args, solver_state, made_jump):
        del solver_state, made_jump
        control = terms.contr(t0, t1)
        # One control for both stages: the same Brownian increment, as Heun's.
        v0 = tangent_project(y0, terms.vf_prod(t0, y0, args, control))
        y_mid = sphere_exp(y0, v0)
        # v(y~) (tangent at y~), carried to x's tangent space by the projection P_x.
        v1 = tangent_project(y0, tangent_project(y_mid, terms.vf_prod(t1, y_mid, args, control)))
        y1 = sphere_exp(y0, 0.5 * (v0 + v1))
        return y1, None, dict(y0=y0, y1=y1), None, diffrax.RESULTS.successful

    def func(self, terms, t0, y0, args):
        return terms.vf(t0, y0, args)
