r"""Target ``pretrained-ablation``: the five variants x four masks on trained weights (paper Fig. 2, pretrained panels).

Each variant takes every layer's trained weights (`rankdyn.checkpoints.Checkpoint.layers`): SAN
(attention with $W_O$ and every bias), SAN+skip, SAN+LN (the checkpoint's own attention LN in
its own position), SAN+skip+LN and the full block, each with the masks complete, causal, window
$\pm1$ and uni-directional window, on real text (`pretrained_common`). $\mu$ (eq. 4) is recorded at
every layer; beyond the checkpoint's depth $L$ the trained stack is cycled (layer $t$ uses trained
layer $t \bmod L$), to 128 layers in full mode; the own-depth view is the first $L$ layers of
the same run. Quick mode: 8 excerpts, own depth only.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from . import _verdict as V
from ._masktable import MASK_LABELS, PAPER_MASKS, masks_for
from ._observers import cheap_observe
from ._runs import band, with_masks
from .pretrained_common import (
    checkpoint_or_none,
    excerpt_ids,
    model_label,
    model_setting,
    not_testable,
    run_chunked,
)

NAME = "pretrained-ablation"
CLAIM = (
    "Paper Fig. 2 (pretrained panels): in pure self-attention networks mu -> 0 for every mask, more local masks "
    "more slowly; in pretrained models LayerNorm together with the skip connections prevents collapse and keeps "
    "mu stable; skip connections alone make mu unstable, especially in deeper layers; the full transformer keeps "
    "mu relatively stable."
)

#: rankdyn variant name -> the paper's label.
VARIANTS = {
    "san": "SAN",
    "san-skip": "SAN+skip",
    "san-ln": "SAN+LN",
    "san-skip-ln": "SAN+skip+LN",
    "full": "full",
}
CHECK_NAMES = (
    "a1: SAN: mu(T) < mu(0) for every mask",
    "a2: SAN: local masks collapse more slowly (window > complete, uni window > causal)",
    "a3: SAN+skip+LN and full: mu(T)/mu(0) > 0.1 for every mask",
    "a4: SAN+skip: mu unstable at 128 layers (mu/mu(0) leaves [0.1, 10])",
    "a5: full: mu relatively stable at 128 layers (mu/mu(0) stays in [0.1, 10])",
)
DEEP = 128


def sizes(quick: bool) -> dict:
    """Excerpts, tokens and depth (None: the checkpoint's own); the paper used 3000 x 128 tokens."""
    if quick:
        return {"n": 128, "batch": 8, "depth": None, "chunk": 8}
    return {"n": 128, "batch": 1000, "depth": DEEP, "chunk": 25}


def run(
    out: Path, *, quick: bool, seed: int, size: dict | None = None, cache: dict | None = None, checkpoint=None
) -> dict:
    from ..plotting import plot_band_panels, save_figure

    out = Path(out)
    ckpt = checkpoint_or_none(checkpoint, cache)
    if ckpt is None:
        return not_testable(NAME, CLAIM, CHECK_NAMES, quick=quick, seed=seed, checkpoint=checkpoint)
    sz = dict(sizes(quick) if size is None else size)
    own = ckpt.num_layers
    depth = sz["depth"] or own
    ids, corpus = excerpt_ids(ckpt, sz["n"], sz["batch"], cache)
    n = ids.shape[1]
    masks = masks_for(PAPER_MASKS, n)
    x0 = ckpt.embed(ids)
    stacks = [with_masks(ckpt.layers(n, v), masks) for v in VARIANTS]
    outs = run_chunked(stacks, x0, depth, observe=cheap_observe, chunk=sz["chunk"])
    layers = outs[0][0]

    summary, panels = {}, {}
    for (variant, label), (_, metrics, nonfinite) in zip(VARIANTS.items(), outs):
        panels[label] = {}
        for i, m in enumerate(PAPER_MASKS):
            b = band(metrics["mu"][i], ~nonfinite[i])
            ratio = b["mean"] / b["mean"][0]
            panels[label][MASK_LABELS[m]] = b
            summary[f"{label}|{m}"] = {
                "variant": label,
                "mask": m,
                "mu_0": float(b["mean"][0]),
                "mu_own": float(b["mean"][min(own, depth)]),
                "mu_T": float(b["mean"][-1]),
                "ratio_own": float(ratio[min(own, depth)]),
                "ratio_T": float(ratio[-1]),
                "ratio_min": float(np.nanmin(ratio)),
                "ratio_max": float(np.nanmax(ratio)),
                # mu is not scale-free: without LN the trained maps (||W_VO||_2 > 1) grow the tokens,
                # so mu/||X||_F tells alignment from norm growth.
                "mu_rel_0": float(band(metrics["mu_rel"][i], ~nonfinite[i])["mean"][0]),
                "mu_rel_T": float(band(metrics["mu_rel"][i], ~nonfinite[i])["mean"][-1]),
                "nonfinite": int(np.sum(nonfinite[i])),
            }
    check_list = checks(summary, depth)
    figs = []
    views = [(own, "own")] + ([(depth, "deep")] if depth > own else [])
    for view, tag in views:
        fig = plot_band_panels(
            layers,
            panels,
            ncols=len(panels),
            xmax=view,
            dtype=str(np.dtype(ckpt.dtype)),
            suptitle=f"mu along depth, {ckpt.arch} {Path(ckpt.path).name} (sha256 {ckpt.sha256[:12]}), "
            f"{corpus['excerpts']} excerpts x {n} tokens" + (", trained stack cycled" if view > own else ""),
            legend_title="mask",
        )
        figs.append(save_figure(fig, out / f"pretrained_ablation_{tag}.png"))
    rows = [
        f"| variant | mask | mu(0) | mu({own})/mu(0) | mu({depth})/mu(0) | min, max of mu/mu(0) | "
        f"mu/norm 0 -> {depth} | non-finite |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for v in summary.values():
        rows.append(
            f"| {v['variant']} | {MASK_LABELS[v['mask']]} | {v['mu_0']:.3g} | {v['ratio_own']:.3g} | "
            f"{v['ratio_T']:.3g} | {v['ratio_min']:.3g}, {v['ratio_max']:.3g} | {v['mu_rel_0']:.3g} -> "
            f"{v['mu_rel_T']:.3g} | {v['nonfinite']} |"
        )
    notes = (
        f"Model: {ckpt.arch} checkpoint {ckpt.path} (weights sha256 {ckpt.sha256}), {own} trained layers, "
        f"d={ckpt.d}, {ckpt.heads} heads, eval mode (no dropout). Inputs: {corpus['excerpts']} excerpts of {n} tokens "
        f"of {corpus['name']} (Python {corpus['python']}, sha256 {corpus['sha256'][:12]}), not the paper's "
        "Wikipedia. The SAN variants keep W_O and every bias; 'LN' is the checkpoint's own attention LayerNorm "
        "(gain, bias, eps). mu (eq. 4) is not scale-free: without LN the trained value/output maps grow the "
        "tokens (||W_VO||_2 > 1), so mu can rise while the tokens align; the table gives mu/||X||_F too. "
        "Trajectories that overflow (SAN+skip grows without bound) are counted as non-finite and left out of "
        "the means."
    )
    if depth > own:
        notes += f" Beyond layer {own} the trained stack is cycled (layer t uses trained layer t mod {own})."
    if quick:
        notes += f" QUICK MODE: {corpus['excerpts']} excerpts, own depth {own} only (checks a4, a5 need 128 layers)."
    return {
        "name": NAME,
        "claim": CLAIM,
        "setting": {
            "model": model_setting(ckpt),
            "corpus": corpus,
            "n": n,
            "batch": int(ids.shape[0]),
            "depth": depth,
            "own_depth": own,
            "masks": list(PAPER_MASKS),
            "window": 1,
            "variants": VARIANTS,
            "seed": seed,
            "seed_note": "deterministic: the excerpts are the first ones of the corpus and eval mode has no randomness",
            "dtype": str(np.dtype(ckpt.dtype)),
        },
        "checks": V.checks_json(check_list),
        "key_numbers": {
            f"full mu({depth})/mu(0), {MASK_LABELS[m]}": summary[f"full|{m}"]["ratio_T"] for m in PAPER_MASKS
        },
        "measured": {"summary": summary, "layers": layers},
        "verdict": V.verdict(check_list),
        "model": model_label(ckpt),
        "criterion": "; ".join(CHECK_NAMES) + ". " + V.VERDICT_RULE,
        "figures": figs,
        "notes": notes,
        "markdown": "\n".join(rows),
    }


def checks(summary: dict, depth: int) -> list:
    """The checks a1-a5 of the claim from the ``summary`` rows (``f"{label}|{mask}"``) at depth ``depth``."""
    row = lambda label, m: summary[f"{label}|{m}"]
    fmt = lambda label, key: ", ".join(f"{MASK_LABELS[m]} {row(label, m)[key]:.3g}" for m in PAPER_MASKS)
    san = {m: row("SAN", m)["ratio_T"] for m in PAPER_MASKS}
    out = [
        V.check(CHECK_NAMES[0], all(v < 1 for v in san.values()), "mu(T)/mu(0): " + fmt("SAN", "ratio_T")),
        V.check(
            CHECK_NAMES[1],
            san["window"] > san["complete"] and san["window-uni"] > san["causal"],
            "mu(T)/mu(0): " + fmt("SAN", "ratio_T"),
        ),
        V.check(
            CHECK_NAMES[2],
            all(row(lab, m)["ratio_T"] > 0.1 for lab in ("SAN+skip+LN", "full") for m in PAPER_MASKS),
            "SAN+skip+LN " + fmt("SAN+skip+LN", "ratio_T") + "; full " + fmt("full", "ratio_T"),
        ),
    ]
    if depth < DEEP:
        why = f"needs {DEEP} layers (this run has {depth}; full mode cycles the trained stack to {DEEP})"
        return out + [V.untestable(CHECK_NAMES[3], why), V.untestable(CHECK_NAMES[4], why)]
    inside = lambda label, m: 0.1 <= row(label, m)["ratio_min"] and row(label, m)["ratio_max"] <= 10
    return out + [
        V.check(
            CHECK_NAMES[3],
            all(not inside("SAN+skip", m) for m in PAPER_MASKS),
            "min/max: "
            + ", ".join(
                f"{MASK_LABELS[m]} {row('SAN+skip', m)['ratio_min']:.3g}/"
                f"{row('SAN+skip', m)['ratio_max']:.3g}"
                for m in PAPER_MASKS
            ),
        ),
        V.check(
            CHECK_NAMES[4],
            all(inside("full", m) for m in PAPER_MASKS),
            "min/max: "
            + ", ".join(
                f"{MASK_LABELS[m]} {row('full', m)['ratio_min']:.3g}/{row('full', m)['ratio_max']:.3g}"
                for m in PAPER_MASKS
            ),
        ),
    ]
