r"""The Fig. 2/6 ablation models, run once and shared by the ``ablation`` and ``geometry`` targets.

Five variants (SAN, SAN+skip, SAN+LN, SAN+skip+LN, full block with MLP) x the four paper masks
(vmapped, weights shared) x dropout modes for the LN variants: eval, attention dropout 0.1 and
attention + hidden dropout 0.1 (BERT's two dropouts, docs/theory.md#experiments).

The runs are memoised in an explicit ``cache`` dict that the caller owns (`run_targets` passes
one per ``rankdyn reproduce`` call), not in module state.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ..._errors import UsageError
from .._dtype import float_dtype
from .._layer_observers import cheap_observe, full_observe
from .._masktable import PAPER_MASKS, mask_table, masks_for
from .._runs import jit_make_layer, rebuild, simulate_many, with_masks

__all__ = ["VARIANTS", "DROPOUT_MODES", "ablation_sizes", "ablation_runs"]

#: The five Fig. 2 variants: (label, skip, post-LN, MLP).
VARIANTS = (
    ("SAN", False, False, False),
    ("SAN+skip", True, False, False),
    ("SAN+LN", False, True, False),
    ("SAN+skip+LN", True, True, False),
    ("full", True, True, True),
)

#: mode -> (attention dropout, hidden dropout); the non-LN variants run in eval mode only.
DROPOUT_MODES = {"eval": (0.0, 0.0), "attn-dropout": (0.1, 0.0), "attn+hidden-dropout": (0.1, 0.1)}


def ablation_sizes(quick: bool) -> dict:
    """Sizes of the ablation grid (paper: BERT base, n = 128, d = 768, 12 heads, depth 128)."""
    modes = tuple(DROPOUT_MODES)
    if quick:
        return {"n": 32, "d": 64, "heads": 4, "batch": 8, "depth": 128, "modes": modes}
    return {"n": 128, "d": 768, "heads": 12, "batch": 16, "depth": 128, "modes": modes}


def ablation_runs(quick: bool, seed: int, sizes: dict | None = None, *, cache: dict | None = None) -> dict:
    """Run the ablation grid (or return it from ``cache`` when this configuration ran already).

    BERT-like random init: per-layer weights U(+-1/sqrt(fan_in)) (std ~ 0.0208, close to BERT's
    N(0, 0.02)), heads with W_O, MLP ratio 4, centred LayerNorm (gain 1, bias 0) after the skip
    (post-LN), BERT-like inputs (centred LN of embeddings sharing a direction, token norm sqrt(d)).

    Arguments:
        quick, seed: reduced sizes; base PRNG seed.
        sizes: override of `ablation_sizes` (``modes`` selects dropout modes by name).
        cache: a dict owned by the caller; results are stored under the configuration.

    Returns:
        ``{"setting": {...}, "layers": (S,), "runs": {(variant, mode): {"metrics": {name:
        (masks, batch, S)}, "nonfinite": (masks, batch), "degenerate": (masks,)}}, "masks": {...}}``.
    """
    from ..._model._norms import make_norm
    from ..._model._tokens import initial_tokens

    sizes = dict(ablation_sizes(quick) if sizes is None else sizes)
    cache_key = (seed, jax.config.jax_enable_x64, tuple(sorted((k, str(v)) for k, v in sizes.items())))
    if cache is not None and cache_key in cache:
        return cache[cache_key]
    dtype = float_dtype()
    n, d, heads, batch, depth = (sizes[k] for k in ("n", "d", "heads", "batch", "depth"))
    modes = tuple(sizes.get("modes", ("eval",)))
    unknown = [m for m in modes if m not in DROPOUT_MODES]
    if unknown:
        raise UsageError(f"unknown dropout mode(s) {unknown}; expected some of {tuple(DROPOUT_MODES)}.")
    rank_tol = 1e-4 if dtype == jnp.float32 else 1e-10
    masks = masks_for(PAPER_MASKS, n)
    k_w, k_x, k_drop = jax.random.split(jax.random.key(seed), 3)
    x0 = initial_tokens(k_x, "bert", n, d, batch=batch, dtype=dtype)
    # Draw the weights once (with the MLP); every variant reuses them and differs only in its switches.
    base = jit_make_layer()(
        k_w,
        n=n,
        d=d,
        mask="complete",
        placement="none",
        value="bert",
        qk="bert",
        num_layers=depth,
        heads=heads,
        output_projection=True,
        mlp=True,
        dtype=dtype,
    )
    names, stacks, keys, observes = [], [], [], []
    for label, skip, ln, mlp in VARIANTS:
        # Dropout matters for the LN variants (docs/theory.md#experiments); the others run in eval mode only.
        for mode in modes if ln else ("eval",):
            pa, ph = DROPOUT_MODES[mode]
            layer = rebuild(
                base,
                placement="post" if ln else "none",
                norm=make_norm("layernorm", d),
                skip=skip,
                mlp=base.weights.mlp if mlp else None,
                attn_dropout=pa,
                hidden_dropout=ph,
            )
            names.append((label, mode))
            stacks.append(with_masks(layer, masks))
            keys.append(k_drop if layer.has_dropout else None)
            # SVD metrics only where `geometry` reads them (eval): compile time is what quick runs pay.
            observes.append(full_observe(rank_tol) if mode == "eval" else cheap_observe)
    outs = simulate_many(stacks, x0, depth, observe=observes, keys=keys)
    runs = {}
    for name, (layers, metrics, nonfinite, degenerate) in zip(names, outs):
        runs[name] = {"metrics": metrics, "nonfinite": nonfinite, "degenerate": degenerate}
    setting = {
        **{k: (list(v) if isinstance(v, tuple) else v) for k, v in sizes.items()},
        "seed": seed,
        "dtype": str(jnp.dtype(dtype)),
        "masks": list(PAPER_MASKS),
        "window": 1,
        "dropout_modes": {
            m: {"attn_dropout": DROPOUT_MODES[m][0], "hidden_dropout": DROPOUT_MODES[m][1]} for m in modes
        },
        "variants": {v[0]: {"skip": v[1], "post_layernorm": v[2], "mlp": v[3]} for v in VARIANTS},
        # std of U(+-1/sqrt(fan_in)) is 1/sqrt(3 fan_in): 0.0208 at BERT's d = 768, larger at quick sizes.
        "weights": "per-layer, U(+-1/sqrt(fan_in)) for W_Q, W_K, W_V, W_O, MLP (std "
        f"{1 / (3 * d) ** 0.5:.3g} at fan_in d = {d} vs BERT N(0,0.02)); no biases",
        "dqk": d // heads,
        "ln": "centred LayerNorm, gain 1, bias 0, eps 1e-12, after the skip (post-LN)",
        "x0": "bert (centred LN of Gaussian embeddings with a shared direction, common_weight 1, token norm "
        "sqrt(d))",
        "mlp_ratio": 4,
        "rank_tol": rank_tol,
        "keys": "key(seed) split into (weights, inputs, dropout)",
    }
    out = {"setting": setting, "layers": layers, "runs": runs, "masks": mask_table(masks)}
    if cache is not None:
        cache[cache_key] = out
    return out
