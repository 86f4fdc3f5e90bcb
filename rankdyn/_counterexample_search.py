r"""Search for value matrices that keep the token rank high at depth (SPEC §5.5, §8.12).

The paper builds counterexamples by hand for the causal mask (Theorem 3) and leaves open whether
LN can sustain higher-rank states under **undirected** masks (the authors conjecture not). This
module searches numerically: it maximises, over $W_V$,

$$\mathcal J(W_V) = \mathbb E_{X^{(0)}}\big[\phi(X^{(T)})\big],\qquad
X^{(t+1)} = \mathrm{LN}\big(A^{(t)} X^{(t)} W_V\big)\ \text{(eq. 3)},$$

with $\phi$ the smallest singular value ($\sigma_{\min}$, the strict "rank is kept" measure) or
the effective rank of the final tokens, by Adam (Optax) through the differentiable
`rankdyn.simulate` (a ``lax.scan`` over depth). $W_Q, W_K$ are zero (uniform attention over
the mask) or fixed random (BERT-style) weights. Since post-LN dynamics are invariant under
$W_V \to cW_V$, the parameter is used as $\sqrt d\, W_V/\|W_V\|_F$.

Finding a high objective is evidence that such states exist (and are reached from random
inputs); failing to find one is weak evidence for the conjecture, nothing more.
"""

from __future__ import annotations

import functools
import time

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import optax
from jaxtyping import Array, ArrayLike, Bool, Float, PRNGKeyArray

from ._layer import SelfAttentionLayer
from ._masks import make_mask, mask_from_adjacency
from ._metrics import effective_rank, mu, singular_values
from ._simulate import simulate
from ._weights import query_key_matrices

__all__ = ["search_value_matrix", "rank_objective", "OBJECTIVES"]

OBJECTIVES = ("sigma_2", "sigma_min", "eff_rank")


def rank_objective(x: Float[Array, "n d"], objective: str = "sigma_min") -> Float[Array, ""]:
    """The per-sample objective on final (unit-norm) tokens.

    ``sigma_2``: the second singular value, 0 iff rank one (the paper's "no rank collapse" is
    ``sigma_2 > 0``); ``sigma_min``: the smallest, 0 iff rank-deficient (full rank is strict: the
    paper's full-rank equilibria are saddles, SPEC §5.6); ``eff_rank``: Roy-Vetterli effective rank.
    """
    s = singular_values(x)
    if objective == "sigma_2":
        return s[1] if s.shape[0] > 1 else jnp.zeros((), x.dtype)
    if objective == "sigma_min":
        return s[-1]
    if objective == "eff_rank":
        return effective_rank(s)
    raise ValueError(f"unknown objective {objective!r}; expected one of {OBJECTIVES}.")


def _normalised(w_v, upper=False):
    d = w_v.shape[-1]
    if upper:
        w_v = jnp.triu(w_v)
    return jnp.sqrt(jnp.asarray(d, w_v.dtype)) * w_v / jnp.linalg.norm(w_v)


def _final_states(layer, w_v, x0, num_layers, upper=False):
    layer = eqx.tree_at(lambda l: l.weights.w_v, layer, _normalised(w_v, upper)[None])
    traj = simulate(layer, x0, num_layers, save_every=max(num_layers, 1), save_states=True,
                    observe=lambda x: {"mu": mu(x)})
    return traj.states[:, -1], traj.degenerate | traj.nonfinite


def _depth_log_objective(layer, w_v, x0, num_layers, objective, upper=False):
    """Training value: mean over inputs *and layers* t = 1..T of log(phi(X^(t)) - floor).

    From a collapsing start phi(X^(T)) sits at the rounding floor (~1e-17), where it carries no
    gradient; averaging the log over depth keeps the signal of the early layers, whose collapse
    rate is what W_V controls.
    """
    layer = eqx.tree_at(lambda l: l.weights.w_v, layer, _normalised(w_v, upper)[None])
    traj = simulate(layer, x0, num_layers, observe=lambda x: {"phi": rank_objective(x, objective)},
                    per_trajectory=True)
    phi = traj.metrics["phi"][:, 1:]
    floor = 1.0 if objective == "eff_rank" else 0.0
    tiny = jnp.finfo(phi.dtype).tiny
    bad = (traj.degenerate | traj.nonfinite)[:, None] | ~jnp.isfinite(phi)
    return jnp.mean(jnp.log(jnp.maximum(jnp.where(bad, floor, phi) - floor, tiny)))


def _mean_objective(layer, w_v, x0, num_layers, objective, log=False, upper=False):
    final, bad = _final_states(layer, w_v, x0, num_layers, upper)
    vals = jax.vmap(lambda x: rank_objective(x, objective))(final)
    # Degenerate / non-finite trajectories count as rank lost (objective 0), never as NaN.
    vals = jnp.where(bad | ~jnp.isfinite(vals), 0.0, vals)
    if log:
        # Collapse is exponential in depth, so sigma_min ~ 1e-18 at T = 50 and its gradient
        # vanishes; log(phi - floor) measures the collapse *rate* and keeps a useful gradient.
        floor = 1.0 if objective == "eff_rank" else 0.0
        tiny = jnp.finfo(vals.dtype).tiny
        vals = jnp.log(jnp.maximum(vals - floor, tiny))
    return jnp.mean(vals), vals


@functools.partial(jax.jit, static_argnums=(1, 2, 3, 4))
def _sphere_batch(key, size, n, d, dtype):
    """``size`` token matrices with rows uniform on the unit sphere."""
    g = jr.normal(key, (size, n, d), dtype)
    return g / jnp.linalg.norm(g, axis=-1, keepdims=True)


@functools.lru_cache(maxsize=None)
def _optimizer(lr: float):
    # Cached so that the jitted step sees the same (static) optimizer and compiles once per lr.
    return optax.chain(optax.clip_by_global_norm(1.0), optax.adam(lr))


@eqx.filter_jit
def _step(layer, opt, w_v, state, x0, depth, objective, loss, upper):
    """One Adam step on the negated objective (module level: compiled once per configuration)."""
    if loss == "depth_log":
        loss_fn = lambda w: -_depth_log_objective(layer, w, x0, depth, objective, upper)
    else:
        loss_fn = lambda w: -_mean_objective(layer, w, x0, depth, objective, loss == "final_log", upper)[0]
    value, grad = jax.value_and_grad(loss_fn)(w_v)
    grad = jnp.where(jnp.isfinite(grad), grad, 0.0)
    # Optax mixes Python floats with its int32 step count; allow that even when the caller
    # runs JAX with strict dtype promotion (our tests do).
    with jax.numpy_dtype_promotion("standard"):
        updates, state = opt.update(grad, state, w_v)
        w_v = optax.apply_updates(w_v, updates)
    return w_v, state, -value


@eqx.filter_jit
def _evaluate(layer, w_v, x_eval, depth, objective, upper):
    """Mean objective and the fractions with rank >= 2 / full rank (sigma > 1e-3 sigma_1).

    ``x_eval`` is an argument (a tracer), not a closed-over constant: simulate only checks the
    finiteness of concrete inputs.
    """
    mean, _ = _mean_objective(layer, w_v, x_eval, depth, objective, upper=upper)
    final, bad = _final_states(layer, w_v, x_eval, depth, upper)
    s = jax.vmap(singular_values)(final)
    keep = lambda v: jnp.mean(((v > 1e-3 * s[:, 0]) & ~bad).astype(s.dtype))
    return mean, keep(s[:, 1]), keep(s[:, -1])


def search_value_matrix(
    key: PRNGKeyArray,
    *,
    mask: str | Bool[ArrayLike, "n n"] = "causal",
    n: int = 3,
    d: int = 3,
    num_layers: int = 50,
    batch: int = 64,
    steps: int = 100,
    lr: float = 1e-2,
    objective: str = "sigma_2",
    qk: str = "zero",
    window: int = 1,
    w_init: Float[ArrayLike, "d d"] | None = None,
    init_scale: float = 0.3,
    eval_batch: int = 512,
    eval_factor: int = 4,
    resample: bool = True,
    dqk: float | None = None,
    loss: str = "final_log",
    stages: int = 4,
    parametrization: str = "full",
) -> dict:
    r"""Optimise $W_V$ with Adam so that random sphere inputs keep a high rank at depth $T$.

    Arguments:
        key: PRNG key (W_V init, Q/K weights, input batches, evaluation set).
        mask: a mask name of `rankdyn.make_mask` (``causal``, ``complete``, ``window`` ...) or a
            boolean ``(n, n)`` array.
        n, d: tokens and dimension.
        num_layers: depth $T$ at which the objective is measured.
        batch: random inputs (uniform on the spheres) per step.
        steps: Adam steps.
        lr: learning rate.
        objective: ``"sigma_2"`` (default: rank > 1), ``"sigma_min"`` (full rank) or
            ``"eff_rank"`` (see `rank_objective`).
        qk: ``"zero"`` (uniform attention over the mask; note that with the complete mask this
            makes all tokens equal after one layer) or ``"bert"`` / ``"gaussian"`` (fixed random
            $W_Q, W_K$, not optimised).
        window: window size for ``mask="window"``.
        w_init: initial $W_V$ (default $I + $ ``init_scale`` $\cdot$ Gaussian).
        eval_batch: size of the fixed held-out evaluation set.
        eval_factor: the evaluation also runs to depth ``eval_factor * T`` to see whether the
            rank persists beyond the trained horizon.
        resample: draw a fresh input batch each step (else one fixed batch).
        dqk: attention temperature (default: the key width).
        loss: the training value. ``"final_log"`` (default): mean over inputs of
            ``log(phi(X_T) - floor)`` (floor 0 for sigma_*, 1 for eff_rank): collapse is
            exponential, so ``phi`` itself is ~1e-16 and flat from a collapsing start while its
            log still has a gradient. ``"depth_log"``: the same averaged over layers t = 1..T
            (rewards slow collapse, not non-collapse). ``"linear"``: ``phi(X_T)`` itself.
            Reported before/after values are always ``phi(X_T)``.
        stages: depth curriculum: the training depth grows in ``stages`` equal steps to T.
        parametrization: ``"full"`` (any $W_V$) or ``"upper"`` ($W_V$ upper triangular, the
            family of the paper's construction). Near the paper's bidiagonal $W_V$ the
            non-collapse of a few percent of inputs survives upper-triangular perturbations but
            is destroyed by generic ones of size 1e-6 (they split the defective eigenvalue 1
            into complex pairs), so a full-space gradient search cannot stay on that family.

    Returns:
        dict with ``w_v`` (found, normalised, as nested lists), ``w_v_init``, ``objective``,
        ``before`` / ``after`` (mean objective on the held-out set at depth T),
        ``before_long`` / ``after_long`` (at depth ``eval_factor * T``), ``frac_rank_ge2_before/after``
        and ``frac_rank_full_before/after`` (fractions of held-out samples with
        sigma_2 > 1e-3 sigma_1, resp. sigma_min > 1e-3 sigma_1, at depth T and at the long depth),
        ``history`` (training value per step: the mean log objective with ``log_loss``), ``w_v_singular_values``,
        ``w_v_eigenvalues`` (as ``[re, im]``), ``seconds`` and the settings.

    Raises:
        ValueError: on an unknown objective, mask or qk family.
    """
    if objective not in OBJECTIVES:
        raise ValueError(f"unknown objective {objective!r}; expected one of {OBJECTIVES}.")
    if loss not in ("final_log", "depth_log", "linear"):
        raise ValueError(f"loss must be 'final_log', 'depth_log' or 'linear', got {loss!r}.")
    if parametrization not in ("full", "upper"):
        raise ValueError(f"parametrization must be 'full' or 'upper', got {parametrization!r}.")
    upper = parametrization == "upper"
    if stages < 1:
        raise ValueError(f"stages must be >= 1, got {stages}.")
    dt = jnp.zeros((), float).dtype
    m = make_mask(mask, n, window=window) if isinstance(mask, str) else mask_from_adjacency(np.asarray(mask))
    k_w, k_qk, k_x, k_eval = jr.split(key, 4)
    w_q, w_k = query_key_matrices(k_qk, qk, d, d, dtype=dt)
    if w_init is None:
        w_v0 = jnp.eye(d, dtype=dt) + init_scale * jr.normal(k_w, (d, d), dt) / jnp.sqrt(jnp.asarray(d, dt))
    else:
        w_v0 = jnp.asarray(w_init, dt)
        if w_v0.shape != (d, d):
            raise ValueError(f"w_init must be (d, d) = ({d}, {d}), got {w_v0.shape}.")
    layer = SelfAttentionLayer(m, w_q, w_k, jnp.eye(d, dtype=dt), dqk=dqk)

    x_eval = _sphere_batch(k_eval, eval_batch, n, d, dt)
    opt = _optimizer(float(lr))
    with jax.numpy_dtype_promotion("standard"):
        state = opt.init(w_v0)

    def evaluate(w_v, x_eval, depth):
        return _evaluate(layer, w_v, x_eval, depth, objective, upper)

    t0 = time.perf_counter()
    before, r2_before, full_before = evaluate(w_v0, x_eval, num_layers)
    before_long, r2_before_long, full_before_long = evaluate(w_v0, x_eval, eval_factor * num_layers)
    w_v = w_v0
    history = []
    for i in range(steps):
        # Depth curriculum: stage s trains at depth ceil(T (s + 1) / stages); early stages still
        # have non-collapsed tokens, hence a gradient (one compilation per stage).
        stage = min(i * stages // max(steps, 1), stages - 1)
        depth = max(1, -(-num_layers * (stage + 1) // stages))
        x0 = _sphere_batch(jr.fold_in(k_x, i) if resample else k_x, batch, n, d, dt)
        w_v, state, val = _step(layer, opt, w_v, state, x0, depth, objective, loss, upper)
        history.append(float(val))
    after, r2_after, full_after = evaluate(w_v, x_eval, num_layers)
    after_long, r2_after_long, full_after_long = evaluate(w_v, x_eval, eval_factor * num_layers)
    w_found = np.asarray(_normalised(w_v, upper))
    return {
        "mask": mask if isinstance(mask, str) else "custom",
        "n": n,
        "d": d,
        "num_layers": num_layers,
        "eval_layers_long": eval_factor * num_layers,
        "qk": qk,
        "objective": objective,
        "loss": loss,
        "stages": stages,
        "steps": steps,
        "lr": lr,
        "batch": batch,
        "before": float(before),
        "after": float(after),
        "before_long": float(before_long),
        "after_long": float(after_long),
        "frac_rank_ge2_before": [float(r2_before), float(r2_before_long)],
        "frac_rank_ge2_after": [float(r2_after), float(r2_after_long)],
        "frac_rank_full_before": [float(full_before), float(full_before_long)],
        "frac_rank_full_after": [float(full_after), float(full_after_long)],
        "history": history,
        "w_v": w_found.tolist(),
        "w_v_init": np.asarray(_normalised(w_v0, upper)).tolist(),
        "parametrization": parametrization,
        "w_v_singular_values": np.linalg.svd(w_found, compute_uv=False).tolist(),
        "w_v_eigenvalues": [[float(z.real), float(z.imag)] for z in np.linalg.eigvals(w_found)],
        "seconds": time.perf_counter() - t0,
    }
