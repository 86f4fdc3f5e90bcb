r"""Target ``pretrained-temperature``: the temperature of a pretrained SAN and the early collapse (paper Fig. 3).

The pretrained SAN (every layer's trained attention with $W_O$ and biases, no skip, no LN, no MLP;
`rankdyn.checkpoints.Checkpoint.layers` ``variant="san"``) is run with its logits rescaled as if
$d_{QK}$ were $\{1/64, 1, 64\}$ times the trained one ($d_{QK} = d_h$, the head width): the scores
$X W_Q (X W_K)^\top/\sqrt{d_{QK}}$ are multiplied by $8, 1, 1/8$. Masks: complete, causal,
window $\pm1$, uni-directional window, at the checkpoint's own depth, on real text. ``dqk`` is an
array field of the layer, so the three temperatures share one compiled program per variant.
"""

from __future__ import annotations

from pathlib import Path

import equinox as eqx
import jax.numpy as jnp
import numpy as np

from . import _verdict as V
from ._masktable import MASK_LABELS, PAPER_MASKS, masks_for
from ._observers import cheap_observe
from ._runs import band, with_masks
from .pretrained_common import (
    checkpoint_or_none,
    excerpt_ids,
    excerpt_sizes,
    model_label,
    model_setting,
    not_testable,
    run_chunked,
)

NAME = "pretrained-temperature"
CLAIM = (
    "Paper Fig. 3 (pretrained SANs): a smaller d_QK (sharper attention) slows the initial rate of rank collapse "
    "for every mask; the effect is larger with global attention than with sparse masks, and larger in shallow "
    "layers than in deep ones."
)

#: d_QK relative to the trained one (the paper's 1/64, 1, 64).
FACTORS = (1 / 64, 1.0, 64.0)
CHECK_NAMES = (
    "t1: mu(L)/mu(0) ordered d_QK x1/64 > x1 > x64 for every mask",
    "t2: the effect log(ratio(1/64)/ratio(64)) is larger for complete than window, causal than uni window",
    "t3: the effect is larger in the first half of the layers than in the second (complete mask)",
)


def run(
    out: Path, *, quick: bool, seed: int, size: dict | None = None, cache: dict | None = None, checkpoint=None
) -> dict:
    from ..plotting import plot_band_panels, save_figure

    out = Path(out)
    ckpt = checkpoint_or_none(checkpoint, cache)
    if ckpt is None:
        return not_testable(NAME, CLAIM, CHECK_NAMES, quick=quick, seed=seed, checkpoint=checkpoint)
    sz = dict(excerpt_sizes(quick) if size is None else size)
    depth = ckpt.num_layers
    ids, corpus = excerpt_ids(ckpt, sz["n"], sz["batch"], cache)
    n = ids.shape[1]
    masks = masks_for(PAPER_MASKS, n)
    base = ckpt.layers(n, "san")
    trained = float(base.dqk)
    stacks = [
        with_masks(eqx.tree_at(lambda l: l.dqk, base, jnp.asarray(trained * f, base.dqk.dtype)), masks)
        for f in FACTORS
    ]
    outs = run_chunked(stacks, ckpt.embed(ids), depth, observe=cheap_observe, chunk=sz["chunk"])
    layers = outs[0][0]
    ratios, panels = {}, {}
    for f, (_, metrics, nonfinite) in zip(FACTORS, outs):
        for i, m in enumerate(PAPER_MASKS):
            b = band(metrics["mu"][i], ~nonfinite[i])
            ratios[(m, f)] = b["mean"] / b["mean"][0]
            panels.setdefault(MASK_LABELS[m], {})[f"d_QK x {_fmt(f)}"] = b
    check_list = checks(ratios)
    fig = plot_band_panels(
        layers,
        panels,
        ncols=len(panels),
        dtype=str(np.dtype(ckpt.dtype)),
        suptitle=f"pretrained SAN, {Path(ckpt.path).name} (sha256 {ckpt.sha256[:12]}): mu vs depth, "
        f"d_QK relative to the trained {trained:g}",
        legend_title="temperature",
    )
    figs = [save_figure(fig, out / "pretrained_temperature.png")]
    rows = [
        "| mask | " + " | ".join(f"mu(L)/mu(0), d_QK x {_fmt(f)}" for f in FACTORS) + " |",
        "|---|---|---|---|",
    ]
    for m in PAPER_MASKS:
        rows.append(
            f"| {MASK_LABELS[m]} | " + " | ".join(f"{ratios[(m, f)][-1]:.3g}" for f in FACTORS) + " |"
        )
    notes = (
        f"Model: {ckpt.arch} checkpoint {ckpt.path} (weights sha256 {ckpt.sha256}), trained d_QK = {trained:g}, "
        f"{depth} layers, pure SAN with W_O and biases, eval mode; {corpus['excerpts']} excerpts of {n} tokens of "
        f"{corpus['name']} (Python {corpus['python']}). The effect of a temperature is "
        "log(mu_t(1/64)/mu_t(64)) at layer t."
    )
    if quick:
        notes += f" QUICK MODE: {corpus['excerpts']} excerpts."
    return {
        "name": NAME,
        "claim": CLAIM,
        "setting": {
            "model": model_setting(ckpt),
            "corpus": corpus,
            "n": n,
            "batch": int(ids.shape[0]),
            "depth": depth,
            "trained_dqk": trained,
            "dqk_factors": list(FACTORS),
            "masks": list(PAPER_MASKS),
            "variant": "san",
            "seed": seed,
            "dtype": str(np.dtype(ckpt.dtype)),
        },
        "checks": V.checks_json(check_list),
        "key_numbers": {
            f"complete mu(L)/mu(0), d_QK x {_fmt(f)}": float(ratios[("complete", f)][-1]) for f in FACTORS
        },
        "measured": {
            "ratio": {f"{m}|{_fmt(f)}": ratios[(m, f)] for m in PAPER_MASKS for f in FACTORS},
            "layers": layers,
        },
        "verdict": V.verdict(check_list),
        "model": model_label(ckpt) + ", pure SAN",
        "criterion": "; ".join(CHECK_NAMES) + ". " + V.VERDICT_RULE,
        "figures": figs,
        "notes": notes,
        "markdown": "\n".join(rows),
    }


def _fmt(f: float) -> str:
    return "1/64" if f < 1 else f"{f:g}"


def checks(ratios: dict) -> list:
    """Checks t1-t3 from ``ratios[(mask, factor)]`` = mean mu_t/mu_0 along depth (layers 0..L)."""
    lo, mid, hi = FACTORS
    last = {k: float(v[-1]) for k, v in ratios.items()}
    t1 = {m: last[(m, lo)] > last[(m, mid)] > last[(m, hi)] for m in PAPER_MASKS}
    effect = {m: float(np.log(last[(m, lo)] / last[(m, hi)])) for m in PAPER_MASKS}
    r_lo, r_hi = np.log(ratios[("complete", lo)]), np.log(ratios[("complete", hi)])
    half = (len(r_lo) - 1) // 2
    gap = r_lo - r_hi  # the effect at each layer: 0 at layer 0
    shallow, deep = float(gap[half] - gap[0]), float(gap[-1] - gap[half])
    return [
        V.check(CHECK_NAMES[0], all(t1.values()), ", ".join(f"{MASK_LABELS[m]} {v}" for m, v in t1.items())),
        V.check(
            CHECK_NAMES[1],
            effect["complete"] > effect["window"] and effect["causal"] > effect["window-uni"],
            ", ".join(f"{MASK_LABELS[m]} {v:.3g}" for m, v in effect.items()),
        ),
        V.check(
            CHECK_NAMES[2],
            shallow > deep,
            f"growth of the effect over layers 0..{half}: {shallow:.3g}, over {half}..{len(gap) - 1}: {deep:.3g}",
        ),
    ]
