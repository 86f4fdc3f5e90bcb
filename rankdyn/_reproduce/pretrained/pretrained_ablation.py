r"""Target ``pretrained-ablation``: five variants x four masks on trained weights (Fig. 2, pretrained panels).

Each variant takes every layer's trained weights (`rankdyn.checkpoints.Checkpoint.layers`): SAN
(attention with $W_O$ and every bias), SAN+skip, SAN+LN (the checkpoint's own attention LN in
its own position), SAN+skip+LN and the full block, each with the masks complete, causal, window
$\pm1$ and uni-directional window, on real text (`pretrained_common`). $\mu$ (eq. 4) is recorded at
every layer; beyond the checkpoint's depth $L$ the trained stack is cycled (layer $t$ uses trained
layer $t \bmod L$), to 128 layers in full mode; the own-depth view is the first $L$ layers of
the same run. Quick mode: 8 excerpts, own depth only.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np

from .. import _verdict as V
from .._layer_observers import cheap_observe
from .._masktable import MASK_LABELS, PAPER_MASKS, masks_for
from .._runs import band, with_masks
from .._target import Description, Measured, Rendered, off_json
from .pretrained_common import (
    ModelRun,
    criterion,
    excerpt_ids,
    model_run,
    run_chunked,
)

NAME = "pretrained-ablation"
CLAIM = (
    "Paper Fig. 2 (pretrained panels): in pure self-attention networks mu -> 0 for every mask, more local "
    "masks more slowly; in pretrained models LayerNorm together with the skip connections prevents collapse "
    "and keeps mu stable; skip connections alone make mu unstable, especially in deeper layers; the full "
    "transformer keeps mu relatively stable."
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
#: mu/mu(0) inside this range is "stable" (a3 uses its lower end at the last layer).
STABLE = (0.1, 10.0)


def sizes(quick: bool) -> dict:
    """Excerpts, tokens and depth (None: the checkpoint's own); the paper used 3000 x 128 tokens."""
    if quick:
        return {"n": 128, "batch": 8, "depth": None, "chunk": 8}
    return {"n": 128, "batch": 1000, "depth": DEEP, "chunk": 25}


@dataclasses.dataclass(frozen=True)
class AblationRow(Measured):
    """One variant and mask: mu (mean over excerpts) at layer 0, at the checkpoint's depth and at the
    last layer; mu/mu(0) there and its min and max over layers; mu/||X||_F at layer 0 and the last
    layer; the count of non-finite trajectories (left out of the means)."""

    variant: str
    mask: str
    mu_0: float = float("nan")
    mu_own: float = float("nan")
    mu_T: float = float("nan")
    ratio_own: float = float("nan")
    ratio_T: float = float("nan")
    ratio_min: float = float("nan")
    ratio_max: float = float("nan")
    mu_rel_0: float = float("nan")
    mu_rel_T: float = float("nan")
    nonfinite: int = 0


@dataclasses.dataclass(frozen=True)
class PretrainedAblationMeasured(Measured):
    """The `AblationRow` of every ``f"{label}|{mask}"`` and the layer indices. Off the JSON: the depth
    run and the checkpoint's own, the mu bands per variant and mask (for the figures) and the
    `ModelRun`."""

    summary: dict[str, AblationRow]
    layers: np.ndarray
    depth: int = off_json()
    own: int = off_json(default=0)
    panels: dict | None = off_json(default=None)
    run: ModelRun | None = off_json(default=None)

    def row(self, label: str, mask: str) -> AblationRow:
        return self.summary[f"{label}|{mask}"]


def compute(sz: dict, seed: int, *, ckpt, cache: dict | None = None) -> PretrainedAblationMeasured:
    """Run the five variants x four masks on the excerpts and summarise mu (the numbers only)."""
    own = ckpt.num_layers
    depth = sz["depth"] or own
    ids, corpus = excerpt_ids(ckpt, sz["n"], sz["batch"], cache)
    n = ids.shape[1]
    masks = masks_for(PAPER_MASKS, n)
    stacks = [with_masks(ckpt.layers(n, v), masks) for v in VARIANTS]
    outs = run_chunked(stacks, ckpt.embed(ids), depth, observe=cheap_observe, chunk=sz["chunk"])
    summary, panels = {}, {}
    for label, (_, metrics, nonfinite) in zip(VARIANTS.values(), outs):
        panels[label] = {}
        for i, m in enumerate(PAPER_MASKS):
            b = band(metrics["mu"][i], ~nonfinite[i])
            ratio = b["mean"] / b["mean"][0]
            panels[label][MASK_LABELS[m]] = b
            # mu is not scale-free: without LN the trained maps (||W_VO||_2 > 1) grow the tokens,
            # so mu/||X||_F tells alignment from norm growth.
            rel = band(metrics["mu_rel"][i], ~nonfinite[i])["mean"]
            summary[f"{label}|{m}"] = AblationRow(
                variant=label,
                mask=m,
                mu_0=float(b["mean"][0]),
                mu_own=float(b["mean"][min(own, depth)]),
                mu_T=float(b["mean"][-1]),
                ratio_own=float(ratio[min(own, depth)]),
                ratio_T=float(ratio[-1]),
                ratio_min=float(np.nanmin(ratio)),
                ratio_max=float(np.nanmax(ratio)),
                mu_rel_0=float(rel[0]),
                mu_rel_T=float(rel[-1]),
                nonfinite=int(np.sum(nonfinite[i])),
            )
    return PretrainedAblationMeasured(
        summary, outs[0][0], depth=depth, own=own, panels=panels, run=model_run(ckpt, corpus, ids)
    )


def checks(m: PretrainedAblationMeasured) -> list[V.Check]:
    """The checks a1-a5 of the claim from the summary rows at the measured depth (pure)."""
    fmt = lambda label, key: ", ".join(
        f"{MASK_LABELS[k]} {getattr(m.row(label, k), key):.3g}" for k in PAPER_MASKS
    )
    san = {k: m.row("SAN", k).ratio_T for k in PAPER_MASKS}
    lo, hi = STABLE
    out = [
        V.check(CHECK_NAMES[0], all(v < 1 for v in san.values()), "mu(T)/mu(0): " + fmt("SAN", "ratio_T")),
        V.check(
            CHECK_NAMES[1],
            san["window"] > san["complete"] and san["window-uni"] > san["causal"],
            "mu(T)/mu(0): " + fmt("SAN", "ratio_T"),
        ),
        V.check(
            CHECK_NAMES[2],
            all(m.row(lab, k).ratio_T > lo for lab in ("SAN+skip+LN", "full") for k in PAPER_MASKS),
            "SAN+skip+LN " + fmt("SAN+skip+LN", "ratio_T") + "; full " + fmt("full", "ratio_T"),
        ),
    ]
    if m.depth < DEEP:
        why = f"needs {DEEP} layers (this run has {m.depth}; full mode cycles the trained stack to {DEEP})"
        return out + [V.untestable(CHECK_NAMES[3], why), V.untestable(CHECK_NAMES[4], why)]
    inside = lambda label, k: lo <= m.row(label, k).ratio_min and m.row(label, k).ratio_max <= hi
    span = lambda label: (
        "min/max: "
        + ", ".join(
            f"{MASK_LABELS[k]} {m.row(label, k).ratio_min:.3g}/{m.row(label, k).ratio_max:.3g}"
            for k in PAPER_MASKS
        )
    )
    return out + [
        V.check(CHECK_NAMES[3], all(not inside("SAN+skip", k) for k in PAPER_MASKS), span("SAN+skip")),
        V.check(CHECK_NAMES[4], all(inside("full", k) for k in PAPER_MASKS), span("full")),
    ]


def table(m: PretrainedAblationMeasured) -> str:
    """The summary rows as a Markdown table."""
    rows = [
        f"| variant | mask | mu(0) | mu({m.own})/mu(0) | mu({m.depth})/mu(0) | min, max of mu/mu(0) | "
        f"mu/norm 0 -> {m.depth} | non-finite |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for v in m.summary.values():
        rows.append(
            f"| {v.variant} | {MASK_LABELS[v.mask]} | {v.mu_0:.3g} | {v.ratio_own:.3g} | "
            f"{v.ratio_T:.3g} | {v.ratio_min:.3g}, {v.ratio_max:.3g} | {v.mu_rel_0:.3g} -> "
            f"{v.mu_rel_T:.3g} | {v.nonfinite} |"
        )
    return "\n".join(rows)


def render(out: Path, m: PretrainedAblationMeasured, cs: list[V.Check], *, quick: bool = False) -> Rendered:
    """The mu-vs-depth figures (own depth, and the cycled deep stack when run) and the notes."""
    from ...plotting import plot_band_panels, save_figure

    r, model, own, depth = m.run, m.run.model, m.own, m.depth
    figs = []
    for view, tag in [(own, "own")] + ([(depth, "deep")] if depth > own else []):
        fig = plot_band_panels(
            m.layers,
            m.panels,
            ncols=3,  # five variants on 3 + 2 panels: a strip of five is too wide for a page
            xmax=view,
            dtype=model["dtype"],
            suptitle=f"mu along depth, {r.title}, {r.corpus['excerpts']} excerpts x {r.n} tokens"
            + (", trained stack cycled" if view > own else ""),
            legend_title="mask",
            # Each panel its own y range: the LN variants stay within a decade, and a range shared
            # with the collapsing SAN (down to the round-off floor) would flatten them to a line.
            sharey=False,
            legend_in_gap=True,  # the sixth cell of the 3 + 2 grid
        )
        figs.append(save_figure(fig, out / f"pretrained_ablation_{tag}.png"))
    notes = (
        f"Model: {model['arch']} checkpoint {model['path']} (weights sha256 {model['sha256']}), {own} "
        f"trained layers, d={model['d']}, {model['heads']} heads, eval mode (no dropout). Inputs: "
        f"{r.corpus['excerpts']} excerpts of {r.n} tokens of {r.text}, not the paper's Wikipedia. The SAN "
        "variants keep W_O and every bias; 'LN' is the checkpoint's own attention LayerNorm (gain, bias, "
        "eps). "
        "mu (eq. 4) is not scale-free: without LN the trained value/output maps grow the tokens "
        "(||W_VO||_2 > 1), so mu can rise while the tokens align; the table gives mu/||X||_F too."
    )
    bad = {v.variant for v in m.summary.values() if v.nonfinite}
    if bad:
        notes += (
            f" Trajectories that overflow ({', '.join(sorted(bad))}) are counted as non-finite and left "
            "out of the means."
        )
    else:
        notes += " Every trajectory stayed finite."
    if depth > own:
        notes += f" Beyond layer {own} the trained stack is cycled (layer t uses trained layer t mod {own})."
    if quick:
        notes += f" QUICK MODE: {r.corpus['excerpts']} excerpts, own depth {own} only."
    if depth < DEEP:
        notes += f" Checks a4, a5 need {DEEP} layers; this run has {depth}."
    return Rendered(figs, notes, table(m))


def describe(
    m: PretrainedAblationMeasured, cs: list[V.Check], sz: dict, *, seed: int, quick: bool
) -> Description:
    r = m.run
    setting = dict(r.setting(), depth=m.depth)
    setting.update(own_depth=m.own, masks=list(PAPER_MASKS), window=1, variants=VARIANTS, seed=seed)
    seed_note = "deterministic: the excerpts are the first ones of the corpus and eval mode has no randomness"
    return Description(
        dict(setting, seed_note=seed_note, dtype=r.model["dtype"]),
        key_numbers={
            f"full mu({m.depth})/mu(0), {MASK_LABELS[k]}": m.row("full", k).ratio_T for k in PAPER_MASKS
        },
        model=r.label,
        criterion=criterion(CHECK_NAMES),
    )
