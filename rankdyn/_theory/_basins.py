r"""Basins of attraction: where random inputs end after ``T`` layers.

(docs/theory.md#constructions, docs/theory.md#stability.)

For a sampler of initial tokens, a layer and a horizon $T$, `basin_fractions` runs
$X^{(T)} = F^{T}(X^{(0)})$ for many inputs (chunked, one compiled program per chunk size) and
counts the classes of the final states given by a ``classify`` function (the numerical rank,
or the nearest known equilibrium). Fractions come with Wilson 95% intervals, which stay
inside $[0, 1]$ and are honest for the rare events found here (a few percent of starts).

Because convergence near the paper's equilibria is algebraic
(docs/theory.md#ambiguities-and-choices), fractions depend on $T$;
always report the horizon with them (the result dict does).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
from jaxtyping import Array, ArrayLike, Float, Int, PRNGKeyArray

from .._arguments import check_count
from .._errors import UsageError
from .._model._layer import SelfAttentionLayer
from .._observe._metrics import mu, numerical_rank, singular_values
from .._observe._tolerances import KEEPS_RANK_TOL
from .._run._simulate import simulate

__all__ = ["basin_fractions", "rank_classifier", "nearest_classifier", "wilson_interval"]


def wilson_interval(
    count: ArrayLike, total: int, z: float = 1.959963984540054
) -> tuple[np.ndarray, np.ndarray]:
    r"""Wilson score interval for a binomial proportion (95% by default).

    $\frac{\hat p + z^2/2n \pm z\sqrt{\hat p(1-\hat p)/n + z^2/4n^2}}{1 + z^2/n}$; unlike the
    normal approximation it stays inside [0, 1] and is informative at 0 or n successes, where
    its ends are exactly 0 and 1 (set exactly, not left to rounding). NaN for ``total <= 0``.
    """
    k = np.asarray(count, dtype=float)
    if total <= 0:
        return np.full(k.shape, np.nan), np.full(k.shape, np.nan)
    p = k / total
    denom = 1 + z**2 / total
    centre = (p + z**2 / (2 * total)) / denom
    half = z * np.sqrt(p * (1 - p) / total + z**2 / (4 * total**2)) / denom
    lo = np.where(k == 0, 0.0, np.clip(centre - half, 0.0, 1.0))
    hi = np.where(k == total, 1.0, np.clip(centre + half, 0.0, 1.0))
    return lo, hi


class _RankClassifier(eqx.Module):
    """`rank_classifier`'s classifier: a module, so that equal tolerances compare (and hash) equal and
    the programs taking it (`basin_fractions`' ``_classify_batch``) compile once per tolerance."""

    tol: float = eqx.field(static=True)

    def __call__(self, x):
        return numerical_rank(singular_values(x), self.tol).astype(jnp.int32)


def rank_classifier(tol: float = KEEPS_RANK_TOL) -> Callable[[Float[Array, "n d"]], Int[Array, ""]]:
    """A classifier returning the numerical rank of the final tokens: #{sigma_i > tol * sigma_1}.

    ``tol`` defaults to `rankdyn._observe._tolerances.KEEPS_RANK_TOL` (1e-3), the threshold of "keeps rank".

    The tolerance is explicit because convergence is slow: at finite depth a collapsing
    trajectory still has small nonzero singular values (e.g. ~1/(wT) in the 2-D example).
    Two classifiers of one tolerance are equal, so a program compiled for one serves the other.
    """
    return _RankClassifier(float(tol))


class _NearestClassifier(eqx.Module):
    """`nearest_classifier`'s classifier: the references are an array field (an argument of the
    programs, not a constant baked into them), so classifiers of one shape and settings share them."""

    refs: Array
    tol: float = eqx.field(static=True)
    sign_invariant: bool = eqx.field(static=True)

    def __call__(self, x):
        refs = self.refs
        dist = jnp.linalg.norm((x[None] - refs).reshape(refs.shape[0], -1), axis=-1)
        if self.sign_invariant:
            dist = jnp.minimum(dist, jnp.linalg.norm((x[None] + refs).reshape(refs.shape[0], -1), axis=-1))
        best = jnp.argmin(dist)
        return jnp.where(dist[best] <= self.tol, best, -1).astype(jnp.int32)


def nearest_classifier(
    references: Float[ArrayLike, "m n d"], tol: float = 1e-2, *, sign_invariant: bool = True
) -> Callable[[Float[Array, "n d"]], Int[Array, ""]]:
    r"""A classifier returning the index of the nearest reference configuration, or -1.

    Distance is the Frobenius norm $\|X - R_m\|_F$ (or $\min_\pm \|X \mp R_m\|_F$ with
    ``sign_invariant``, since $F(-X) = -F(X)$ for these layers); a state farther than ``tol``
    from every reference is class ``-1`` ("other").
    """
    return _NearestClassifier(jnp.asarray(references), float(tol), bool(sign_invariant))


@eqx.filter_jit
def _classify_batch(classify, x):
    return jax.vmap(classify)(x)


def _cheap_observe(t, x, args):
    return {"mu": mu(x)}


def basin_fractions(
    layer: SelfAttentionLayer,
    sampler_or_x0: Callable[[PRNGKeyArray, int], Float[Array, "b n d"]] | Float[ArrayLike, "b n d"],
    num_layers: int,
    classify: Callable[[Float[Array, "n d"]], Int[Array, ""]],
    *,
    batch: int | None = None,
    chunk: int = 1024,
    key: PRNGKeyArray | None = None,
    progress: bool = False,
    labels: dict[int, str] | None = None,
) -> dict:
    r"""Fractions of inputs whose state after ``num_layers`` layers falls in each class.

    Arguments:
        layer: a `SelfAttentionLayer`.
        sampler_or_x0: either a function ``(key, size) -> (size, n, d)`` drawing initial tokens
            (called once per chunk with ``jr.fold_in(key, chunk_index)``), or a fixed array
            ``(batch, n, d)`` of initial tokens (e.g. a grid).
        num_layers: the horizon $T$.
        classify: ``(n, d) -> int`` class of a final state, traceable (vmapped and jitted), e.g.
            `rank_classifier` or `nearest_classifier`.
        batch: number of samples (required with a sampler; defaults to the array's length).
        chunk: samples per compiled chunk (memory bound; equal chunks reuse one compilation).
        key: PRNG key for the sampler.
        progress: show a tqdm bar over chunks.
        labels: optional names for the integer classes in the output.

    Returns:
        dict with ``num_samples``, ``num_layers``, ``classes`` (sorted class ids, as strings
        via ``labels`` when given), ``counts``, ``fractions``, ``ci95`` (``[low, high]`` Wilson
        intervals), each keyed by class; plus ``nonfinite`` and ``degenerate`` counts (a
        trajectory that met a zero row or NaN is counted in the class ``"nonfinite"`` and
        ``"degenerate"`` is reported separately, never silently classified).

    Raises:
        ValueError: for a sampler without ``batch``/``key``, a bad ``chunk``, or shapes that do
            not match the layer.
    """
    chunk = check_count(chunk, "chunk")
    is_sampler = callable(sampler_or_x0)
    if is_sampler:
        if batch is None or key is None:
            raise UsageError("with a sampler function pass both `batch=` (number of samples) and `key=`.")
        total = int(batch)
    else:
        x_all = jnp.asarray(sampler_or_x0)
        if x_all.ndim != 3:
            raise UsageError(f"initial tokens must be (batch, n, d), got shape {x_all.shape}.")
        total = x_all.shape[0] if batch is None else min(int(batch), x_all.shape[0])
    num_chunks = math.ceil(total / chunk)
    save_every = max(num_layers, 1)
    all_cls, nonfinite, degenerate = [], 0, 0
    bar = None
    if progress:
        from .._run._progress import progress_bar as tqdm

        bar = tqdm(total=total, desc="basins", unit="sample")
    for c in range(num_chunks):
        size = min(chunk, total - c * chunk)
        if is_sampler:
            x0 = sampler_or_x0(jr.fold_in(key, c), size)
        else:
            x0 = x_all[c * chunk : c * chunk + size]
        traj = simulate(
            layer, x0, num_layers, save_every=save_every, save_states=True, observe=_cheap_observe
        )
        final = traj.states[:, -1]
        cls = np.asarray(_classify_batch(classify, final))
        bad = np.asarray(traj.nonfinite)
        degenerate += int(traj.summary.degenerate)
        nonfinite += int(np.sum(bad))
        all_cls.append(np.where(bad, np.iinfo(np.int32).min, cls))
        if bar is not None:
            bar.update(size)
    if bar is not None:
        bar.close()
    cls = np.concatenate(all_cls) if all_cls else np.zeros(0, np.int32)
    ids, counts = np.unique(cls, return_counts=True)
    lo, hi = wilson_interval(counts, total)

    def name(i):
        if i == np.iinfo(np.int32).min:
            return "nonfinite"
        return labels.get(int(i), str(int(i))) if labels else str(int(i))

    names = [name(i) for i in ids]
    return {
        "num_samples": total,
        "num_layers": int(num_layers),
        "classes": names,
        "counts": {nm: int(k) for nm, k in zip(names, counts)},
        "fractions": {nm: float(k) / total for nm, k in zip(names, counts)},
        "ci95": {nm: [float(a), float(b)] for nm, a, b in zip(names, lo, hi)},
        "nonfinite": nonfinite,
        "degenerate": degenerate,
    }
