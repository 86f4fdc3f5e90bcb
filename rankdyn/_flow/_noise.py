r"""The noise of the noisy flow: its Stratonovich solvers, its diffusion terms and a blocked drift.

The noisy flow is the Stratonovich SDE on $(S^{d-1})^n$ (docs/theory.md#the-noisy-flow)

$$dx_i = F_i(X)\,dt + \sigma\,P_{x_i}\circ dW^i_t \qquad\text{(independent noise)},$$
$$dx_i = F_i(X)\,dt + \sigma\,P_{x_i}\big(dW_t\,A_i(X)\big) \qquad\text{(common noise)},$$

with $F$ the deterministic field (`FlowField`), $P_x y = y - \langle x, y\rangle x / |x|^2$, $W^i$
independent standard Brownian motions in $\mathbb R^d$ (one per token), and in the common case one
$d \times d$ matrix Brownian motion $W_t$ shared by every token, whose entries are independent with
variance $t / d$ (the limit of $\sum_{\ell \le t/h} \sqrt h\, G_\ell$, $G_\ell$ with i.i.d.
$N(0, 1/d)$ entries: `rankdyn._flow._random_depth`), applied to the attention vector
$A_i(X) = \sum_j w_{ij} V x_j$ (common noise also in Stratonovich form, $\circ\,dW_t$).

In Stratonovich form the chain rule is the ordinary one, so $d|x_i|^2 = 2\langle x_i, dx_i\rangle = 0$:
the exact solution keeps every $|x_i|$. Diffrax's ``Euler`` converges to the *Itô* solution, which for
the same coefficients is another SDE (Itô's $dx = \sigma P_x\,dW$ has $d|x|^2 = \sigma^2 (d - 1)\,dt$;
the Stratonovich one has the extra drift $-\sigma^2 \frac{d-1}{2} x$ in Itô form
that holds it on the sphere), so only Stratonovich solvers are accepted: ``heun`` (Diffrax's Heun,
fixed step), ``geodesic_heun`` (`rankdyn._flow._geodesic.GeodesicHeun`: Heun along the sphere's
geodesics, fixed step, the radius kept to round-off) and ``spark`` (Diffrax's SPaRK, adaptive, with
space-time Lévy area from the `diffrax.VirtualBrownianTree`).
"""

from __future__ import annotations

import math

import diffrax
import jax
import jax.numpy as jnp
import lineax as lx
import numpy as np
from jax import lax

from .._errors import UsageError
from ._field import FlowField, tangent_project
from ._plan import BLOCK_ROWS, DENSE_MAX  # defined with the memory estimate that counts them
from ._schemes import scheme_velocity

__all__ = [
    "NOISE_SOLVERS",
    "FIXED_NOISE_SOLVERS",
    "check_noise",
    "noise_solver",
    "noise_terms",
    "blocked_velocity",
    "BLOCK_ROWS",
]

#: The noisy flow's solver names: Heun and geodesic Heun (fixed step ``dt``), SPaRK (adaptive,
#: ``rtol``/``atol``).
NOISE_SOLVERS = ("heun", "spark", "geodesic_heun")
#: The fixed-step ones (they take ``dt``).
FIXED_NOISE_SOLVERS = ("heun", "geodesic_heun")
#: ``spark``'s default ``rtol`` and ``atol`` (the deterministic flow's 1e-6, 1e-8 are far too tight
#: for a method of strong order 1/2).
NOISE_TOLERANCE = 1e-3
_HI = lax.Precision.HIGHEST


def check_noise(noise, key, placement: str) -> float:
    """``noise`` as a float, checked with its ``key`` (before any compute).

    Raises:
        UsageError: a negative, non-finite or non-real ``noise``, a missing ``key``, or a scheme
            that moves the radius (``pre``, ``mix``, ``peri``: the tangent noise has no meaning there).
    """
    ok = isinstance(noise, (int, float, np.integer, np.floating)) and not isinstance(noise, bool)
    if not ok or not math.isfinite(float(noise)) or float(noise) < 0:
        raise UsageError(f"noise (the noise level sigma) must be a finite number >= 0, got {noise!r}.")
    if key is None:
        raise UsageError(
            "noise= needs key=, the PRNG key of the Brownian paths (e.g. key=jax.random.key(0)); "
            "trajectory b uses jax.random.fold_in(key, b)."
        )
    if placement in ("pre", "mix", "peri"):
        raise UsageError(
            f"noise= applies to the schemes that stay on the sphere (post, ngpt, lns), not placement="
            f"{placement!r}, which moves the radius."
        )
    return float(noise)


def noise_solver(solver, controller, rtol, atol, dt):
    """The Stratonovich solver and step-size controller of the noisy flow, from a name or an object.

    ``None`` picks ``heun`` when ``dt`` is given, else ``spark``.

    Raises:
        UsageError: ``euler`` (Itô in Diffrax), ``rk4``, ``tsit5``, ``dopri5`` or any solver that is
            not a Diffrax Stratonovich solver; a `ProjectedSolver` (it renormalises silently); a
            missing ``dt`` for ``heun`` / ``geodesic_heun``; ``rtol``/``atol`` with them or ``dt``
            with ``spark``.
    """
    from ._geodesic import GeodesicHeun
    from ._solvers import ProjectedSolver, _solver_and_controller

    if solver is None:
        solver = "heun" if dt is not None else "spark"
    if isinstance(solver, str):
        if solver == "euler":
            raise UsageError(
                "solver 'euler' is refused with noise: Diffrax's Euler converges to the Itô solution, "
                "which is another SDE here (it leaves the sphere); use 'heun' or 'geodesic_heun' (fixed "
                "step dt) or 'spark' (adaptive), which solve the Stratonovich SDE."
            )
        if solver not in NOISE_SOLVERS:
            raise UsageError(
                f"solver {solver!r} is not an SDE solver; with noise use one of {NOISE_SOLVERS}: 'heun' or "
                "'geodesic_heun' (fixed step dt) or 'spark' (adaptive, rtol/atol)."
            )
        if controller is not None:
            raise UsageError(
                f"stepsize_controller goes with a diffrax solver object, not the name {solver!r}."
            )
        fixed = solver in FIXED_NOISE_SOLVERS
        if fixed and dt is None:
            raise UsageError(f"the fixed-step solver {solver} needs a step dt > 0 (e.g. dt=0.01).")
        if not fixed and dt is not None:
            raise UsageError(
                "dt applies to the fixed-step solvers heun, geodesic_heun; spark chooses its own steps."
            )
        if fixed and (rtol is not None or atol is not None):
            raise UsageError(f"rtol/atol apply to the adaptive solver spark only, not {solver}.")
        if not fixed:  # strong order 1/2: a tolerance of 1e-6 would take ~1e12 steps
            rtol = NOISE_TOLERANCE if rtol is None else rtol
            atol = NOISE_TOLERANCE if atol is None else atol
        obj = {"heun": diffrax.Heun, "spark": diffrax.SPaRK, "geodesic_heun": GeodesicHeun}[solver]()
        return _solver_and_controller(obj, None, rtol, atol, dt)
    if isinstance(solver, ProjectedSolver) or not isinstance(solver, diffrax.AbstractStratonovichSolver):
        raise UsageError(
            f"with noise the solver must be a Diffrax Stratonovich solver (e.g. diffrax.Heun(), "
            f"diffrax.SPaRK()), not {type(solver).__name__}"
            + (" (it renormalises every step silently)." if isinstance(solver, ProjectedSolver) else ".")
        )
    return _solver_and_controller(solver, controller, rtol, atol, dt)


def _block_rows(field: FlowField, theta, beta, block: int):
    r"""$A_i(\Theta) = \sum_j w_{ij} V\theta_j$ computed ``block`` query rows at a time (`lax.map`):
    the scores never exceed ``(block, n)``. The weights are `FlowField.weights`' formula."""
    n, d = theta.shape
    dt = theta.dtype
    q = jnp.matmul(theta, field.q.astype(dt).T, precision=_HI)
    k = jnp.matmul(theta, field.k.astype(dt).T, precision=_HI)
    v = jnp.matmul(theta, field.v.astype(dt).T, precision=_HI)
    nb = -(-n // block)
    pad = nb * block - n
    qb = jnp.pad(q, ((0, pad), (0, 0))).reshape(nb, block, d)
    # Padded rows attend to everything (no 0/0); they are cut off below.
    mb = jnp.pad(field.mask, ((0, pad), (0, 0)), constant_values=True).reshape(nb, block, n)
    b = jnp.asarray(beta, dt)

    def rows(args):
        qr, mr = args
        s = b * jnp.matmul(qr, k.T, precision=_HI)
        if field.dynamics == "sa":
            s = jnp.where(mr, s, jnp.finfo(dt).min)
            w = jnp.where(mr, jnp.exp(s - jnp.max(s, axis=-1, keepdims=True)), 0)
            # Normalised after the product: a (block, d) division instead of a (block, n) one.
            return jnp.matmul(w, v, precision=_HI) / jnp.sum(w, axis=-1, keepdims=True)
        w = jnp.where(mr, jnp.exp(s), 0)
        return jnp.matmul(w, v, precision=_HI) / n

    return lax.map(rows, (qb, mb)).reshape(nb * block, d)[:n]


def attention_vectors(field: FlowField, theta, beta):
    """`FlowField.attention`, dense up to `DENSE_MAX` tokens and row-blocked above (O(n * block) memory)."""
    if field.num_tokens <= DENSE_MAX:
        return field.attention(theta, beta)
    return _block_rows(field, theta, beta, BLOCK_ROWS)


def blocked_velocity(field: FlowField, x, beta, t=0.0):
    """The field's velocity (`FlowField.__call__`) with the attention of `attention_vectors`."""
    if field.num_tokens <= DENSE_MAX:
        return field(x, beta, t)
    if field.placement == "post":
        return tangent_project(x, _block_rows(field, x, beta, BLOCK_ROWS))
    alpha, tau = field.ngpt_alpha.astype(x.dtype), field.mix_time.astype(x.dtype)
    return scheme_velocity(
        field.placement, x, lambda th: _block_rows(field, th, beta, BLOCK_ROWS), t, alpha, tau
    )


def noise_terms(field: FlowField, sigma, key, t0, t1, tol, dtype, *, common: bool, levy):
    r"""The `diffrax.MultiTerm` of drift and noise for one trajectory, and its Brownian path.

    The path is a `diffrax.VirtualBrownianTree` on ``[t0, t1]`` from ``key`` (shape ``(n, d)``,
    one $\mathbb R^d$ motion per token, or ``(d, d)`` for common noise): any sub-interval a piece
    integrates reads the same path, so pieces and chunks never change it.
    """
    n, d = field.num_tokens, field.dim
    shape = jax.ShapeDtypeStruct((d, d) if common else (n, d), dtype)
    path = diffrax.VirtualBrownianTree(t0, t1, tol=tol, shape=shape, key=key, levy_area=levy)
    drift = diffrax.ODETerm(lambda t, y, b: blocked_velocity(field, y, b, t))
    s = jnp.asarray(sigma, dtype)
    if common:
        # The entries of W have variance t / d: scale a standard motion by 1 / sqrt(d).
        scale = s / jnp.sqrt(jnp.asarray(d, dtype))

        def diffusion(t, y, b):
            a = attention_vectors(field, y, b)
            return lx.FunctionLinearOperator(
                lambda w: scale * tangent_project(y, jnp.matmul(a, w.T, precision=_HI)), shape
            )
    else:

        def diffusion(t, y, b):
            return lx.FunctionLinearOperator(lambda w: s * tangent_project(y, w), shape)

    return diffrax.MultiTerm(drift, diffrax.ControlTerm(diffusion, path)), path
