r"""Search for value matrices that keep the token rank high at depth.

(Paper App. F.4; docs/theory.md#constructions.)

The paper builds counterexamples by hand for the causal mask (Theorem 3) and leaves open whether
LN can sustain higher-rank states under **undirected** masks (App. F.4: the authors conjecture
not). This module searches numerically: it maximises, over $W_V$,

$$\mathcal J(W_V) = \log \mathbb E_{X^{(0)}}\big[\phi(X^{(T)})\big],\qquad
X^{(t+1)} = \mathrm{LN}\big(A^{(t)} X^{(t)} W_V\big)\ \text{(eq. 3)},$$

with $\phi$ the second singular value ($\sigma_2$, rank > 1), the smallest ($\sigma_{\min}$, the
strict "full rank is kept" measure) or the effective rank of the final tokens, by Adam (Optax)
through a differentiable ``lax.scan`` over depth (one compiled program per stage of the
curriculum, vmapped over settings and restarts), with a depth curriculum, restarts and checkpoint
selection at depth $T$. $W_Q, W_K$ are zero (uniform attention over the mask) or fixed random
(BERT-style) weights. Since post-LN dynamics are
invariant under $W_V \to cW_V$, the parameter is used as $\sqrt d\, W_V/\|W_V\|_F$.

Positive control: with the causal mask and uniform attention the paper's bidiagonal $W_V$
($w = 4$, $N = d = 3$) keeps rank 2 for a few percent of random inputs. From a random start the
search finds value matrices that do the same (``tests/test_basins_search.py``); the earlier
mean-of-log objective did not (it favours slowing the collapse of every input, a near-rotation).

A high objective is evidence that such states exist and are reached from random inputs;
failing to find one is weak evidence for the conjecture, nothing more.
"""

from __future__ import annotations

import dataclasses
import time

import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
from jaxtyping import ArrayLike, Bool, Float, PRNGKeyArray

from .._errors import UsageError
from .._model._layer import SelfAttentionLayer
from .._model._masks import make_mask, mask_from_adjacency
from .._model._weights import query_key_matrices
from ._search_core import (
    OBJECTIVES,
    _evaluate,
    _init_state,
    _normalised,
    _optimizer,
    _step,
    rank_objective,
    sphere_batch,
)

__all__ = ["search_value_matrix", "search_value_matrices", "SearchResult", "rank_objective", "OBJECTIVES"]

LOSSES = ("log_mean", "final_log", "depth_log", "linear")


@dataclasses.dataclass(frozen=True)
class SearchResult:
    """One `search_value_matrix` result (host-side numbers; `to_dict` gives the JSON form).

    Attributes:
        setting: mask name, n, d, depths, qk family, objective, loss, stages, curriculum
            (``depths``), steps, restarts, lr, batch, parametrization.
        w_v: the selected $W_V$ (normalised to Frobenius norm $\\sqrt d$); ``w_v_init``: restart 0's start.
        w_q, w_k: the fixed query/key weights.
        before, after: mean objective on the held-out set at depth T for restart 0's start / the selected W_V.
        before_long, after_long: the same at depth ``eval_factor * T``.
        frac_rank_ge2_before, frac_rank_ge2_after, frac_rank_full_before, frac_rank_full_after:
            ``(at T, at eval_factor * T)`` fractions of held-out inputs with sigma_2 (resp.
            sigma_min) > ``KEEPS_RANK_TOL`` (1e-3) sigma_1 (`rankdyn._observe._tolerances`).
        selected: restart, step, depth and selection score of the returned W_V (None without steps).
        restart_scores: best selection score per restart; history: training value per step of the
            selected restart.
        w_v_singular_values, w_v_eigenvalues (``[re, im]``), seconds.
    """

    setting: dict
    w_v: list
    w_v_init: list
    w_q: list
    w_k: list
    before: float
    after: float
    before_long: float
    after_long: float
    frac_rank_ge2_before: tuple
    frac_rank_ge2_after: tuple
    frac_rank_full_before: tuple
    frac_rank_full_after: tuple
    selected: dict | None
    restart_scores: list
    history: list
    w_v_singular_values: list
    w_v_eigenvalues: list
    seconds: float

    def to_dict(self) -> dict:
        """JSON-ready dict: the setting's keys flattened next to the measured ones."""
        d = dataclasses.asdict(self)
        setting = d.pop("setting")
        return {**setting, **{k: (list(v) if isinstance(v, tuple) else v) for k, v in d.items()}}


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


def _check_options(objective, loss, parametrization, stages, steps, **sizes):
    if objective not in OBJECTIVES:
        raise UsageError(f"unknown objective {objective!r}; expected one of {OBJECTIVES}.")
    if loss not in LOSSES:
        raise UsageError(f"loss must be one of {LOSSES}, got {loss!r}.")
    if parametrization not in ("full", "upper"):
        raise UsageError(f"parametrization must be 'full' or 'upper', got {parametrization!r}.")
    if stages is not None and stages < 1:
        raise UsageError(f"stages must be None (geometric) or >= 1, got {stages}.")
    for name, v in sizes.items():
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise UsageError(f"{name} must be an integer >= 1, got {v!r}.")
    if isinstance(steps, bool) or not isinstance(steps, (int, np.integer)) or steps < 0:
        raise UsageError(f"steps must be an integer >= 0, got {steps!r}.")


def search_value_matrices(
    key: PRNGKeyArray,
    layers: list[SelfAttentionLayer],
    *,
    num_layers: int = 50,
    batch: int = 128,
    steps: int = 200,
    lr: float = 3e-2,
    objective: str = "sigma_2",
    w_init: Float[ArrayLike, "d d"] | None = None,
    init_scale: float = 0.3,
    eval_batch: int = 512,
    eval_factor: int = 4,
    resample: bool = True,
    loss: str = "log_mean",
    stages: int | None = None,
    parametrization: str = "full",
    restarts: int = 4,
    select_every: int = 10,
    select_batch: int = 256,
    train_depth: int | None = None,
    names: list[str] | None = None,
    evaluate_start: bool = True,
) -> list[SearchResult]:
    r"""`search_value_matrix` for several settings at once: one compiled program for all.

    ``layers`` are post-LN layers of equal ``(n, d)`` (their masks and $W_Q, W_K$ differ; their
    $W_V$ is ignored). Every setting sees the same restarts' initial $W_V$, input batches,
    selection and evaluation sets (from ``key``), so settings differ only by mask and attention.
    The other arguments are those of `search_value_matrix`; ``names`` label the settings' masks;
    ``evaluate_start=False`` skips the evaluation of the start (the ``before`` values are then NaN).

    Returns:
        One `SearchResult` per layer, in order.

    Raises:
        UsageError: on an unknown objective, loss or parametrization, non-positive sizes, or
            layers of different sizes.
    """
    _check_options(
        objective,
        loss,
        parametrization,
        stages,
        steps,
        num_layers=num_layers,
        batch=batch,
        restarts=restarts,
        select_every=select_every,
        select_batch=select_batch,
        eval_batch=eval_batch,
        eval_factor=eval_factor,
        train_depth=1 if train_depth is None else train_depth,
    )
    if not layers or len({(lay.num_tokens, lay.dim) for lay in layers}) != 1:
        raise UsageError("layers must be a non-empty list of layers with the same (n, d).")
    n, d = layers[0].num_tokens, layers[0].dim
    upper = parametrization == "upper"
    dt = jnp.zeros((), float).dtype
    stacked = jax.tree.map(
        lambda *a: jnp.stack([jnp.asarray(v, dt) if v.dtype != bool else v for v in a]), *layers
    )
    num_s = len(layers)
    k_w, _, k_x, k_eval, k_sel = jr.split(key, 5)
    if w_init is None:
        w_v0 = _initial_value_matrix(k_w, d, init_scale, dt)
    else:
        w_v0 = jnp.asarray(w_init, dt)
        if w_v0.shape != (d, d):
            raise UsageError(f"w_init must be (d, d) = ({d}, {d}), got {w_v0.shape}.")
    x_eval, x_sel = sphere_batch(k_eval, eval_batch, n, d, dt), sphere_batch(k_sel, select_batch, n, d, dt)
    opt = _optimizer(float(lr))
    depths = _depth_schedule(min(num_layers, train_depth or num_layers), stages)
    long_t = eval_factor * num_layers

    def evaluate(w_v, x, depth, mark):  # w_v (S, R, d, d) -> (S, R, 2, 3) on the host
        depth, mark = jnp.asarray(depth, jnp.int32), jnp.asarray(mark, jnp.int32)  # traced: one compilation
        return np.asarray(_evaluate(stacked, w_v, x, depth, mark, long_t, objective, upper), dtype=float)

    t0 = time.perf_counter()
    # The start's values cost one evaluation at depth eval_factor * T: only when asked for.
    ev0 = (
        evaluate(jnp.broadcast_to(w_v0, (num_s, 1, d, d)), x_eval, long_t, num_layers)[:, 0]
        if evaluate_start or steps == 0
        else np.full((num_s, 2, 3), np.nan)
    )
    best = [{"score": -np.inf, "w_v": w_v0, "restart": 0, "step": 0, "depth": 0} for _ in range(num_s)]
    restart_scores = np.full((num_s, restarts), -np.inf)
    history = np.zeros((steps, num_s, restarts))
    if steps > 0:
        # All settings and restarts advance together as one vmapped program (the per-layer work
        # of a few small token matrices is tiny, so they cost little more than one).
        w_r = jnp.stack(
            [w_v0]
            + [_initial_value_matrix(jr.fold_in(k_w, r), d, init_scale, dt) for r in range(1, restarts)]
        )
        w_v = jnp.broadcast_to(w_r, (num_s,) + w_r.shape)
        state = _init_state(opt, w_v)
        for i in range(steps):
            stage = min(i * len(depths) // steps, len(depths) - 1)
            x0 = sphere_batch(jr.fold_in(k_x, i) if resample else k_x, restarts * batch, n, d, dt)
            x0 = x0.reshape(restarts, batch, n, d)
            depth = jnp.asarray(depths[stage], jnp.int32)
            # The scan's static length is the stage's depth, not the curriculum's last: a step
            # past ``depth`` is skipped by a cond in the forward pass, but the backward pass
            # still carries every step's residuals (measured: at depth 2 of 32, a step cost 5x
            # one of length 2). One compilation per stage; the arithmetic is the same.
            length = depths[stage]
            w_v, state, val = _step(stacked, opt, w_v, state, x0, depth, length, objective, loss, upper)
            history[i] = np.asarray(val)
            next_stage = min((i + 1) * len(depths) // steps, len(depths) - 1)
            if (i + 1) % select_every == 0 or next_stage != stage or i + 1 == steps:
                # Checkpoint selection at the target depth: a later stage can lose what an
                # earlier one found (Adam steps across the edge of a small basin).
                score = evaluate(w_v, x_sel, num_layers, num_layers)[:, :, 0, 0]
                score = np.where(np.isfinite(score), score, -np.inf)
                restart_scores = np.maximum(restart_scores, score)
                for s in range(num_s):
                    r = int(np.argmax(score[s]))
                    if score[s, r] > best[s]["score"]:
                        best[s] = {
                            "score": float(score[s, r]),
                            "w_v": w_v[s, r],
                            "restart": r,
                            "step": i + 1,
                            "depth": depths[stage],
                        }
    w_best = jnp.stack([b["w_v"] for b in best])[:, None]
    ev1 = evaluate(w_best, x_eval, long_t, num_layers)[:, 0]
    seconds = (time.perf_counter() - t0) / num_s
    out = []
    w_init_n = np.asarray(_normalised(w_v0, upper)).tolist()
    for s, lay in enumerate(layers):
        w_found = np.asarray(_normalised(best[s]["w_v"], upper))
        setting = {
            "mask": names[s] if names else "custom",
            "n": n,
            "d": d,
            "num_layers": num_layers,
            "eval_layers_long": long_t,
            "objective": objective,
            "loss": loss,
            "stages": stages,
            "depths": depths,
            "train_depth": depths[-1],
            "steps": steps,
            "restarts": restarts,
            "lr": lr,
            "batch": batch,
            "parametrization": parametrization,
        }
        pair = lambda e, j: (float(e[s, 0, j]), float(e[s, 1, j]))  # noqa: E731 - (at T, at long)
        out.append(
            SearchResult(
                setting=setting,
                w_v=w_found.tolist(),
                w_v_init=w_init_n,
                w_q=np.asarray(lay.weights.w_q[0]).tolist(),
                w_k=np.asarray(lay.weights.w_k[0]).tolist(),
                before=float(ev0[s, 0, 0]),
                after=float(ev1[s, 0, 0]),
                before_long=float(ev0[s, 1, 0]),
                after_long=float(ev1[s, 1, 0]),
                frac_rank_ge2_before=pair(ev0, 1),
                frac_rank_ge2_after=pair(ev1, 1),
                frac_rank_full_before=pair(ev0, 2),
                frac_rank_full_after=pair(ev1, 2),
                selected={k: v for k, v in best[s].items() if k != "w_v"} if steps > 0 else None,
                restart_scores=restart_scores[s].tolist() if steps > 0 else [],
                history=history[:, s, best[s]["restart"]].tolist(),
                w_v_singular_values=np.linalg.svd(w_found, compute_uv=False).tolist(),
                w_v_eigenvalues=[[float(z.real), float(z.imag)] for z in np.linalg.eigvals(w_found)],
                seconds=seconds,
            )
        )
    return out


def search_value_matrix(
    key: PRNGKeyArray,
    *,
    mask: str | Bool[ArrayLike, "n n"] = "causal",
    n: int = 3,
    d: int = 3,
    qk: str = "zero",
    window: int = 1,
    dqk: float | None = None,
    **options,
) -> SearchResult:
    r"""Optimise $W_V$ with Adam so that random sphere inputs keep a high rank at depth $T$.

    Each of ``restarts`` runs starts from $I + $ ``init_scale`` $\cdot G/\sqrt d$ ($G$
    Gaussian; restart 0 from ``w_init`` when given) and follows a depth curriculum (``stages``).
    Every ``select_every`` steps and at the end of each stage the iterate is scored on a fixed
    *selection* set at depth $T$ (mean $\phi(X^{(T)})$); the best checkpoint over all restarts
    is returned. The reported ``after`` values are measured on a third, held-out *evaluation*
    set, so the selection does not bias them. Post-LN dynamics are invariant under
    $W_V \to cW_V$, so the parameter is used as $\sqrt d\, W_V/\|W_V\|_F$.

    Arguments:
        key: PRNG key (W_V inits, Q/K weights, input batches, selection and evaluation sets).
        mask: a `rankdyn.masks.make_mask` name (``causal``, ``complete``, ``window`` ...) or a bool
            ``(n, n)`` array.
        n, d: tokens and dimension.
        qk: ``"zero"`` (uniform attention over the mask; with the complete mask this makes all
            tokens equal after one layer), ``"bert"`` / ``"gaussian"`` (fixed random $W_Q, W_K$,
            not optimised) or ``"symmetric"`` ($W_Q = W_K$ BERT-uniform: symmetric logits).
        window: window size for ``mask="window"``; dqk: attention temperature (default: the key width).
        **options: ``num_layers`` (depth $T$, default 50), ``batch`` (128), ``steps`` (200, Adam
            steps per restart), ``lr`` (3e-2), ``objective`` (``"sigma_2"``: rank > 1;
            ``"sigma_min"``: full rank; ``"eff_rank"``; see `rank_objective`), ``w_init``,
            ``init_scale`` (0.3), ``eval_batch`` (512, held-out set), ``eval_factor`` (4: the
            evaluation also runs to ``eval_factor * T``), ``resample`` (True: a fresh batch per
            step), ``loss`` (``"log_mean"``: $\log$ of the batch mean of $\phi(X^{(T)}) -$
            floor, which favours a basin of inputs that keep their rank; ``"final_log"``: the
            mean of the log; ``"depth_log"``: that averaged over layers; ``"linear"``),
            ``stages`` (None: the training depth doubles from 2 up to $T$; an int: equal steps),
            ``parametrization`` (``"full"`` or ``"upper"`` triangular), ``restarts`` (4),
            ``select_every`` (10), ``select_batch`` (256), ``train_depth`` (deepest training
            depth, default $T$; selection and evaluation are always at $T$).

    Returns:
        A `SearchResult` (``to_dict()`` for JSON). With ``steps=0`` it describes restart 0's start.

    Raises:
        UsageError: on an unknown objective, loss, parametrization, mask or qk family, or on
            non-positive sizes.
    """
    dt = jnp.zeros((), float).dtype
    m = make_mask(mask, n, window=window) if isinstance(mask, str) else mask_from_adjacency(np.asarray(mask))
    k_qk = jr.split(key, 5)[1]
    if qk == "symmetric":
        w_q = w_k = query_key_matrices(k_qk, "bert", d, d, dtype=dt)[0]
    else:
        w_q, w_k = query_key_matrices(k_qk, qk, d, d, dtype=dt)
    layer = SelfAttentionLayer(m, w_q, w_k, jnp.eye(d, dtype=dt), dqk=dqk)
    (res,) = search_value_matrices(
        key, [layer], names=[mask if isinstance(mask, str) else "custom"], **options
    )
    return dataclasses.replace(res, setting={**res.setting, "qk": qk})
