r"""Attention sinks: the attention mass on token 0 and on the mask's centres, per layer and head.

For the attention $A^{(t,h)}$ that layer $t$ computes (from the tokens its placement feeds the
attention: $\mathrm{LN}(X)$ for pre, peri and nGPT), with the queries
$\mathcal Q = \{1, \dots, n-1\}$ (token 0 attends only to itself under a causal mask),

$$m_0^{(t,h)} = \operatorname{mean}_{b,\, i \in \mathcal Q} A^{(t,h)}_{i0}, \qquad
m_C^{(t,h)} = \operatorname{mean}_{b,\, i \in \mathcal Q} \textstyle\sum_{j \in C} A^{(t,h)}_{ij},$$

$C$ the centres of the mask graph (`rankdyn._model._graph.graph_info`: token 0 alone for the
causal mask, where Theorem 1 says the tokens collapse toward it). The uniform attention over
each row's neighbours gives the baselines $u_0 = \operatorname{mean}_i [0 \in \mathcal N_i]/|\mathcal N_i|$
and $u_C$; $m_0 / u_0 \gg 1$ is an attention sink. Next to them, the mean cosine of the tokens
$i \ge 1$ to token 0, and among themselves, at every depth $0..L$: whether the directions move
toward token 0's or collapse among themselves.

The masses are $A$ applied to a probe matrix $P = [e_0, 1_C]$ (`attention_times`): on the blocked
attention path the probe goes through the online softmax in place of the values, so no ``(n, n)``
array is formed, and the cosines are sums of unit vectors ($O(n d)$); the dense path gives the same
numbers to rounding.
"""

from __future__ import annotations

import dataclasses

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from .._errors import UsageError
from .._model._graph import graph_info
from .._model._layer import PRECISIONS
from .._model._placements import attention_input

__all__ = ["SINK_FACTOR", "SinkStats", "attention_sinks", "attention_times", "sink_summary"]

#: A sink: head-mean attention on token 0 at least this many times its uniform baseline (the
#: threshold of the attention-sinks target's checks s1 and s2).
SINK_FACTOR = 2.0


@dataclasses.dataclass(frozen=True)
class SinkStats:
    """Per layer and head attention masses (``(layers, heads)``), their uniform baselines, and the
    cosines per depth (``(layers + 1,)``); ``centers`` are the mask's centre tokens.

    Attributes:
        mass_first, mass_centers: $m_0$, $m_C$ (see the module docstring).
        uniform_first, uniform_centers: $u_0$, $u_C$ (scalars).
        cos_first: mean cosine of tokens $i \\ge 1$ to token 0, at depths $0..L$.
        cos_others: mean cosine between distinct tokens $i, j \\ge 1$, at depths $0..L$.
    """

    mass_first: np.ndarray
    mass_centers: np.ndarray
    uniform_first: float
    uniform_centers: float
    cos_first: np.ndarray
    cos_others: np.ndarray
    centers: tuple[int, ...]

    @property
    def sink_ratio(self) -> np.ndarray:
        """$m_0 / u_0$ per layer, averaged over heads."""
        return self.mass_first.mean(axis=1) / self.uniform_first

    def to_dict(self) -> dict:
        d = {k: np.asarray(v).tolist() for k, v in dataclasses.asdict(self).items()}
        d["sink_ratio"] = self.sink_ratio.tolist()
        return d


def attention_times(layer, x, t, probe):
    r"""$A^{(t)} P$ per head, ``(heads, n, p)``: the attention that layer ``t`` applies to ``x``
    (eval mode, from the tokens its placement feeds the attention) times a probe ``(n, p)``, on the
    layer's path (the blocked path never forms $A$)."""
    w = layer.weights_at(t)
    x_att = attention_input(layer, x, t, w)
    prec = PRECISIONS[layer.precision]
    return layer.path.times(layer, x_att, w, probe, prec)


def _cosines(x):
    # Means of u_0 . u_i and of u_i . u_j (i != j >= 1) from the sum of the unit rows: O(n d).
    u = x / jnp.linalg.norm(x, axis=-1, keepdims=True)
    rest = jnp.sum(u[1:], axis=0)
    m = u.shape[0] - 1
    off = (jnp.sum(rest * rest) - jnp.sum(u[1:] * u[1:])) / max(m * (m - 1), 1)
    return jnp.dot(u[0], rest) / m, off


@eqx.filter_jit
def _scan(layer, x0, probe, num_layers: int):
    def step(x, t):
        ap = jax.vmap(lambda x1: attention_times(layer, x1, t, probe))(x)  # (batch, heads, n, 2)
        first, cent = (jnp.mean(ap[:, :, 1:, c], axis=(0, 2)) for c in (0, 1))
        y = jax.vmap(lambda x1: layer(x1, t)[0])(x)
        return y, (first, cent, jax.vmap(_cosines)(y))

    _, (first, cent, (cf, co)) = lax.scan(step, x0, jnp.arange(num_layers))
    cf0, co0 = jax.vmap(_cosines)(x0)
    cos_first = jnp.concatenate([jnp.mean(cf0)[None], jnp.mean(cf, axis=1)])
    cos_others = jnp.concatenate([jnp.mean(co0)[None], jnp.mean(co, axis=1)])
    return first, cent, cos_first, cos_others


def attention_sinks(layer, x0, num_layers: int) -> SinkStats:
    """`SinkStats` of ``layer`` (a `SelfAttentionLayer`, random or trained) from ``x0`` over ``num_layers``.

    Arguments:
        layer: the layer map; per-layer weights are used as in `rankdyn.simulate`.
        x0: ``(batch, n, d)`` initial tokens (e.g. a checkpoint's embeddings), ``n >= 3``.
        num_layers: depth $L$.

    Raises:
        ValueError: for a layer with dropout (the eval-mode map is measured), ``n < 3`` or ``x0``
            of the wrong rank.
    """
    x0 = jnp.asarray(x0)
    if x0.ndim != 3 or x0.shape[1] < 3:
        raise UsageError(f"x0 must be (batch, n, d) with n >= 3, got shape {x0.shape}.")
    if layer.has_dropout:
        raise UsageError("attention_sinks measures the eval-mode map: build the layer without dropout.")
    info = graph_info(layer.mask)
    n = x0.shape[1]
    probe = np.zeros((n, 2))
    probe[0, 0] = 1.0
    probe[list(info.centers), 1] = 1.0
    probe = jnp.asarray(probe, x0.dtype)
    if layer.attention_path == "blocked":  # the uniform weights of each row: all scores zero
        u = _uniform(layer, probe)
        uniform_first, uniform_centers = (float(np.mean(u[1:, c])) for c in (0, 1))
    else:
        mask = np.asarray(layer.mask)
        deg = mask.sum(axis=1)
        uniform_first = float(np.mean(mask[1:, 0] / deg[1:]))
        uniform_centers = float(
            np.mean((mask[1:] & (np.asarray(probe[:, 1]) > 0)[None]).sum(axis=1) / deg[1:])
        )
    first, cent, cf, co = _scan(layer, x0, probe, int(num_layers))
    return SinkStats(
        mass_first=np.asarray(first),
        mass_centers=np.asarray(cent),
        uniform_first=uniform_first,
        uniform_centers=uniform_centers,
        cos_first=np.asarray(cf),
        cos_others=np.asarray(co),
        centers=tuple(int(c) for c in info.centers),
    )


@eqx.filter_jit
def _uniform(layer, probe):
    prec = PRECISIONS[layer.precision]
    return layer.path.uniform_times(layer, probe, prec)[0]


def _ranges(layers) -> str:
    """1-based layer numbers as runs: ``[1, 2, 3, 5]`` -> ``"1-3, 5"``."""
    runs: list[list[int]] = []
    for k in layers:
        if runs and k == runs[-1][1] + 1:
            runs[-1][1] = k
        else:
            runs.append([k, k])
    return ", ".join(f"{a}" if a == b else f"{a}-{b}" for a, b in runs)


def _ratio_words(s: SinkStats, factor: float) -> tuple[str, str]:
    r = np.asarray(s.sink_ratio, float)
    finite = np.isfinite(r)
    sinks = [i + 1 for i in np.flatnonzero(finite & (r >= factor))]
    layers = f"{len(sinks)} of {r.size} layers" + (f" ({_ranges(sinks)})" if sinks else "")
    if not finite.any():
        return layers, "no finite ratio"
    med = f"median ratio {np.median(r[finite]):.3g}"
    return layers, med + f" (min {np.min(r[finite]):.3g}, max {np.max(r[finite]):.3g})"


def sink_summary(stats: SinkStats, control: SinkStats | None = None, *, factor: float = SINK_FACTOR) -> str:
    r"""Three lines that say where the sinks are: the layers whose head-mean attention on token 0
    is at least ``factor`` times uniform ($m_0 / u_0 \ge$ ``factor``, 1-based), the median ratio,
    and the same for ``control`` (the scale-matched random layers of a checkpoint), or that there
    is none. Layers whose ratio is not finite are counted but never called a sink.
    """
    layers, med = _ratio_words(stats, factor)
    lines = [
        f"attention sinks (attention on token 0 >= {factor:g}x uniform, mean over heads): {layers}",
        f"this run: {med}; uniform share of token 0 {stats.uniform_first:.3g}",
    ]
    if control is None:
        lines.append("control: none (a checkpoint run compares with its scale-matched random layers)")
    else:
        c_layers, c_med = _ratio_words(control, factor)
        lines.append(
            f"scale-matched control (matrices redrawn at the trained norms): {c_med}; sinks in {c_layers}"
        )
    return "\n".join(lines)
