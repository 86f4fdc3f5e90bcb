r"""Target ``masks-collapse``: Theorem 1, masked attention without LN collapses exponentially.

SAN without LN (eq. 2), $X^{(t+1)} = A^{(t)} X^{(t)} W_V^{(t)}$ with per-layer Haar-orthogonal
$W_V$ (assumption A3 with equality, so the norm of the common vector cannot vanish and any
decay of mu is averaging, not shrinking weights), BERT-uniform $W_Q, W_K$, Gaussian inputs.
All masks share the same weights and inputs and run as one vmapped program.

For each mask we fit the per-layer factor of $\mu$ and compare it with the bound
$(1-\epsilon^r)^{1/r}$ evaluated with the measured $\epsilon$ (smallest attention weight on an
edge over all layers and samples) and the computed radius $r$. Norm shrinkage and directional
collapse are shown separately (docs/theory.md#experiments): $\mu$, $\mu/\|X\|_F$,
$\mu(\mathrm{LN}(X))$ and the mean row norm.

Rule, fixed before the run (docs/theory.md, "Verdict rules fixed before the run"): the locality
ordering max(complete, causal) < window < uni window of the average per-layer factor of
$\mu(\mathrm{LN}(X))$ is scored at two depths, the first `EARLY` layers and the final depth,
one check each; the headline lists both sets of factors and ``masks_collapse_ordering.png``
shows the factor against the depth with both scored depths marked.

The average factor over the layers above the round-off floor (issue 54, item 7; written before the
run): at a scored depth $T_s$ the factor of a mask is $(\mu_{t^*} / \mu_0)^{1/t^*}$ with $\mu$ the
mean $\mu(\mathrm{LN}(X))$ and $t^* \le T_s$ the last layer before $\mu$ first falls to the
relative floor ($\mu_t \le$ floor $\cdot \mu_0$; $t^* = T_s$ when it never does). Formerly the
ratio at $T_s$ was clamped to the floor, so a mask that reached the floor at layer 2 (complete) or
17 (causal) got $(\mathrm{floor})^{1/T_s}$ = 0.9319 at 128 layers in float32: a number set by the
round-off floor and the depth, not by the mask. Where $\mu$ is at the floor already at layer 1
($t^* = 0$), the factor is the floor itself, an upper estimate of the true one-layer factor; the
ordering's first inequality, $\max(\text{complete}, \text{causal}) < \text{window}$, stays
decidable with an upper estimate on its left side. The layer $t^*$ at the final depth is in the
JSON (``floor_layer``: the first layer at the floor, null if none).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import jax
import numpy as np

from ..._theory._rates import bound_rate, fit_rate_window, log10_bound_gap
from .. import _verdict as V
from .._dtype import float_dtype, rel_floor
from .._masktable import MASK_LABELS, PAPER_MASKS, mask_table, masks_for
from .._report import format_table
from .._runs import band, san_layer, simulate_stacked, with_masks
from .._target import Description, Measured, Rendered, off_json
from ._rate_summary import geo_mean, ratio_text

NAME = "masks-collapse"
CLAIM = (
    "Theorem 1: without LayerNorm, masked self-attention with any quasi-strongly connected mask makes "
    "tokens converge exponentially to a common vector, mu(X^(t)) <= C (1 - eps^r)^(t/r) with r the graph "
    "radius; more local masks (larger r) collapse more slowly (complete ~ causal faster than window +-1 "
    "faster than the uni-directional window)."
)

MASKS = ("complete", "causal", "window", "window-uni", "dilated", "global")
#: Depth of the first ordering check: BERT's 12 layers (paper Fig. 2); the second is the final depth.
EARLY = 12
#: The curves of the figure (metric names of `rankdyn.metrics.direction_metrics`).
BANDS = ("mu", "mu_rel", "mu_normalized", "row_norm_mean")


def sizes(quick: bool) -> dict:
    if quick:
        return {"n": 64, "d": 32, "batch": 32, "depth": 128}
    return {"n": 128, "d": 64, "batch": 256, "depth": 256}


@dataclasses.dataclass(frozen=True)
class MaskCollapse(Measured):
    """One mask: its graph facts, Theorem 1's bound with the measured eps, the fitted rate and
    the ratios last / first layer of the four curves."""

    strongly_connected: bool
    quasi_strongly_connected: bool
    num_centers: int
    radius: int
    eps_measured: float
    log10_eps_pow_r: float
    bound_rate: float
    fitted_rate: float
    fit_window: tuple[int, int] | None
    mu_ratio: float
    mu_normalized_ratio: float
    mu_rel_ratio: float
    row_norm_ratio: float
    avg_rate_mu_normalized: float
    #: Average per-layer factor of mu(LN(X)) over the first `EARLY` layers.
    avg_rate_mu_normalized_early: float
    nonfinite: int
    #: First layer where the mean mu(LN(X)) is at the relative floor (None: never); the factors
    #: average over the layers before it (`floor_factor`).
    floor_layer: int | None = None

    def to_dict(self) -> dict:
        d = super().to_dict()
        return {
            (f"avg_rate_mu_normalized_first_{EARLY}" if k == "avg_rate_mu_normalized_early" else k): v
            for k, v in d.items()
        }


@dataclasses.dataclass(frozen=True)
class MasksCollapseMeasured(Measured):
    """Per mask a `MaskCollapse`; the saved layers; the curves and the setting for render."""

    per_mask: dict[str, MaskCollapse]
    layers_saved: int
    layers: np.ndarray = off_json()
    #: quantity -> mask label -> band (mean, std over samples).
    bands: dict = off_json()
    setting: dict = off_json()

    def factors(self, early: bool) -> dict[str, float]:
        """Average per-layer factor of mu(LN(X)) of the paper masks, first `EARLY` layers or all."""
        key = "avg_rate_mu_normalized_early" if early else "avg_rate_mu_normalized"
        return {m: getattr(self.per_mask[m], key) for m in PAPER_MASKS}


def floor_factor(layers, mun, t_max: int, floor: float) -> tuple[float, int | None]:
    r"""The average per-layer factor of ``mun`` over the layers above the round-off floor.

    $(\mu_{t^*} / \mu_0)^{1/t^*}$, $t^*$ the last saved layer $\le$ ``t_max`` before $\mu$ first
    falls to ``floor`` $\cdot \mu_0$ (module docstring); where the first saved layer $t_1$ is
    already at the floor, ``floor`` $^{1/t_1}$, an upper estimate.

    Returns:
        The factor and the first saved layer at the floor (None if there is none).
    """
    t, mun = np.asarray(layers), np.asarray(mun, float)
    below = np.flatnonzero((t > 0) & (mun <= floor * mun[0]))
    first = int(t[below[0]]) if below.size else None
    ok = np.flatnonzero((t > 0) & (t <= t_max) & (t < (first if first is not None else t_max + 1)))
    if not ok.size:
        return float(floor ** (1.0 / first)), first
    i = ok[-1]
    return float((mun[i] / mun[0]) ** (1.0 / t[i])), first


def ordered(g: dict[str, float]) -> bool:
    """The paper's locality ordering of the factors: max(complete, causal) < window < uni window."""
    return bool(max(g["complete"], g["causal"]) < g["window"] < g["window-uni"])


def compute(sz: dict, seed: int) -> MasksCollapseMeasured:
    r"""Run the SAN $X \leftarrow A X W_V$ (eq. 2) under every mask of `MASKS` as one vmapped program.

    Arguments:
        sz: ``n, d, batch, depth`` (`sizes`).
        seed: ``key(seed)`` splits into the weights' and the inputs' keys.

    Returns:
        The per-mask rates, bounds and ratios, the curves of the figure and the setting.
    """
    from ..._model._tokens import initial_tokens

    n, d, batch, depth = sz["n"], sz["d"], sz["batch"], sz["depth"]
    dtype = float_dtype()
    floor = rel_floor(dtype)
    masks = masks_for(MASKS, n)
    graph = mask_table(masks)
    k_w, k_x = jax.random.split(jax.random.key(seed))
    layer = san_layer(k_w, n, d, depth, dtype=dtype)
    x0 = initial_tokens(k_x, "gaussian", n, d, batch=batch, dtype=dtype)
    layers, met, nonfinite, _ = simulate_stacked(with_masks(layer, masks), x0, depth)

    per_mask, bands = {}, {k: {} for k in BANDS}
    for i, name in enumerate(masks):
        ok = ~nonfinite[i]
        b = {k: band(met[k][i], ok) for k in BANDS}
        for k in BANDS:
            bands[k][MASK_LABELS[name]] = b[k]
        eps = float(np.min(met["eps_min"][i][ok])) if ok.any() else float("nan")
        r = graph[name]["radius"]
        # Geometric mean over samples: the rate of the typical trajectory.
        rate, window = fit_rate_window(
            layers, geo_mean(met["mu"][i], ok), geo_mean(met["mu_rel"][i], ok), floor
        )
        mun = b["mu_normalized"]["mean"]
        avg, floor_layer = floor_factor(layers, mun, depth, floor)
        avg_early, _ = floor_factor(layers, mun, min(EARLY, depth), floor)

        def ratio(k):
            return float(b[k]["mean"][-1] / b[k]["mean"][0])

        per_mask[name] = MaskCollapse(
            **graph[name],
            eps_measured=eps,
            log10_eps_pow_r=log10_bound_gap(eps, r),
            bound_rate=bound_rate(eps, r),
            fitted_rate=rate,
            fit_window=window,
            mu_ratio=ratio("mu"),
            mu_normalized_ratio=float(mun[-1] / mun[0]),
            mu_rel_ratio=ratio("mu_rel"),
            row_norm_ratio=ratio("row_norm_mean"),
            # Average per-layer factor over the layers above the floor: the collapse-speed ordering.
            avg_rate_mu_normalized=avg,
            avg_rate_mu_normalized_early=avg_early,
            nonfinite=int(np.sum(nonfinite[i])),
            floor_layer=floor_layer,
        )
    setting = _setting(sz, seed, dtype, floor)
    return MasksCollapseMeasured(per_mask, len(layers), layers, bands, setting)


def _setting(sz: dict, seed: int, dtype, floor: float) -> dict:
    return {
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
        "dqk": sz["d"],
        "x0": "gaussian N(0,1)",
        "keys": "key(seed) -> (weights, inputs)",
        "floor": floor,
        "fit": "least squares of log(geometric-mean mu) on layers >= 1 above the relative floor "
        f"{floor:.2g}, second half of the usable points when more than 8",
    }


def _bound_check(name: str, v: MaskCollapse) -> V.Check:
    return V.bound_check(f"{MASK_LABELS[name]}: fitted rate <= (1-eps^r)^(1/r)", v.fitted_rate, v.bound_rate)


def ordering_checks(m: MasksCollapseMeasured) -> list[V.Check]:
    """The paper's locality ordering of the average per-layer factor of mu(LN(X)), scored at both
    depths fixed before the run: the first `EARLY` layers and the final depth (one check each)."""
    out = []
    for early, where, ts in (
        (True, f"over the first {EARLY} layers", EARLY),
        (False, f"over all {m.setting['depth']} layers", m.setting["depth"]),
    ):
        g = m.factors(early=early)

        def at(k):
            fl = m.per_mask[k].floor_layer
            return f" (floor at layer {fl})" if fl is not None and fl <= ts else ""

        out.append(
            V.check(
                f"locality ordering {where}",
                ordered(g),
                "average factors of mu(LN(X)) over the layers above the floor: "
                + ", ".join(f"{MASK_LABELS[k]} {x:.4g}{at(k)}" for k, x in g.items()),
            )
        )
    return out


def checks(m: MasksCollapseMeasured) -> list[V.Check]:
    """(a) every mask decays; (b) fitted rate <= Theorem 1's bound (not testable where the bound
    is 1 within `_verdict.BOUND_ONE_TOL`); (c) the paper's locality ordering on the paper masks at
    the first `EARLY` layers and at the final depth (`ordering_checks`)."""
    return (
        [
            V.check(
                f"{MASK_LABELS[k]}: decays",
                v.mu_ratio < 0.9 and v.mu_normalized_ratio < 0.9 and v.fitted_rate < 1.0,
                f"mu T/0 {v.mu_ratio:.3g}, mu(LN) T/0 {v.mu_normalized_ratio:.3g}, rate {v.fitted_rate:.4g}",
            )
            for k, v in m.per_mask.items()
        ]
        + [_bound_check(k, v) for k, v in m.per_mask.items()]
        + ordering_checks(m)
    )


def table(m: MasksCollapseMeasured) -> str:
    """The per-mask table: graph facts, eps, bound, fitted rate and the ratios T / 0."""
    rows = [
        "| mask | strongly conn. | centers | r | eps (measured) | log10 eps^r | bound (1-eps^r)^(1/r) | "
        "fitted rate (layers) | mu T/0 | mu(LN) T/0 | row norm T/0 |",
        "|" + "---|" * 11,
    ]
    for k, v in m.per_mask.items():
        window = tuple(v.fit_window) if v.fit_window else ""
        rows.append(
            f"| {MASK_LABELS[k]} | {v.strongly_connected} | {v.num_centers} | {v.radius} | "
            f"{v.eps_measured:.3g} | {v.log10_eps_pow_r:.1f} | {v.bound_rate:.6g} | "
            f"{v.fitted_rate:.4g} {window} | {v.mu_ratio:.3g} | {v.mu_normalized_ratio:.3g} | "
            f"{v.row_norm_ratio:.3g} |"
        )
    return "\n".join(rows)


def render(out: Path, m: MasksCollapseMeasured, cs: list[V.Check], *, quick: bool = False) -> Rendered:
    """The four-curve figure, the fitted-vs-bound figure, and the notes from the numbers."""
    from ...plotting import plot_band_panels, plot_rates_vs_bounds, save_figure

    s = m.setting
    panels = {
        "mu (eq. 4)": m.bands["mu"],
        "mu(LN(X)): direction only": m.bands["mu_normalized"],
        "mu / ||X||_F": m.bands["mu_rel"],
        "mean row norm: norm shrinkage": m.bands["row_norm_mean"],
    }
    fig = plot_band_panels(
        m.layers,
        panels,
        suptitle=f"SAN without LN, orthogonal W_V, n={s['n']}, d={s['d']}, {s['batch']} samples",
        ylabels={t: t.split(":")[0] for t in panels},
        sharey=False,
        dtype=s["dtype"],
        floor_panels=list(panels)[:3],
    )
    figs = [save_figure(fig, out / "masks_collapse_mu.png")]
    ax = plot_rates_vs_bounds(
        [MASK_LABELS[k] for k in m.per_mask],
        [v.fitted_rate for v in m.per_mask.values()],
        [v.bound_rate for v in m.per_mask.values()],
        title="Theorem 1: decay per layer, fitted vs guaranteed by (1-eps^r)^(1/r)",
        # 1 - (1 - x)^(1/r) = x / r (1 + O(x)): the bound's gap where it is 1 in float64 (x < 1e-16).
        log10_gaps=[v.log10_eps_pow_r - np.log10(max(v.radius, 1)) for v in m.per_mask.values()],
        testable=[_bound_check(k, v).testable for k, v in m.per_mask.items()],
    )
    figs.append(save_figure(ax.figure, out / "masks_collapse_rates.png"))
    figs.append(save_figure(ordering_figure(m), out / "masks_collapse_ordering.png"))
    return Rendered(figs, notes(m), table(m))


def ordering_figure(m: MasksCollapseMeasured):
    """``masks_collapse_ordering.png``: what the ordering checks test. The average per-layer factor
    of mu(LN(X)) over the first t layers, (mu_t / mu_0)^(1/t), against t for the paper masks, with
    the two scored depths marked and each one's check result."""
    from ..._plotting._verdict_figures import plot_factor_vs_depth

    floor = m.setting.get("floor", 0.0)
    curves = {}
    for k in PAPER_MASKS:
        mun = np.asarray(m.bands["mu_normalized"][MASK_LABELS[k]]["mean"], float)
        t = np.asarray(m.layers)[1:]
        # The factor the checks score at each depth: over the layers above the floor.
        curves[MASK_LABELS[k]] = (t, np.array([floor_factor(m.layers, mun, int(s), floor)[0] for s in t]))
    marks = {c.name.replace("locality ordering ", ""): c.passed for c in ordering_checks(m)}
    depths = (min(EARLY, m.setting["depth"]), m.setting["depth"])
    return plot_factor_vs_depth(
        curves,
        dict(zip(depths, marks.items())),
        title="locality: decay of complete, causal > window > uni window?",
        ylabel="decay per layer over the first t layers\n1 - (mu(LN(X))_t / mu(LN(X))_0)^(1/t)",
    )


def notes(m: MasksCollapseMeasured) -> str:
    """The prose: every conclusion is stated only when the numbers (or the dtype) make it so."""
    s, pm = m.setting, m.per_mask
    text = (
        "The bound uses the smallest attention weight seen over all layers and samples "
        "(a valid uniform eps). "
    )
    vacuous = [k for k, v in pm.items() if not _bound_check(k, v).testable]
    if vacuous:
        exact = [MASK_LABELS[k] for k in vacuous if pm[k].bound_rate == 1.0]
        text += (
            f"It is loose for {', '.join(MASK_LABELS[k] for k in vacuous)}: there log10 eps^r is "
            f"{ratio_text([pm[k].log10_eps_pow_r for k in vacuous])}, so (1-eps^r)^(1/r), computed in "
            f"float64 whatever the run's dtype, is 1 within {V.BOUND_ONE_TOL:g}"
            + (f" (exactly 1 for {', '.join(exact)})" if exact else "")
            + "; the check 'fitted <= bound' cannot fail there and is shown as not testable. "
        )
    else:
        text += f"Every bound is below 1 - {V.BOUND_ONE_TOL:g}, so every 'fitted <= bound' check could fail. "
    n, depth = s["n"], s["depth"]
    if depth < n**2:
        rates = [pm[k].fitted_rate for k in ("window", "window-uni")]
        text += (
            f"For the window masks the depth ({depth}) is below the mixing time of a path graph (~n^2 = "
            f"{n**2} layers), so their fitted rates ({ratio_text(rates)}) are those of the pre-asymptotic "
            "regime (diffusive smoothing)" + (", close to 1. " if min(rates) > 0.9 else ". ")
        )
    text += (
        "With orthogonal W_V the row norm can shrink only because averaging random directions shortens "
        "tokens (consensus vector ~ |mean of x0|); here the mean row norm ends at "
        f"{ratio_text([v.row_norm_ratio for v in pm.values()])} of its start. mu(LN(X)) shows the "
        "directional collapse without any norm effect. "
    )
    at_floor = [MASK_LABELS[k] for k, v in pm.items() if v.fit_window and v.fit_window[0] == 0]
    if at_floor:
        text += (
            "A fit window starting at layer 0 marks an upper estimate: mu reached the round-off floor within "
            f"that many layers ({', '.join(at_floor)})."
        )
    return text.rstrip() + _ordering_notes(m)


def _ordering_notes(m: MasksCollapseMeasured) -> str:
    ge, g = m.factors(early=True), m.factors(early=False)
    ordering, ordering_final = ordered(ge), ordered(g)
    text = ""
    if not ordering:
        text += (
            f" The locality ordering failed over the first {EARLY} layers; average factors of mu(LN(X)):\n\n"
            + format_table({MASK_LABELS[k]: x for k, x in ge.items()}, key="mask")
            + "\n\n"
        )
    if ordering != ordering_final:
        text += (
            f" The ordering at the final depth differs from the first {EARLY} layers (average factors per "
            "layer of mu(LN(X)) in the table below)"
        )
        if g["window-uni"] < g["window"]:
            text += (
                ": the uni-directional window overtakes the bidirectional one once t exceeds ~2n, because on "
                "a directed path the centre's information travels as a front (~1/2 token per layer) and the "
                "chain then contracts geometrically, whereas a bidirectional window only diffuses ~sqrt(t) "
                "tokens (mixing time ~n^2). The radius r orders the bounds, not the actual speeds at every "
                "depth"
            )
        text += ".\n\n" + format_table(
            {MASK_LABELS[k]: {f"first {EARLY} layers": ge[k], "all layers": g[k]} for k in PAPER_MASKS},
            key="mask",
        )
    return text


def describe(m: MasksCollapseMeasured, cs: list[V.Check], sz: dict, *, seed: int, quick: bool) -> Description:
    criterion = (
        "rule fixed before the run (docs/theory.md): checks: every mask decays (mean mu and mean "
        "mu(LN(X)) at the last layer below 0.9 x layer 0, fitted per-layer rate < 1); every fitted rate "
        "<= Theorem 1's (1-eps^r)^(1/r) with the measured eps and "
        f"radius; over the first {EARLY} layers (BERT depth, Fig. 2) and over all {m.setting['depth']} "
        "layers (one check each) the average per-layer factor of mu(LN(X)), over the layers before it first "
        "reaches the round-off floor, satisfies max(complete, causal) "
        "< window "
        "< uni window. " + V.VERDICT_RULE
    )
    ge, g = m.factors(early=True), m.factors(early=False)
    key_numbers = {f"factor mu(LN(X)) first {EARLY} layers, {MASK_LABELS[k]}": ge[k] for k in PAPER_MASKS}
    key_numbers |= {
        f"factor mu(LN(X)) all {m.setting['depth']} layers, {MASK_LABELS[k]}": g[k] for k in PAPER_MASKS
    }
    key_numbers |= {f"fitted rate of mu {MASK_LABELS[k]}": m.per_mask[k].fitted_rate for k in PAPER_MASKS}
    return Description(m.setting, key_numbers=key_numbers, criterion=criterion)
