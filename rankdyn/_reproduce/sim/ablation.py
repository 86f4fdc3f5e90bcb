r"""Target ``ablation``: masks x LayerNorm x skip x MLP at BERT-like random init (paper Fig. 2 and 6).

Five variants (SAN, SAN+skip, SAN+LN, SAN+skip+LN, full block with MLP) x four masks, depth
128 (paper Fig. 6), with per-layer BERT-like random weights, 12 heads and $W_O$; the
12-layer view (Fig. 2) is the first 12 layers of the same runs (with i.i.d. per-layer weights
a 12-layer model has exactly the distribution of this prefix). The LN variants also run with
BERT's two train-mode dropouts separated: attention dropout 0.1, and attention + hidden dropout
0.1 (docs/theory.md#experiments).

Rule, fixed before the run (docs/theory.md, "Verdict rules fixed before the run"): no dropout
mode is chosen after the run. c1, c2, c5 (SAN, SAN+skip, eval) and the LN checks c3, c4 of
every mode that ran (one check each) form one list under the house rule: "reproduced" needs c3
and c4 to pass in every mode; the per-mode verdicts are information (``mode_verdicts``).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np

from .. import _verdict as V
from .._masktable import MASK_LABELS, PAPER_MASKS
from .._runs import band
from .._target import Description, Measured, Rendered, off_json
from ._ablation_runs import DROPOUT_MODES, ablation_runs, ablation_sizes

NAME = "ablation"
CLAIM = (
    "Paper Fig. 2 and Fig. 6 (random init): in pure self-attention networks mu -> 0 exponentially for every "
    "mask, more local masks more slowly; adding LayerNorm keeps mu stable well above 0; skip connections "
    "alone make mu unstable; the full transformer block keeps mu relatively stable. Holds at depth 12 and "
    "128."
)

SHALLOW = 12
#: The LN variants (checks c3 and c4, evaluated per dropout mode).
LN_VARIANTS = ("SAN+LN", "SAN+skip+LN", "full")
#: The key numbers of the short report: (variant, mask, mode); mode None is every mode that ran.
KEY_ROWS = (
    ("SAN", "complete", "eval"),
    ("SAN+LN", "complete", None),
    ("SAN+LN", "causal", None),
    ("full", "complete", None),
)


@dataclasses.dataclass(frozen=True)
class AblationRow(Measured):
    """One (variant, mask, dropout mode): mu at layers 0, `SHALLOW` and T, the ratios to layer 0,
    the largest ratio and the coefficient of variation over the last quarter of the depth."""

    variant: str
    mask: str
    mode: str
    mu_0: float
    mu_shallow: float
    mu_depth: float
    ratio_shallow: float
    ratio_depth: float
    max_ratio: float
    cv_last_quarter: float
    nonfinite: int
    degenerate_ln: int
    #: The layers of ``*_shallow`` and ``*_depth`` (the JSON keys are ``mu_12``, ``ratio_128``...).
    shallow: int = off_json()
    depth: int = off_json()

    def to_dict(self) -> dict:
        names = {
            "mu_shallow": f"mu_{self.shallow}",
            "mu_depth": f"mu_{self.depth}",
            "ratio_shallow": f"ratio_{self.shallow}",
            "ratio_depth": f"ratio_{self.depth}",
        }
        return {
            names.get(f.name, f.name): getattr(self, f.name)
            for f in dataclasses.fields(self)
            if f.metadata.get("json", True)
        }


@dataclasses.dataclass(frozen=True)
class AblationMeasured(Measured):
    """``"<variant>|<mask>|<mode>"`` -> `AblationRow`, and the graph facts of the masks. The JSON
    also lists the verdict of every dropout mode (`mode_verdicts`, from these numbers)."""

    summary: dict[str, AblationRow]
    masks: dict[str, dict]
    layers: np.ndarray = off_json()
    #: ``"<variant>: <mask label>"`` -> dropout mode -> band of mu (a panel each, for the figures).
    panels: dict = off_json()
    #: SAN, eval mode: mask -> per-layer factor of the mean row norm over the first `SHALLOW` layers.
    san_norm_factor: dict = off_json()
    #: The dropout modes that ran (`DROPOUT_MODES` order).
    modes: tuple = off_json()
    setting: dict = off_json()

    def row(self, variant: str, mask: str, mode: str) -> AblationRow:
        return self.summary[f"{variant}|{mask}|{mode}"]

    @property
    def shallow(self) -> int:
        return min(SHALLOW, self.setting["depth"])

    def to_dict(self) -> dict:
        return super().to_dict() | {"mode_verdicts": mode_verdicts(self)}


def sizes(quick: bool) -> dict:
    """The grid's sizes (`_ablation_runs.ablation_sizes`: the runs are shared with geometry)."""
    return ablation_sizes(quick)


def compute(sz: dict, seed: int, *, cache: dict | None = None) -> AblationMeasured:
    """The ablation grid (`_ablation_runs.ablation_runs`, memoised in ``cache``) summarised per
    (variant, mask, dropout mode).

    Arguments:
        sz: the grid's sizes (`_ablation_runs.ablation_sizes`, ``modes`` included).
        seed: base PRNG seed.
        cache: a dict owned by the caller (one per ``rankdyn reproduce`` call).

    Returns:
        The summary rows, the graph facts, the SAN's row-norm factors, the curves and the setting.
    """
    res = ablation_runs(False, seed, sz, cache=cache)
    layers, runs, setting = res["layers"], res["runs"], res["setting"]
    depth = setting["depth"]
    shallow = min(SHALLOW, depth)
    modes = tuple(md for md in DROPOUT_MODES if any(q == md for _, q in runs))
    summary, panels, norm = {}, {}, {}
    # Small multiples: a row per variant, a column per mask, a curve per dropout mode (colour and
    # line style), so no panel holds more than 3 curves; a row shares one y range, so a variant's
    # masks compare by height while the SAN's 1e-40 does not flatten the LN rows.
    styles = ("-", "--", ":", "-.")
    for (label, p), r in runs.items():
        ok_all = ~r["nonfinite"]
        for i, m in enumerate(PAPER_MASKS):
            b = band(r["metrics"]["mu"][i], ok_all[i])
            style = {"color": f"C{modes.index(p)}", "linestyle": styles[modes.index(p) % len(styles)]}
            panels.setdefault(f"{label}: {MASK_LABELS[m]}", {})[p] = b | style
            mean, std = b["mean"], b["std"]
            q = depth // 4
            summary[f"{label}|{m}|{p}"] = AblationRow(
                variant=label,
                mask=m,
                mode=p,
                mu_0=float(mean[0]),
                mu_shallow=float(mean[shallow]),
                mu_depth=float(mean[depth]),
                ratio_shallow=float(mean[shallow] / mean[0]),
                ratio_depth=float(mean[depth] / mean[0]),
                max_ratio=float(np.max(mean) / mean[0]),
                cv_last_quarter=float(np.mean(std[-q:] / np.maximum(mean[-q:], 1e-300))),
                nonfinite=int(np.sum(r["nonfinite"][i])),
                degenerate_ln=int(np.sum(r["degenerate"][i])),
                shallow=shallow,
                depth=depth,
            )
            if (label, p) == ("SAN", "eval"):
                rn = band(r["metrics"]["row_norm_mean"][i], ok_all[i])["mean"]
                norm[m] = float((rn[shallow] / rn[0]) ** (1.0 / shallow))
    setting = {
        **setting,
        "shallow_view": shallow,
        "depth_12_model": f"first {shallow} layers of the depth-{depth} runs (same i.i.d. per-layer "
        "distribution)",
    }
    return AblationMeasured(summary, res["masks"], layers, panels, norm, modes, setting)


def _base_checks(m: AblationMeasured) -> list[V.Check]:
    """c1, c2, c5: the SAN and SAN+skip variants, eval mode."""
    depth, shallow, masks = m.setting["depth"], m.shallow, PAPER_MASKS
    san = {k: m.row("SAN", k, "eval") for k in masks}
    c1 = all(r.ratio_depth < 1e-2 and r.ratio_shallow < 0.5 for r in san.values())
    mu_s = {k: r.mu_shallow for k, r in san.items()}
    c2 = bool(mu_s["complete"] < mu_s["window"] < mu_s["window-uni"] and mu_s["causal"] < mu_s["window-uni"])
    c5 = all(m.row("SAN+skip", k, "eval").ratio_depth > 0.1 for k in masks)
    return [
        V.check(
            "c1: SAN collapses under every mask", c1, f"mu_{depth}/mu_0 < 1e-2 and mu_{shallow}/mu_0 < 0.5"
        ),
        V.check(
            f"c2: SAN locality ordering at layer {shallow}",
            c2,
            ", ".join(f"{MASK_LABELS[k]} {x:.3g}" for k, x in mu_s.items()),
        ),
        V.check("c5: skip only, no collapse", c5, f"SAN+skip mu_{depth}/mu_0 > 0.1 for every mask"),
    ]


def ln_checks(m: AblationMeasured, p: str) -> tuple[bool, bool]:
    """(c3, c4) in dropout mode ``p``: SAN+LN and SAN+skip+LN keep mu_T/mu_0 > 0.1; the full block
    keeps 0.1 < mu_T/mu_0 < 10; all masks."""
    c3 = all(m.row(v, k, p).ratio_depth > 0.1 for v in ("SAN+LN", "SAN+skip+LN") for k in PAPER_MASKS)
    c4 = all(0.1 < m.row("full", k, p).ratio_depth < 10 for k in PAPER_MASKS)
    return bool(c3), bool(c4)


def _mode_checks(m: AblationMeasured, p: str) -> list[V.Check]:
    c3, c4 = ln_checks(m, p)
    return [
        V.check(f"c3 ({p}): SAN+LN and SAN+skip+LN do not collapse", c3, "mu_T/mu_0 > 0.1, all masks"),
        V.check(f"c4 ({p}): full block stable", c4, "0.1 < mu_T/mu_0 < 10, all masks"),
    ]


def mode_verdicts(m: AblationMeasured) -> dict[str, str]:
    """The verdict of the base checks plus the LN checks of each dropout mode (information only:
    the target's verdict is that of `checks`, which holds every mode)."""
    return {p: V.verdict(_base_checks(m) + _mode_checks(m, p)) for p in m.modes}


def checks(m: AblationMeasured) -> list[V.Check]:
    """c1, c2, c5 and the LN checks c3, c4 of every dropout mode that ran: no mode is chosen after
    the run, so "reproduced" needs c3 and c4 to pass in every mode."""
    return _base_checks(m) + [c for p in m.modes for c in _mode_checks(m, p)]


def table(m: AblationMeasured) -> str:
    """Every (variant, mask, mode): mu at layers 0, `SHALLOW` and T, the ratios to layer 0."""
    depth, shallow = m.setting["depth"], m.shallow
    rows = [
        f"| variant | mask | mode | mu layer 0 | mu layer {shallow} | mu layer {depth} | mu {depth} / mu 0 | "
        "max mu / mu 0 |",
        "|" + "---|" * 8,
    ]
    for v in m.summary.values():
        rows.append(
            f"| {v.variant} | {MASK_LABELS[v.mask]} | {v.mode} | {v.mu_0:.3g} | {v.mu_shallow:.3g} | "
            f"{v.mu_depth:.3g} | {v.ratio_depth:.3g} | {v.max_ratio:.3g} |"
        )
    return "\n".join(rows)


def depth_figure(layers, panels: dict, setting: dict, view: int):
    """``ablation_depth<view>.png``: mu against depth, a row per variant and a column per mask.

    The quantity is named once (the figure's y label), each row by its variant and each column by
    its mask; a dropout mode that only some rows ran says in the legend which rows have it, and a
    row run in fewer modes than the legend lists says so in its label.

    Arguments:
        layers: saved layers.
        panels: ``{"<variant>: <mask>": {mode: band}}``, variant-major, masks in `PAPER_MASKS` order.
        setting: the run's sizes (``n, d, heads, batch, dtype``).
        view: the last layer shown.
    """
    from ...plotting import plot_band_panels

    modes = list(dict.fromkeys(mode for curves in panels.values() for mode in curves))
    variants = list(dict.fromkeys(t.split(": ")[0] for t in panels))
    rows_with = {p: [v for v in variants if any(p in c for t, c in panels.items() if t.startswith(v + ": "))]
                 for p in modes}  # fmt: skip
    shown = {
        p: p if len(rows_with[p]) == len(variants) else f"{p} ({', '.join(rows_with[p])} only)" for p in modes
    }
    fig = plot_band_panels(
        layers,
        {t: {shown[p]: b for p, b in c.items()} for t, c in panels.items()},
        ncols=len(PAPER_MASKS),
        xmax=view,
        dtype=setting["dtype"],
        panel_size=(2.5, 1.8),
        sharey="row",
        legend_title="dropout mode",
        legend_below=True,
        suptitle=f"mu vs layer, first {view} layers, {' vs '.join(modes)}, n={setting['n']}, "
        f"d={setting['d']}, {setting['heads']} heads, {setting['batch']} samples",
    )
    ncols = len(PAPER_MASKS)
    for i, (ax, (title, curves)) in enumerate(zip(fig.axes, panels.items())):
        variant, mask = title.split(": ", 1)
        ax.set_title(mask if i < ncols else "", fontsize=10)
        only = f"\n({', '.join(curves)} only)" if len(curves) < len(modes) else ""
        ax.set_ylabel(f"{variant}{only}" if i % ncols == 0 else "", fontsize=9)
        if i < len(panels) - ncols:
            ax.set_xlabel("")
    fig.supylabel("mu (eq. 4), mean +- std over samples", fontsize=10)
    return fig


def render(out: Path, m: AblationMeasured, cs: list[V.Check], *, quick: bool = False) -> Rendered:
    """The depth figures (all layers and the first `SHALLOW`) and the notes from the numbers."""
    from ...plotting import save_figure

    figs = [
        save_figure(depth_figure(m.layers, m.panels, m.setting, view), out / f"ablation_depth{view}.png")
        for view in (m.setting["depth"], m.shallow)
    ]
    return Rendered(figs, notes(m), table(m))


def notes(m: AblationMeasured) -> str:
    """The prose: each conclusion only when the numbers say so."""
    s = m.setting
    d, shallow = s["d"], m.shallow
    text = (
        f"Random-init weights are U(+-1/sqrt(fan_in)) (std {1 / np.sqrt(3 * d):.3g} at fan_in d = {d}; BERT "
        "uses N(0, 0.02)); no biases, LN gain 1 and bias 0, synthetic BERT-like inputs (no pretrained models "
        "or Wikipedia text offline). "
    )
    share = {}
    for k, f in m.san_norm_factor.items():
        r = m.row("SAN", k, "eval").ratio_shallow
        if 0 < r < 1 and f > 0:
            share[k] = shallow * np.log(f) / np.log(r)
    if m.san_norm_factor:
        factors = list(m.san_norm_factor.values())
        text += (
            f"In the SAN each layer multiplies the mean row norm by {min(factors):.2g} to {max(factors):.2g} "
            f"(geometric mean over the first {shallow} layers, per mask)"
        )
        if share:
            lo, hi = min(share.values()), max(share.values())
            text += f": norm shrinkage makes {lo:.0%} to {hi:.0%} of the decay of log mu by layer {shallow}"
            text += " (the decay of mu is largely norm shrinkage). " if lo > 0.5 else ". "
        else:
            text += ". "
    return text + _ln_notes(m)


def _ln_notes(m: AblationMeasured) -> str:
    s, rd = m.setting, "ratio_depth"
    failed_ln = {
        f"{v}|{k}": getattr(m.row(v, k, "eval"), rd)
        for v in LN_VARIANTS
        for k in PAPER_MASKS
        if not getattr(m.row(v, k, "eval"), rd) > 0.1
    }
    text = ""
    if failed_ln:
        text += (
            "Without dropout, LN does not prevent collapse for: "
            + ", ".join(f"{k} (mu_T/mu_0 = {v:.2g})" for k, v in failed_ln.items())
            + ". "
        )
        if any(k.endswith("|complete") for k in failed_ln):
            text += (
                "With centred LN and no dropout the complete mask collapses at random init "
                "(docs/theory.md#ambiguities-and-choices). "
            )
        ln = {p: ln_checks(m, p) for p in m.modes if p != "eval"}
        text += "".join(f"In mode {p} the LN checks are c3 = {c3}, c4 = {c4}. " for p, (c3, c4) in ln.items())
        rescued = [p for p, c in ln.items() if all(c)]
        text += (
            "The paper does not say whether its models ran in train mode; the 'stable level well above zero' "
            + (
                f"may come from active dropout (mode {', '.join(rescued)} passes both LN checks here), "
                "real-text embeddings, or LN details it does not state."
                if rescued
                else "may come from real-text embeddings or LN details it does not state (no dropout mode "
                "here passes both LN checks)."
            )
        )
    c2 = _base_checks(m)[1]
    if not c2.passed:
        mu_s = {k: m.row("SAN", k, "eval").mu_shallow for k in PAPER_MASKS}
        text += f" SAN locality ordering at layer {m.shallow} failed: mu = {mu_s}."
    full = ablation_sizes(False)
    if any(s[k] != full[k] for k in ("n", "d", "heads", "batch", "depth")):
        text += (
            f" QUICK MODE: n={s['n']}, d={s['d']}, {s['heads']} heads, {s['batch']} samples (full: "
            f"n={full['n']}, d={full['d']}, {full['heads']} heads)."
        )
    return text.strip()


def describe(m: AblationMeasured, cs: list[V.Check], sz: dict, *, seed: int, quick: bool) -> Description:
    depth, modes = m.setting["depth"], ", ".join(m.modes)
    criterion = (
        f"c1: SAN mu_{depth}/mu_0 < 1e-2 and mu_{m.shallow}/mu_0 < 0.5 for all masks; c2: SAN at layer "
        f"{m.shallow}: mu(complete) < mu(window) < mu(uni window) and mu(causal) < mu(uni window); c5: "
        "SAN+skip mu_T/mu_0 > 0.1 for all masks; c3: SAN+LN and SAN+skip+LN mu_T/mu_0 > 0.1 for all masks; "
        "c4: full block 0.1 < mu_T/mu_0 < 10 for all masks. c3 and c4 are checks of every dropout mode "
        f"({modes}): the paper does not say whether dropout was on, so no mode is chosen after the run and "
        "'reproduced' needs every mode to pass (rule fixed before the run, docs/theory.md). " + V.VERDICT_RULE
    )
    key_numbers = {
        f"{v} {MASK_LABELS[k]} mu_T/mu_0 ({q})": m.row(v, k, q).ratio_depth
        for v, k, p in KEY_ROWS
        for q in ((p,) if p else m.modes)
    }
    return Description(m.setting, key_numbers=key_numbers, criterion=criterion)
