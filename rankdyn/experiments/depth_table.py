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
"""

from __future__ import annotations

from pathlib import Path

import jax
import jax.random as jr
import numpy as np

from . import _verdict as V
from ._dtype import float_dtype
from ._masktable import MASK_LABELS, PAPER_MASKS, mask_table, masks_for
from ._observers import observe_zero_rows
from ._runs import band, simulate_many, with_masks

NAME = "depth-table"
CLAIM = (
    "Authors' rebuttal table: in a 128-layer SAN with LayerNorm and exactly orthogonal W_V, the strongly connected "
    "masks (complete, window +-1) show collapse or a clear decrease of mu by layer 128, while the quasi-strongly "
    "connected ones (causal, uni window) do not (docs/theory.md#experiments)."
)

TABLE_LAYERS = (0, 32, 64, 96, 128)
#: mode -> (attention dropout, hidden dropout).
MODES = {"eval": (0.0, 0.0), "attn-dropout": (0.1, 0.0), "attn+hidden-dropout": (0.1, 0.1)}
#: "clear decrease": mean mu at the last layer below this fraction of layer 0.
DECREASE = 0.5


def sizes(quick: bool) -> dict:
    if quick:
        return {"n": 32, "d": 64, "dk": 8, "dqk": 8.0, "batch": 8, "depth": 128}
    # 8 samples per mask and mode: the three modes x four masks finish in about 10 minutes on 2 busy cores.
    return {"n": 128, "d": 768, "dk": 64, "dqk": 64.0, "batch": 8, "depth": 128}


def _weights(key, d: int, dk: int, depth: int, dtype):
    from .._weights import bert_uniform, orthogonal

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


def pattern_checks(ratios: dict[str, float], mode: str) -> list[V.Check]:
    """The rebuttal's pattern as four checks on ``mu_T / mu_0`` per mask."""
    out = []
    for m in ("complete", "window"):
        out.append(
            V.check(
                f"{mode}: {MASK_LABELS[m]} decreases (mu_T/mu_0 < {DECREASE})",
                ratios[m] < DECREASE,
                f"mu_T/mu_0 = {ratios[m]:.3g}",
            )
        )
    for m in ("causal", "window-uni"):
        out.append(
            V.check(
                f"{mode}: {MASK_LABELS[m]} does not (mu_T/mu_0 >= {DECREASE})",
                ratios[m] >= DECREASE,
                f"mu_T/mu_0 = {ratios[m]:.3g}",
            )
        )
    return out


def mechanism(stats: dict, n: int, d: int, p: float, depth: int) -> dict:
    """Compare the measured zero rows of the attention-dropout mode with the zero-row model."""
    out = {}
    for m, s in stats.items():
        k = s["zero_rows_mean"][-1]
        out[m] = {
            "zero_rows_T": k,
            "first_zero_fraction_T": s["first_zero_T"],
            # The prefix grows by one per layer with probability p: about p * t rows after t layers.
            "predicted_zero_rows_T": p * depth if m in ("causal", "window-uni") else 0.0,
            # Live tokens collapsed to one vector of norm sqrt(d), k zero rows: mu = sqrt(d k (n - k) / n).
            "predicted_mu_T": float(np.sqrt(d * k * (n - k) / n)),
            "mu_T": s["mu_mean"][-1],
            "mu_rel_nonzero_T": s["mu_rel_nonzero_T"],
        }
    return out


def mechanism_verdict(verdicts: dict, checks: dict, best: str, live: float) -> tuple[str, list, str]:
    """``(verdict, checks, sentence)``: the best mode's pattern checks plus the mechanism check.

    The authors explain the table by quasi-strong connectivity (those masks do not collapse). In
    our runs the table is matched under dropout only because dropped tokens become zero rows while
    the live tokens collapse (``live``: their mu/||X|| at T, causal, attention dropout). The
    mechanism check asks whether the pattern also holds without dropout (eval mode); if not, the
    verdict is at most "partially" and the sentence says both things.
    """
    mech = V.check(
        "mechanism: the pattern holds without dropout (eval mode), as the quasi-strong-connectivity explanation "
        "predicts",
        verdicts["eval"] == "reproduced",
        f"eval mode: {verdicts['eval']}; best mode {best}: {verdicts[best]}; live-token mu/||X|| at T under "
        f"attention dropout, causal: {live:.2g}",
    )
    target = list(checks[best]) + [mech]
    sentence = (
        "The numbers match the rebuttal's table only in a dropout mode, and there the mechanism is dropout's zero "
        "rows, not quasi-strong connectivity: the causal mu stays high because dropped tokens become zero rows "
        f"while the live tokens collapse (live mu/||X|| {live:.2g} at T). "
        if verdicts[best] == "reproduced" and not mech.passed
        else ""
    )
    return V.verdict(target), target, sentence


def run(out: Path, *, quick: bool, seed: int, size: dict | None = None) -> dict:
    from .._init import initial_tokens
    from .._layer import SelfAttentionLayer
    from .._norms import make_norm
    from ..plotting import plot_band_panels, save_figure

    out = Path(out)
    sz = dict(sizes(quick) if size is None else size)
    n, d, dk, dqk, batch, depth = sz["n"], sz["d"], sz["dk"], sz["dqk"], sz["batch"], sz["depth"]
    table_layers = tuple(sorted({int(round(f * depth)) for f in (0, 0.25, 0.5, 0.75, 1.0)}))
    dtype = float_dtype()
    masks = masks_for(PAPER_MASKS, n)
    graph = mask_table(masks)
    k_w, k_x, k_drop = jr.split(jr.PRNGKey(seed), 3)
    w_q, w_k, w_v = _weights(k_w, d, dk, depth, dtype)
    x0 = initial_tokens(k_x, "bert", n, d, batch=batch, dtype=dtype)
    stacks, keys = [], []
    for pa, ph in MODES.values():
        layer = SelfAttentionLayer(
            masks["complete"],
            w_q,
            w_k,
            w_v,
            dqk=dqk,
            norm=make_norm("layernorm", d),
            placement="post",
            attn_dropout=pa,
            hidden_dropout=ph,
        )
        stacks.append(with_masks(layer, masks))
        keys.append(k_drop if layer.has_dropout else None)
    # One compiled program for the three modes (each vmapped over the masks, weights held once).
    outs = simulate_many(stacks, x0, depth, observe=observe_zero_rows, keys=keys)

    stats, panels, checks, verdicts, ratios = {}, {}, {}, {}, {}
    for mode, (layers, met, nonfinite, degenerate) in zip(MODES, outs):
        stats[mode], panels[mode] = {}, {}
        for i, m in enumerate(masks):
            ok = ~nonfinite[i]
            b = band(met["mu"][i], ok)
            panels[mode][MASK_LABELS[m]] = b
            z = band(met["zero_rows"][i], ok)
            stats[mode][m] = {
                "mu_mean": [float(b["mean"][t]) for t in table_layers],
                "mu_std": [float(b["std"][t]) for t in table_layers],
                "zero_rows_mean": [float(z["mean"][t]) for t in table_layers],
                "zero_rows_std": [float(z["std"][t]) for t in table_layers],
                "first_zero_T": float(np.mean(met["first_zero"][i][ok, depth])),
                "mu_rel_nonzero_T": float(np.mean(met["mu_rel_nonzero"][i][ok, depth])),
                "mu_rel_nonzero_min": float(np.min(band(met["mu_rel_nonzero"][i], ok)["mean"])),
                "ratio_T_0": float(b["mean"][depth] / b["mean"][0]),
                "ratio_min_0": float(np.min(b["mean"]) / b["mean"][0]),
                "nonfinite": int(np.sum(nonfinite[i])),
            }
        ratios[mode] = {m: stats[mode][m]["ratio_T_0"] for m in masks}
        checks[mode] = pattern_checks(ratios[mode], mode)
        verdicts[mode] = V.verdict(checks[mode])

    mech = mechanism(stats["attn-dropout"], n, d, MODES["attn-dropout"][0], depth)
    att = stats["attn-dropout"]
    eval_zero = max(s["zero_rows_mean"][-1] for s in stats["eval"].values())
    # Mechanism checks: independent predictions (closed forms), not the quantities they explain.
    mech_checks = [
        V.check("eval mode has no zero rows", eval_zero == 0.0, f"max mean zero rows at T: {eval_zero:.3g}"),
        V.check(
            "attn dropout: token 0 is zero at T under causal and uni window (P = 1 - 0.9^T)",
            min(att["causal"]["first_zero_T"], att["window-uni"]["first_zero_T"]) >= 0.5,
            f"fractions {att['causal']['first_zero_T']:.3g}, {att['window-uni']['first_zero_T']:.3g}; "
            f"predicted {1 - 0.9**depth:.3g}",
        ),
        V.check(
            "attn dropout: zero rows within a factor 2 of p*T under causal and uni window",
            all(
                0.5 * mech[m]["predicted_zero_rows_T"]
                <= mech[m]["zero_rows_T"]
                <= 2 * mech[m]["predicted_zero_rows_T"]
                for m in ("causal", "window-uni")
            ),
            ", ".join(f"{MASK_LABELS[m]} {mech[m]['zero_rows_T']:.3g}" for m in ("causal", "window-uni"))
            + f" vs p*T = {0.1 * depth:.3g}",
        ),
        V.check(
            "attn dropout: no absorbing zero rows under the strongly connected masks (< 1 at T)",
            max(mech[m]["zero_rows_T"] for m in ("complete", "window")) < 1.0,
            ", ".join(f"{MASK_LABELS[m]} {mech[m]['zero_rows_T']:.3g}" for m in ("complete", "window")),
        ),
        V.check(
            "attn dropout, causal: mu at T within 25% of sqrt(d k (n-k)/n) (live tokens collapsed, k zero rows)",
            abs(mech["causal"]["mu_T"] - mech["causal"]["predicted_mu_T"])
            <= 0.25 * mech["causal"]["predicted_mu_T"],
            f"mu_T {mech['causal']['mu_T']:.3g}, predicted {mech['causal']['predicted_mu_T']:.3g}",
        ),
    ]
    mech_holds = all(c.passed for c in mech_checks)

    best = max(MODES, key=lambda md: ("not reproduced", "partially", "reproduced").index(verdicts[md]))
    live = att["causal"]["mu_rel_nonzero_T"]
    verdict, target_checks, mechanism_sentence = mechanism_verdict(verdicts, checks, best, live)

    md = [
        f"mu mean (std) over {batch} samples and zero rows (mean) at layers {', '.join(map(str, table_layers))}; "
        "centred LayerNorm after attention.",
        "",
    ]
    for mode, (pa, ph) in MODES.items():
        md += [
            f"*{mode}* (attention dropout {pa:g}, hidden dropout {ph:g}): verdict **{verdicts[mode]}**",
            "",
            "| mask | strongly conn. | "
            + " | ".join(f"layer {t}" for t in table_layers)
            + " | zero rows at T |",
            "|" + "---|" * (len(table_layers) + 3),
        ]
        for m in masks:
            s = stats[mode][m]
            cells = " | ".join(f"{a:.3g} ({b:.2g})" for a, b in zip(s["mu_mean"], s["mu_std"]))
            md.append(
                f"| {MASK_LABELS[m]} | {graph[m]['strongly_connected']} | {cells} | {s['zero_rows_mean'][-1]:.3g} |"
            )
        md.append("")
    md += ["Zero-row mechanism (attention dropout 0.1):", "", V.checks_markdown(mech_checks), ""]
    fig = plot_band_panels(
        layers,
        panels,
        ncols=3,
        dtype=dtype,
        suptitle=f"{depth}-layer SAN + centred LN, orthogonal W_V, n={n}, d={d}: eval vs train mode",
    )
    figs = [save_figure(fig, out / "depth_table_mu.png")]

    notes = (
        mechanism_sentence
        + "Per-mode verdicts: "
        + "; ".join(f"{k}: {v}" for k, v in verdicts.items())
        + ". "
        + (
            "The zero-row mechanism is established by the measurements: "
            if mech_holds
            else "The zero-row mechanism is NOT fully supported (see the failed mechanism checks): "
        )
        + f"under attention dropout token 0 ends at zero in {att['causal']['first_zero_T']:.0%} (causal) and "
        f"{att['window-uni']['first_zero_T']:.0%} (uni window) of the runs, zero rows reach "
        f"{att['causal']['zero_rows_mean'][-1]:.3g} (causal) and {att['window-uni']['zero_rows_mean'][-1]:.3g} (uni window) "
        f"against p*T = {0.1 * depth:.3g}, the live (nonzero) tokens' mu/||X|| at T is "
        f"{att['causal']['mu_rel_nonzero_T']:.2g} (causal: collapsed; mu stays up only through the zero rows) and "
        f"{att['window-uni']['mu_rel_nonzero_T']:.2g} (uni window; eval mode {stats['eval']['window-uni']['mu_rel_nonzero_T']:.2g}: "
        "with radius n-1 its live tokens have not collapsed within this depth, with or without dropout), and the "
        "strongly connected masks keep "
        f"{max(mech[m]['zero_rows_T'] for m in ('complete', 'window')):.2g} zero rows. Hidden dropout zeroes single "
        "entries, not rows; it keeps every mask away from collapse."
    )
    if quick:
        notes += f" QUICK MODE: n={n}, d={d}, key width {dk}, d_QK={dqk:g}, {batch} samples (full: n=128, d=768, d_QK=64)."
    return {
        "name": NAME,
        "claim": CLAIM,
        "setting": {
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
            "x0": "bert: centred LN of Gaussian embeddings sharing a direction (common_weight 1), token norm sqrt(d)",
            "keys": "PRNGKey(seed) -> (weights, inputs, dropout); shared by every mask and mode",
        },
        "measured": {
            "stats": stats,
            "graph": graph,
            "mode_verdicts": verdicts,
            "mode_checks": {k: V.checks_json(v) for k, v in checks.items()},
            "mechanism": mech,
            "mechanism_checks": V.checks_json(mech_checks),
            "mechanism_established": bool(mech_holds),
        },
        "checks": V.checks_json(target_checks),
        "key_numbers": {
            "eval mu_T/mu_0 complete": ratios["eval"]["complete"],
            "eval causal": ratios["eval"]["causal"],
            "attn-dropout causal": ratios["attn-dropout"]["causal"],
            "attn-dropout uni window": ratios["attn-dropout"]["window-uni"],
            "attn-dropout zero rows at T, causal": att["causal"]["zero_rows_mean"][-1],
            "live-token mu/||X|| at T, causal": att["causal"]["mu_rel_nonzero_T"],
            "attn+hidden complete": ratios["attn+hidden-dropout"]["complete"],
        },
        "verdict": verdict,
        "criterion": (
            f"per mode, four checks: complete and window mu_T/mu_0 < {DECREASE}; causal and uni window mu_T/mu_0 >= "
            f"{DECREASE} (the rebuttal's pattern). The rebuttal does not say whether dropout was on, so the target's "
            f"target's checks are those of the best-matching mode (here {best}) plus one mechanism check: the pattern "
            "must also hold in eval mode (no dropout), else the match is dropout's zero rows and the verdict is at "
            "most partially; every mode's verdict is listed. " + V.VERDICT_RULE
        ),
        "figures": figs,
        "notes": notes,
        "markdown": "\n".join(md),
    }
