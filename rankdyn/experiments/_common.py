r"""Helpers shared by the simulation targets of ``rankdyn reproduce``.

- `float_dtype`: float64 when the user turned x64 on (CLI ``--x64``), else float32; library
  code never changes JAX's configuration.
- `cheap_observe`: the SVD-free metrics (mu, its scale-free variants, row norms, cosines), so
  long or wide runs do not pay a batched SVD per layer.
- `with_masks` / `simulate_masks`: one layer's weights with several masks, simulated as ONE
  vmapped program (the mask is an array field of the layer), so masks share the same weights
  and inputs (common random numbers) and the sweep compiles once.
- `simulate_many`: several such stacks (differing in static switches) as ONE compiled program;
  compile time, not run time, dominates the quick runs on CPU.
- `san_layer` / `rebuild`: the Theorem 1-2 SAN (drawn by one jitted call) and the same weights
  with other switches.
- `mask_table`: graph facts (strong connectivity, centers, radius) of the masks used.
- `log_fit`: a per-layer rate from $\log\mu$ above the round-off floor, with the window used.
- `ablation_runs`: the Fig. 2/6 ablation models, run once per process and shared by the
  ``ablation`` and ``geometry`` targets.
"""

from __future__ import annotations

import functools

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .._graph import graph_info
from .._masks import make_mask
from .._metrics import collapse_metrics, direction_metrics
from .._simulate import simulate

#: Masks of the paper (Fig. 2, 3, 6): complete, causal, window +-1, uni-directional window.
PAPER_MASKS = ("complete", "causal", "window", "window-uni")
MASK_LABELS = {
    "complete": "complete",
    "causal": "causal",
    "window": "window +-1",
    "window-uni": "uni window",
    "dilated": "dilated",
    "global": "global+local",
}


def float_dtype():
    """float64 if JAX runs with x64 enabled, else float32."""
    return jnp.float64 if jax.config.jax_enable_x64 else jnp.float32


def rel_floor(dtype) -> float:
    """Relative round-off floor for mu: below ``mu_rel`` of this size, mu is noise."""
    return float(1e3 * jnp.finfo(dtype).eps)


def cheap_observe(x):
    """SVD-free per-layer metrics: mu (eq. 4), mu/||X||_F, mu(LN(X)), row norms, cosines."""
    return direction_metrics(x)


def sigma_ratio(x):
    r"""$\sigma_2/\sigma_1$ of one token matrix: 0 at rank one (SPEC §5.6: rank >= 2 iff > 1e-2)."""
    s = jnp.linalg.svd(x, compute_uv=False)
    return s[1] / jnp.where(s[0] > 0, s[0], 1.0)


def observe_sigma_ratio(x):
    # Module level: simulate's jit cache is keyed on this function object.
    return {"ratio": sigma_ratio(x)}


def full_observe(rank_tol):
    """All of `rankdyn.collapse_metrics` (with SVD) at relative rank tolerance ``rank_tol``."""
    return lambda x: collapse_metrics(x, rank_tol)


def masks_for(names, n: int, **kw) -> dict[str, np.ndarray]:
    """Name -> boolean mask. ``dilated`` uses 2 hops of dilation 4 plus the unit window;
    ``global`` one global token plus the +-1 window."""
    out = {}
    for name in names:
        if name == "dilated":
            out[name] = make_mask("dilated", n, window=2, dilation=4)
        elif name == "global":
            out[name] = make_mask("global", n, window=1, num_global=1)
        else:
            out[name] = make_mask(name, n, window=1)
    return out


def mask_table(masks: dict[str, np.ndarray]) -> dict[str, dict]:
    """Graph facts per mask: strongly / quasi-strongly connected, number of centers, radius."""
    out = {}
    for name, m in masks.items():
        g = graph_info(m)
        out[name] = {
            "strongly_connected": g.strongly_connected,
            "quasi_strongly_connected": g.quasi_strongly_connected,
            "num_centers": g.num_centers,
            "radius": g.radius,
        }
    return out


def stack(modules):
    """Stack equal-structure modules (same static fields) along a new leading axis, for vmap."""
    return jax.tree.map(lambda *xs: jnp.stack(xs), *modules)


def with_masks(layer, masks: dict[str, np.ndarray]):
    """One layer per mask with the SAME weights, stacked along a leading axis (order of ``masks``)."""
    return stack([eqx.tree_at(lambda l: l.mask, layer, jnp.asarray(m)) for m in masks.values()])


def simulate_many(stacks, x0, num_layers: int, *, observe=cheap_observe, keys=None, save_every: int = 1,
                  x0_per_config: bool = False):
    """Several stacks of layers (differing in static switches: norm, skip, MLP, dropout), each
    vmapped over its configs, compiled as ONE program.

    One XLA program instead of one per stack roughly halves the compile time on CPU, which
    dominates the quick runs (a program costs seconds to compile and milliseconds to run).

    Arguments:
        stacks: list of layers stacked along a leading config axis (`stack` / `with_masks`).
        x0: ``(batch, n, d)`` shared by every config, or ``(configs, batch, n, d)`` with
            ``x0_per_config=True`` (the same for every stack).
        observe: one observation function for every stack, or a list (one per stack).
        keys: None or a list (one PRNG key or None per stack; a key is needed for dropout).

    Returns:
        A list, per stack, of ``(layers, metrics, nonfinite, degenerate)`` as NumPy arrays;
        metrics are ``(configs, batch, saved_layers)``.
    """
    keys = [None] * len(stacks) if keys is None else list(keys)
    observes = list(observe) if isinstance(observe, (list, tuple)) else [observe] * len(stacks)

    @eqx.filter_jit
    def run(stacks, x0, keys):
        outs = []
        for stacked, key, observe in zip(stacks, keys, observes):
            def one(layer, x, key=key, observe=observe):
                tr = simulate(layer, x, num_layers, observe=observe, key=key, save_every=save_every,
                              per_trajectory=True)
                return tr.metrics, tr.nonfinite, tr.degenerate

            if x0_per_config:
                outs.append(eqx.filter_vmap(one)(stacked, x0))
            else:
                outs.append(eqx.filter_vmap(lambda layer, one=one: one(layer, x0))(stacked))
        return outs

    layers = np.arange(0, num_layers + 1, save_every)
    result = []
    for metrics, nonfinite, degenerate in run(list(stacks), x0, keys):
        metrics = {k: np.asarray(v, dtype=np.float64) for k, v in metrics.items()}
        result.append((layers, metrics, np.asarray(nonfinite), np.asarray(degenerate)))
    return result


def simulate_stacked(stacked, x0, num_layers: int, *, observe=cheap_observe, key=None, save_every: int = 1,
                     x0_per_config: bool = False):
    """`rankdyn.simulate` vmapped over a stack of layers: one compiled program for the whole sweep.

    Arguments:
        stacked: layers stacked along a leading config axis (`stack` / `with_masks`).
        x0: ``(batch, n, d)`` shared by every config, or ``(configs, batch, n, d)`` with
            ``x0_per_config=True``.

    Returns:
        ``(layers, metrics, nonfinite, degenerate)`` as NumPy arrays; metrics are
        ``(configs, batch, saved_layers)``.
    """
    return simulate_many([stacked], x0, num_layers, observe=observe, keys=[key], save_every=save_every,
                         x0_per_config=x0_per_config)[0]


@functools.cache
def _jit_make_layer(make_layer):
    """``eqx.filter_jit(make_layer)``, created once so equal configurations reuse the compilation."""
    return eqx.filter_jit(make_layer)


def san_layer(key, n: int, d: int, num_layers: int, *, norm: str = "none", dtype=None):
    """The single-head SAN of the Theorem 1 targets: per-layer Haar-orthogonal W_V (A3 with
    equality), BERT-uniform W_Q, W_K (A2), complete mask (replace it with `with_masks`)."""
    from .._build import make_layer

    # One compiled weight draw instead of dozens of eagerly dispatched (and compiled) ops.
    return _jit_make_layer(make_layer)(key, n=n, d=d, mask="complete", norm=norm, value="orthogonal", qk="bert",
                                      num_layers=num_layers, dtype=dtype)


def rebuild(layer, **changes):
    """The same weights, mask and temperature with other switches (placement, norm, skip, MLP,
    dropout): static fields cannot be changed with ``eqx.tree_at``, so the layer is rebuilt.
    ``mlp=None`` drops the MLP block."""
    from .._layer import SelfAttentionLayer

    w = layer.weights
    kw = {
        "dqk": layer.dqk, "norm": layer.norm, "placement": layer.placement, "w_o": w.w_o, "mlp": w.mlp,
        "skip": layer.skip, "dropout": layer.dropout, "attention_from_normalized": layer.attention_from_normalized,
        "fixed_attention": layer.fixed_attention, "precision": layer.precision,
    }
    kw.update(changes)
    return SelfAttentionLayer(layer.mask, w.w_q, w.w_k, w.w_v, **kw)


def band(v: np.ndarray, ok: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """Mean and std over samples of ``v (batch, S)``, ignoring non-finite trajectories."""
    if ok is not None and ok.any():
        v = v[ok]
    return {"mean": np.mean(v, axis=0), "std": np.std(v, axis=0)}


def log_fit(layers, curve, rel, floor: float, *, start: int = 1, stop: int | None = None, tail: bool = True):
    r"""Per-layer rate $\rho = \exp(\mathrm{slope})$ of $\log$ ``curve`` against depth.

    Points with ``rel <= floor`` (round-off) are dropped. With ``tail=True`` and more than 8
    usable points only the second half is fitted (the asymptotic regime; early layers can be
    algebraic, e.g. the uni-directional window before information crossed the sequence).

    Returns:
        ``(rho, (t_first, t_last))``. If mu hits the floor before two points are usable (e.g.
        uniform complete attention makes every token equal in one layer), ``rho`` is the upper
        estimate ``floor ** (1 / t_hit)`` and the window is ``(0, t_hit)``; ``nan`` otherwise.
    """
    t = np.asarray(layers, dtype=float)
    c = np.asarray(curve, dtype=float)
    r = np.asarray(rel, dtype=float)
    sel = (t >= start) & np.isfinite(c) & (c > 0) & (r > floor)
    if stop is not None:
        sel &= t <= stop
    idx = np.flatnonzero(sel)
    # Stop at the first point at the floor: later points are noise around it.
    below = np.flatnonzero((t >= start) & ~(r > floor))
    if below.size:
        idx = idx[idx < below[0]]
    if idx.size < 2:
        if below.size and t[below[0]] > 0:
            # mu reached the round-off floor before two points could be fitted: the mean
            # per-layer factor up to that layer is at most floor ** (1 / t_hit) (an upper estimate).
            t_hit = float(t[below[0]])
            return float(floor ** (1.0 / t_hit)), (0, int(t_hit))
        return float("nan"), None
    if tail and idx.size > 8:
        idx = idx[idx.size // 2:]
    slope = np.polyfit(t[idx], np.log(c[idx]), 1)[0]
    return float(np.exp(slope)), (int(t[idx[0]]), int(t[idx[-1]]))


def log10_bound_gap(eps: float, radius: int, power: int = 1, centers: int = 1) -> float:
    r"""$\log_{10}(c\,\epsilon^{p r})$: how far below 1 the bound's contraction term is.

    The bounds' per-layer factors $(1 - c\epsilon^{pr})^{1/(pr)}$ round to exactly 1 in float64
    when this is below about -16 (e.g. $\epsilon^{127}$ for the uni-directional window).
    """
    if not eps > 0:
        return float("-inf")
    return float(np.log10(centers) + power * radius * np.log10(eps))


def bound_rate(eps: float, radius: int, power: int = 1, centers: int = 1) -> float:
    r"""Per-layer factor $(1 - c\,\epsilon^{pr})^{1/(pr)}$, evaluated without underflow.

    $p = 1$, $c = 1$: Theorem 1; $p = 2$, $c = n$: Theorem 2; $p = 2$, $c$ = centers: Corollary 1.
    Computed as $\exp(\log1p(-c\epsilon^{pr})/(pr))$, which is exactly 1.0 when the term underflows.
    """
    g = log10_bound_gap(eps, radius, power, centers)
    term = 10.0 ** g if g > -300 else 0.0
    if term >= 1.0:
        return 0.0
    return float(np.exp(np.log1p(-term) / (power * radius)))


# ---------------------------------------------------------------------------- ablation models

#: The five Fig. 2 variants: (label, skip, post-LN, MLP).
VARIANTS = (
    ("SAN", False, False, False),
    ("SAN+skip", True, False, False),
    ("SAN+LN", False, True, False),
    ("SAN+skip+LN", True, True, False),
    ("full", True, True, True),
)


def ablation_sizes(quick: bool) -> dict:
    """Sizes of the ablation grid (paper: BERT base, n = 128, d = 768, 12 heads, depth 128)."""
    if quick:
        return {"n": 32, "d": 64, "heads": 4, "batch": 8, "depth": 128, "dropouts": (0.0, 0.1)}
    return {"n": 128, "d": 768, "heads": 12, "batch": 16, "depth": 128, "dropouts": (0.0, 0.1)}


_ABLATION_CACHE: dict = {}


def ablation_runs(quick: bool, seed: int, sizes: dict | None = None) -> dict:
    """Run (once per process and configuration) the ablation grid with every metric.

    {5 variants} x {4 paper masks, vmapped} x {dropout rates (LN variants only; 0 for the others)}, BERT-like random init: per-layer
    weights U(+-1/sqrt(fan_in)) (std ~ 0.0208, close to BERT's N(0, 0.02)), heads with W_O,
    MLP ratio 4, centred LayerNorm (gain 1, bias 0) after the skip (post-LN), BERT-like inputs
    (centred LN of embeddings sharing a direction, token norm sqrt(d)).

    Returns:
        ``{"setting": {...}, "layers": (S,), "runs": {(variant, dropout): {"metrics": {name:
        (masks, batch, S)}, "nonfinite": (masks, batch), "degenerate": ...}}, "masks": {...}}``.
    """
    from .._build import make_layer
    from .._init import initial_tokens

    sizes = dict(ablation_sizes(quick) if sizes is None else sizes)
    cache_key = (seed, jax.config.jax_enable_x64, tuple(sorted((k, str(v)) for k, v in sizes.items())))
    if cache_key in _ABLATION_CACHE:
        return _ABLATION_CACHE[cache_key]
    dtype = float_dtype()
    n, d, heads, batch, depth = (sizes[k] for k in ("n", "d", "heads", "batch", "depth"))
    rank_tol = 1e-4 if dtype == jnp.float32 else 1e-10
    masks = masks_for(PAPER_MASKS, n)
    key = jax.random.PRNGKey(seed)
    k_w, k_x, k_drop = jax.random.split(key, 3)
    x0 = initial_tokens(k_x, "bert", n, d, batch=batch, dtype=dtype)
    from .._norms import make_norm

    # Draw the weights once (with the MLP); every variant reuses them and differs only in its switches.
    base = _jit_make_layer(make_layer)(
        k_w, n=n, d=d, mask="complete", norm="none", value="bert", qk="bert", num_layers=depth, heads=heads,
        output_projection=True, mlp=True, dtype=dtype,
    )
    names, stacks, keys, observes = [], [], [], []
    for label, skip, ln, mlp in VARIANTS:
        # Dropout matters for the LN variants (SPEC §6.7); the others run without it only.
        for p in (sizes["dropouts"] if ln else (0.0,)):
            layer = rebuild(base, placement="post" if ln else "none", norm=make_norm("layernorm", d), skip=skip,
                            mlp=base.weights.mlp if mlp else None, dropout=p)
            names.append((label, p))
            stacks.append(with_masks(layer, masks))
            keys.append(k_drop if p > 0 else None)
            # SVD metrics only where `geometry` reads them (no dropout): compile time is what quick runs pay.
            observes.append(full_observe(rank_tol) if p == 0 else cheap_observe)
    outs = simulate_many(stacks, x0, depth, observe=observes, keys=keys)
    runs = {}
    for name, (layers, metrics, nonfinite, degenerate) in zip(names, outs):
        runs[name] = {"metrics": metrics, "nonfinite": nonfinite, "degenerate": degenerate}
    setting = {
        **{k: (list(v) if isinstance(v, tuple) else v) for k, v in sizes.items()},
        "seed": seed, "dtype": str(jnp.dtype(dtype)), "masks": list(PAPER_MASKS), "window": 1,
        "variants": {v[0]: {"skip": v[1], "post_layernorm": v[2], "mlp": v[3]} for v in VARIANTS},
        "weights": "per-layer, U(+-1/sqrt(fan_in)) for W_Q, W_K, W_V, W_O, MLP (std ~0.0208 vs BERT N(0,0.02)); no biases",
        "dqk": d // heads, "ln": "centred LayerNorm, gain 1, bias 0, eps 1e-12, after the skip (post-LN)",
        "x0": "bert (centred LN of Gaussian embeddings with a shared direction, common_weight 1, token norm sqrt(d))",
        "mlp_ratio": 4, "rank_tol": rank_tol,
        "keys": "PRNGKey(seed) split into (weights, inputs, dropout)",
    }
    out = {"setting": setting, "layers": layers, "runs": runs, "masks": mask_table(masks)}
    _ABLATION_CACHE[cache_key] = out
    return out
