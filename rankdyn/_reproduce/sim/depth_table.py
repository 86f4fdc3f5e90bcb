r"""Target ``depth-table``: the authors' 128-layer orthogonal-$W_V$ table, in eval and train mode.

A 128-layer single-head SAN at BERT scale ($n = 128$, $d = 768$, key width and $d_{QK} = 64$,
BERT-uniform $W_Q, W_K$, per-layer Haar-orthogonal $W_V$), centred LayerNorm after attention
(token norm $\sqrt d$), BERT-like inputs; mu mean (std) at layers 0/32/64/96/128 for the four
paper masks in three modes: eval (no dropout), attention dropout 0.1 (BERT's
``attention_probs_dropout_prob``) and attention + hidden dropout 0.1. Every mode sees the same
weights and inputs; the masks of one mode share weights, inputs and dropout keys.

The zero-row mechanism (docs/theory.md#experiments): a token whose every attention weight is
dropped gets a zero row; LN keeps it at zero; it stays zero while it attends only to zero
tokens. A set of tokens closed under "attends to" is then absorbing: under the causal and
uni-window masks every prefix $\{0..k\}$ is such a set, under the complete and $\pm1$ window
masks (strongly connected) none is. The prefix of zero rows grows by one with probability
about $p$ per layer (the frontier token's own weight dropped), so after $t$ layers it holds
about $p\,t$ rows, and once the live tokens have collapsed to one vector $v$ with $\|v\| =
\sqrt d$, $\mu = \sqrt{d\,k(n-k)/n}$ for $k$ zero rows: mu rises again with depth.

Rule, fixed before the run (docs/theory.md, "Verdict rules fixed before the run"): complete and
window "collapse or clearly decrease", $\mu_T/\mu_0 <$ `DECREASE`; causal and uni window "do not
collapse": their live tokens' $\mu/\|X\|$ at $T$ is at least `LIVE_COLLAPSED`, and either
$\mu_T/\mu_0 \ge$ `DECREASE` or the decay is not geometric, $\log(\mu_T/\mu_{T/2}) >$
`SECOND_HALF` $\log(\mu_{T/2}/\mu_0)$ (geometric collapse has equal halves).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import jax
import jax.random as jr
import numpy as np

from .. import _verdict as V
from .._dtype import float_dtype
from .._layer_observers import observe_zero_rows
from .._masktable import MASK_LABELS, PAPER_MASKS, mask_table, masks_for
from .._runs import band, simulate_many, with_masks
from .._target import Description, Measured, Rendered, off_json
from ._zero_rows import (
    DECREASE,
    LIVE_COLLAPSED,
    QUASI,
    SECOND_HALF,
    STRONG,
    ZeroRowModel,
    does_not_collapse,
    mechanism_checks as _mechanism_checks,
    mechanism_verdict,
    zero_row_model,
)

__all__ = [
    "NAME",
    "CLAIM",
    "MODES",
    "compute",
    "checks",
    "render",
    "sizes",
    "describe",
    "pattern_checks",
    "mechanism_verdict",
]

NAME = "depth-table"
CLAIM = (
    "Authors' rebuttal table: in a 128-layer SAN with LayerNorm and exactly orthogonal W_V, the strongly "
    "connected masks (complete, window +-1) show collapse or a clear decrease of mu by layer 128, while the "
    "quasi-strongly connected ones (causal, uni window) do not (docs/theory.md#experiments)."
)

TABLE_LAYERS = (0, 32, 64, 96, 128)
#: mode -> (attention dropout, hidden dropout).
MODES = {"eval": (0.0, 0.0), "attn-dropout": (0.1, 0.0), "attn+hidden-dropout": (0.1, 0.1)}


def sizes(quick: bool) -> dict:
    if quick:
        return {"n": 32, "d": 64, "dk": 8, "dqk": 8.0, "batch": 8, "depth": 128}
    # 8 samples per mask and mode: the three modes x four masks in minutes (benchmarks/README.md).
    return {"n": 128, "d": 768, "dk": 64, "dqk": 64.0, "batch": 8, "depth": 128}


def _weights(key, d: int, dk: int, depth: int, dtype):
    from ..._model._weights import bert_uniform, orthogonal

    @jax.jit
    def draw(key):
        def one(k):
            kq, kk, kv = jr.split(k, 3)
            return (
                bert_uniform(kq, (d, dk), dtype),
                bert_uniform(kk, (d, dk), dtype),
                orthogonal(kv, d, dtype),
            )

        w_q, w_k, w_v = jax.vmap(one)(jr.split(key, depth))
        return w_q[:, None], w_k[:, None], w_v[:, None]

    return draw(key)


@dataclasses.dataclass(frozen=True)
class MaskStats(Measured):
    """One mask in one mode: mu and zero rows (mean, std) at the table layers, and at T the
    fraction of runs with token 0 zero and the live tokens' mu/||X||."""

    mu_mean: list[float]
    mu_std: list[float]
    zero_rows_mean: list[float]
    zero_rows_std: list[float]
    first_zero_T: float
    mu_rel_nonzero_T: float
    mu_rel_nonzero_min: float
    ratio_T_0: float
    ratio_min_0: float
    nonfinite: int


@dataclasses.dataclass(frozen=True)
class DepthTableMeasured(Measured):
    """Per mode and mask a `MaskStats`; the graph facts; per mask the `ZeroRowModel` of the
    attention-dropout mode. The JSON also lists the per-mode checks and verdicts and the mechanism
    checks, all computed from these numbers by the pure functions below."""

    stats: dict[str, dict[str, MaskStats]]
    graph: dict[str, dict]
    mechanism: dict[str, ZeroRowModel]
    layers: np.ndarray = off_json()
    #: mode -> mask label -> band of mu, for the figure.
    panels: dict = off_json()
    setting: dict = off_json()
    #: mode -> mask label -> band of the live (nonzero) tokens' mu/||X|| (the quasi masks' check).
    live_panels: dict = off_json(default=None)

    def ratios(self, mode: str) -> dict[str, float]:
        """mu_T / mu_0 per mask in ``mode``."""
        return {m: s.ratio_T_0 for m, s in self.stats[mode].items()}

    def mechanism_checks(self) -> list[V.Check]:
        """The zero-row mechanism's checks (`_zero_rows.mechanism_checks`)."""
        p = MODES["attn-dropout"][0]
        return _mechanism_checks(self.stats["eval"], self.mechanism, p, self.setting["depth"])

    def to_dict(self) -> dict:
        d = super().to_dict()
        mc = mode_checks(self)
        mech = self.mechanism_checks()
        return {
            "stats": d["stats"],
            "graph": d["graph"],
            "mode_verdicts": mode_verdicts(self),
            "mode_checks": {k: V.checks_json(v) for k, v in mc.items()},
            "mechanism": d["mechanism"],
            "mechanism_checks": V.checks_json(mech),
            "mechanism_established": all(c.passed for c in mech),
        }


def compute(sz: dict, seed: int) -> DepthTableMeasured:
    r"""Run the post-LN SAN $X \leftarrow \mathrm{LN}(A X W_V)$ in the three `MODES` (one program).

    Arguments:
        sz: ``n, d, dk, dqk, batch, depth`` (`sizes`).
        seed: ``key(seed)`` splits into the weights', inputs' and dropout keys (shared by every
            mask and mode: common random numbers).

    Returns:
        Per mode and mask the table statistics, the graph facts, the zero-row model of the
        attention-dropout mode, the curves and the setting.
    """
    from ..._model._layer import SelfAttentionLayer
    from ..._model._norms import make_norm
    from ..._model._tokens import initial_tokens

    n, d, dk, dqk, batch, depth = sz["n"], sz["d"], sz["dk"], sz["dqk"], sz["batch"], sz["depth"]
    table_layers = tuple(sorted({int(round(f * depth)) for f in (0, 0.25, 0.5, 0.75, 1.0)}))
    dtype = float_dtype()
    masks = masks_for(PAPER_MASKS, n)
    k_w, k_x, k_drop = jr.split(jr.key(seed), 3)
    w_q, w_k, w_v = _weights(k_w, d, dk, depth, dtype)
    x0 = initial_tokens(k_x, "bert", n, d, batch=batch, dtype=dtype)
    stacks, keys = [], []
    for pa, ph in MODES.values():
        norm = make_norm("layernorm", d)
        layer = SelfAttentionLayer(
            masks["complete"],
            w_q,
            w_k,
            w_v,
            dqk=dqk,
            norm=norm,
            placement="post",
            attn_dropout=pa,
            hidden_dropout=ph,
        )
        stacks.append(with_masks(layer, masks))
        keys.append(k_drop if layer.has_dropout else None)
    # One compiled program for the three modes (each vmapped over the masks, weights held once).
    outs = simulate_many(stacks, x0, depth, observe=observe_zero_rows, keys=keys)

    stats, panels, live = {}, {}, {}
    for mode, (layers, met, nonfinite, _) in zip(MODES, outs):
        stats[mode], panels[mode], live[mode] = {}, {}, {}
        for i, m in enumerate(masks):
            ok = ~nonfinite[i]
            b, z = band(met["mu"][i], ok), band(met["zero_rows"][i], ok)
            panels[mode][MASK_LABELS[m]] = b
            live[mode][MASK_LABELS[m]] = band(met["mu_rel_nonzero"][i], ok)
            stats[mode][m] = MaskStats(
                mu_mean=[float(b["mean"][t]) for t in table_layers],
                mu_std=[float(b["std"][t]) for t in table_layers],
                zero_rows_mean=[float(z["mean"][t]) for t in table_layers],
                zero_rows_std=[float(z["std"][t]) for t in table_layers],
                first_zero_T=float(np.mean(met["first_zero"][i][ok, depth])),
                mu_rel_nonzero_T=float(np.mean(met["mu_rel_nonzero"][i][ok, depth])),
                mu_rel_nonzero_min=float(np.min(band(met["mu_rel_nonzero"][i], ok)["mean"])),
                ratio_T_0=float(b["mean"][depth] / b["mean"][0]),
                ratio_min_0=float(np.min(b["mean"]) / b["mean"][0]),
                nonfinite=int(np.sum(nonfinite[i])),
            )
    mech = zero_row_model(stats["attn-dropout"], n, d, MODES["attn-dropout"][0], depth)
    setting = _setting(sz, seed, dtype, table_layers)
    return DepthTableMeasured(stats, mask_table(masks), mech, layers, panels, setting, live)


def _setting(sz: dict, seed: int, dtype, table_layers: tuple) -> dict:
    return {
        **sz,
        "seed": seed,
        "dtype": str(np.dtype(dtype)),
        "masks": list(PAPER_MASKS),
        "modes": {k: {"attn_dropout": a, "hidden_dropout": h} for k, (a, h) in MODES.items()},
        "table_layers": table_layers,
        "heads": 1,
        "w_q_w_k": "BERT-uniform U(+-1/sqrt d), (d, dk), per layer",
        "w_v": "Haar-orthogonal d x d, per layer",
        "placement": "post-LN",
        "layernorm": "centred, gain 1, bias 0, eps 1e-12: token norm sqrt(d)",
        "x0": "bert: centred LN of Gaussian embeddings sharing a direction (common_weight 1), token norm "
        "sqrt(d)",
        "keys": "key(seed) -> (weights, inputs, dropout); shared by every mask and mode",
    }


def pattern_checks(stats: dict[str, MaskStats], mode: str) -> list[V.Check]:
    """The rebuttal's pattern as four checks: complete and window collapse or clearly decrease
    (mu_T/mu_0 < `DECREASE`); causal and uni window do not collapse (`does_not_collapse`)."""
    out = []
    for m in STRONG:
        r = stats[m].ratio_T_0
        out.append(
            V.check(
                f"{mode}: {MASK_LABELS[m]} decreases (mu_T/mu_0 < {DECREASE})",
                r < DECREASE,
                f"mu_T/mu_0 = {r:.3g}",
            )
        )
    for m in QUASI:
        ok, detail = does_not_collapse(stats[m])
        out.append(
            V.check(
                f"{mode}: {MASK_LABELS[m]} does not collapse (live tokens >= {LIVE_COLLAPSED:g}; "
                f"mu_T/mu_0 >= {DECREASE} or second-half decay < {SECOND_HALF} x first half)",
                ok,
                detail,
            )
        )
    return out


def mode_checks(m: DepthTableMeasured) -> dict[str, list[V.Check]]:
    """The rebuttal's pattern checks of every mode."""
    return {mode: pattern_checks(m.stats[mode], mode) for mode in m.stats}


def mode_verdicts(m: DepthTableMeasured) -> dict[str, str]:
    """The verdict of every mode's pattern checks."""
    return {mode: V.verdict(cs) for mode, cs in mode_checks(m).items()}


def _target_checks(m: DepthTableMeasured) -> tuple[str, list[V.Check], str]:
    return mechanism_verdict(
        mode_verdicts(m), mode_checks(m), m.stats["attn-dropout"]["causal"].mu_rel_nonzero_T
    )


def checks(m: DepthTableMeasured) -> list[V.Check]:
    """Every mode's four pattern checks plus the mechanism check (`mechanism_verdict`): no mode is
    chosen after the run."""
    return _target_checks(m)[1]


def table(m: DepthTableMeasured) -> str:
    """Per mode, mu mean (std) at the table layers and the zero rows at T; the mechanism checks."""
    s, verdicts = m.setting, mode_verdicts(m)
    layers = s["table_layers"]
    md = [
        f"mu mean (std) over {s['batch']} samples and zero rows (mean) at layers "
        f"{', '.join(map(str, layers))}; centred LayerNorm after attention.",
        "",
    ]
    for mode, (pa, ph) in MODES.items():
        md += [
            f"*{mode}* (attention dropout {pa:g}, hidden dropout {ph:g}): verdict **{verdicts[mode]}**",
            "",
            "| mask | strongly conn. | " + " | ".join(f"layer {t}" for t in layers) + " | zero rows at T |",
            "|" + "---|" * (len(layers) + 3),
        ]
        for k, st in m.stats[mode].items():
            cells = " | ".join(f"{a:.3g} ({b:.2g})" for a, b in zip(st.mu_mean, st.mu_std))
            strong = m.graph[k]["strongly_connected"]
            md.append(f"| {MASK_LABELS[k]} | {strong} | {cells} | {st.zero_rows_mean[-1]:.3g} |")
        md.append("")
    md += ["Zero-row mechanism (attention dropout 0.1):", "", V.checks_markdown(m.mechanism_checks()), ""]
    return "\n".join(md)


def render(out: Path, m: DepthTableMeasured, cs: list[V.Check], *, quick: bool = False) -> Rendered:
    """mu against depth per mode and mask, and the notes from the numbers."""
    from ...plotting import plot_band_panels, save_figure

    s = m.setting
    # What the checks read: mu at 0, T/2 (dotted line) and T; the live tokens' mu/||X|| at T
    # against LIVE_COLLAPSED (second row, dashed line).
    panels = {f"{mode}: mu": b for mode, b in m.panels.items()}
    ylabels = {t: "mu (eq. 4)" for t in panels}
    if m.live_panels:
        panels |= {f"{mode}: live tokens' mu/||X||": b for mode, b in m.live_panels.items()}
        ylabels |= {f"{mode}: live tokens' mu/||X||": "live tokens' mu/||X||" for mode in m.live_panels}
    fig = plot_band_panels(
        m.layers,
        panels,
        ncols=3,
        dtype=s["dtype"],
        ylabels=ylabels,
        sharey="row",
        suptitle=f"{s['depth']}-layer SAN + centred LN, orthogonal W_V, n={s['n']}, d={s['d']}: eval vs "
        f"train mode; checks read layers 0, {s['depth'] // 2} (dotted) and {s['depth']}",
    )
    for i, ax in enumerate(fig.axes[: len(panels)]):
        ax.axvline(s["depth"] // 2, color="0.4", lw=0.7, ls=":")
        if i >= len(m.panels):
            ax.axhline(LIVE_COLLAPSED, color="C3", lw=0.8, ls="--")
    return Rendered([save_figure(fig, out / "depth_table_mu.png")], notes(m), table(m))


def _collapsed(x: float) -> str:
    return "collapsed" if x < LIVE_COLLAPSED else "not collapsed"


def notes(m: DepthTableMeasured) -> str:
    """The prose: each conclusion only when the numbers say so."""
    s, att, ev = m.setting, m.stats["attn-dropout"], m.stats["eval"]
    mech_holds = all(c.passed for c in m.mechanism_checks())
    p, depth = MODES["attn-dropout"][0], s["depth"]
    live_c, live_u, live_u_eval = (
        x.mu_rel_nonzero_T for x in (att["causal"], att["window-uni"], ev["window-uni"])
    )
    text = (
        _target_checks(m)[2]
        + "Per-mode verdicts: "
        + "; ".join(f"{k}: {v}" for k, v in mode_verdicts(m).items())
    )
    text += ". " + (
        "The zero-row mechanism is established by the measurements: "
        if mech_holds
        else "The zero-row mechanism is NOT fully supported (see the failed mechanism checks): "
    )
    text += (
        f"under attention dropout token 0 ends at zero in {att['causal'].first_zero_T:.0%} (causal) and "
        f"{att['window-uni'].first_zero_T:.0%} (uni window) of the runs, zero rows reach "
        f"{att['causal'].zero_rows_mean[-1]:.3g} (causal) and {att['window-uni'].zero_rows_mean[-1]:.3g} "
        f"(uni window) against p*T = {p * depth:.3g}, the live (nonzero) tokens' mu/||X|| at T is "
        f"{live_c:.2g} (causal: {_collapsed(live_c)}"
        + ("; mu stays up only through the zero rows" if live_c < LIVE_COLLAPSED and mech_holds else "")
        + f") and {live_u:.2g} (uni window: {_collapsed(live_u)}; eval mode {live_u_eval:.2g}: "
        f"{_collapsed(live_u_eval)}"
    )
    if live_u >= LIVE_COLLAPSED and live_u_eval >= LIVE_COLLAPSED:
        text += (
            ": with radius n-1 its live tokens have not collapsed within this depth, with or without dropout"
        )
    hidden = [x.mu_rel_nonzero_T for x in m.stats["attn+hidden-dropout"].values()]
    text += (
        f"), and the strongly connected masks keep {max(m.mechanism[k].zero_rows_T for k in STRONG):.2g} "
        "zero rows. Hidden dropout zeroes single entries, not rows"
        + (
            f"; with it the live tokens' mu/||X|| at T stays at {min(hidden):.2g} or more under every mask, "
            "away from collapse."
            if min(hidden) >= LIVE_COLLAPSED
            else f"; with it the live tokens' mu/||X|| at T goes down to {min(hidden):.2g}."
        )
    )
    full = sizes(False)
    if any(s[k] != v for k, v in full.items()):
        text += (
            f" QUICK MODE: n={s['n']}, d={s['d']}, key width {s['dk']}, d_QK={s['dqk']:g}, {s['batch']} "
            f"samples (full: n={full['n']}, d={full['d']}, d_QK={full['dqk']:g})."
        )
    return text


def describe(m: DepthTableMeasured, cs: list[V.Check], sz: dict, *, seed: int, quick: bool) -> Description:
    r = {mode: m.ratios(mode) for mode in MODES}
    att = m.stats["attn-dropout"]["causal"]
    criterion = (
        "rule fixed before the run (docs/theory.md): per mode, four checks: complete and window mu_T/mu_0 "
        f"< {DECREASE}; causal and uni window do not collapse: live tokens' mu/||X|| at T >= "
        f"{LIVE_COLLAPSED:g} and (mu_T/mu_0 >= {DECREASE} or log(mu_T/mu_T/2) > {SECOND_HALF} "
        "log(mu_T/2/mu_0), i.e. the decay is not geometric) (the rebuttal's pattern). The rebuttal does "
        "not say whether dropout was on, so every mode's checks count (no mode is chosen after the run), "
        "plus one mechanism check: the pattern must also hold in eval mode (no dropout), else a match is "
        "dropout's zero rows; every mode's verdict is listed. " + V.VERDICT_RULE
    )
    key_numbers = {
        "eval mu_T/mu_0 complete": r["eval"]["complete"],
        "eval causal": r["eval"]["causal"],
        "attn-dropout causal": r["attn-dropout"]["causal"],
        "attn-dropout uni window": r["attn-dropout"]["window-uni"],
        "attn-dropout zero rows at T, causal": att.zero_rows_mean[-1],
        "live-token mu/||X|| at T, causal": att.mu_rel_nonzero_T,
        "attn+hidden complete": r["attn+hidden-dropout"]["complete"],
    }
    return Description(m.setting, key_numbers=key_numbers, criterion=criterion)
