r"""Target ``attention-sinks``: attention sinks in a trained decoder against Theorem 1's causal centre.

Under the causal mask token 0 is the graph's only centre, and Theorem 1 says the tokens collapse
toward it. Trained decoders put much of their attention on token 0 (an "attention sink"). On
SmolLM2-135M (default; any checkpoint with ``--checkpoint``) and on the first excerpts of the
default corpus, `rankdyn._run._sinks.attention_sinks` measures per layer and head the mass
$m_0$ on token 0 (the causal mask's centre) against the uniform causal baseline $u_0$, and the
mean cosine of the tokens to token 0. It compares the trained block, its SAN variants, and
the controls of `_sink_controls`: layers of the same shapes redrawn with the trained matrices'
norms and gains (scored), and $\mathcal N(0, 0.02^2)$ layers (HF's ``initializer_range``; RMSNorm
gains 1; reported in full mode).

Rule, fixed before the run (docs/theory.md, "Verdict rules fixed before the run"): check s2 reads
the scale-matched control (`_sink_controls.scale_matched_init`: every matrix redrawn with the
trained matrix's Frobenius norm, trained gains kept), whose logits have the trained scale, so the
causal mask and the depth could make a sink by themselves and the control can fail. The
N(0, 0.02^2) control (near-uniform attention) is reported in full mode, not scored.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np

from ..._run._io import to_jsonable
from ..._run._sinks import SinkStats, attention_sinks
from .. import _verdict as V
from .._target import Description, Measured, Rendered, off_json
from ._sink_controls import INIT_STD, random_init, scale_matched_init
from .pretrained_common import ModelRun, criterion, excerpt_ids, model_run

NAME = "attention-sinks"
CLAIM = (
    "Theorem 1 (causal mask): token 0 is the only centre and the tokens collapse toward it. Trained "
    "decoders concentrate attention on token 0 (attention sinks): is that learned, or does the causal "
    "mask alone give it, and do the token directions move toward token 0's?"
)
CHECK_NAMES = (
    "s1: trained block: attention on token 0 is at least 2x the uniform causal baseline in most layers",
    "s2: scale-matched random layers (trained weight norms and gains): below 2x in most layers (the sink "
    "is learned)",
    "s3: trained block: the tokens move toward token 0's direction (mean cosine to token 0 rises over the "
    "depth and ends at least as high as the cosine among the other tokens)",
    "s4: trained SAN with skip and LN: the tokens' directions approach token 0's (mean cosine >= 0.9)",
)
#: A sink: attention on token 0 at least this many times the uniform causal baseline.
SINK_FACTOR = 2.0


@dataclasses.dataclass(frozen=True)
class AttentionSinksMeasured(Measured):
    """``stats[model]``: the `SinkStats` of each model (``trained full``, ``trained san``, ...,
    ``random full``); ``nonfinite[model]``: layers whose statistics are not finite (left out)."""

    stats: dict[str, SinkStats]
    nonfinite: dict[str, int]
    mask: str
    run: ModelRun | None = off_json(default=None)

    def to_dict(self) -> dict:
        # The target's file format: each model's SinkStats fields, without the derived sink_ratio
        # that SinkStats.to_dict (the command's sinks.json) adds.
        d = super().to_dict()
        d["stats"] = {k: to_jsonable(dataclasses.asdict(s)) for k, s in self.stats.items()}
        return d


def sizes(quick: bool) -> dict:
    """Quick: 4 excerpts of 32 tokens, the trained block, one SAN variant and the scale-matched
    control; full: 32 excerpts of 128 tokens, every variant, and the N(0, 0.02^2) layers too."""
    if quick:
        return {"n": 32, "batch": 4, "variants": ("full", "san-skip-ln"), "controls": ("full",), "random": ()}
    return {
        "n": 128,
        "batch": 32,
        "variants": ("full", "san", "san-skip", "san-ln", "san-skip-ln"),
        "controls": ("full", "san-skip-ln"),
        "random": ("full", "san-skip-ln"),
    }


def compute(sz: dict, seed: int, *, ckpt) -> AttentionSinksMeasured:
    """The sink statistics of the trained variants and the random-init layers (the numbers only)."""
    ids, corpus = excerpt_ids(ckpt, sz["n"], sz["batch"], None)
    n = ids.shape[1]
    x0 = ckpt.embed(ids)
    models = {f"trained {v}": (ckpt, v) for v in sz["variants"]}
    matched = scale_matched_init(ckpt, seed)
    models |= {f"scale-matched {v}": (matched, v) for v in sz["controls"]}
    if sz["random"]:
        rand = random_init(ckpt, seed)
        models |= {f"random {v}": (rand, v) for v in sz["random"]}
    stats, nonfinite = {}, {}
    for name, (c, v) in models.items():
        # The controls read the trained embeddings (their blocks only are redrawn).
        s = attention_sinks(c.layers(n, v), x0, c.num_layers)
        stats[name] = s
        nonfinite[name] = int(np.sum(~np.isfinite(s.mass_first).all(axis=1)))
    return AttentionSinksMeasured(stats, nonfinite, ckpt.own_mask, run=model_run(ckpt, corpus, ids))


def _finite(a):
    a = np.asarray(a, float)
    return a[np.isfinite(a)]


def _sink_share(s: SinkStats) -> float:
    """Fraction of (finite) layers whose head-mean attention on token 0 is >= SINK_FACTOR x uniform."""
    r = _finite(s.sink_ratio)
    return float(np.mean(r >= SINK_FACTOR)) if r.size else float("nan")


def checks(m: AttentionSinksMeasured) -> list[V.Check]:
    """Checks s1-s4 from the sink statistics (pure); without a causal mask they are untestable."""
    if m.mask != "causal":
        why = f"the checkpoint's own mask is {m.mask}, not causal: token 0 is not the only centre"
        return [V.untestable(c, why) for c in CHECK_NAMES]
    full, rand = m.stats["trained full"], m.stats["scale-matched full"]
    out = []
    for name, s, want in ((CHECK_NAMES[0], full, True), (CHECK_NAMES[1], rand, False)):
        share = _sink_share(s)
        ok = share > 0.5 if want else share <= 0.5
        r = _finite(s.sink_ratio)
        out.append(
            V.check(name, ok, f"{share:.0%} of layers >= {SINK_FACTOR:g}x; median ratio {np.median(r):.3g}")
        )
    cf, co = full.cos_first, full.cos_others
    out.append(
        V.check(
            CHECK_NAMES[2],
            bool(cf[-1] > cf[0] and cf[-1] >= co[-1]),
            f"cos to token 0: layer 0 {cf[0]:.3g}, last {cf[-1]:.3g}; among the others, last {co[-1]:.3g}",
        )
    )
    san = m.stats.get("trained san-skip-ln")
    if san is None or not np.isfinite(san.cos_first[-1]):
        out.append(V.untestable(CHECK_NAMES[3], "the san-skip-ln variant was not run or is not finite"))
    else:
        c = san.cos_first
        out.append(
            V.check(
                CHECK_NAMES[3],
                bool(c[-1] >= 0.9),
                f"cos to token 0: layer 0 {c[0]:.3g}, last {c[-1]:.3g}; among tokens 1..n-1 "
                f"{san.cos_others[-1]:.3g}",
            )
        )
    return out


def table(m: AttentionSinksMeasured) -> str:
    """Per model: the sink ratio (median, share of layers >= SINK_FACTOR) and the cosines, Markdown."""
    rows = [
        "| model | median attention on token 0 / uniform | layers >= 2x | cos to token 0, layer 0 -> L "
        "| cos among the others at L |",
        "|---|---|---|---|---|",
    ]
    for name, s in m.stats.items():
        r = _finite(s.sink_ratio)
        med = float(np.median(r)) if r.size else float("nan")
        rows.append(
            f"| {name} | {med:.3g} | {_sink_share(s):.0%} | {s.cos_first[0]:.2f} -> {s.cos_first[-1]:.2f} "
            f"| {s.cos_others[-1]:.2f} |"
        )
    return "\n".join(rows)


def render(out: Path, m: AttentionSinksMeasured, cs: list[V.Check], *, quick: bool = False) -> Rendered:
    """Sink ratio and cosine to token 0 against depth, per model, and notes generated from the numbers."""
    from ...plotting import plot_attention_sinks, save_figure

    r = m.run
    # The model by its name, n and the text (docs/figures.md), then what is drawn.
    title = f"{r.title}, {r.batch} excerpts x n = {r.n} tokens of {r.corpus['name']}"
    fig = plot_attention_sinks(m.stats, title=title + "\nattention on token 0 (the causal centre)")
    # What s1 and s2 test: the share of layers at or above the sink threshold.
    fig.axes[0].axhline(SINK_FACTOR, color="C3", lw=0.8, ls=":")
    fig.axes[0].annotate(
        f"sink threshold {SINK_FACTOR:g}x (s1: trained above, s2: scale-matched control below, most layers)",
        (0.01, SINK_FACTOR),
        xycoords=("axes fraction", "data"),
        fontsize=6,
        va="bottom",
    )
    figs = [save_figure(fig, out / "attention_sinks.png")]
    parts = []
    for name, s in m.stats.items():
        ratio = _finite(s.sink_ratio)
        med = float(np.median(ratio)) if ratio.size else float("nan")
        word = "a sink" if _sink_share(s) > 0.5 else "no sink"
        parts.append(
            f"{name}: median attention on token 0 {med:.3g}x uniform ({word}), cos to token 0 "
            f"{s.cos_first[0]:.2f} -> {s.cos_first[-1]:.2f}, among the others {s.cos_others[-1]:.2f}"
            + (f", {m.nonfinite[name]} layers not finite (left out)" if m.nonfinite[name] else "")
        )
    notes = (
        f"Model: {r.label}; {r.batch} excerpts of {r.n} tokens of {r.text}; mask {m.mask}, uniform "
        f"baseline for token 0 {next(iter(m.stats.values())).uniform_first:.3g}. " + "; ".join(parts) + "."
    )
    if r.model.get("quantization"):
        notes += (
            " The weights are dequantised from GGUF ("
            + ", ".join(f"{k} x{v}" for k, v in r.model["quantization"].items())
            + "): a trained model, not the float model."
        )
    if quick:
        notes += f" QUICK MODE: {r.batch} excerpts of {r.n} tokens."
    return Rendered(figs, notes, table(m))


def describe(
    m: AttentionSinksMeasured, cs: list[V.Check], sz: dict, *, seed: int, quick: bool
) -> Description:
    r = m.run
    setting = r.setting() | {"mask": m.mask, "models": list(m.stats), "seed": seed, "init_std": INIT_STD}
    key = {f"{k} median sink ratio": float(np.median(_finite(s.sink_ratio))) for k, s in m.stats.items()}
    return Description(setting, key_numbers=key, model=r.label, criterion=criterion(CHECK_NAMES))
