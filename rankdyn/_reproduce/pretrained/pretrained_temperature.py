r"""Target ``pretrained-temperature``: a pretrained SAN's temperature and the early collapse (paper Fig. 3).

The pretrained SAN (every layer's trained attention with $W_O$ and biases, no skip, no LN, no MLP;
`rankdyn.checkpoints.Checkpoint.layers` ``variant="san"``) is run with its logits rescaled as if
$d_{QK}$ were $\{1/64, 1, 64\}$ times the trained one ($d_{QK} = d_h$, the head width): the scores
$X W_Q (X W_K)^\top/\sqrt{d_{QK}}$ are multiplied by $8, 1, 1/8$. Masks: complete, causal,
window $\pm1$, uni-directional window, at the checkpoint's own depth, on real text. ``dqk`` is an
array field of the layer, so the three temperatures share one compiled program per variant.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import equinox as eqx
import jax.numpy as jnp
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
    excerpt_sizes,
    model_run,
    run_chunked,
)

NAME = "pretrained-temperature"
CLAIM = (
    "Paper Fig. 3 (pretrained SANs): a smaller d_QK (sharper attention) slows the initial rate of rank "
    "collapse for every mask; the effect is larger with global attention than with sparse masks, and larger "
    "in shallow layers than in deep ones."
)

#: d_QK relative to the trained one (the paper's 1/64, 1, 64).
FACTORS = (1 / 64, 1.0, 64.0)
CHECK_NAMES = (
    "t1: mu(L)/mu(0) ordered d_QK x1/64 > x1 > x64 for every mask",
    "t2: the effect log(ratio(1/64)/ratio(64)) is larger for complete than window, causal than uni window",
    "t3: the effect is larger in the first half of the layers than in the second (complete mask)",
)


def _fmt(f: float) -> str:
    return "1/64" if f < 1 else f"{f:g}"


@dataclasses.dataclass(frozen=True)
class PretrainedTemperatureMeasured(Measured):
    """``ratio[f"{mask}|{factor}"]``: the mean mu_t/mu_0 along depth (layers 0..L) per mask and d_QK
    factor (factor written ``1/64``, ``1``, ``64``), and the layer indices. Off the JSON: the trained
    d_QK, the mu bands per mask and factor (for the figure) and the `ModelRun`."""

    ratio: dict[str, np.ndarray]
    layers: np.ndarray
    trained_dqk: float = off_json(default=float("nan"))
    panels: dict | None = off_json(default=None)
    run: ModelRun | None = off_json(default=None)

    def of(self, mask: str, factor: float) -> np.ndarray:
        """mu_t/mu_0 along depth for ``mask`` at ``factor`` x the trained d_QK."""
        return np.asarray(self.ratio[f"{mask}|{_fmt(factor)}"])


def sizes(quick: bool) -> dict:
    """The excerpts at the checkpoint's own depth (`pretrained_common.excerpt_sizes`)."""
    return excerpt_sizes(quick)


def compute(sz: dict, seed: int, *, ckpt, cache: dict | None = None) -> PretrainedTemperatureMeasured:
    """The pretrained SAN at three temperatures x four masks on the excerpts (the numbers only)."""
    ids, corpus = excerpt_ids(ckpt, sz["n"], sz["batch"], cache)
    n = ids.shape[1]
    masks = masks_for(PAPER_MASKS, n)
    base = ckpt.layers(n, "san")
    trained = float(base.dqk)
    stacks = [
        with_masks(eqx.tree_at(lambda l: l.dqk, base, jnp.asarray(trained * f, base.dqk.dtype)), masks)
        for f in FACTORS
    ]
    outs = run_chunked(stacks, ckpt.embed(ids), ckpt.num_layers, observe=cheap_observe, chunk=sz["chunk"])
    ratio, panels = {}, {}
    for f, (_, metrics, nonfinite) in zip(FACTORS, outs):
        for i, m in enumerate(PAPER_MASKS):
            b = band(metrics["mu"][i], ~nonfinite[i])
            ratio[f"{m}|{_fmt(f)}"] = b["mean"] / b["mean"][0]
            panels.setdefault(MASK_LABELS[m], {})[f"d_QK x {_fmt(f)}"] = b
    ratio = {f"{m}|{_fmt(f)}": ratio[f"{m}|{_fmt(f)}"] for m in PAPER_MASKS for f in FACTORS}
    return PretrainedTemperatureMeasured(
        ratio, outs[0][0], trained_dqk=trained, panels=panels, run=model_run(ckpt, corpus, ids)
    )


def _effect_growth(m: PretrainedTemperatureMeasured) -> tuple[int, float, float]:
    """Growth of the complete mask's effect log(ratio(1/64)/ratio(64)) over the first and the second
    half of the layers: ``(half, shallow, deep)``."""
    lo, _, hi = FACTORS
    gap = np.log(m.of("complete", lo)) - np.log(m.of("complete", hi))  # 0 at layer 0
    half = (len(gap) - 1) // 2
    return half, float(gap[half] - gap[0]), float(gap[-1] - gap[half])


def checks(m: PretrainedTemperatureMeasured) -> list[V.Check]:
    """Checks t1-t3 from the mean mu_t/mu_0 along depth per mask and factor (pure)."""
    lo, mid, hi = FACTORS
    last = {(k, f): float(m.of(k, f)[-1]) for k in PAPER_MASKS for f in FACTORS}
    t1 = {k: last[(k, lo)] > last[(k, mid)] > last[(k, hi)] for k in PAPER_MASKS}
    effect = {k: float(np.log(last[(k, lo)] / last[(k, hi)])) for k in PAPER_MASKS}
    half, shallow, deep = _effect_growth(m)
    n_layers = len(m.of("complete", lo)) - 1
    return [
        V.check(CHECK_NAMES[0], all(t1.values()), ", ".join(f"{MASK_LABELS[k]} {v}" for k, v in t1.items())),
        V.check(
            CHECK_NAMES[1],
            effect["complete"] > effect["window"] and effect["causal"] > effect["window-uni"],
            ", ".join(f"{MASK_LABELS[k]} {v:.3g}" for k, v in effect.items()),
        ),
        V.check(
            CHECK_NAMES[2],
            shallow > deep,
            f"growth of the effect over layers 0..{half}: {shallow:.3g}, over {half}..{n_layers}: {deep:.3g}",
        ),
    ]


def table(m: PretrainedTemperatureMeasured) -> str:
    """mu(L)/mu(0) per mask and factor as a Markdown table."""
    rows = [
        "| mask | " + " | ".join(f"mu(L)/mu(0), d_QK x {_fmt(f)}" for f in FACTORS) + " |",
        "|---|---|---|---|",
    ]
    for k in PAPER_MASKS:
        rows.append(f"| {MASK_LABELS[k]} | " + " | ".join(f"{m.of(k, f)[-1]:.3g}" for f in FACTORS) + " |")
    return "\n".join(rows)


def render(
    out: Path, m: PretrainedTemperatureMeasured, cs: list[V.Check], *, quick: bool = False
) -> Rendered:
    """The mu-vs-depth figure per mask and temperature and the notes, from the numbers."""
    from ...plotting import plot_band_panels, save_figure

    r, model = m.run, m.run.model
    fig = plot_band_panels(
        m.layers,
        m.panels,
        ncols=len(m.panels),
        dtype=model["dtype"],
        suptitle=f"pretrained SAN, {r.file} (sha256 {model['sha256'][:12]}): mu vs depth, "
        f"d_QK relative to the trained {m.trained_dqk:g}",
        legend_title="temperature",
    )
    figs = [save_figure(fig, out / "pretrained_temperature.png")]
    notes = (
        f"Model: {model['arch']} checkpoint {model['path']} (weights sha256 {model['sha256']}), trained "
        f"d_QK = {m.trained_dqk:g}, {model['num_layers']} layers, pure SAN with W_O and biases, eval mode; "
        f"{r.corpus['excerpts']} excerpts of {r.n} tokens of {r.corpus['name']} (Python "
        f"{r.corpus['python']}). The effect of a temperature is log(mu_t(1/64)/mu_t(64)) at layer t."
    )
    half, shallow, deep = _effect_growth(m)
    notes += (
        f" On the complete mask it grows by {shallow:.3g} over layers 0..{half} and by {deep:.3g} after, "
        + (
            "so it is larger in shallow layers."
            if shallow > deep
            else "so it is not larger in shallow layers."
        )
    )
    if quick:
        notes += f" QUICK MODE: {r.corpus['excerpts']} excerpts."
    return Rendered(figs, notes, table(m))


def describe(
    m: PretrainedTemperatureMeasured, cs: list[V.Check], sz: dict, *, seed: int, quick: bool
) -> Description:
    r = m.run
    setting = r.setting()
    setting.update(depth=r.model["num_layers"], trained_dqk=m.trained_dqk, dqk_factors=list(FACTORS))
    setting.update(masks=list(PAPER_MASKS), variant="san", seed=seed, dtype=r.model["dtype"])
    return Description(
        setting,
        key_numbers={
            f"complete mu(L)/mu(0), d_QK x {_fmt(f)}": float(m.of("complete", f)[-1]) for f in FACTORS
        },
        model=r.label + ", pure SAN",
        criterion=criterion(CHECK_NAMES),
    )
