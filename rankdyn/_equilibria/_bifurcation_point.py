r"""A located bifurcation as a differentiable function of the family's other inputs.

For a family $f(x, p, \theta)$ and a fold, period doubling or Neimark--Sacker point located on
$f(\cdot, \cdot, \theta_0)$, `bifurcation_point` solves the minimally augmented system of
`continue_curve` (`rankdyn._equilibria._curves`, imported from there) at $\theta$ with $\theta$
held fixed: the unknowns are $z = (x, p)$ (and $\kappa = \cos\omega$ at a Neimark--Sacker point),

$$H(z, \theta) = \begin{pmatrix} g_\theta(x, p) - x \\ s(x, p, \theta) \end{pmatrix} = 0,
\qquad g = f^k,$$

with $s$ the border of $A - I$ (fold), $A + I$ (period doubling) or $A^2 - 2\kappa A + I$
(Neimark--Sacker), $A = D_x g$. The borders are the singular vectors of the smallest singular
values at the start, held fixed: the zero set of $s$ (where the matrix is singular) does not
depend on them, only its scaling does. Newton on $H = 0$ in float64, from the located point.

Where $D_z H$ is invertible (a regular fold: $\partial_p g \notin \operatorname{range}(A - I)$, a
simple multiplier; a period doubling or Neimark--Sacker point whose multipliers cross the circle),
the implicit-function theorem gives the derivative in any direction $\dot\theta$:

$$\dot z = -\,(D_z H)^{-1}\, D_\theta H\,\dot\theta,\qquad \dot p = e_p^\top \dot z,$$

which is the `jax.custom_jvp` rule: no derivative is taken through the Newton iterations, and
reverse mode (``jax.grad``) transposes the rule, $\bar\theta = -(D_\theta H)^\top (D_z H)^{-\top}
e_p\,\bar p$: one linear solve with the Jacobian Newton ended on, and one vector-Jacobian product
of $H$ in $\theta$.

A layer family ``f(p, theta) -> SelfAttentionLayer`` is a map of the flattened token matrix, as in
`continue_curve` (`LayerMap2`): at a fixed point of a post-LN layer $DF$ maps into the tangent
space of the spheres, so the full-space multipliers are the tangent (slice-chart) ones and a zero
per token, and the conditions above are those of the tangent space.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from .._errors import UsageError
from ._branch import Bifurcation
from ._curves import CURVE_KINDS, _system
from ._maps import check_period
from ._quotient import commuting_rotations

__all__ = ["bifurcation_point"]


def bifurcation_point(
    f: Callable,
    bifurcation: Bifurcation,
    theta: Any,
    *,
    period: int = 1,
    t: int = 0,
    tol: float = 1e-12,
    max_iter: int = 25,
    throw: bool = True,
) -> Float[Array, ""]:
    r"""The parameter $p^*(\theta)$ of a located bifurcation, re-solved at ``theta``, differentiable
    in ``theta`` by the implicit-function theorem (module docstring).

    ``jax.grad``, ``jax.jacfwd``, ``jax.jacrev`` and ``jax.jit`` work through it; the derivative
    is $\dot p = -e_p^\top (D_z H)^{-1} D_\theta H\,\dot\theta$ on the minimally augmented system
    $H$ of `continue_curve`, not a derivative of the Newton iterations.

    Arguments:
        f: a map ``f(x, p, theta) -> x`` of a 1-D state, or a layer family
            ``f(p, theta) -> SelfAttentionLayer`` (the bifurcation's point is then ``(n, d)``);
            JAX-traceable in ``p`` and ``theta``.
        bifurcation: a located ``"fold"``, ``"period-doubling"`` or ``"neimark-sacker"`` of a
            branch of ``f(., ., theta0)`` (`continue_branch`): the start of Newton.
        theta: any pytree of float64 arrays (or Python floats).
        period: ``k`` of the branch (fixed points of $f^k$).
        t: the layer index of a per-layer stack (layer families).
        tol: Newton's tolerance on $\|H\|_2$.
        max_iter: Newton iterations at most.
        throw: raise when Newton does not reach ``tol`` (default); with ``throw=False`` the result is
            NaN there instead (for searches that back off, such as a line search).

    Returns:
        The bifurcation's parameter at ``theta``, a float64 scalar (NaN where Newton failed, with
        ``throw=False``).

    Raises:
        UsageError: for a bifurcation that is not located or of another kind (a branch point is not
            a regular solution of these systems), float32 (float64 disabled, or a float32 leaf in
            ``theta``), a point that is neither 1-D nor 2-D, a map that changes the state's shape,
            a layer with dropout or one that commutes with rotations.
        EquinoxRuntimeError: with ``throw=True``, when Newton does not reach ``tol`` (``theta`` too
            far from where the bifurcation was located: re-locate it nearer).
    """
    if not isinstance(bifurcation, Bifurcation):
        raise UsageError(
            f"bifurcation must be a Bifurcation of continue_branch, got {type(bifurcation).__name__}."
        )
    if bifurcation.kind not in CURVE_KINDS:
        raise UsageError(
            f"bifurcation_point differentiates {', '.join(CURVE_KINDS)} points, got a {bifurcation.kind} "
            "(its augmented system is singular there)."
        )
    if not bifurcation.located:
        lo, hi = sorted(float(b) for b in bifurcation.bracket)
        raise UsageError(
            f"the {bifurcation.kind} in [{lo:.6g}, {hi:.6g}] is not located: a gradient needs a located "
            "point (continue the branch with a smaller ds, in float64)."
        )
    period = check_period(period)
    if jnp.asarray(0.0).dtype != jnp.float64:
        raise UsageError(
            "bifurcation_point needs float64: enable it with jax.config.update('jax_enable_x64', True) "
            "(the command line's --x64) before any array is made."
        )
    theta = jax.tree.map(jnp.asarray, theta)
    bad = [
        str(a.dtype)
        for a in jax.tree.leaves(theta)
        if jnp.issubdtype(a.dtype, jnp.inexact) and a.dtype != jnp.float64
    ]
    if bad:
        raise UsageError(
            f"theta must hold float64 arrays, got {', '.join(sorted(set(bad)))}: cast it with .astype(float)."
        )
    x0 = np.asarray(bifurcation.point, dtype=np.float64)
    if x0.ndim not in (1, 2):
        raise UsageError(f"the bifurcation's point must be (m,) or (n, d), got shape {x0.shape}.")
    p0 = float(bifurcation.param)
    if x0.ndim == 1:
        dt = jnp.float64
        out = jax.eval_shape(f, jax.ShapeDtypeStruct(x0.shape, dt), jax.ShapeDtypeStruct((), dt), theta)
        if getattr(out, "shape", None) != x0.shape:
            raise UsageError(
                f"the map must return a state of the shape it is given: f(x, p, theta) with x of shape "
                f"{x0.shape} returned {getattr(out, 'shape', type(out).__name__)}."
            )
    elif not any(isinstance(a, jax.core.Tracer) for a in jax.tree.leaves(theta)):
        # The symmetry check needs concrete arrays; under a transformation Newton fails instead.
        layer0 = f(p0, theta)
        if layer0.has_dropout:
            raise UsageError("dropout must be 0: a stochastic map has no bifurcation points.")
        if commuting_rotations(layer0, t=t).shape[0]:
            raise UsageError(
                "the layer commutes with rotations: its equilibria come in continua (a multiplier 1 "
                "everywhere), so the bifurcation is not isolated; break the symmetry first."
            )
    z0 = [x0.reshape(-1), [p0]]
    if bifurcation.kind == "neimark-sacker":
        z0.append([math.cos(bifurcation.theta)])
    solve = _program(f, bifurcation.kind, period, x0.shape, int(t), float(tol), int(max_iter), bool(throw))
    return solve(theta, jnp.asarray(np.concatenate(z0)))


def _program(f, kind, period, shape, t, tol, max_iter, throw):
    """The compiled solver of `bifurcation_point`, one per (family, kind, shape, settings); families
    that cannot be hashed (e.g. holding arrays) get a fresh one each call."""
    try:
        return _cached(f, kind, period, shape, t, tol, max_iter, throw)
    except TypeError:
        return _build(f, kind, period, shape, t, tol, max_iter, throw)


def _build(f, kind, period, shape, t, tol, max_iter, throw):
    m = int(np.prod(shape))
    layer = len(shape) == 2
    ns = kind == "neimark-sacker"

    def map2(x, p, q, theta):
        # `_system`'s maps take a second parameter q; here it is a dummy (z has none).
        if layer:
            return f(p, theta)(x.reshape(shape), t)[0].reshape(-1)
        return f(x, p, theta)

    # `_system` makes constants (an identity) when called: evaluated here, not as tracers of a
    # transformation that happens to be active at the first call (they would leak into the cache).
    with jax.ensure_compile_time_eval():
        both, matrix, _ = _system(map2, period, kind, m)
    cols = np.delete(np.arange(m + 2 + ns), m + 1)  # the unknowns z: every y column but q's

    def lift(z):
        return jnp.concatenate([z[: m + 1], jnp.zeros(1, z.dtype), z[m + 1 :]])

    def system(z, borders, theta):
        b, c, pair = borders
        h, jac = both(lift(z), b, c, pair, theta)
        return h, jac[:, cols]

    def prepare(z0, theta):
        """Borders at the start: singular vectors of the smallest singular values (`_borders`)."""
        k = 2 if ns else 1
        u, _, vt = jnp.linalg.svd(matrix(lift(z0), theta))
        b, c = u[:, -k:], vt[-k:].T
        if not ns:
            return b, c, jnp.zeros(2, jnp.int32)
        # Neimark-Sacker: the two entries of G whose Jacobian is best conditioned (as continue_curve).
        cands = jnp.array([[0, 1], [0, 2], [0, 3], [1, 2], [1, 3], [2, 3]], jnp.int32)
        smallest = jax.vmap(
            lambda pr: jnp.linalg.svd(system(z0, (b, c, pr), theta)[1], compute_uv=False)[-1]
        )(cands)
        return b, c, cands[jnp.argmax(smallest)]

    def newton(theta, z0):
        borders = jax.lax.stop_gradient(prepare(z0, theta))
        h, jac = system(z0, borders, theta)

        def cond(state):
            _, h, _, i = state
            r = jnp.linalg.norm(h)
            return (r > tol) & (i < max_iter) & jnp.isfinite(r)

        def body(state):
            z, h, jac, i = state
            z = z - jnp.linalg.solve(jac, h)
            h, jac = system(z, borders, theta)
            return z, h, jac, i + 1

        z, h, jac, _ = jax.lax.while_loop(cond, body, (z0, h, jac, jnp.asarray(0)))
        return z, h, jac, borders

    def g(x, p, theta):
        for _ in range(period):  # static: one program per period
            x = map2(x, p, None, theta)
        return x

    def moved(z, borders, theta):
        r"""$\theta \mapsto (g_\theta(x, p),\ -W^\top M_\theta V)$ at fixed $z$, $V$, $W$: its
        derivative in $\theta$ is $D_\theta H$ (the bordering lemma, module docstring)."""
        b, c, pair = borders
        x, p = z[:m], z[m]
        k = b.shape[1]
        big = jnp.block([[matrix(lift(z), theta), b], [c.T, jnp.zeros((k, k))]])
        rhs = jnp.concatenate([jnp.zeros((m, k)), jnp.eye(k)])
        v = jnp.linalg.solve(big, rhs)[:m]
        w = jnp.linalg.solve(big.T, rhs)[:m]
        v, w = jax.lax.stop_gradient((v, w))

        def apply_a(u):  # A u, A = D_x g, column by column
            return jax.vmap(lambda col: jax.jvp(lambda y: g(y, p, theta), (x,), (col,))[1], 1, 1)(u)

        av = apply_a(v)
        if kind == "fold":
            mv = av - v
        elif kind == "period-doubling":
            mv = av + v
        else:
            mv = apply_a(av) - 2 * z[m + 1] * av + v
        cond = -(w.T @ mv).reshape(-1)
        return jnp.concatenate([g(x, p, theta), cond[pair] if ns else cond])

    @jax.custom_jvp
    def solution(theta, z0):
        z, h, _, _ = newton(theta, z0)
        return z, jnp.linalg.norm(h)

    @solution.defjvp
    def _(primals, tangents):
        theta, z0 = primals
        dtheta, _ = tangents  # z0 is only Newton's start: the solution does not depend on it
        z, h, jac, borders = newton(theta, z0)
        with jax.default_matmul_precision("highest"):
            dh = jax.jvp(lambda th: moved(z, borders, th), (theta,), (dtheta,))[1]
            dz = -jnp.linalg.solve(jac, dh)
        res = jnp.linalg.norm(h)
        return (z, res), (dz, jnp.zeros_like(res))

    @jax.jit
    def run(theta, z0):
        z, res = solution(theta, z0)
        failed = ~(res <= tol)
        if not throw:
            return jnp.where(failed, jnp.nan, z[m])
        return eqx.error_if(
            z[m],
            failed,
            f"bifurcation_point: Newton on the {kind}'s augmented system did not reach ||H|| <= {tol:g} "
            "from the located point: theta is too far from where it was located (re-locate it nearer).",
        )

    return run


_cached = functools.lru_cache(maxsize=16)(_build)
