r"""Target ``temperature``: the temperature $\sqrt{d_{QK}}$ and the early rate of collapse (Fig. 3/7).

Theorem 1's rate $(1-\epsilon^r)^{1/r}$ grows as $\epsilon$ shrinks; a smaller $d_{QK}$ sharpens
attention (smaller $\epsilon$), so it should slow the *initial* collapse, more for global masks
than for sparse ones. The SAN of ``masks-collapse`` (same seed: the same weights and inputs) is
run for the four paper masks at 13 temperatures $d_{QK} = 2^{-6}, \dots, 2^6$, which include
the paper's $\{1/64, 1, 64\}$, as ONE vmapped program over (mask, $d_{QK}$): ``dqk`` is an
array field of the layer, so the sweep never recompiles.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from ..._theory._rates import fit_rate_window
from .. import _verdict as V
from .._dtype import float_dtype, rel_floor
from .._masktable import MASK_LABELS, PAPER_MASKS, masks_for
from .._runs import band, san_layer, simulate_stacked, stack
from .._target import Description, Measured, Rendered, off_json
from . import masks_collapse as MC
from ._rate_summary import geo_mean

NAME = "temperature"
CLAIM = (
    "Theorem 1 implication (paper Fig. 3 and Fig. 7): a smaller temperature d_QK (sharper attention, smaller "
    "eps) slows the initial rate of rank collapse for every mask; the effect is larger with global attention "
    "than with sparse masks, and larger in shallow layers than in deep ones."
)

#: Swept temperatures 2^-6 .. 2^6; indices 0, 6, 12 are the paper's 1/64, 1, 64.
DQKS = 2.0 ** np.arange(-6, 7)
PAPER_DQKS = (1 / 64, 1.0, 64.0)
#: Index of each paper temperature in `DQKS`.
PAPER_INDEX = {q: int(np.argmin(np.abs(DQKS - q))) for q in PAPER_DQKS}
#: Layers of the "early" rate fit (0..EARLY) and the "late" one (EARLY..depth).
EARLY = 4
#: "Decreases with d_QK": Spearman rank correlation of the early factor with log d_QK at most this.
SPEARMAN_MAX = -0.8


def sizes(quick: bool) -> dict:
    base = MC.sizes(quick)
    if quick:
        return {"n": base["n"], "d": base["d"], "batch": 16, "depth": 32, "weight_layers": base["depth"]}
    return {"n": base["n"], "d": base["d"], "batch": 64, "depth": 64, "weight_layers": base["depth"]}


def _spearman(x, y) -> float:
    x, y = np.asarray(x, float), np.asarray(y, float)
    ok = np.isfinite(x) & np.isfinite(y)
    if ok.sum() < 3:
        return float("nan")
    rx = np.argsort(np.argsort(x[ok]))
    ry = np.argsort(np.argsort(y[ok]))
    if np.std(rx) == 0 or np.std(ry) == 0:
        return float("nan")
    return float(np.corrcoef(rx, ry)[0, 1])


@dataclasses.dataclass(frozen=True)
class TemperatureMeasured(Measured):
    """Per mask (of `PAPER_MASKS`), one value per temperature of `DQKS` (early and late rates,
    median layer-0 eps) or one number (Spearman, effect, spreads)."""

    early_rate: dict[str, list[float]]
    late_rate: dict[str, list[float]]
    median_eps_layer0: dict[str, list[float]]
    spearman: dict[str, float]
    effect_1_64_minus_64: dict[str, float]
    spread_shallow: dict[str, float]
    spread_deep: dict[str, float]
    layers: np.ndarray = off_json()
    #: "d_QK = q" -> mask label -> band of mu, for the paper's three temperatures.
    curves: dict = off_json()
    setting: dict = off_json()

    @property
    def monotone(self) -> dict[str, bool]:
        """Per mask: the early factor decreases with d_QK (Spearman <= `SPEARMAN_MAX`)."""
        return {m: bool(np.isfinite(r) and r <= SPEARMAN_MAX) for m, r in self.spearman.items()}

    @property
    def complete_effect_largest(self) -> bool:
        """The effect of the temperature is larger for the complete mask than for both windows."""
        e = self.effect_1_64_minus_64
        return bool(e["complete"] > max(e["window"], e["window-uni"]))

    def to_dict(self) -> dict:
        d = super().to_dict()
        # The JSON's order: the two derived booleans sit next to the numbers they come from.
        keys = ("early_rate", "late_rate", "median_eps_layer0", "spearman")
        return (
            {k: d[k] for k in keys}
            | {"monotone": self.monotone, "effect_1_64_minus_64": d["effect_1_64_minus_64"]}
            | {"complete_effect_largest": self.complete_effect_largest}
            | {k: d[k] for k in ("spread_shallow", "spread_deep")}
        )


def compute(sz: dict, seed: int) -> TemperatureMeasured:
    r"""Run the masks-collapse SAN for every (mask, $d_{QK}$) of `PAPER_MASKS` x `DQKS` as one program.

    The scores are divided by $\sqrt{d_{QK}}$, so a small $d_{QK}$ sharpens attention.

    Arguments:
        sz: ``n, d, batch, depth, weight_layers`` (`sizes`).
        seed: the same keys as masks-collapse (same weights and inputs).

    Returns:
        The early and late per-layer factors, the median layer-0 eps, Spearman correlations, effects
        and spreads per mask, the curves at the paper's three temperatures and the setting.
    """
    from ..._model._tokens import initial_tokens

    n, d, batch, depth = sz["n"], sz["d"], sz["batch"], sz["depth"]
    dtype = float_dtype()
    floor = rel_floor(dtype)
    masks = masks_for(PAPER_MASKS, n)
    k_w, k_x = jax.random.split(jax.random.key(seed))
    layer = san_layer(k_w, n, d, max(sz["weight_layers"], depth), dtype=dtype)
    x0 = initial_tokens(k_x, "gaussian", n, d, batch=batch, dtype=dtype)
    # Configs ordered (mask, dqk): one stacked layer per pair, one compiled program.
    configs = [
        eqx.tree_at(
            lambda l: l.dqk, eqx.tree_at(lambda l: l.mask, layer, jnp.asarray(m)), jnp.asarray(q, dtype)
        )
        for m in masks.values()
        for q in DQKS
    ]
    layers, met, nonfinite, _ = simulate_stacked(stack(configs), x0, depth)
    shape = (len(masks), len(DQKS))
    mu_all, rel_all, eps_all = (met[k].reshape(shape + met[k].shape[1:]) for k in ("mu", "mu_rel", "eps_min"))
    bad = nonfinite.reshape(shape + nonfinite.shape[1:])
    early, late, eps_med, curves = {}, {}, {}, {}
    for i, name in enumerate(masks):
        e_r, l_r, em = [], [], []
        for j in range(len(DQKS)):
            ok = ~bad[i, j]
            gm, gr = geo_mean(mu_all[i, j], ok), geo_mean(rel_all[i, j], ok)
            e_r.append(fit_rate_window(layers, gm, gr, floor, start=0, stop=EARLY, tail=False)[0])
            l_r.append(fit_rate_window(layers, gm, gr, floor, start=EARLY, stop=depth, tail=False)[0])
            em.append(float(np.median(eps_all[i, j][ok][:, 0])))
        early[name], late[name], eps_med[name] = e_r, l_r, em
    for q, j in PAPER_INDEX.items():
        # Written as a power of two, as the rate figure's log2 axis labels the same temperatures.
        curves[f"d_QK = 2^{int(np.log2(q))}"] = {
            MASK_LABELS[m]: band(mu_all[i, j], ~bad[i, j]) for i, m in enumerate(masks)
        }
    lo, hi = PAPER_INDEX[1 / 64], PAPER_INDEX[64.0]
    return TemperatureMeasured(
        early_rate=early,
        late_rate=late,
        median_eps_layer0=eps_med,
        spearman={m: _spearman(np.log(DQKS), early[m]) for m in masks},
        effect_1_64_minus_64={m: float(early[m][lo] - early[m][hi]) for m in masks},
        spread_shallow={m: float(np.nanmax(early[m]) - np.nanmin(early[m])) for m in masks},
        spread_deep={
            m: float(np.nanmax(late[m]) - np.nanmin(late[m])) if np.isfinite(late[m]).any() else float("nan")
            for m in masks
        },
        layers=layers,
        curves=curves,
        setting=_setting(sz, seed, dtype, floor),
    )


def _setting(sz: dict, seed: int, dtype, floor: float) -> dict:
    return {
        **sz,
        "seed": seed,
        "dtype": str(np.dtype(dtype)),
        "masks": list(PAPER_MASKS),
        "dqk_sweep": DQKS,
        "paper_dqks": PAPER_DQKS,
        "early_layers": [0, EARLY],
        "model": "masks-collapse SAN (no LN, per-layer Haar-orthogonal W_V, BERT-uniform W_Q/W_K), same "
        "weights and inputs as masks-collapse at this seed",
        "x0": "gaussian N(0,1)",
        "keys": "key(seed) -> (weights, inputs)",
    }


def checks(m: TemperatureMeasured) -> list[V.Check]:
    """(1) the early factor decreases with d_QK for every mask; (2) the effect (early factor at
    1/64 minus at 64) is larger for the complete mask than for both windows."""
    out = [
        V.check(
            f"{MASK_LABELS[k]}: early factor decreases with d_QK (Spearman <= {SPEARMAN_MAX:g})",
            m.monotone[k],
            f"Spearman {m.spearman[k]:.3g}",
        )
        for k in m.spearman
    ]
    out.append(
        V.check(
            "temperature effect larger for complete than both windows",
            m.complete_effect_largest,
            ", ".join(f"{MASK_LABELS[k]} {e:.3g}" for k, e in m.effect_1_64_minus_64.items()),
        )
    )
    return out


def table(m: TemperatureMeasured) -> str:
    """Early factor at the paper's temperatures, the Spearman correlation and the effect, per mask."""
    head = (
        "| mask | "
        + " | ".join(f"d_QK={q:g}" for q in PAPER_DQKS)
        + " | Spearman(log d_QK, rate) | effect 1/64 - 64 |"
    )
    rows = [head, "|" + "---|" * (len(PAPER_DQKS) + 3)]
    for k, e in m.early_rate.items():
        rows.append(
            f"| {MASK_LABELS[k]} | "
            + " | ".join(f"{e[PAPER_INDEX[q]]:.3g}" for q in PAPER_DQKS)
            + f" | {m.spearman[k]:.2f} | {m.effect_1_64_minus_64[k]:.3g} |"
        )
    return "\n".join(rows)


def render(out: Path, m: TemperatureMeasured, cs: list[V.Check], *, quick: bool = False) -> Rendered:
    """mu against depth at the paper's temperatures, the early factor against d_QK, and the notes."""
    from ...plotting import plot_band_panels, plot_rate_vs_dqk, save_figure

    s = m.setting
    fig = plot_band_panels(
        m.layers,
        m.curves,
        ncols=3,
        dtype=s["dtype"],
        suptitle=f"SAN without LN, mu vs depth at three temperatures (n={s['n']}, d={s['d']})",
    )
    figs = [save_figure(fig, out / "temperature_mu.png")]
    ax = plot_rate_vs_dqk(DQKS, {MASK_LABELS[k]: v for k, v in m.early_rate.items()}, marks=PAPER_DQKS)
    ax.set_title(f"early per-layer factor of mu (layers 0..{EARLY})", fontsize=9)
    figs.append(save_figure(ax.figure, out / "temperature_rate.png"))
    return Rendered(figs, notes(m), table(m))


def notes(m: TemperatureMeasured) -> str:
    """The prose, from the numbers: the fit, the spreads, and why a mask is not monotone."""
    floor, depth = rel_floor(m.setting["dtype"]), m.setting["depth"]
    text = (
        f"Early rate = exp(slope) of log(geometric-mean mu) over layers 0..{EARLY}, points at the round-off "
        f"floor (mu/||X||_F <= {floor:.2g}) left out; where mu reached the floor before two points were "
        "usable the upper estimate floor^(1/t_hit) is used. Shallow vs deep: the spread of the factor over "
        f"d_QK is { {k: round(v, 3) for k, v in m.spread_shallow.items()} } in layers 0..{EARLY} and "
        f"{ {k: round(v, 3) for k, v in m.spread_deep.items()} } in layers {EARLY}..{depth} (reported; "
        "deep-layer rates of masks that already collapsed are undefined)."
    )
    eps, i1, i64, i0 = m.median_eps_layer0, PAPER_INDEX[1.0], PAPER_INDEX[64.0], PAPER_INDEX[1 / 64]
    for k in (k for k, v in m.monotone.items() if not v):
        early = m.early_rate[k]
        hi = [r for q, r in zip(DQKS, early) if q >= 1]
        text += (
            f" {MASK_LABELS[k]}: not monotone (Spearman {m.spearman[k]:.2f}); for d_QK >= 1 its early factor "
            f"only ranges over [{np.nanmin(hi):.3g}, {np.nanmax(hi):.3g}] although the median layer-0 eps "
            f"changes from {eps[k][i1]:.3g} (d_QK=1) to {eps[k][i64]:.3g} (d_QK=64). eps enters only the "
            "upper bound of Theorem 1: sharper attention that sends many queries to the same few keys also "
            "merges tokens quickly, so a smaller eps need not slow the actual collapse"
        )
        a, b = early[i0], early[i1]
        text += (
            f"; from d_QK = 1/64 to 1 the factor falls from {a:.3g} to {b:.3g}."
            if a > b
            else f"; even from d_QK = 1/64 to 1 it does not fall ({a:.3g} -> {b:.3g})."
        )
    return text


def describe(m: TemperatureMeasured, cs: list[V.Check], sz: dict, *, seed: int, quick: bool) -> Description:
    criterion = (
        f"checks: for each of the four masks the early per-layer factor (layers 0..{EARLY}) decreases with "
        f"d_QK (Spearman rank correlation with log d_QK <= {SPEARMAN_MAX:g}); the effect factor(1/64) - "
        "factor(64) is larger for the complete mask than for both windows. " + V.VERDICT_RULE
    )
    return Description(
        m.setting,
        key_numbers={
            f"effect factor(1/64) - factor(64), {MASK_LABELS[k]}": e
            for k, e in m.effect_1_64_minus_64.items()
        },
        criterion=criterion,
    )
