r"""What is recorded at each saved time of the flow: collapse metrics, clusters, energy, diameter.

- The collapse metrics are the SVD-free ones of `rankdyn.metrics` (``mu``, ``mu_normalized``,
  ``min_cos``, ...), computed by `rankdyn._observe._metric_observer.MetricObserver`.
- ``clusters``: the number of connected components of the graph with an edge $i \sim j$ iff
  $\langle x_i, x_j\rangle \ge$ ``cos_threshold`` (tokens on the sphere).
- ``energy``: $E_\beta$ of `interaction_energy` (meaningful for $Q = K = V = I$).
- ``diameter``: $\max_{i,j} |x_i - x_j|$; the tokens are $\epsilon$-clustered when it is $\le \epsilon$
  (one cluster of diameter $\epsilon$), and ``clustered`` is that indicator (its batch mean is the
  fraction of trajectories clustered at each time).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import equinox as eqx
import jax.numpy as jnp
from jax import lax
from jaxtyping import Array, ArrayLike, Float

from .._errors import UsageError
from .._observe._metric_observer import MetricObserver
from ._field import interaction_energy

__all__ = ["FlowObserver", "WithClustered", "cluster_count", "diameter", "FLOW_METRICS"]

_HI = lax.Precision.HIGHEST
#: The collapse metrics recorded by default (the SVD-free ones: cheap at every saved time).
COLLAPSE = ("mu", "mu_normalized", "min_cos", "mean_abs_cos")
#: Every metric `FlowObserver` records, in order.
FLOW_METRICS = COLLAPSE + ("clusters", "energy", "diameter", "clustered")


def cluster_count(x: Float[ArrayLike, "n d"], cos_threshold: float | Array = 0.99) -> Float[Array, ""]:
    r"""Number of clusters: connected components of $\{(i, j) : \langle x_i, x_j\rangle \ge c\}$.

    The transitive closure is taken by $\lceil \log_2 n\rceil$ Boolean squarings of the adjacency
    (no loop over tokens), and each component is counted once, at its smallest index.

    Arguments:
        x: ``(n, d)`` unit tokens.
        cos_threshold: the cosine $c$ above which two tokens are neighbours.

    Returns:
        The count, as a float scalar (so it can be averaged with the other metrics).
    """
    x = jnp.asarray(x)
    n = x.shape[0]
    g = jnp.matmul(x, x.T, precision=_HI)
    reach = (g >= cos_threshold) | jnp.eye(n, dtype=bool)
    for _ in range(max(1, math.ceil(math.log2(max(n, 2))))):
        r = reach.astype(x.dtype)
        reach = jnp.matmul(r, r, precision=_HI) > 0
    earlier = jnp.tril(jnp.ones((n, n), bool), k=-1)
    first = ~jnp.any(reach & earlier, axis=1)
    return jnp.sum(first).astype(x.dtype)


def diameter(x: Float[ArrayLike, "n d"]) -> Float[Array, ""]:
    r"""$\max_{i,j} |x_i - x_j|$, from the Gram matrix.

    On the sphere $|x_i - x_j|^2 = 2 - 2\langle x_i, x_j\rangle$.
    """
    x = jnp.asarray(x)
    g = jnp.matmul(x, x.T, precision=_HI)
    sq = jnp.diagonal(g)[:, None] + jnp.diagonal(g)[None, :] - 2 * g
    return jnp.sqrt(jnp.maximum(jnp.max(sq), 0))


class FlowObserver(eqx.Module):
    """``(t, x, beta) -> {name: scalar}``: the chosen metrics of `FLOW_METRICS` for one ``(n, d)`` state.

    The observer signature of `rankdyn.simulate` (``(t, x, args)``, after Diffrax's
    ``SaveAt(fn=...)``), with ``t`` the time and ``args`` the inverse temperature beta (which
    ``energy`` reads).

    Attributes:
        cos_threshold: cosine above which two tokens belong to one cluster.
        eps: diameter at or below which the tokens count as one cluster (``clustered``).
        names: the metrics recorded (``metrics=``, the name of `rankdyn.simulate`'s argument):
            None for every one of `FLOW_METRICS`, or a subset (a list or a comma-separated
            string). ``clustered`` is always recorded: `FlowSolution.time_to_cluster` reads it.
    """

    cos_threshold: Float[Array, ""]
    eps: Float[Array, ""]
    collapse: MetricObserver
    names: tuple[str, ...] = eqx.field(static=True)

    def __init__(self, cos_threshold: float = 0.99, eps: float = 1e-2, metrics=None):
        self.cos_threshold = jnp.asarray(cos_threshold)
        self.eps = jnp.asarray(eps)
        self.names = _flow_metric_names(metrics)
        self.collapse = MetricObserver(tuple(k for k in COLLAPSE if k in self.names))

    def __call__(self, t, x: Float[Array, "n d"], beta) -> dict[str, Float[Array, ""]]:
        out = dict(self.collapse(t, x))
        diam = diameter(x)
        if "clusters" in self.names:
            out["clusters"] = cluster_count(x, self.cos_threshold.astype(x.dtype))
        if "energy" in self.names:
            out["energy"] = interaction_energy(x, beta)
        if "diameter" in self.names:
            out["diameter"] = diam
        out["clustered"] = (diam <= self.eps.astype(x.dtype)).astype(x.dtype)
        return out


class WithClustered(eqx.Module):
    """A user's flow observer, with ``clustered`` (`FlowObserver`'s default ``eps``) added when it
    does not return it: `FlowSolution.time_to_cluster` reads it."""

    observe: Callable
    default: FlowObserver

    def __init__(self, observe: Callable):
        self.observe = observe
        self.default = FlowObserver(metrics="clustered")

    def __call__(self, t, x: Float[Array, "n d"], beta) -> dict[str, Float[Array, ""]]:
        out = dict(self.observe(t, x, beta))
        if "clustered" not in out:
            out["clustered"] = self.default(t, x, beta)["clustered"]
        return out


def _flow_metric_names(metrics) -> tuple[str, ...]:
    """``metrics=`` as names in `FLOW_METRICS`' order, ``clustered`` always among them."""
    if metrics is None or metrics == "all":
        return FLOW_METRICS
    asked = [m.strip() for m in metrics.split(",")] if isinstance(metrics, str) else list(metrics)
    bad = [m for m in asked if m not in FLOW_METRICS]
    if bad or not asked:
        raise UsageError(
            f"metrics= names the flow's metrics, some of {', '.join(FLOW_METRICS)} (or 'all'); got "
            f"{metrics!r}."
        )
    return tuple(m for m in FLOW_METRICS if m in asked or m == "clustered")


def join_chunks(total, counts, nb: int, times, batch: int, betas, values=None, states=None):
    """The chunks' records of a flow run joined: ``(pick, summary, metrics, states)``.

    ``total`` holds each piece's streamed statistics (temperature x time), ``counts`` the per-
    temperature ``bad`` / ``zero`` counts, ``values`` and ``states`` each chunk's per-trajectory
    metrics and states (None when not kept). ``pick`` drops the temperature axis for a scalar
    ``betas``; a vector of temperatures gives one Summary whose arrays have a leading beta axis.
    Shared by the deterministic flow and the noisy one (`rankdyn._flow._sde`).
    """
    import jax
    import numpy as np

    from .._observe._stats import summarize

    scalar = np.ndim(betas) == 0
    pick = (lambda a: a[0]) if scalar else (lambda a: a)
    # The pieces' records (temperature x time) back to (temperature, time), joined over time. On
    # the host (copies, the same bits): eager JAX compiled a program per op for each new shape.
    stats = jax.tree.map(
        lambda *a: np.concatenate([np.asarray(v).reshape(nb, -1) for v in a], axis=1), *total
    )
    per_beta = [
        summarize(
            jax.tree.map(lambda a, i=i: jax.device_put(a[i]), stats),
            jnp.arange(times.size),
            batch,
            jnp.asarray(counts["bad"][i]),
            jnp.asarray(counts["zero"][i]),
        )
        for i in range(nb)
    ]
    summary = (
        per_beta[0]
        if scalar
        else jax.tree.map(lambda *a: jax.device_put(np.stack([np.asarray(v) for v in a])), *per_beta)
    )
    metrics = None
    if values is not None:
        metrics = {m: pick(np.concatenate([v[m] for v in values], axis=1)) for m in values[0]}
    joined = None if states is None else pick(np.concatenate(states, axis=1))  # (nb, batch, S, n, d)
    return pick, summary, metrics, joined
