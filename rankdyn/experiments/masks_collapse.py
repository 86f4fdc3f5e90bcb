r"""Target ``masks-collapse``: Theorem 1, masked attention without LN collapses exponentially.

SAN without LN (eq. 2), $X^{(t+1)} = A^{(t)} X^{(t)} W_V^{(t)}$ with per-layer Haar-orthogonal
$W_V$ (assumption A3 with equality, so the norm of the common vector cannot vanish and any
decay of mu is averaging, not shrinking weights), BERT-uniform $W_Q, W_K$, Gaussian inputs.
All masks share the same weights and inputs and run as one vmapped program.

For each mask we fit the per-layer factor of $\mu$ and compare it with the bound
$(1-\epsilon^r)^{1/r}$ evaluated with the measured $\epsilon$ (smallest attention weight on an
edge over all layers and samples) and the computed radius $r$. Norm shrinkage and directional
collapse are shown separately (docs/theory.md#experiments): $\mu$, $\mu/\|X\|_F$, $\mu(\mathrm{LN}(X))$ and the
mean row norm.
"""

from __future__ import annotations

from pathlib import Path

import jax
import numpy as np

from .._rates import bound_rate, fit_rate_window, log10_bound_gap
from . import _verdict as V
from ._dtype import float_dtype, rel_floor
from ._masktable import MASK_LABELS, PAPER_MASKS, mask_table, masks_for
from ._report import format_table
from ._runs import band, san_layer, simulate_stacked, with_masks

NAME = "masks-collapse"
CLAIM = (
    "Theorem 1: without LayerNorm, masked self-attention with any quasi-strongly connected mask makes "
    "tokens converge exponentially to a common vector, mu(X^(t)) <= C (1 - eps^r)^(t/r) with r the graph "
    "radius; more local masks (larger r) collapse more slowly (complete ~ causal faster than window +-1 "
    "faster than the uni-directional window)."
)

MASKS = ("complete", "causal", "window", "window-uni", "dilated", "global")
#: Depth of the ordering check: BERT's 12 layers (paper Fig. 2).
EARLY = 12


def sizes(quick: bool) -> dict:
    if quick:
        return {"n": 64, "d": 32, "batch": 32, "depth": 128}
    return {"n": 128, "d": 64, "batch": 256, "depth": 256}


def run(out: Path, *, quick: bool, seed: int, size: dict | None = None) -> dict:
    from .._init import initial_tokens
    from ..plotting import plot_band_panels, plot_rates_vs_bounds, save_figure

    out = Path(out)
    sz = dict(sizes(quick) if size is None else size)
    n, d, batch, depth = sz["n"], sz["d"], sz["batch"], sz["depth"]
    dtype = float_dtype()
    floor = rel_floor(dtype)
    masks = masks_for(MASKS, n)
    graph = mask_table(masks)
    k_w, k_x = jax.random.split(jax.random.PRNGKey(seed))
    layer = san_layer(k_w, n, d, depth, dtype=dtype)
    x0 = initial_tokens(k_x, "gaussian", n, d, batch=batch, dtype=dtype)
    layers, met, nonfinite, _ = simulate_stacked(with_masks(layer, masks), x0, depth)

    per_mask, bands = {}, {k: {} for k in ("mu", "mu_rel", "mu_normalized", "row_norm_mean")}
    for i, name in enumerate(masks):
        ok = ~nonfinite[i]
        b = {k: band(met[k][i], ok) for k in bands}
        for k in bands:
            bands[k][MASK_LABELS[name]] = b[k]
        eps = float(np.min(met["eps_min"][i][ok])) if ok.any() else float("nan")
        r = graph[name]["radius"]
        # Geometric mean over samples: the rate of the typical trajectory.
        log_mu = np.exp(np.mean(np.log(np.maximum(met["mu"][i][ok], 1e-300)), axis=0))
        rel = np.exp(np.mean(np.log(np.maximum(met["mu_rel"][i][ok], 1e-300)), axis=0))
        rate, window = fit_rate_window(layers, log_mu, rel, floor)
        mun = b["mu_normalized"]["mean"]
        # Average per-layer factor over the whole depth (floored): the collapse-speed ordering.
        avg = (max(mun[-1], floor * mun[0]) / mun[0]) ** (1.0 / depth)
        early = min(EARLY, depth)
        avg_early = (max(mun[early], floor * mun[0]) / mun[0]) ** (1.0 / early)
        per_mask[name] = {
            **graph[name],
            "eps_measured": eps,
            "log10_eps_pow_r": log10_bound_gap(eps, r),
            "bound_rate": bound_rate(eps, r),
            "fitted_rate": rate,
            "fit_window": window,
            "mu_ratio": float(b["mu"]["mean"][-1] / b["mu"]["mean"][0]),
            "mu_normalized_ratio": float(mun[-1] / mun[0]),
            "mu_rel_ratio": float(b["mu_rel"]["mean"][-1] / b["mu_rel"]["mean"][0]),
            "row_norm_ratio": float(b["row_norm_mean"]["mean"][-1] / b["row_norm_mean"]["mean"][0]),
            "avg_rate_mu_normalized": float(avg),
            f"avg_rate_mu_normalized_first_{EARLY}": float(avg_early),
            "nonfinite": int(np.sum(nonfinite[i])),
        }

    # Checks: (a) every mask decays; (b) fitted rate <= Theorem 1's bound (not testable where the
    # bound is 1 to within 1e-6); (c) the paper's locality ordering on the four paper masks.
    ge = {m: per_mask[m][f"avg_rate_mu_normalized_first_{EARLY}"] for m in PAPER_MASKS}
    g = {m: per_mask[m]["avg_rate_mu_normalized"] for m in PAPER_MASKS}
    ordering = bool(max(ge["complete"], ge["causal"]) < ge["window"] < ge["window-uni"])
    ordering_final = bool(max(g["complete"], g["causal"]) < g["window"] < g["window-uni"])
    check_list = (
        [
            V.check(
                f"{MASK_LABELS[m]}: decays",
                v["mu_ratio"] < 0.9 and v["mu_normalized_ratio"] < 0.9 and v["fitted_rate"] < 1.0,
                f"mu T/0 {v['mu_ratio']:.3g}, mu(LN) T/0 {v['mu_normalized_ratio']:.3g}, "
                f"rate {v['fitted_rate']:.4g}",
            )
            for m, v in per_mask.items()
        ]
        + [
            V.bound_check(
                f"{MASK_LABELS[m]}: fitted rate <= (1-eps^r)^(1/r)", v["fitted_rate"], v["bound_rate"]
            )
            for m, v in per_mask.items()
        ]
        + [
            V.check(
                f"locality ordering over the first {EARLY} layers",
                ordering,
                "average factors of mu(LN(X)): "
                + ", ".join(f"{MASK_LABELS[m]} {x:.4g}" for m, x in ge.items()),
            ),
        ]
    )
    checks = V.checks_json(check_list)
    verdict = V.verdict(check_list)

    panels = {
        "mu (eq. 4)": bands["mu"],
        "mu(LN(X)): direction only": bands["mu_normalized"],
        "mu / ||X||_F": bands["mu_rel"],
        "mean row norm: norm shrinkage": bands["row_norm_mean"],
    }
    fig = plot_band_panels(
        layers,
        panels,
        suptitle=f"SAN without LN, orthogonal W_V, n={n}, d={d}, {batch} samples",
        ylabels={t: t.split(":")[0] for t in panels},
        sharey=False,
        dtype=dtype,
        floor_panels=list(panels)[:3],
    )
    figs = [save_figure(fig, out / "masks_collapse_mu.png")]
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5), layout="constrained")
    plot_rates_vs_bounds(
        [MASK_LABELS[m] for m in MASKS],
        [per_mask[m]["fitted_rate"] for m in MASKS],
        [per_mask[m]["bound_rate"] for m in MASKS],
        ax=ax,
        title="Theorem 1: fitted per-layer factor vs (1-eps^r)^(1/r)",
    )
    figs.append(save_figure(fig, out / "masks_collapse_rates.png"))

    rows = [
        "| mask | strongly conn. | centers | r | eps (measured) | log10 eps^r | bound (1-eps^r)^(1/r) | "
        "fitted rate (layers) | mu T/0 | mu(LN) T/0 | row norm T/0 |",
        "|" + "---|" * 11,
    ]
    for m, v in per_mask.items():
        rows.append(
            f"| {MASK_LABELS[m]} | {v['strongly_connected']} | {v['num_centers']} | {v['radius']} | "
            f"{v['eps_measured']:.3g} | {v['log10_eps_pow_r']:.1f} | {v['bound_rate']:.6g} | "
            f"{v['fitted_rate']:.4g} {tuple(v['fit_window']) if v['fit_window'] else ''} | {v['mu_ratio']:.3g} | "
            f"{v['mu_normalized_ratio']:.3g} | {v['row_norm_ratio']:.3g} |"
        )
    slow = [MASK_LABELS[m] for m, v in per_mask.items() if v["bound_rate"] >= 1.0 - 1e-12]
    notes = (
        "The bound uses the smallest attention weight seen over all layers and samples (a valid uniform eps). "
        "It is loose: for the masks with a large radius the term eps^r is far below float64 resolution "
        f"(log10 eps^r in the table), so (1-eps^r)^(1/r) evaluates to exactly 1 ({', '.join(slow) or 'none'}); the "
        "check 'fitted <= bound' cannot fail and is shown as not testable. "
        "For the window masks the depth is far below the mixing time of a path graph (~n^2 layers), so the fitted "
        "rate is that of the pre-asymptotic regime (diffusive smoothing), close to 1. With orthogonal W_V the row "
        "norm shrinks only because averaging random directions shortens tokens (consensus vector ~ |mean of x0|); "
        "mu(LN(X)) shows the directional collapse without any norm effect. A fit window starting at layer 0 marks "
        "an upper estimate: mu reached the round-off floor within that many layers."
    )
    if not ordering:
        notes += (
            f" The locality ordering failed over the first {EARLY} layers; average factors of mu(LN(X)):\n\n"
            + format_table({MASK_LABELS[m]: x for m, x in ge.items()}, key="mask")
            + "\n\n"
        )
    if ordering != ordering_final:
        notes += (
            f" The ordering at the final depth differs from the first {EARLY} layers (average factors per layer "
            "of mu(LN(X)) in the table below): the "
            "uni-directional window overtakes the bidirectional one once t exceeds ~2n, because on a directed path "
            "the centre's information travels as a front (~1/2 token per layer) and the chain then contracts "
            "geometrically, whereas a bidirectional window only diffuses ~sqrt(t) tokens (mixing time ~n^2). The "
            "radius r orders the bounds, not the actual speeds at every depth.\n\n"
            + format_table(
                {MASK_LABELS[m]: {f"first {EARLY} layers": ge[m], "all layers": g[m]} for m in PAPER_MASKS},
                key="mask",
            )
        )
    return {
        "name": NAME,
        "claim": CLAIM,
        "setting": {
            **sz,
            "seed": seed,
            "dtype": str(np.dtype(dtype)),
            "masks": list(MASKS),
            "mask_params": {
                "window": "+-1",
                "window-uni": "look-back 1",
                "dilated": "unit window + hops of 4 up to 8",
                "global": "token 0 global + window +-1",
            },
            "norm": "none (eq. 2)",
            "value": "orthogonal (Haar), per layer",
            "qk": "bert U(+-1/sqrt d), per layer",
            "dqk": d,
            "x0": "gaussian N(0,1)",
            "keys": "PRNGKey(seed) -> (weights, inputs)",
            "fit": "least squares of log(geometric-mean mu) on layers >= 1 above the relative floor "
            f"{floor:.2g}, second half of the usable points when more than 8",
        },
        "measured": {
            "per_mask": per_mask,
            "layers_saved": len(layers),
            "locality_ordering_at_final_depth (reported, not scored)": ordering_final,
        },
        "checks": checks,
        "key_numbers": {f"fitted rate {MASK_LABELS[m]}": per_mask[m]["fitted_rate"] for m in PAPER_MASKS},
        "verdict": verdict,
        "criterion": (
            "checks: every mask decays (mean mu and mean mu(LN(X)) at the last layer below 0.9 x layer 0, fitted "
            "per-layer rate < 1); every fitted rate <= Theorem 1's (1-eps^r)^(1/r) with the measured eps and radius; "
            f"over the first {EARLY} layers (BERT depth, Fig. 2) the average per-layer factor of mu(LN(X)) satisfies "
            "max(complete, causal) < window < uni window. " + V.VERDICT_RULE
        ),
        "figures": figs,
        "notes": notes,
        "markdown": "\n".join(rows),
    }
