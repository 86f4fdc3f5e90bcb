r"""Streaming batch statistics: per-layer mean, std, min and max folded inside the compiled scan.

A run of $B$ trajectories records, at every saved layer $t$, a value $v_b^{(t)}$ per trajectory
and metric (e.g. $\mu(X_b^{(t)})$, eq. (4)). When only the ensemble summary is wanted, storing
the $(B, \text{layers})$ array is wasted memory: the batch is walked in chunks and each chunk is
reduced to ``(count, mean, M2, min, max)`` per layer, then merged with the running totals by
Chan, Golub and LeVeque's pairwise update (numerically sound, unlike summing squares):

$$n = n_a + n_b,\quad \delta = \bar v_b - \bar v_a,\quad
\bar v = \bar v_a + \delta\,\frac{n_b}{n},\quad M_2 = M_{2,a} + M_{2,b} + \delta^2\,\frac{n_a n_b}{n},$$

with standard deviation $\sqrt{M_2 / n}$ (population, as ``numpy.std``). Within a chunk the mean
and $M_2$ are computed in two passes. Values of a trajectory at a layer where its state or any
recorded metric is not finite are left out of that layer's statistics (and the trajectory is
counted as non-finite); see ``docs/theory.md#metrics``.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Bool, Float, Int

__all__ = ["BatchStats", "Summary", "chunk_stats", "merge_stats", "merge_stacked", "summarize"]


class BatchStats(eqx.Module):
    """Running statistics of a set of recorded values, per saved layer.

    Every array has the same leading (layer) axes; ``mean`` etc. may carry the trailing axes of
    non-scalar observations.

    Attributes:
        count: number of values folded in (trajectories finite at that layer).
        mean, m2, min, max: name -> running mean, sum of squared deviations, minimum, maximum.
    """

    count: Float[Array, "*s"]
    mean: dict[str, Array]
    m2: dict[str, Array]
    min: dict[str, Array]
    max: dict[str, Array]


def _expand(ok, v):
    return ok.reshape(ok.shape + (1,) * (v.ndim - ok.ndim))


def chunk_stats(values: dict[str, Array], ok: Bool[Array, " c"]) -> BatchStats:
    """Statistics over the leading (chunk) axis of ``values``, counting only members with ``ok``.

    Arguments:
        values: name -> ``(c, ...)`` values of ``c`` trajectories at one layer.
        ok: ``(c,)`` which members count (real, not padding, and finite).
    """
    some = next(iter(values.values()), None)
    dtype = some.dtype if some is not None else jnp.zeros(()).dtype
    count = jnp.sum(ok).astype(dtype)
    safe = jnp.where(count > 0, count, jnp.ones((), dtype))
    mean, m2, lo, hi = {}, {}, {}, {}
    for k, v in values.items():
        w = _expand(ok, v)
        # where(), not multiplication: a non-finite excluded value times 0 would still be NaN.
        mk = jnp.sum(jnp.where(w, v, 0), axis=0) / safe
        mean[k] = mk
        m2[k] = jnp.sum(jnp.where(w, (v - mk) ** 2, 0), axis=0)
        lo[k] = jnp.min(jnp.where(w, v, jnp.inf), axis=0)
        hi[k] = jnp.max(jnp.where(w, v, -jnp.inf), axis=0)
    return BatchStats(count=count, mean=mean, m2=m2, min=lo, max=hi)


def merge_stats(a: BatchStats, b: BatchStats) -> BatchStats:
    """Chan et al.'s pairwise merge of two sets of statistics (same layers, disjoint members)."""
    n = a.count + b.count
    safe = jnp.where(n > 0, n, jnp.ones_like(n))
    fb = b.count / safe
    mean, m2 = {}, {}
    for k in a.mean:
        ex = lambda c: c.reshape(c.shape + (1,) * (a.mean[k].ndim - c.ndim))  # noqa: E731
        delta = b.mean[k] - a.mean[k]
        mean[k] = a.mean[k] + delta * ex(fb)
        m2[k] = a.m2[k] + b.m2[k] + delta**2 * ex(a.count * fb)
        # An empty side has mean 0 by convention: take the other side's values exactly.
        mean[k] = jnp.where(ex(a.count) == 0, b.mean[k], jnp.where(ex(b.count) == 0, a.mean[k], mean[k]))
        m2[k] = jnp.where(ex(a.count) == 0, b.m2[k], jnp.where(ex(b.count) == 0, a.m2[k], m2[k]))
    lo = {k: jnp.minimum(a.min[k], b.min[k]) for k in a.min}
    hi = {k: jnp.maximum(a.max[k], b.max[k]) for k in a.max}
    return BatchStats(count=n, mean=mean, m2=m2, min=lo, max=hi)


def merge_stacked(s: BatchStats) -> BatchStats:
    """Merge statistics stacked along a leading axis (e.g. one entry per device), in order."""
    first = jax.tree.map(lambda v: v[0], s)
    rest = jax.tree.map(lambda v: v[1:], s)
    out, _ = jax.lax.scan(lambda acc, x: (merge_stats(acc, x), None), first, rest)
    return out


class Summary(eqx.Module):
    """Batch statistics of a run, per saved layer, over the trajectories finite at that layer.

    Attributes:
        layers: the saved layer indices ``0, k, ..., T``.
        count: ``(layers,)`` trajectories that entered the statistics of each layer.
        mean, std, min, max: metric name -> ``(layers, ...)``; NaN where ``count`` is 0.
        num_trajectories: trajectories simulated.
        nonfinite: trajectories whose state or a recorded metric became NaN or infinite.
        degenerate: trajectories in which a token became zero: a normalisation met a zero row,
            or (without one) a token underflowed; their direction metrics are NaN at such layers.
    """

    layers: Int[Array, " s"]
    count: Float[Array, " s"]
    mean: dict[str, Array]
    std: dict[str, Array]
    min: dict[str, Array]
    max: dict[str, Array]
    num_trajectories: Int[Array, ""]
    nonfinite: Int[Array, ""]
    degenerate: Int[Array, ""]

    def to_dict(self) -> dict[str, dict[str, np.ndarray]]:
        """``{metric: {"mean", "std", "min", "max": (layers,) NumPy arrays}}`` (JSON-friendly)."""
        return {
            k: {stat: np.asarray(getattr(self, stat)[k]) for stat in ("mean", "std", "min", "max")}
            for k in self.mean
        }


def summarize(stats: BatchStats, layers, num_trajectories, nonfinite, degenerate) -> Summary:
    """Turn running `BatchStats` into a `Summary` (std from M2; NaN for empty layers)."""
    out = _summary_arrays(stats)
    return Summary(
        layers=layers,
        count=stats.count,
        **out,
        # Host numbers put on the device: no eager conversion program to compile.
        num_trajectories=_on_device(num_trajectories),
        nonfinite=_on_device(nonfinite),
        degenerate=_on_device(degenerate),
    )


def _on_device(v):
    """A host number put on the device (no eager conversion program); a JAX array as it is."""
    return v if isinstance(v, jax.Array) else jax.device_put(np.asarray(v))


@eqx.filter_jit
def _summary_arrays(stats: BatchStats) -> dict:
    """Mean, std, min and max per metric: one compiled program (op by op, each was one compile)."""
    empty = stats.count == 0
    out = {"mean": {}, "std": {}, "min": {}, "max": {}}
    for k in stats.mean:
        e = empty.reshape(empty.shape + (1,) * (stats.mean[k].ndim - empty.ndim))
        nan = jnp.full_like(stats.mean[k], jnp.nan)
        safe = jnp.where(e, 1, stats.count.reshape(e.shape)).astype(stats.m2[k].dtype)
        out["mean"][k] = jnp.where(e, nan, stats.mean[k])
        out["std"][k] = jnp.where(e, nan, jnp.sqrt(stats.m2[k] / safe))
        out["min"][k] = jnp.where(e, nan, stats.min[k])
        out["max"][k] = jnp.where(e, nan, stats.max[k])
    return out
