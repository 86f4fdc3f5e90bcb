r"""Search for value matrices that keep the token rank high at depth (paper App. F.4; docs/theory.md#constructions).

The paper builds counterexamples by hand for the causal mask (Theorem 3) and leaves open whether
LN can sustain higher-rank states under **undirected** masks (App. F.4: the authors conjecture
not). This module searches numerically: it maximises, over $W_V$,

$$\mathcal J(W_V) = \log \mathbb E_{X^{(0)}}\big[\phi(X^{(T)})\big],\qquad
X^{(t+1)} = \mathrm{LN}\big(A^{(t)} X^{(t)} W_V\big)\ \text{(eq. 3)},$$

with $\phi$ the second singular value ($\sigma_2$, rank > 1), the smallest ($\sigma_{\min}$, the
strict "full rank is kept" measure) or the effective rank of the final tokens, by Adam (Optax)
through the differentiable `rankdyn.simulate` (a ``lax.scan`` over depth), with a depth
curriculum, restarts and checkpoint selection at depth $T$. $W_Q, W_K$ are zero (uniform
attention over the mask) or fixed random (BERT-style) weights. Since post-LN dynamics are
invariant under $W_V \to cW_V$, the parameter is used as $\sqrt d\, W_V/\|W_V\|_F$.

Positive control: with the causal mask and uniform attention the paper's bidiagonal $W_V$
($w = 4$, $N = d = 3$) keeps rank 2 for a few percent of random inputs. From a random start the
search finds value matrices that do the same (``tests/test_basins_search.py``); the earlier
mean-of-log objective did not (it favours slowing the collapse of every input, a near-rotation).

A high objective is evidence that such states exist and are reached from random inputs;
failing to find one is weak evidence for the conjecture, nothing more.
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
from ._metrics import effective_rank, singular_values
from ._simulate import simulate
from ._weights import query_key_matrices

__all__ = ["search_value_matrix", "rank_objective", "OBJECTIVES"]

OBJECTIVES = ("sigma_2", "sigma_min", "eff_rank")
LOSSES = ("log_mean", "final_log", "depth_log", "linear")


def rank_objective(x: Float[Array, "n d"], objective: str = "sigma_min") -> Float[Array, ""]:
    """The per-sample objective on final (unit-norm) tokens.

    ``sigma_2``: the second singular value, 0 iff rank one (the paper's "no rank collapse" is
    ``sigma_2 > 0``); ``sigma_min``: the smallest, 0 iff rank-deficient (full rank is strict: the
    paper's full-rank equilibria are saddles, docs/theory.md#stability); ``eff_rank``: Roy-Vetterli effective rank.
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


def _no_metrics(x):
    return {}  # only the final states are needed


def _final_states(layer, w_v, x0, num_layers, upper=False):
    layer = eqx.tree_at(lambda l: l.weights.w_v, layer, _normalised(w_v, upper)[None])
    traj = simulate(
        layer, x0, num_layers, save_every=max(num_layers, 1), save_states=True, observe=_no_metrics
    )
    return traj.states[:, -1], traj.degenerate | traj.nonfinite


def _depth_log_objective(layer, w_v, x0, num_layers, objective, upper=False):
    """Training value: mean over inputs *and layers* t = 1..T of log(phi(X^(t)) - floor).

    From a collapsing start phi(X^(T)) sits at the rounding floor (~1e-17), where it carries no
    gradient; averaging the log over depth keeps the signal of the early layers, whose collapse
    rate is what W_V controls.
    """
    layer = eqx.tree_at(lambda l: l.weights.w_v, layer, _normalised(w_v, upper)[None])
    traj = simulate(
        layer, x0, num_layers, observe=lambda x: {"phi": rank_objective(x, objective)}, per_trajectory=True
    )
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


def _log_mean_objective(layer, w_v, x0, num_layers, objective, upper=False):
    r"""Training value $\log \frac1B\sum_b (\phi(X_b^{(T)}) - \text{floor})$ (``loss="log_mean"``).

    The log of the mean, not the mean of the log: the gradient is
    $\sum_b \nabla\phi_b / \sum_b \phi_b$, a weighted mean dominated by the inputs that still
    keep their rank. A basin of a few percent of inputs (the paper's counterexample) is what
    this rewards; the mean of the log instead rewards slowing the collapse of *every* input
    (a near-rotation $W_V$), which collapses anyway at larger depth. Computed as a logsumexp
    of the per-sample logs, so that it is finite when every $\phi_b$ is at the rounding floor.
    """
    _, logs = _mean_objective(layer, w_v, x0, num_layers, objective, log=True, upper=upper)
    return jax.nn.logsumexp(logs) - jnp.log(jnp.asarray(logs.shape[0], logs.dtype))


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
    """One Adam step per restart on the negated objective, vmapped over the leading restart axis
    of ``w_v``, ``state`` and ``x0`` (independent restarts, including the gradient clipping).
    Module level: compiled once per configuration and depth."""

    def one(w_v, state, x0):
        if loss == "depth_log":
            loss_fn = lambda w: -_depth_log_objective(layer, w, x0, depth, objective, upper)
        elif loss == "log_mean":
            loss_fn = lambda w: -_log_mean_objective(layer, w, x0, depth, objective, upper)
        else:
            loss_fn = lambda w: (
                -_mean_objective(layer, w, x0, depth, objective, loss == "final_log", upper)[0]
            )
        value, grad = jax.value_and_grad(loss_fn)(w_v)
        grad = jnp.where(jnp.isfinite(grad), grad, 0.0)
        # Optax mixes Python floats with its int32 step count; allow that even when the caller
        # runs JAX with strict dtype promotion (our tests do).
        with jax.numpy_dtype_promotion("standard"):
            updates, state = opt.update(grad, state, w_v)
            w_v = optax.apply_updates(w_v, updates)
        return w_v, state, -value

    return jax.vmap(one)(w_v, state, x0)


@eqx.filter_jit
def _init_state(opt, w_v):
    with jax.numpy_dtype_promotion("standard"):
        return jax.vmap(opt.init)(w_v)


@eqx.filter_jit
def _evaluate(layer, w_v, x_eval, depth, objective, upper):
    """Mean objective and the fractions with rank >= 2 / full rank (sigma > 1e-3 sigma_1).

    ``x_eval`` is an argument (a tracer), not a closed-over constant: simulate only checks the
    finiteness of concrete inputs.
    """
    if w_v.ndim == 3:
        return jax.vmap(lambda w: _evaluate(layer, w, x_eval, depth, objective, upper))(w_v)
    final, bad = _final_states(layer, w_v, x_eval, depth, upper)
    vals = jax.vmap(lambda x: rank_objective(x, objective))(final)
    mean = jnp.mean(jnp.where(bad | ~jnp.isfinite(vals), 0.0, vals))  # as _mean_objective, one simulation
    s = jax.vmap(singular_values)(final)
    keep = lambda v: jnp.mean(((v > 1e-3 * s[:, 0]) & ~bad).astype(s.dtype))
    return mean, keep(s[:, 1]), keep(s[:, -1])


def _depth_schedule(num_layers: int, stages: int | None) -> list[int]:
    """Training depth per stage: ``None``: 2, 4, 8, ... then ``num_layers`` (from a collapsing
    start every input is at the rounding floor by depth ~25, where no gradient is left; at depth
    2-8 some still keep their rank); an int ``s``: ``s`` equal steps ``ceil(T (j + 1) / s)``."""
    if stages is None:
        depths, t = [], 2
        while t < num_layers:
            depths.append(t)
            t *= 2
        return depths + [max(num_layers, 1)]
    return [max(1, -(-num_layers * (j + 1) // stages)) for j in range(stages)]


def _initial_value_matrix(key, d, init_scale, dt):  # I + init_scale * G / sqrt(d)
    return jnp.eye(d, dtype=dt) + init_scale * jr.normal(key, (d, d), dt) / jnp.sqrt(jnp.asarray(d, dt))


def search_value_matrix(
    key: PRNGKeyArray,
    *,
    mask: str | Bool[ArrayLike, "n n"] = "causal",
    n: int = 3,
    d: int = 3,
    num_layers: int = 50,
    batch: int = 128,
    steps: int = 200,
    lr: float = 3e-2,
    objective: str = "sigma_2",
    qk: str = "zero",
    window: int = 1,
    w_init: Float[ArrayLike, "d d"] | None = None,
    init_scale: float = 0.3,
    eval_batch: int = 512,
    eval_factor: int = 4,
    resample: bool = True,
    dqk: float | None = None,
    loss: str = "log_mean",
    stages: int | None = None,
    parametrization: str = "full",
    restarts: int = 4,
    select_every: int = 10,
    select_batch: int = 256,
    train_depth: int | None = None,
) -> dict:
    r"""Optimise $W_V$ with Adam so that random sphere inputs keep a high rank at depth $T$.

    Each of ``restarts`` runs starts from $I + $ ``init_scale`` $\cdot G/\sqrt d$ ($G$
    Gaussian; restart 0 from ``w_init`` when given) and follows a depth curriculum (``stages``).
    Every ``select_every`` steps and at the end of each stage the iterate is scored on a fixed
    *selection* set at depth $T$ (mean $\phi(X^{(T)})$); the best checkpoint over all restarts
    is returned. The reported ``after`` values are measured on a third, held-out *evaluation*
    set, so the selection does not bias them.

    Arguments:
        key: PRNG key (W_V inits, Q/K weights, input batches, selection and evaluation sets).
        mask: a `rankdyn.masks.make_mask` name (``causal``, ``complete``, ``window`` ...) or a bool ``(n, n)`` array.
        n, d: tokens and dimension; num_layers: depth $T$ at which the objective is measured.
        batch, steps, lr: random sphere inputs per step, Adam steps per restart, learning rate.
        objective: ``"sigma_2"`` (default: rank > 1), ``"sigma_min"`` (full rank) or
            ``"eff_rank"`` (see `rank_objective`).
        qk: ``"zero"`` (uniform attention over the mask; note that with the complete mask this
            makes all tokens equal after one layer) or ``"bert"`` / ``"gaussian"`` (fixed random
            $W_Q, W_K$, the same for every restart, not optimised).
        window: window size for ``mask="window"``.
        w_init: initial $W_V$ of restart 0 (default: random like the other restarts).
        init_scale: size of the random part of the initial $W_V$.
        eval_batch: size of the fixed held-out evaluation set.
        eval_factor: the evaluation also runs to depth ``eval_factor * T`` (does the rank persist?).
        resample: draw a fresh input batch each step (else one fixed batch).
        dqk: attention temperature (default: the key width).
        loss: the training value. ``"log_mean"`` (default): $\log$ of the batch mean of
            $\phi(X^{(T)}) - $ floor (floor 0 for sigma_*, 1 for eff_rank), which favours a
            basin of inputs that keep their rank (see `_log_mean_objective`).
            ``"final_log"``: the mean of $\log(\phi - $ floor$)$, which favours slowing the
            collapse of every input. ``"depth_log"``: that averaged over layers t = 1..T.
            ``"linear"``: $\phi(X^{(T)})$ itself. Reported values are always $\phi(X^{(T)})$.
        stages: depth curriculum: ``None`` (default) doubles the training depth from 2 up to
            $T$; an int ``s`` grows it in ``s`` equal steps.
        parametrization: ``"full"`` (any $W_V$) or ``"upper"`` ($W_V$ upper triangular, the
            family of the paper's construction).
        restarts: independent starts; the best checkpoint over all of them is returned.
        select_every: steps between scorings on the selection set.
        select_batch: size of the selection set.
        train_depth: deepest training depth of the curriculum (default $T$). Selection and
            evaluation are always at $T$. Near a sustained state the trajectory is stationary
            after a few hundred layers, so the gradient through $T = 1000$ layers adds cost
            (forward and backward through every layer), not information.

    Returns:
        dict with ``w_v`` (the selected one, normalised, as nested lists), ``w_v_init`` (restart
        0's start), ``objective``, ``before`` / ``after`` (mean objective on the evaluation set
        at depth T for restart 0's start / the selected W_V), ``before_long`` / ``after_long``
        (at depth ``eval_factor * T``), ``frac_rank_ge2_before/after`` and
        ``frac_rank_full_before/after`` (``[at T, at eval_factor * T]`` fractions of evaluation
        inputs with sigma_2 > 1e-3 sigma_1, resp. sigma_min > 1e-3 sigma_1), ``selected``
        (restart, step, depth and selection score of the returned W_V), ``restart_scores``
        (best selection score per restart), ``depths`` (the curriculum), ``history`` (training
        value per step of the selected restart), ``w_v_singular_values``, ``w_v_eigenvalues``
        (as ``[re, im]``), the fixed ``w_q`` / ``w_k``, ``seconds`` and the settings. With ``steps=0`` the result is restart
        0's start.

    Raises:
        ValueError: on an unknown objective, loss, parametrization, mask or qk family, or on
            non-positive sizes.
    """
    if objective not in OBJECTIVES:
        raise ValueError(f"unknown objective {objective!r}; expected one of {OBJECTIVES}.")
    if loss not in LOSSES:
        raise ValueError(f"loss must be one of {LOSSES}, got {loss!r}.")
    if parametrization not in ("full", "upper"):
        raise ValueError(f"parametrization must be 'full' or 'upper', got {parametrization!r}.")
    if stages is not None and stages < 1:
        raise ValueError(f"stages must be None (geometric) or >= 1, got {stages}.")
    for name, v in (
        ("num_layers", num_layers),
        ("batch", batch),
        ("restarts", restarts),
        ("select_every", select_every),
        ("select_batch", select_batch),
        ("eval_batch", eval_batch),
        ("train_depth", 1 if train_depth is None else train_depth),
    ):
        if v < 1:
            raise ValueError(f"{name} must be >= 1, got {v}.")
    if steps < 0:
        raise ValueError(f"steps must be >= 0, got {steps}.")
    upper = parametrization == "upper"
    dt = jnp.zeros((), float).dtype
    m = make_mask(mask, n, window=window) if isinstance(mask, str) else mask_from_adjacency(np.asarray(mask))
    k_w, k_qk, k_x, k_eval, k_sel = jr.split(key, 5)
    w_q, w_k = query_key_matrices(k_qk, qk, d, d, dtype=dt)
    if w_init is None:
        w_v0 = _initial_value_matrix(k_w, d, init_scale, dt)
    else:
        w_v0 = jnp.asarray(w_init, dt)
        if w_v0.shape != (d, d):
            raise ValueError(f"w_init must be (d, d) = ({d}, {d}), got {w_v0.shape}.")
    layer = SelfAttentionLayer(m, w_q, w_k, jnp.eye(d, dtype=dt), dqk=dqk)

    x_eval, x_sel = _sphere_batch(k_eval, eval_batch, n, d, dt), _sphere_batch(k_sel, select_batch, n, d, dt)
    opt = _optimizer(float(lr))
    depths = _depth_schedule(min(num_layers, train_depth or num_layers), stages)

    def evaluate(w_v, x, depth):
        return _evaluate(layer, w_v, x, depth, objective, upper)

    t0 = time.perf_counter()
    before, r2_before, full_before = evaluate(w_v0, x_eval, num_layers)
    before_long, r2_before_long, full_before_long = evaluate(w_v0, x_eval, eval_factor * num_layers)
    best = {"score": -np.inf, "w_v": w_v0, "restart": 0, "step": 0, "depth": 0}
    restart_scores = np.full(restarts, -np.inf)
    history = np.zeros((steps, restarts))
    if steps > 0:
        # All restarts advance together as one vmapped program (the per-layer work of a few
        # 3 x 3 token matrices is tiny, so R restarts cost about as much as one).
        w_v = jnp.stack(
            [w_v0]
            + [_initial_value_matrix(jr.fold_in(k_w, r), d, init_scale, dt) for r in range(1, restarts)]
        )
        state = _init_state(opt, w_v)
        for i in range(steps):
            stage = min(i * len(depths) // steps, len(depths) - 1)
            x0 = _sphere_batch(jr.fold_in(k_x, i) if resample else k_x, restarts * batch, n, d, dt)
            x0 = x0.reshape(restarts, batch, n, d)
            w_v, state, val = _step(layer, opt, w_v, state, x0, depths[stage], objective, loss, upper)
            history[i] = np.asarray(val)
            next_stage = min((i + 1) * len(depths) // steps, len(depths) - 1)
            if (i + 1) % select_every == 0 or next_stage != stage or i + 1 == steps:
                # Checkpoint selection at the target depth: a later stage can lose what an
                # earlier one found (Adam steps across the edge of a small basin).
                score = np.asarray(evaluate(w_v, x_sel, num_layers)[0], dtype=float)
                score = np.where(np.isfinite(score), score, -np.inf)
                restart_scores = np.maximum(restart_scores, score)
                r = int(np.argmax(score))
                if score[r] > best["score"]:
                    best = {
                        "score": float(score[r]),
                        "w_v": w_v[r],
                        "restart": r,
                        "step": i + 1,
                        "depth": depths[stage],
                    }
    w_v = best["w_v"]
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
        "depths": depths,
        "train_depth": depths[-1],
        "steps": steps,
        "restarts": restarts,
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
        "selected": {k: (float(v) if k == "score" else int(v)) for k, v in best.items() if k != "w_v"}
        if steps > 0
        else None,
        "restart_scores": restart_scores.tolist() if steps > 0 else [],
        "history": history[:, best["restart"]].tolist(),
        "w_v": w_found.tolist(),
        "w_v_init": np.asarray(_normalised(w_v0, upper)).tolist(),
        "w_q": np.asarray(w_q).tolist(),
        "w_k": np.asarray(w_k).tolist(),
        "parametrization": parametrization,
        "w_v_singular_values": np.linalg.svd(w_found, compute_uv=False).tolist(),
        "w_v_eigenvalues": [[float(z.real), float(z.imag)] for z in np.linalg.eigvals(w_found)],
        "seconds": time.perf_counter() - t0,
    }
