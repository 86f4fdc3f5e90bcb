r"""Batched search for equilibria (fixed points) of one layer map (SPEC §4.4, §5.2, §8).

A fixed point of the post-LN layer (eq. 3) solves

$$F(X) = \mathrm{LN}\big(A(X)\,X\,W_V\big) = X,\qquad X \in (\mathbb S^{d-1})^n,$$

and for the un-normalised map (eq. 2, ``placement="none"``) $A(X) X W_V = X$ in
$\mathbb R^{n\times d}$. Forward iteration only finds attractors; the paper's equilibria of
rank $\ge 3$ are saddles (SPEC §5.6), so we solve the residual $R(X) = F(X) - X = 0$ directly:

1. optional forward iteration $X \leftarrow F(X)$ (``lax.scan``);
2. optional Optax (Adam) minimisation of $\|R(X)\|_F^2$ (plus deflation and rank terms), kept on
   the spheres by renormalising rows after every step (a retraction);
3. Gauss--Newton (default) or Levenberg--Marquardt polishing with Optimistix on the least
   squares problem $\min_X \|R(X)\|^2$ over $\mathbb R^{n\times d}$.

Step 3 needs no explicit sphere constraint: the output of post-LN lies on the spheres, so any
zero of $R$ does too. The full-space Jacobian $DR = DF - I$ is singular exactly when the
tangent Jacobian has a multiplier 1 (the normal block of $DF$ is 0, so that block of $DR$ is
$-I$). Every equilibrium of the paper's construction has such multipliers (the first token is
non-hyperbolic), so the linear solves use a pseudo-inverse (``lineax.SVD``) or damping (LM).

**Accuracy.** For the bidiagonal $W_V = I + wS$ the first token's fixed point $\pm e_d$ is a
root of multiplicity $d - 1$ of $R$ (in ratio coordinates $u_m = x_m / x_d$ the residual is
$w(u_{m-1} - u_m u_{d-1})$, whose zero set near 0 is the curve $u_m = a^{d-m}$ with
$R \sim w a^{d-1}$). A residual at rounding level therefore pins $X$ only to
$\sim (\varepsilon / w)^{1/(d-1)}$ (about 1e-3 at $d = 6$ in float64), although the result is an
exact equilibrium of a map whose $W_V$ is perturbed at rounding level (small backward error).
Hence `deduplicate` and closed-form matching use a distance tolerance of 2e-2 while the
residual tolerance is 1e-10.

**Deflation** (Farrell, Birkisson, Funke 2015). Given known solutions $X_j$, the deflated
residual $M(X) R(X)$ with $M(X) = \prod_j (\|X - X_j\|_F^{-p} + \sigma)$ has the same zeros as
$R$ except the $X_j$, so a new solve from the same starts finds other equilibria. Because of
the multiplicity above, $p$ must exceed the order of the root (default ``p = d + 1``).

**Rank bias** (``target_rank=k``). In the Adam phase we add
$\lambda\,\big(\sum_{j>k}\sigma_j^2 / \sum_j \sigma_j^2 + \mathrm{relu}(\log\tau - \log(\sigma_k/\sigma_1))\big)$,
annealed linearly to 0 so that the final Newton phase solves the unbiased equations. Measured
at n = d = 6, w = 7 (512 random starts each): plain Gauss-Newton gives ranks 1-4 only (about
90% rank 1); with ``target_rank=4`` and 300 Adam steps the ranks spread over 1-5 and a rank-4
closed form appears; ``target_rank=6`` reaches rank 6.

**Structure of the paper's system** (causal mask, uniform attention, $W_V = I + wS$). Writing
$r_i = \|\sum_{j\le i} X_j W_V\|$, a fixed point satisfies $X_{i+1}(r_{i+1} I - W_V) = r_i X_i$.
Either $r_{i+1} = 1$ (a "chain" step, $X_{i+1}(-wS) = r_i X_i$, which extends the support of the
tokens by one coordinate) or $X_{i+1} = r_i X_i((r_{i+1} - 1)I - wS)^{-1}$ with $r_{i+1}$ a root
of a polynomial norm condition (support not extended). The closed forms of SPEC §5.2 take
$r = i$ (copies of $e_d$) for the first $c$ tokens and chain steps afterwards; every other
interleaving of the two kinds of steps is an equilibrium too, so the equilibrium set is much
larger than the closed forms (e.g. 100 distinct classes at n = d = 6, w = 7, of which only a
handful are closed forms). Rank $n$ needs $n - 1$ chain steps, so every rank-$n$ equilibrium is
a closed form.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Sequence

import equinox as eqx
import jax
import jax.numpy as jnp
import lineax as lx
import numpy as np
import optax
import optimistix as optx
from jax import lax
from jaxtyping import Array, ArrayLike, Float, Int

from ._layer import SelfAttentionLayer

__all__ = [
    "RESULTS",
    "EquilibriumSolution",
    "EquilibriumClass",
    "find_equilibria",
    "equilibrium_residual",
    "equilibrium_rank",
    "deduplicate",
    "symmetry_group",
    "symmetric_images",
    "default_residual_tol",
]


class RESULTS(eqx.Enumeration):
    """Status of one start of `find_equilibria`."""

    successful = "the residual ||F(X) - X||_F is below the tolerance"
    max_steps_reached = "the solver stopped (max steps or stagnation) with the residual above the tolerance"
    nonfinite = "a NaN or inf appeared in the iterates (the member was frozen)"
    singular = "a normalisation met a zero row (LN undefined) or the linear solve broke down"


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
        by_value = {int(item._value): name for name, item in RESULTS._name_to_item.items()}
        names = np.array([by_value[i] for i in range(len(by_value))])
        return names[np.asarray(self.result._value)]

    def status_counts(self) -> dict[str, int]:
        """How many starts ended with each status (host-side)."""
        codes = np.asarray(self.result._value).ravel()
        names = list(RESULTS._name_to_item)
        return {name: int(np.sum(codes == RESULTS._name_to_item[name]._value)) for name in names}


def default_residual_tol(dtype) -> float:
    """1e-10 in float64, 1e-5 in float32 (about ``eps ** 0.6``)."""
    return 1e-10 if jnp.finfo(dtype).bits >= 64 else 1e-5


def _map(layer: SelfAttentionLayer, t):
    return lambda x: layer(x, t)[0]


def equilibrium_residual(layer: SelfAttentionLayer, x: Float[ArrayLike, "n d"], t=0) -> Float[Array, ""]:
    r"""$\|F(X) - X\|_F$ for one token matrix."""
    x = jnp.asarray(x)
    return jnp.linalg.norm(layer(x, t)[0] - x)


def equilibrium_rank(x: Float[ArrayLike, "n d"], rtol: float = 1e-8, atol: float | None = None) -> Int[Array, ""]:
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


def _retract(x, on_sphere: bool):
    if not on_sphere:
        return x
    nrm = jnp.linalg.norm(x, axis=-1, keepdims=True)
    return x / jnp.where(nrm > 0, nrm, 1.0)


def _log_deflation(x, known, power, shift):
    """$\\log M(X) = \\sum_j \\log(\\|X - X_j\\|^{-p} + \\sigma)$, computed stably."""
    if known is None:
        return jnp.zeros((), x.dtype)
    dist2 = jnp.sum((x[None] - known) ** 2, axis=(-2, -1))
    # log(d^-p + s) = logaddexp(-p/2 log d^2, log s); the tiny floor keeps d = 0 finite.
    tiny = jnp.finfo(x.dtype).tiny
    return jnp.sum(jnp.logaddexp(-0.5 * power * jnp.log(dist2 + tiny), jnp.log(shift)))


def _rank_penalty(x, k: int, tau: float):
    s = jnp.linalg.svd(x, compute_uv=False)
    s2 = s**2
    tail = jnp.sum(s2[k:]) / jnp.sum(s2)
    low = jax.nn.relu(jnp.log(tau) - jnp.log(s[k - 1] / s[0] + jnp.finfo(x.dtype).tiny))
    return tail + low


def _solve_one(
    layer, x0, known, t, *, method, max_steps, rtol, atol, residual_tol, forward_steps, minimise_steps,
    learning_rate, deflation_power, deflation_shift, target_rank, rank_weight, rank_floor, rank_tol,
):
    on_sphere = layer.placement == "post"
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

    if method == "gn":
        solver = optx.GaussNewton(rtol=rtol, atol=atol, linear_solver=lx.SVD())
    else:
        solver = optx.LevenbergMarquardt(rtol=rtol, atol=atol)
    if max_steps > 0:
        sol = optx.least_squares(residual_fn, solver, x, max_steps=max_steps, throw=False)
        x_new = sol.value
        steps = sol.stats["num_steps"].astype(jnp.int32)
        lin_fail = (sol.result == optx.RESULTS.singular) | (sol.result == optx.RESULTS.breakdown)
        # A Newton iterate that blew up is reported as non-finite; the member keeps its input.
        newton_finite = jnp.all(jnp.isfinite(x_new))
        nonfinite = nonfinite | ~newton_finite
        x_new = jnp.where(newton_finite, x_new, x)
        x = _retract(x_new, on_sphere)
    else:
        steps = jnp.array(0, jnp.int32)
        lin_fail = jnp.array(False)

    y, aux = layer(x, t)
    residual = jnp.linalg.norm(y - x)
    finite = jnp.all(jnp.isfinite(x)) & jnp.isfinite(residual)
    nonfinite = nonfinite | bad_start | ~finite
    ok = residual <= residual_tol
    result = RESULTS.where(
        nonfinite,
        RESULTS.nonfinite,
        RESULTS.where(
            aux.degenerate | (lin_fail & ~ok),
            RESULTS.singular,
            RESULTS.where(ok, RESULTS.successful, RESULTS.max_steps_reached),
        ),
    )
    x = jnp.where(bad_start, x0, x)
    residual = jnp.where(bad_start, jnp.asarray(jnp.nan, dt), residual)
    rank = jnp.where(finite, equilibrium_rank(jnp.where(finite, x, 1.0), rank_tol), -1)
    return EquilibriumSolution(x=x, residual=residual, result=result, steps=steps, rank=rank)


def find_equilibria(
    layer: SelfAttentionLayer,
    x0s: Float[ArrayLike, "*batch n d"],
    *,
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
    rank_tol: float = 1e-8,
    t=0,
    throw: bool = False,
) -> EquilibriumSolution:
    r"""Solve $F(X) = X$ from many starts at once (one compiled program, vmapped over starts).

    Arguments:
        layer: a `SelfAttentionLayer` (placement ``"post"``: search on $(\mathbb S^{d-1})^n$;
            ``"none"``/``"pre"``: in $\mathbb R^{n\times d}$).
        x0s: starts ``(*batch, n, d)``; post-LN starts are normalised first.
        method: ``"gn"`` (Gauss--Newton with an SVD pseudo-inverse, default) or ``"lm"``
            (Levenberg--Marquardt; measured to stall near the paper's degenerate equilibria).
        max_steps: Newton/LM steps (0 skips that phase).
        rtol, atol: Optimistix Cauchy termination tolerances.
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
        throw: raise if any start did not succeed (use ``False`` under ``vmap``/sweeps).

    Returns:
        An `EquilibriumSolution` with the batch axes of ``x0s``.

    Raises:
        ValueError: on bad shapes or options (trace time); with ``throw=True`` an
            `equinox.EquinoxRuntimeError` when some start did not converge.
    """
    x0s = jnp.asarray(x0s)
    n, d = layer.num_tokens, layer.dim
    if x0s.ndim < 2 or x0s.shape[-2:] != (n, d):
        raise ValueError(f"x0s must have shape (*batch, {n}, {d}) for this layer, got {x0s.shape}.")
    if not jnp.issubdtype(x0s.dtype, jnp.floating):
        x0s = x0s.astype(float)
    if method not in ("gn", "lm"):
        raise ValueError(f"method must be 'gn' or 'lm', got {method!r}.")
    if min(max_steps, forward_steps, minimise_steps) < 0:
        raise ValueError("max_steps, forward_steps and minimise_steps must be >= 0.")
    if target_rank is not None:
        if not 1 <= target_rank <= min(n, d):
            raise ValueError(f"target_rank must be in [1, min(n, d) = {min(n, d)}], got {target_rank}.")
        if minimise_steps == 0:
            raise ValueError("target_rank acts in the Adam phase: pass minimise_steps > 0.")
    known = None
    if deflation is not None:
        known = jnp.asarray(deflation, dtype=x0s.dtype)
        if known.ndim == 2:
            known = known[None]
        if known.ndim != 3 or known.shape[1:] != (n, d):
            raise ValueError(f"deflation must be (m, {n}, {d}) known solutions, got {known.shape}.")
        if known.shape[0] == 0:
            known = None
    power = float(d + 1 if deflation_power is None else deflation_power)
    tol = default_residual_tol(x0s.dtype) if residual_tol is None else float(residual_tol)
    batch = x0s.shape[:-2]
    flat = x0s.reshape((-1, n, d))
    sol = _batched(
        layer, flat, known, t, method=method, max_steps=int(max_steps), rtol=float(rtol), atol=float(atol),
        residual_tol=tol, forward_steps=int(forward_steps), minimise_steps=int(minimise_steps),
        learning_rate=float(learning_rate), deflation_power=power, deflation_shift=float(deflation_shift),
        target_rank=target_rank, rank_weight=float(rank_weight), rank_floor=float(rank_floor),
        rank_tol=float(rank_tol),
    )
    sol = jax.tree.map(lambda a: a.reshape(batch + a.shape[1:]), sol)
    if throw:
        failed = ~jnp.all(sol.result == RESULTS.successful)
        x = eqx.error_if(sol.x, failed, "find_equilibria: some starts did not converge (pass throw=False).")
        sol = eqx.tree_at(lambda s: s.x, sol, x)
    return sol


@eqx.filter_jit
def _batched(layer, xs, known, t, **static):
    return jax.vmap(lambda x: _solve_one(layer, x, known, t, **static))(xs)


# ----------------------------------------------------------------------------- symmetries


def _perm_automorphisms(mask: np.ndarray, fixed_attention: np.ndarray | None, max_tokens: int) -> list:
    n = mask.shape[0]
    if n > max_tokens:
        return [np.arange(n)]
    out = []
    for p in itertools.permutations(range(n)):
        p = np.asarray(p)
        if not np.array_equal(mask[np.ix_(p, p)], mask):
            continue
        if fixed_attention is not None and not np.allclose(fixed_attention[np.ix_(p, p)], fixed_attention):
            continue
        out.append(p)
    return out


def symmetry_group(layer: SelfAttentionLayer, *, max_tokens: int = 8, check: bool = True, key=None) -> dict:
    r"""Discrete symmetries $g$ with $F(gX) = gF(X)$ that `deduplicate` quotients by.

    - Global sign flip $X \mapsto -X$: scores are quadratic in $X$, so $A(-X) = A(X)$ and
      $F(-X) = -F(X)$ whenever the normalisation and the blocks are odd (sphere/RMS LN, no
      MLP bias-GELU). Verified numerically at a random point.
    - Token permutations $P$ that are automorphisms of the mask ($M[p][:, p] = M$, and of a fixed
      attention matrix): $F(PX) = PF(X)$ because the layer has no positional information. The
      complete mask allows all permutations (handled by an assignment problem); other masks are
      enumerated up to ``max_tokens`` tokens (the causal mask has only the identity).
    - Skipped: orthogonal $Z$ with $Z W_V = W_V Z$ (and $Z W_Q W_K^\top Z^\top = W_Q W_K^\top$).
      For the bidiagonal (one Jordan block) and generic $W_V$ these are only $\pm I$, already
      covered by the sign flip; for $W_V \propto I$ or orthogonal $W_V$ they form continuous
      groups, whose orbits show up as neutral multipliers in `rankdyn.stability`.

    Returns:
        ``{"sign": bool, "all_permutations": bool, "permutations": list of index arrays}``.
    """
    import jax.random as jr

    mask = np.asarray(layer.mask)
    n, d = layer.num_tokens, layer.dim
    fixed = None if layer.fixed_attention is None else np.asarray(layer.fixed_attention)
    key = jr.PRNGKey(0) if key is None else key
    x = jr.normal(key, (n, d), dtype=layer.weights.w_v.dtype)
    x = x / jnp.linalg.norm(x, axis=-1, keepdims=True)
    fx = np.asarray(layer(x)[0])
    scale = 1e3 * float(jnp.finfo(x.dtype).eps) * max(1.0, float(np.max(np.abs(fx))))
    sign = bool(np.max(np.abs(np.asarray(layer(-x)[0]) + fx)) <= scale) if check else True
    complete = bool(mask.all()) and (fixed is None or np.allclose(fixed, fixed[0, 0]))
    perms = [] if complete else _perm_automorphisms(mask, fixed, max_tokens)
    if check:
        test = [np.roll(np.arange(n), 1)] if complete and n > 1 else perms
        good = all(np.max(np.abs(np.asarray(layer(x[p])[0]) - fx[p])) <= scale for p in test)
        if not good:  # the layer breaks the mask's symmetry (e.g. per-token weights): drop it
            complete, perms = False, [np.arange(n)]
    return {"sign": sign, "all_permutations": complete, "permutations": perms}


def symmetric_images(x: Float[ArrayLike, "n d"], group: dict) -> np.ndarray:
    """All images ``g x`` of one equilibrium under `symmetry_group` (for deflation).

    For the complete mask (all permutations) only the sign images are returned: deflating all
    $n!$ copies is not practical there.
    """
    x = np.asarray(x)
    perms = group["permutations"] if not group["all_permutations"] and group["permutations"] else [np.arange(x.shape[0])]
    imgs = [x[p] for p in perms]
    if group["sign"]:
        imgs = imgs + [-y for y in imgs]
    return np.stack(imgs)


def _distance(x: np.ndarray, y: np.ndarray, group: dict) -> float:
    """Max-abs distance between ``x`` and the closest image of ``y`` under the group."""
    signs = (1.0, -1.0) if group["sign"] else (1.0,)
    best = math.inf
    for s in signs:
        ys = s * y
        if group["all_permutations"]:
            from scipy.optimize import linear_sum_assignment

            cost = np.max(np.abs(x[:, None, :] - ys[None, :, :]), axis=-1)
            # min over permutations of the max-abs distance: bottleneck assignment; the
            # sum-assignment on squared costs is exact whenever copies are close (what we test).
            r, c = linear_sum_assignment(cost**2)
            best = min(best, float(np.max(cost[r, c])))
        else:
            for p in group["permutations"] or [np.arange(x.shape[0])]:
                best = min(best, float(np.max(np.abs(x - ys[p]))))
    return best


@dataclasses.dataclass(frozen=True)
class EquilibriumClass:
    """One distinct equilibrium (up to symmetry) found by `deduplicate`.

    Attributes:
        x: the representative (the member with the smallest residual), NumPy ``(n, d)``.
        residual: its residual.
        members: indices (into the inputs of `deduplicate`) of all starts in this class.
    """

    x: np.ndarray
    residual: float
    members: np.ndarray

    @property
    def count(self) -> int:
        return int(len(self.members))


def deduplicate(
    xs: Float[ArrayLike, "m n d"],
    residuals: Float[ArrayLike, " m"],
    *,
    tol: float = 2e-2,
    symmetries: dict | None = None,
    known: Sequence[np.ndarray] = (),
) -> list[EquilibriumClass]:
    r"""Group equilibria that coincide up to symmetry (max-abs distance below ``tol``).

    Greedy clustering in order of increasing residual: each point joins the first class whose
    representative is within ``tol`` of some image of it, else starts a new class.

    Arguments:
        xs: candidate equilibria (only pass the converged ones).
        residuals: their residuals (the best one represents a class).
        tol: max-abs distance, 2e-2 by default. Degenerate equilibria are pinned only to
            about 1e-3..1e-2 by a rounding-level residual (module docstring). Measured at
            n = d = 6, w = 7: copies of a closed form lie within 4.3e-3 of it, while two
            distinct equilibria can be as close as 0.058 (ranks 3 and 4, differing in tokens 5-6).
        symmetries: a `symmetry_group` dict; default: the identity only.
        known: representatives of classes found earlier (e.g. a previous deflation round); a
            point matching one of them gets class index ``< len(known)``. Those classes are
            returned first, possibly with no members.

    Returns:
        A list of `EquilibriumClass`, known classes first, then new ones in order of discovery.
    """
    xs = np.asarray(xs)
    res = np.asarray(residuals, dtype=float)
    if xs.ndim != 3 or res.shape != xs.shape[:1]:
        raise ValueError(f"xs must be (m, n, d) and residuals (m,), got {xs.shape} and {res.shape}.")
    group = symmetries or {"sign": False, "all_permutations": False, "permutations": []}
    reps = [np.asarray(k) for k in known]
    rep_res = [math.inf] * len(reps)
    members: list[list[int]] = [[] for _ in reps]
    order = np.argsort(res, kind="stable")
    for i in order:
        x = xs[i]
        found = -1
        for c, r in enumerate(reps):
            if _distance(r, x, group) <= tol:
                found = c
                break
        if found < 0:
            reps.append(x)
            rep_res.append(float(res[i]))
            members.append([int(i)])
        else:
            members[found].append(int(i))
            if res[i] < rep_res[found] and found >= len(known):
                rep_res[found] = float(res[i])
    out = []
    for c, r in enumerate(reps):
        rr = rep_res[c] if np.isfinite(rep_res[c]) else float("nan")
        out.append(EquilibriumClass(x=r, residual=rr, members=np.asarray(members[c], dtype=int)))
    return out
