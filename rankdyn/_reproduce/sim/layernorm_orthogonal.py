r"""Target ``layernorm-orthogonal``: Theorem 2 and Corollary 1, post-LN and pre-LN.

With the paper's LayerNorm (rows scaled to the unit sphere) and per-layer Haar-orthogonal
$W_V$:

- strongly connected masks (complete, window +-1) from inputs uniform on the sphere with
  $n \le d$ (full rank, condition (*)) collapse: $\mu \le C(1 - n\epsilon^{2r})^{t/(2r)}$;
- quasi-strongly connected masks (causal, uni window) collapse when all initial cosines are
  $\ge 0$ (inputs on the positive orthant): $\mu \le C(1 - c\,\epsilon^{2r})^{t/(2r)}$ with
  $c$ the number of centers.

Both placements, post-LN (eq. 3) and pre-LN ($X^{(t+1)} = A\,\mathrm{LN}(X)W_V$, $A$ from
$\mathrm{LN}(X)$), are run. As an outside-the-hypotheses control, the quasi-strongly connected
masks are also run from sphere inputs (negative cosines). Each placement is ONE vmapped
program over (mask, input kind).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from ..._errors import UsageError
from ..._theory._rates import bound_rate, fit_rate_window, log10_bound_gap
from .. import _verdict as V
from .._dtype import float_dtype, rel_floor
from .._masktable import MASK_LABELS, mask_table, masks_for
from .._runs import band, rebuild, san_layer, simulate_many, stack
from .._target import Description, Measured, Rendered, off_json
from ._rate_summary import geo_mean, ratio_text

NAME = "layernorm-orthogonal"
CLAIM = (
    "Theorem 2 and Corollary 1 (and their pre-LN versions, paper §4.2): with LayerNorm and orthogonal W_V, "
    "strongly connected masks collapse exponentially from full-rank inputs with n <= d, "
    "mu <= C (1 - n eps^(2r))^(t/(2r)); quasi-strongly connected masks collapse exponentially when all "
    "initial cosines are >= 0, mu <= C (1 - eps^(2r))^(t/(2r))."
)

#: (mask, input kind, inside the theorem's hypotheses?)
CASES = (
    ("complete", "sphere", True),
    ("window", "sphere", True),
    ("causal", "nonneg", True),
    ("window-uni", "nonneg", True),
    ("causal", "sphere", False),
    ("window-uni", "sphere", False),
)
PLACEMENTS = ("post", "pre")
#: "Collapses": mean mu at the last layer below this fraction of layer 0.
COLLAPSED = 1e-2
#: `COLLAPSED` as the criterion writes it.
COLLAPSED_TEXT = f"{COLLAPSED:.0e}".replace("e-0", "e-")
#: "Nearly uniform" attention: eps at least this fraction of 1 / (largest neighbourhood).
UNIFORM = 0.8


def sizes(quick: bool) -> dict:
    if quick:
        return {"n": 16, "d": 32, "batch": 32, "depth": 512, "save_every": 2}
    return {"n": 32, "d": 64, "batch": 256, "depth": 2048, "save_every": 4}


@dataclasses.dataclass(frozen=True)
class LayerNormCase(Measured):
    """One (placement, mask, input kind): graph facts, the bound with the measured eps, the fitted
    rate, mu and the smallest cosine at the first and last layer."""

    placement: str
    mask: str
    x0: str
    inside_hypotheses: bool
    strongly_connected: bool
    quasi_strongly_connected: bool
    num_centers: int
    radius: int
    eps_measured: float
    bound: str
    log10_c_eps_pow_2r: float
    bound_rate: float
    fitted_rate: float
    fit_window: tuple[int, int] | None
    mu_0: float
    mu_T: float
    mu_ratio: float
    min_cos_0: float
    min_cos_T: float
    frac_min_cos0_nonneg: float
    nonfinite: int
    degenerate_ln: int


@dataclasses.dataclass(frozen=True)
class LayerNormMeasured(Measured):
    """The cases ``"<placement>/<mask>/<x0>"`` and the largest pre- vs post-LN gap of mu_T/mu_0."""

    cases: dict[str, LayerNormCase]
    max_log10_gap_pre_vs_post_mu_ratio: float
    layers: np.ndarray = off_json()
    #: panel title -> case label -> band (mu, then 1 - min cosine), for the figure.
    panels: dict = off_json()
    #: mask -> the largest neighbourhood of a token (eps of uniform attention is 1 / that).
    neighbours: dict = off_json()
    setting: dict = off_json()

    @property
    def scored(self) -> dict[str, LayerNormCase]:
        """The cases inside the theorems' hypotheses (the ones the checks score)."""
        return {k: v for k, v in self.cases.items() if v.inside_hypotheses}


def compute(sz: dict, seed: int) -> LayerNormMeasured:
    r"""Run every case of `CASES` with post-LN $X \leftarrow \mathrm{LN}(A X W_V)$ and pre-LN (one program).

    Arguments:
        sz: ``n, d, batch, depth, save_every`` (`sizes`), with ``n <= d`` (Theorem 2's full rank).
        seed: ``key(seed)`` splits into the weights' and the inputs' keys.

    Returns:
        Per case its bound, fitted rate, mu and min cosine; the pre/post gap; curves and setting.

    Raises:
        UsageError: ``n > d``.
    """
    from ..._model._tokens import initial_tokens

    n, d, batch, depth, every = sz["n"], sz["d"], sz["batch"], sz["depth"], sz["save_every"]
    if n > d:
        raise UsageError(f"Theorem 2 needs n <= d, got n={n}, d={d}: pass a size with n <= d.")
    dtype = float_dtype()
    floor = rel_floor(dtype)
    masks = masks_for(sorted({m for m, _, _ in CASES}), n)
    graph = mask_table(masks)
    k_w, k_x = jax.random.split(jax.random.key(seed))
    x0s = {
        kind: initial_tokens(jax.random.fold_in(k_x, i), kind, n, d, batch=batch, dtype=dtype)
        for i, kind in enumerate(("sphere", "nonneg"))
    }
    x0 = jnp.stack([x0s[kind] for _, kind, _ in CASES])
    post = san_layer(k_w, n, d, depth, placement="post", dtype=dtype)
    stacks = [
        stack(
            [
                eqx.tree_at(lambda l: l.mask, rebuild(post, placement=p), jnp.asarray(masks[m]))
                for m, _, _ in CASES
            ]
        )
        for p in PLACEMENTS
    ]
    # One compiled program for both placements (each vmapped over the cases).
    outs = simulate_many(stacks, x0, depth, save_every=every, x0_per_config=True)
    cases, panels_mu, panels_cos = {}, {}, {}
    for placement, (layers, met, nonfinite, degenerate) in zip(PLACEMENTS, outs):
        p_mu = panels_mu.setdefault(f"{placement}-LN: mu", {})
        p_cos = panels_cos.setdefault(f"{placement}-LN: 1 - min cosine", {})
        for i, (m, kind, inside) in enumerate(CASES):
            ok = ~nonfinite[i]
            label = f"{MASK_LABELS[m]} / {kind}"
            b_mu, b_cos = band(met["mu"][i], ok), band(met["min_cos"][i], ok)
            # Cases outside the hypotheses (drawn last) are dashed: where they coincide with a case
            # inside, both colours still show.
            style = {"linestyle": "-" if inside else (0, (4, 3))}
            p_mu[label] = b_mu | style
            p_cos[label] = {"mean": 1.0 - b_cos["mean"], "std": b_cos["std"]} | style
            g = graph[m]
            eps = float(np.min(met["eps_min"][i][ok])) if ok.any() else float("nan")
            # Theorem 2 (strongly connected): n in the contraction term; Corollary 1: the centers.
            which, centers = (
                ("Theorem 2", n) if g["strongly_connected"] else ("Corollary 1", g["num_centers"])
            )
            gm = geo_mean(met["mu"][i], ok)
            rate, window = fit_rate_window(layers, gm, gm / max(gm[0], 1e-300), floor)
            cases[f"{placement}/{m}/{kind}"] = LayerNormCase(
                placement=placement,
                mask=m,
                x0=kind,
                inside_hypotheses=inside,
                **g,
                eps_measured=eps,
                bound=which,
                log10_c_eps_pow_2r=log10_bound_gap(eps, g["radius"], 2, centers),
                bound_rate=bound_rate(eps, g["radius"], 2, centers),
                fitted_rate=rate,
                fit_window=window,
                mu_0=float(b_mu["mean"][0]),
                mu_T=float(b_mu["mean"][-1]),
                mu_ratio=float(b_mu["mean"][-1] / b_mu["mean"][0]),
                min_cos_0=float(b_cos["mean"][0]),
                min_cos_T=float(b_cos["mean"][-1]),
                frac_min_cos0_nonneg=float(np.mean(met["min_cos"][i][:, 0] >= 0)),
                nonfinite=int(np.sum(nonfinite[i])),
                degenerate_ln=int(np.sum(degenerate[i])),
            )

    def log_ratio(key):
        return np.log10(max(cases[key].mu_ratio, 1e-300))

    # With A computed from LN(X), Z_t = LN(X_t) of pre-LN obeys exactly the post-LN recursion, so the
    # two placements can differ only through the final rescaling: measure how much they differ.
    gap = max(abs(log_ratio(f"pre/{m}/{k}") - log_ratio(f"post/{m}/{k}")) for m, k, _ in CASES)
    neighbours = {m: int(np.max(np.sum(np.asarray(a), axis=1))) for m, a in masks.items()}
    # mu panels in the first row, 1 - min cosine in the second (a y range per row).
    panels = panels_mu | panels_cos
    return LayerNormMeasured(cases, gap, layers, panels, neighbours, _setting(sz, seed, dtype, floor))


def _setting(sz: dict, seed: int, dtype, floor: float) -> dict:
    return {
        **sz,
        "seed": seed,
        "dtype": str(np.dtype(dtype)),
        "cases": [{"mask": m, "x0": k, "inside_hypotheses": h} for m, k, h in CASES],
        "placements": PLACEMENTS,
        "ln": "sphere (rows to unit 2-norm, the paper's LN)",
        "pre_ln_attention": "from LN(X)",
        "value": "orthogonal (Haar), per layer",
        "qk": "bert U(+-1/sqrt d), per layer",
        "dqk": sz["d"],
        "x0_kinds": {
            "sphere": "uniform on S^{d-1} (full rank since n <= d)",
            "nonneg": "uniform on the positive orthant of the sphere (all cosines >= 0)",
        },
        "keys": "key(seed) -> (weights, inputs); inputs fold_in 0 (sphere), 1 (nonneg); same weights for "
        "both placements",
        "fit": f"log(geometric-mean mu), layers >= 1 above the relative floor {floor:.2g}, second half of "
        "the points",
    }


def _bound_check(key: str, v: LayerNormCase) -> V.Check:
    return V.bound_check(f"{key}: fitted rate <= {v.bound} bound", v.fitted_rate, v.bound_rate)


def checks(m: LayerNormMeasured) -> list[V.Check]:
    """Per case inside the hypotheses: it collapses (mu_T/mu_0 < `COLLAPSED`, a fitted rate < 1)
    and its fitted rate obeys the theorem's bound."""
    out = []
    for k, v in m.scored.items():
        out.append(
            V.check(
                f"{k}: collapses",
                v.mu_ratio < COLLAPSED and np.isfinite(v.fitted_rate) and v.fitted_rate < 1.0,
                f"mu T/0 {v.mu_ratio:.3g}, rate {v.fitted_rate:.4g}",
            )
        )
        out.append(_bound_check(k, v))
    return out


def table(m: LayerNormMeasured) -> str:
    """Every case: hypotheses, graph facts, eps, bound, fitted rate, mu T/0 and the min cosine."""
    rows = [
        "| placement | mask | x0 | hypotheses | r | centers | eps | bound | log10 c eps^2r | bound rate | "
        "fitted rate (layers) | mu T/0 | min cos 0 -> T |",
        "|" + "---|" * 13,
    ]
    for v in m.cases.values():
        window = tuple(v.fit_window) if v.fit_window else ""
        rows.append(
            f"| {v.placement} | {MASK_LABELS[v.mask]} | {v.x0} | "
            f"{'in' if v.inside_hypotheses else 'outside'} | {v.radius} | {v.num_centers} | "
            f"{v.eps_measured:.3g} | {v.bound} | {v.log10_c_eps_pow_2r:.1f} | {v.bound_rate:.6g} | "
            f"{v.fitted_rate:.4g} {window} | {v.mu_ratio:.3g} | {v.min_cos_0:.2f} -> {v.min_cos_T:.4f} |"
        )
    return "\n".join(rows)


def render(out: Path, m: LayerNormMeasured, cs: list[V.Check], *, quick: bool = False) -> Rendered:
    """mu and 1 - min cosine per placement, fitted rates against the bounds, and the notes."""
    from ...plotting import plot_band_panels, plot_rates_vs_bounds, save_figure

    s = m.setting
    fig = plot_band_panels(
        m.layers,
        m.panels,
        ylabels={t: t.split(": ")[1] for t in m.panels},
        sharey="row",
        dtype=s["dtype"],
        suptitle=f"sphere LN, orthogonal W_V, n={s['n']}, d={s['d']}, {s['batch']} samples",
    )
    figs = [save_figure(fig, out / "layernorm_orthogonal_mu.png")]
    ax = plot_rates_vs_bounds(
        list(m.scored),
        [v.fitted_rate for v in m.scored.values()],
        [v.bound_rate for v in m.scored.values()],
        title="decay per layer, fitted vs guaranteed by Theorem 2 / Corollary 1",
        # 1 - (1 - x)^(1/(2r)) = x / (2r) (1 + O(x)), x = c eps^(2r): the gap where it is 1 in float64.
        log10_gaps=[v.log10_c_eps_pow_2r - np.log10(max(2 * v.radius, 1)) for v in m.scored.values()],
        testable=[_bound_check(k, v).testable for k, v in m.scored.items()],
    )
    figs.append(save_figure(ax.figure, out / "layernorm_orthogonal_rates.png"))
    return Rendered(figs, notes(m, cs), table(m))


def notes(m: LayerNormMeasured, cs: list[V.Check]) -> str:
    """The prose: each conclusion only when the numbers (or the dtype) make it so."""
    text = "The bounds use the smallest attention weight over all layers and samples. "
    uniformity = [v.eps_measured * m.neighbours[v.mask] for v in m.scored.values()]
    if min(uniformity) >= UNIFORM:
        text += (
            "With unit-norm tokens and BERT-uniform W_Q, W_K the scores are small, so attention is nearly "
            f"uniform: eps is {ratio_text(uniformity)} times 1/max|N_i| in every case inside the hypotheses. "
        )
    vacuous = {k: v for k, v in m.scored.items() if not _bound_check(k, v).testable}
    if vacuous:
        text += (
            f"The contraction terms c*eps^(2r) of {', '.join(vacuous)} are tiny (log10 "
            f"{ratio_text([v.log10_c_eps_pow_2r for v in vacuous.values()])}), so their bound rates are 1 "
            f"within {V.BOUND_ONE_TOL:g} and 'fitted <= bound' cannot fail there (shown as not testable). "
        )
    outside = {k: float(f"{v.mu_ratio:.3g}") for k, v in m.cases.items() if not v.inside_hypotheses}
    text += (
        "Outside the hypotheses (sphere inputs with negative cosines, quasi-strongly connected masks) "
        f"mu_T/mu_0 = {outside}: Corollary 1 does not apply there, so neither outcome contradicts the paper. "
    )
    at_floor = [k for k, v in m.cases.items() if v.fit_window and v.fit_window[0] == 0]
    if at_floor:
        text += (
            "A fit window starting at layer 0 marks an upper estimate: mu reached the round-off floor within "
            f"that many layers ({', '.join(at_floor)}). "
        )
    gap = m.max_log10_gap_pre_vs_post_mu_ratio
    text += (
        "Pre-LN with attention computed from LN(X) is post-LN in disguise: Z_t = LN(X_t) satisfies "
        "Z_{t+1} = LN(A(Z_t) Z_t W_V), the post-LN map, and pre-LN's X_t = A Z W_V only adds row norms <= 1; "
        + (
            f"accordingly the two placements agree here to {gap:.2g} decades in mu_T/mu_0. "
            if gap < 1
            else f"yet the two placements differ here by up to {gap:.2g} decades in mu_T/mu_0. "
        )
    )
    eps = float(np.finfo(m.setting["dtype"]).eps)
    text += (
        "In the figure, curves inside the grey round-off band are float noise and drawn faint: e.g. 1 - min "
        f"cosine of a collapsed state rounds to about +-{eps:.0e} in {m.setting['dtype']} (min cos can round "
        "above 1), so a lone positive value among them shows on the log axis as a spike, not a feature. "
        "Cases outside the hypotheses are dashed, so curves that coincide with a case inside them stay "
        "visible."
    )
    failed = [c.name for c in cs if c.testable and not c.passed]
    if failed:
        text += " Cases that did not meet the criterion: " + ", ".join(failed) + "."
        if any("window" in f for f in failed):
            text += (
                " A window mask is a path graph whose mixing time grows like n^2 layers; at this depth it "
                f"may not have reached the {COLLAPSED_TEXT} level yet."
            )
    return text


def describe(m: LayerNormMeasured, cs: list[V.Check], sz: dict, *, seed: int, quick: bool) -> Description:
    criterion = (
        "for each case inside the hypotheses (complete and window +-1 from sphere inputs; causal and uni "
        f"window from nonnegative inputs) and each placement: mean mu at the last layer < {COLLAPSED_TEXT} x "
        "layer 0, a fitted per-layer rate < 1, and fitted rate <= the bound (Theorem 2: (1-n "
        "eps^(2r))^(1/(2r)); Corollary 1: (1-c eps^(2r))^(1/(2r)), c centers) with the measured "
        "eps. " + V.VERDICT_RULE
    )
    return Description(
        m.setting,
        key_numbers={f"{k} mu_T/mu_0": v.mu_ratio for k, v in list(m.scored.items())[:4]},
        criterion=criterion,
    )
