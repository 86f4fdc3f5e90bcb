r"""`find_equilibria`: batched search for equilibria (fixed points) of one layer map on an Optimistix solver.

A fixed point of the post-LN layer (eq. 3) solves

$$F(X) = \mathrm{LN}\big(A(X)\,X\,W_V\big) = X,\qquad X \in (\mathbb S^{d-1})^n,$$

and for the un-normalised map (eq. 2, ``placement="none"``) $A(X) X W_V = X$ in
$\mathbb R^{n\times d}$. Forward iteration only finds attractors; the paper's equilibria of
rank $\ge 3$ are saddles (`docs/theory.md#stability`), so we solve $R(X) = F(X) - X = 0$:

1. optional forward iteration $X \leftarrow F(X)$ (``lax.scan``);
2. optional Optax (Adam) minimisation of $\|R(X)\|_F^2$ (plus deflation and rank terms), kept on
   the spheres by renormalising rows after every step (a retraction);
3. a Newton-type solve with an Optimistix solver object: by default Gauss--Newton with a
   Lineax SVD (pseudo-inverse) linear solver on $\min_X \|R(X)\|^2$; any
   ``optx.AbstractLeastSquaresSolver`` or ``optx.AbstractRootFinder`` can be passed instead.

Step 3 needs no explicit sphere constraint: the output of post-LN lies on the spheres, so any
zero of $R$ does too. The full-space Jacobian $DR = DF - I$ is singular exactly when the
tangent Jacobian has a multiplier 1; every equilibrium of the paper's construction has such
multipliers (the first token is non-hyperbolic), hence the pseudo-inverse.

**Accuracy.** For the bidiagonal $W_V = I + wS$ the first token's fixed point $\pm e_d$ is a
root of multiplicity $d - 1$ of $R$ (in ratio coordinates $u_m = x_m / x_d$ the residual is
$w(u_{m-1} - u_m u_{d-1})$, zero set near 0 the curve $u_m = a^{d-m}$ with $R \sim w a^{d-1}$),
so a residual at rounding level pins $X$ only to $\sim(\varepsilon / w)^{1/(d-1)}$ (about 1e-3
at $d = 6$). A residual is not a distance: for acyclic masks `rankdyn._equilibria._tree`
re-solves such results token by token (the first token exactly), and the census reports an
error estimate next to the residual.

**Deflation** (Farrell, Birkisson, Funke 2015). Given known solutions $X_j$, the deflated
residual $M(X) R(X)$ with $M(X) = \prod_j (\|X - X_j\|_F^{-p} + \sigma)$ has the same zeros as
$R$ except the $X_j$, so a new solve from the same starts finds other equilibria. Because of
the multiplicity above, $p$ must exceed the order of the root (default ``p = d + 1``).

**Rank bias** (``target_rank=k``). In the Adam phase we add
$\lambda\,\big(r_k + \mathrm{relu}(\log\tau - \log(\sigma_k/\sigma_1))\big)$ with
$r_k = \sum_{j>k}\sigma_j^2 / \sum_j \sigma_j^2$,
annealed linearly to 0 so that the final Newton phase solves the unbiased equations.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import lineax as lx
import numpy as np
import optax
import optimistix as optx
from jax import lax
from jaxtyping import Array, ArrayLike, Float, Int

from .._errors import SolveError, UsageError
from .._model._layer import SelfAttentionLayer
from .._model._placements import fixed_point_layer, on_spheres
from .._observe._tolerances import EQUILIBRIUM_RANK_TOL, default_residual_tol
from .._results import RESULTS
from ._deflation import _log_deflation, _rank_penalty, _retract

__all__ = [
    "RESULTS",
    "EquilibriumSolution",
    "find_equilibria",
    "equilibrium_residual",
    "equilibrium_rank",
    "default_residual_tol",
    "default_solver",
    "status_names",
]


# The status of one start is a member of the one `rankdyn.RESULTS` (rankdyn/_results.py):
# ``successful`` means ||F(X) - X||_F <= residual_tol (not merely that the solver stopped); the
# solver's own outcomes are promoted from ``optx.RESULTS``. Every status a start can end with,
# in a fixed order (host-side reporting compares with each; no private internals).
_STATUS = (
    "successful",
    "max_steps_reached",
    "residual_above_tolerance",
    "nonfinite",
    "singular",
    "degenerate",
    "breakdown",
    "stagnation",
    "nonlinear_max_steps_reached",
    "nonlinear_divergence",
    "nonfinite_input",
    "conlim",
)


def status_names() -> tuple[str, ...]:
    """The names of the `RESULTS` members `EquilibriumSolution.status_counts` reports."""
    return tuple(name for name in _STATUS if hasattr(RESULTS, name))


class EquilibriumSolution(eqx.Module):
    """Result of `find_equilibria`; every field has the batch axes of the starts in front.

    Attributes:
        x: the final iterates ``(*batch, n, d)``.
        residual: $\\|F(X) - X\\|_F$ at ``x`` (undeflated, unpenalised).
        result: a `RESULTS` member per start.
        steps: number of Newton/LM steps taken.
        rank: numerical rank of ``x`` (relative tolerance ``rank_tol`` of `find_equilibria`).
    """

    x: Float[Array, "*batch n d"]
    residual: Float[Array, "*batch"]
    result: RESULTS
    steps: Int[Array, "*batch"]
    rank: Int[Array, "*batch"]

    @property
    def successful(self) -> Array:
        """Boolean mask of the starts that converged."""
        return self.result == RESULTS.successful

    @property
    def status(self) -> np.ndarray:
        """The status name of every start (host-side array of str, batch shape)."""
        out = np.full(np.shape(self.residual), "unknown", dtype=object)
        for name in status_names():
            out[np.asarray(self.result == getattr(RESULTS, name))] = name
        return out.astype(str)

    def status_counts(self) -> dict[str, int]:
        """How many starts ended with each status (host-side)."""
        return {
            name: int(np.sum(np.asarray(self.result == getattr(RESULTS, name)))) for name in status_names()
        }


def _map(layer: SelfAttentionLayer, t):
    return lambda x: layer(x, t)[0]


def equilibrium_residual(layer: SelfAttentionLayer, x: Float[ArrayLike, "n d"], t=0) -> Float[Array, ""]:
    r"""$\|F(X) - X\|_F$ for one token matrix."""
    x = jnp.asarray(x)
    return jnp.linalg.norm(layer(x, t)[0] - x)


def equilibrium_rank(
    x: Float[ArrayLike, "n d"], rtol: float = EQUILIBRIUM_RANK_TOL, atol: float | None = None
) -> Int[Array, ""]:
    r"""Numerical rank: the number of singular values above $\max(\mathrm{rtol}\,\sigma_1, \mathrm{atol})$.

    ``atol`` (default 100 machine epsilons) makes the zero equilibrium of the un-normalised map
    rank 0 instead of "full rank at the 1e-30 scale"; sphere-valued tokens have $\sigma_1 \ge 1$.

    The default 1e-8 sits between the smallest genuine singular value of the paper's rank-6
    equilibria at $w = 7$ (about $2\cdot10^{-5}\sigma_1$) and the rounding-level ones of
    converged solves (below 1e-12).
    """
    x = jnp.asarray(x)
    s = jnp.linalg.svd(x, compute_uv=False)
    floor = 100 * jnp.finfo(x.dtype).eps if atol is None else atol
    return jnp.sum(s > jnp.maximum(rtol * s[0], floor)).astype(jnp.int32)


def _solve_one(
    layer,
    x0,
    known,
    t,
    *,
    solver,
    max_steps,
    residual_tol,
    forward_steps,
    minimise_steps,
    learning_rate,
    deflation_power,
    deflation_shift,
    target_rank,
    rank_weight,
    rank_floor,
    rank_tol,
):
    on_sphere = on_spheres(layer)
    f = _map(layer, t)
    dt = x0.dtype
    bad_start = ~jnp.all(jnp.isfinite(x0))
    # A non-finite start is swapped for a harmless one and reported; the batch carries on.
    safe = jnp.full(x0.shape, 1.0, dtype=dt)
    x = jnp.where(bad_start, safe, x0)
    x = _retract(x, on_sphere)

    # Phase 1: forward iteration (finds attractors; a cheap way into their neighbourhoods).
    def fwd(carry, _):
        x, bad = carry
        y = f(x)
        ok = jnp.all(jnp.isfinite(y))
        return (jnp.where(ok, y, x), bad | ~ok), None

    nonfinite = jnp.array(False)
    if forward_steps > 0:
        (x, nonfinite), _ = lax.scan(fwd, (x, nonfinite), None, length=forward_steps)

    # Phase 2: Adam on ||R||^2 (+ deflation, + annealed rank bias), retracted onto the spheres.
    if minimise_steps > 0:
        opt = optax.adam(learning_rate)

        def loss(x, frac):
            xr = _retract(x, on_sphere)
            r2 = jnp.sum((f(xr) - xr) ** 2)
            val = r2 * jnp.exp(2 * _log_deflation(xr, known, deflation_power, deflation_shift))
            if target_rank is not None:
                val = val + rank_weight * (1.0 - frac) * _rank_penalty(xr, target_rank, rank_floor)
            return val

        def adam_step(carry, i):
            x, state, bad = carry
            frac = i.astype(dt) / minimise_steps
            g = jax.grad(loss)(x, frac)
            # Optax mixes Python floats with its int32 step count (bias correction): allow the
            # standard promotion locally so that callers running strict promotion still work.
            with jax.numpy_dtype_promotion("standard"):
                upd, new_state = opt.update(g, state, x)
            y = _retract(optax.apply_updates(x, upd), on_sphere)
            ok = jnp.all(jnp.isfinite(y))
            # Freeze a member at its last finite iterate (stop on non-finite).
            x = jnp.where(ok & ~bad, y, x)
            state = jax.tree.map(lambda a, b: jnp.where(ok & ~bad, a, b), new_state, state)
            return (x, state, bad | ~ok), None

        (x, _, bad2), _ = lax.scan(adam_step, (x, opt.init(x), jnp.array(False)), jnp.arange(minimise_steps))
        nonfinite = nonfinite | bad2

    # Phase 3: Newton-type polishing with Optimistix (least squares: the Jacobian is singular).
    def residual_fn(y, args):
        r = f(y) - y
        if known is not None:
            r = r * jnp.exp(_log_deflation(y, known, deflation_power, deflation_shift))
        return r

    promoted = RESULTS.successful
    if max_steps > 0:
        # A root finder (e.g. optx.Newton) solves R = 0; a least-squares solver min ||R||^2.
        solve = optx.root_find if isinstance(solver, optx.AbstractRootFinder) else optx.least_squares
        sol = solve(residual_fn, solver, x, max_steps=max_steps, throw=False)
        x_new = sol.value
        steps = sol.stats["num_steps"].astype(jnp.int32)
        promoted = RESULTS.promote(sol.result)
        # A Newton iterate that blew up is reported as non-finite; the member keeps its input.
        newton_finite = jnp.all(jnp.isfinite(x_new))
        nonfinite = nonfinite | ~newton_finite
        x_new = jnp.where(newton_finite, x_new, x)
        x = _retract(x_new, on_sphere)
    else:
        steps = jnp.array(0, jnp.int32)

    y, aux = layer(x, t)
    residual = jnp.linalg.norm(y - x)
    finite = jnp.all(jnp.isfinite(x)) & jnp.isfinite(residual)
    nonfinite = nonfinite | bad_start | ~finite
    ok = residual <= residual_tol
    # Precedence: non-finite, LN undefined, success by residual, then the solver's own reason
    # (a solver that "converged" above the tolerance sat in a local minimum of ||R||).
    stopped = RESULTS.where(promoted == RESULTS.successful, RESULTS.residual_above_tolerance, promoted)
    result = RESULTS.where(
        nonfinite,
        RESULTS.nonfinite,
        RESULTS.where(aux.degenerate, RESULTS.degenerate, RESULTS.where(ok, RESULTS.successful, stopped)),
    )
    x = jnp.where(bad_start, x0, x)
    residual = jnp.where(bad_start, jnp.asarray(jnp.nan, dt), residual)
    rank = jnp.where(finite, equilibrium_rank(jnp.where(finite, x, 1.0), rank_tol), -1)
    return EquilibriumSolution(x=x, residual=residual, result=result, steps=steps, rank=rank)


def find_equilibria(
    layer: SelfAttentionLayer,
    x0: Float[ArrayLike, "*batch n d"] | None = None,
    *,
    solver: optx.AbstractLeastSquaresSolver | optx.AbstractRootFinder | None = None,
    method: str = "gn",
    max_steps: int = 100,
    rtol: float = 1e-13,
    atol: float = 1e-13,
    residual_tol: float | None = None,
    forward_steps: int = 0,
    minimise_steps: int = 0,
    learning_rate: float = 1e-2,
    deflation: Float[ArrayLike, "m n d"] | None = None,
    deflation_power: float | None = None,
    deflation_shift: float = 1.0,
    target_rank: int | None = None,
    rank_weight: float = 1.0,
    rank_floor: float = 1e-4,
    rank_tol: float = EQUILIBRIUM_RANK_TOL,
    t=0,
    throw: bool = True,
) -> EquilibriumSolution:
    r"""Solve $F(X) = X$ from many starts at once (one compiled program, vmapped over starts).

    Arguments:
        layer: a `SelfAttentionLayer` (placement ``"post"``: search on $(\mathbb S^{d-1})^n$;
            ``"none"``/``"pre"``: in $\mathbb R^{n\times d}$).
        x0: starts ``(*batch, n, d)``; post-LN starts are normalised first (the name of the
            starts in `rankdyn.simulate`).
        solver: an Optimistix least-squares solver or root finder for the Newton phase
            (default `default_solver` ``(method, rtol, atol)``). Equilibria come in degenerate
            families, so choose a solver whose linear solves tolerate singular Jacobians
            (``lx.SVD()``, ``lx.QR()`` for least squares, or damping).
        method: ``"gn"`` (Gauss--Newton with an SVD pseudo-inverse, default) or ``"lm"``
            (Levenberg--Marquardt; measured to stall near the paper's degenerate equilibria);
            ignored when ``solver`` is given.
        max_steps: Newton/LM steps (0 skips that phase).
        rtol, atol: Optimistix Cauchy termination tolerances of the default solver.
        residual_tol: success threshold on $\|F(X) - X\|_F$ (default `default_residual_tol`).
        forward_steps: forward iterations before the solve.
        minimise_steps, learning_rate: Adam phase on $\|R\|^2$ (0 skips it).
        deflation: known solutions ``(m, n, d)`` to deflate (include their symmetric images,
            see `symmetric_images`); ``None`` for none.
        deflation_power, deflation_shift: $p$ (default $d + 1$) and $\sigma$ of the deflation.
        target_rank: bias the Adam phase towards this rank (needs ``minimise_steps > 0``).
        rank_weight, rank_floor: weight $\lambda$ and floor $\tau$ of that bias.
        rank_tol: relative tolerance of the reported rank (`equilibrium_rank`).
        t: layer index (per-layer weights).
        throw: raise if any start did not succeed (default). Batched censuses, the CLI and
            code under ``vmap`` pass ``False`` and read the per-start `RESULTS`.

    Returns:
        An `EquilibriumSolution` with the batch axes of ``x0``.

    Raises:
        UsageError: on bad shapes or options (trace time).
        SolveError: with ``throw=True``, when a start did not succeed (inside a caller's ``jit``,
            Equinox's runtime error instead).
    """
    if x0 is None:
        raise UsageError("find_equilibria() needs the starts x0, shape (*batch, n, d).")
    layer = fixed_point_layer(layer, t)  # mix at depth t: post or pre; peri and lns: refused
    x0s = jnp.asarray(x0)
    n, d = layer.num_tokens, layer.dim
    if x0s.ndim < 2 or x0s.shape[-2:] != (n, d):
        raise UsageError(f"x0 must have shape (*batch, {n}, {d}) for this layer, got {x0s.shape}.")
    if not jnp.issubdtype(x0s.dtype, jnp.floating):
        x0s = x0s.astype(float)
    if solver is None:
        solver = default_solver(method, rtol, atol)
    elif not isinstance(solver, (optx.AbstractLeastSquaresSolver, optx.AbstractRootFinder)):
        raise UsageError(
            "solver must be an optimistix least-squares solver or root finder (e.g. "
            f"optx.GaussNewton(rtol, atol, linear_solver=lx.SVD())), got {type(solver).__name__}."
        )
    if min(max_steps, forward_steps, minimise_steps) < 0:
        raise UsageError("max_steps, forward_steps and minimise_steps must be >= 0.")
    if target_rank is not None:
        if not 1 <= target_rank <= min(n, d):
            raise UsageError(f"target_rank must be in [1, min(n, d) = {min(n, d)}], got {target_rank}.")
        if minimise_steps == 0:
            raise UsageError("target_rank acts in the Adam phase: pass minimise_steps > 0.")
    known = None
    if deflation is not None:
        known = jnp.asarray(deflation, dtype=x0s.dtype)
        if known.ndim == 2:
            known = known[None]
        if known.ndim != 3 or known.shape[1:] != (n, d):
            raise UsageError(f"deflation must be (m, {n}, {d}) known solutions, got {known.shape}.")
        if known.shape[0] == 0:
            known = None
    power = float(d + 1 if deflation_power is None else deflation_power)
    tol = default_residual_tol(x0s.dtype) if residual_tol is None else float(residual_tol)
    batch = x0s.shape[:-2]
    flat = x0s.reshape((-1, n, d))
    sol = _batched(
        layer,
        flat,
        known,
        t,
        solver,
        max_steps=int(max_steps),
        residual_tol=tol,
        forward_steps=int(forward_steps),
        minimise_steps=int(minimise_steps),
        learning_rate=float(learning_rate),
        deflation_power=power,
        deflation_shift=float(deflation_shift),
        target_rank=target_rank,
        rank_weight=float(rank_weight),
        rank_floor=float(rank_floor),
        rank_tol=float(rank_tol),
    )
    sol = jax.tree.map(lambda a: a.reshape(batch + a.shape[1:]), sol)
    if throw:
        why = (
            "find_equilibria: {} start(s) did not reach residual_tol (more max_steps or starts may help); "
            "pass throw=False to get the per-start status in `EquilibriumSolution.result` instead."
        )
        ok = sol.result == RESULTS.successful
        if isinstance(ok, jax.core.Tracer):  # inside the caller's jit: a runtime check
            sol = eqx.tree_at(lambda s: s.x, sol, eqx.error_if(sol.x, ~jnp.all(ok), why.format("some")))
        elif not bool(jnp.all(ok)):
            # A start with NaN or inf never could: say so, not only "more max_steps may help".
            bad = ~np.all(np.isfinite(np.asarray(x0s)), axis=(-2, -1))
            nonfinite = (
                f" {int(bad.sum())} of them start from NaN or infinite values in x0 (the first at batch "
                f"index {tuple(map(int, np.argwhere(bad)[0]))}): pass finite starts."
                if bad.any()
                else ""
            )
            raise SolveError(why.format(int(np.sum(~np.asarray(ok)))) + nonfinite)
    return sol


def default_solver(method: str = "gn", rtol: float = 1e-13, atol: float = 1e-13):
    """The Newton-phase solver: ``"gn"`` Gauss--Newton with ``lx.SVD()``, ``"lm"`` Levenberg--Marquardt.

    Raises:
        ValueError: for another ``method``.
    """
    if method == "gn":
        return optx.GaussNewton(rtol=float(rtol), atol=float(atol), linear_solver=lx.SVD())
    if method == "lm":
        return optx.LevenbergMarquardt(rtol=float(rtol), atol=float(atol))
    raise UsageError(f"method must be 'gn' or 'lm', got {method!r}; or pass an optimistix solver as solver=.")


@eqx.filter_jit
def _batched(layer, xs, known, t, solver, **static):
    return jax.vmap(lambda x: _solve_one(layer, x, known, t, solver=solver, **static))(xs)
