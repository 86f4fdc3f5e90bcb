r"""The compiled core of `rankdyn.search_value_matrix`: the lean depth scan, the training
value, the vmapped Adam step and the evaluation (settings x restarts in one program).

`rankdyn.simulate` is built for long recorded runs (chunks, statistics, memory checks); the
search needs only the final tokens, thousands of times, with gradients, so it iterates the
layer in a plain ``lax.scan`` whose depth is a traced argument (`_iterate`).
"""

from __future__ import annotations

import functools

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax import lax
from jaxtyping import Array, Float

from .._errors import UsageError
from .._observe._metrics import effective_rank, singular_values

OBJECTIVES = ("sigma_2", "sigma_min", "eff_rank")


def rank_objective(x: Float[Array, "n d"], objective: str = "sigma_min") -> Float[Array, ""]:
    """The per-sample objective on final (unit-norm) tokens.

    ``sigma_2``: the second singular value, 0 iff rank one (the paper's "no rank collapse" is
    ``sigma_2 > 0``); ``sigma_min``: the smallest, 0 iff rank-deficient (full rank is strict: the
    paper's full-rank equilibria are saddles, docs/theory.md#stability); ``eff_rank``: Roy-Vetterli
    effective rank.
    """
    s = singular_values(x)
    if objective == "sigma_2":
        return s[1] if s.shape[0] > 1 else jnp.zeros((), x.dtype)
    if objective == "sigma_min":
        return s[-1]
    if objective == "eff_rank":
        return effective_rank(s)
    raise UsageError(f"unknown objective {objective!r}; expected one of {OBJECTIVES}.")


def _normalised(w_v, upper=False):
    d = w_v.shape[-1]
    if upper:
        w_v = jnp.triu(w_v)
    return jnp.sqrt(jnp.asarray(d, w_v.dtype)) * w_v / jnp.linalg.norm(w_v)


def with_value(layer, w_v, upper):
    return eqx.tree_at(lambda l: l.weights.w_v, layer, _normalised(w_v, upper)[None])


def _iterate(layer, x0, depth, length: int, objective=None, mark=None):
    r"""``depth`` layers of ``layer`` from one token matrix ``x0``: a ``lax.scan`` of static
    ``length`` whose steps ``t >= depth`` are skipped by ``lax.cond`` (``depth`` is a traced
    scalar shared by the batch, so the cond stays a branch under ``vmap``: one compiled program
    serves both evaluation depths). Skipped steps are cheap forward only: under a gradient
    each still stores and replays its residuals, so the training step passes ``length = depth``.

    Returns ``(x at depth, x at mark, bad, sum over t = 1..depth of log phi(X^(t)))``; ``bad``
    flags a degenerate or non-finite trajectory, ``mark`` (default ``depth``) is a second depth
    whose state is kept, and the sum is only formed when ``objective`` is given.
    """
    mark = depth if mark is None else mark
    tiny = jnp.finfo(x0.dtype).tiny
    floor = 1.0 if objective == "eff_rank" else 0.0

    def layer_step(x):
        y, aux = layer(x)
        logphi = (
            0.0 if objective is None else jnp.log(jnp.maximum(rank_objective(y, objective) - floor, tiny))
        )
        return y, aux.degenerate, jnp.asarray(logphi, x.dtype)

    def body(carry, t):
        x, xm, bad, acc = carry
        y, deg, lp = lax.cond(
            t < depth, layer_step, lambda x: (x, jnp.array(False), jnp.zeros((), x.dtype)), x
        )
        xm = jnp.where(t + 1 == mark, y, xm)
        return (y, xm, bad | deg, acc + lp), None

    init = (x0, x0, jnp.array(False), jnp.zeros((), x0.dtype))
    (x, xm, bad, acc), _ = lax.scan(body, init, jnp.arange(length, dtype=jnp.int32))
    bad = bad | ~jnp.all(jnp.isfinite(x))
    return x, xm, bad, acc


def _train_value(layer, w_v, x0, depth, length, objective, loss, upper):
    """The training value of ``loss`` (see `search_value_matrix`) on a batch ``x0``."""
    layer = with_value(layer, w_v, upper)
    depth_log = loss == "depth_log"
    x, _, bad, acc = jax.vmap(lambda x: _iterate(layer, x, depth, length, objective if depth_log else None))(
        x0
    )
    floor = 1.0 if objective == "eff_rank" else 0.0
    tiny = jnp.finfo(x.dtype).tiny
    if depth_log:
        # Averaged over layers: from a collapsing start phi(X^(T)) sits at the rounding floor,
        # where it carries no gradient; the early layers' collapse rate is what W_V controls.
        return jnp.mean(jnp.where(bad, jnp.log(tiny), acc / depth))
    vals = jax.vmap(lambda y: rank_objective(y, objective))(x)
    # Degenerate / non-finite trajectories count as rank lost (objective 0), never as NaN.
    vals = jnp.where(bad | ~jnp.isfinite(vals), floor, vals)
    if loss == "linear":
        return jnp.mean(vals)
    # Collapse is exponential in depth: log(phi - floor) keeps a useful gradient.
    logs = jnp.log(jnp.maximum(vals - floor, tiny))
    if loss == "final_log":
        return jnp.mean(logs)
    # log_mean: the log of the mean, a weighted mean dominated by the inputs that keep their
    # rank (a basin of a few percent is what this rewards), as a logsumexp so that it stays
    # finite when every phi_b is at the rounding floor.
    return jax.nn.logsumexp(logs) - jnp.log(jnp.asarray(logs.shape[0], logs.dtype))


def sphere_batch(key, size, n, d, dtype):
    """``size`` token matrices with rows uniform on the unit sphere, drawn on the host by NumPy
    from the key's bits (no compilation per batch size: the search draws batches of four sizes)."""
    rng = np.random.default_rng(np.asarray(jax.random.key_data(key) if _is_typed(key) else key).tolist())
    g = rng.standard_normal((size, n, d))
    return jnp.asarray(g / np.linalg.norm(g, axis=-1, keepdims=True), dtype)


def _is_typed(key) -> bool:
    return jnp.issubdtype(key.dtype, jax.dtypes.prng_key)


@functools.lru_cache(maxsize=None)
def _optimizer(lr: float):
    # Cached so that the jitted step sees the same (static) optimizer and compiles once per lr.
    return optax.chain(optax.clip_by_global_norm(1.0), optax.adam(lr))


@eqx.filter_jit
def _step(layers, opt, w_v, state, x0, depth, length, objective, loss, upper):
    """One Adam step per (setting, restart) on the negated training value, vmapped over the
    settings (leading axis of ``layers``, ``w_v``, ``state``) and the restarts (second axis of
    ``w_v``, ``state``; first of ``x0``, shared by the settings). ``depth`` is traced, and
    ``length`` (the scan's static length) should equal it when training: steps past ``depth``
    are skipped forward but still cost their residuals in the backward pass."""

    def one(layer, w_v, state, x0):
        value, grad = jax.value_and_grad(
            lambda w: -_train_value(layer, w, x0, depth, length, objective, loss, upper)
        )(w_v)
        grad = jnp.where(jnp.isfinite(grad), grad, 0.0)
        # Optax mixes Python floats with its int32 step count; allow that even when the caller
        # runs JAX with strict dtype promotion (our tests do).
        with jax.numpy_dtype_promotion("standard"):
            updates, state = opt.update(grad, state, w_v)
            w_v = optax.apply_updates(w_v, updates)
        return w_v, state, -value

    per_setting = jax.vmap(one, in_axes=(None, 0, 0, 0))
    return jax.vmap(per_setting, in_axes=(0, 0, 0, None))(layers, w_v, state, x0)


@eqx.filter_jit
def _init_state(opt, w_v):
    with jax.numpy_dtype_promotion("standard"):
        return jax.vmap(jax.vmap(opt.init))(w_v)


@eqx.filter_jit
def _evaluate(layers, w_v, x_eval, depth, mark, length, objective, upper):
    """Per setting and W_V (``w_v`` ``(S, R, d, d)``): mean objective and the fractions with
    rank >= 2 / full rank (sigma > 1e-3 sigma_1), at depth ``mark`` and at ``depth`` (both
    traced, one scan of static ``length``)."""

    def one(layer, w):
        lay = with_value(layer, w, upper)
        x, xm, bad, _ = jax.vmap(lambda x: _iterate(lay, x, depth, length, mark=mark))(x_eval)

        def stats(final):
            vals = jax.vmap(lambda y: rank_objective(y, objective))(final)
            mean = jnp.mean(jnp.where(bad | ~jnp.isfinite(vals), 0.0, vals))
            s = jax.vmap(singular_values)(final)
            keep = lambda v: jnp.mean(((v > 1e-3 * s[:, 0]) & ~bad).astype(s.dtype))
            return jnp.stack([mean, keep(s[:, 1]), keep(s[:, -1])])

        return jnp.stack([stats(xm), stats(x)])  # (2: mark, depth; 3: mean, rank>=2, full)

    return jax.vmap(lambda layer, ws: jax.vmap(lambda w: one(layer, w))(ws))(layers, w_v)


@eqx.filter_jit
def final_states(layers, w_v, x0, depth, length, upper=False):
    """Per setting (leading axis of ``layers`` and ``w_v`` ``(S, d, d)``): the tokens after
    ``depth`` layers from every start in ``x0`` ``(B, n, d)``, the max-abs residual
    $\\|F(X) - X\\|_\\infty$ there and the bad flags (one compiled program per size)."""

    def one(layer, w):
        lay = with_value(layer, w, upper)
        x, _, bad, _ = jax.vmap(lambda x: _iterate(lay, x, depth, length))(x0)
        fx = jax.vmap(lambda y: lay(y)[0])(x)
        return x, jnp.max(jnp.abs(fx - x), axis=(-2, -1)), bad

    return jax.vmap(one)(layers, w_v)
