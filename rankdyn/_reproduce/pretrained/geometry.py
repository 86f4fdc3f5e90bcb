r"""Target ``geometry``: token geometry along depth in a trained model (paper Fig. 4, 8 and 9).

On the trained checkpoint (MiniLM by default, ``--checkpoint DIR`` otherwise; `pretrained_common`)
as trained (variant ``full``, its own mask, eval mode) and on real text: at every layer the
numerical rank of the token matrix (relative tolerance stated), $\sigma_{\min}$, the mean
pairwise $|\cos|$ (diagonal excluded) and the stable rank $\|X\|_F^2/\|X\|_2^2$ (Fig. 4); the
whole singular spectrum at every layer for 3 excerpts drawn with the seed (Fig. 8); and the
pairwise cosines of the initial embeddings (Fig. 9), whose sign is Corollary 1's condition
$\phi^{(0)} \ge 0$. Without a checkpoint the target is "not testable here".
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import jax.numpy as jnp
import numpy as np

from .. import _verdict as V
from .._runs import band
from .._target import Description, Measured, Rendered, off_json
from .pretrained_common import (
    ModelRun,
    criterion,
    excerpt_ids,
    excerpt_sizes,
    model_run,
)

NAME = "geometry"
CLAIM = (
    "Paper Fig. 4, 8, 9 (pretrained models): along depth the token matrix keeps full rank and its smallest "
    "singular value stays well above 0, while the mean absolute pairwise cosine rises (anisotropy), matching "
    "the full-rank but near-low-dimensional equilibria of Theorem 3; one singular direction dominates; the "
    "pairwise cosines of the initial embeddings are all non-negative (Corollary 1's phi(0) >= 0)."
)

METRICS = ("num_rank", "sigma_min", "mean_abs_cos", "stable_rank")
TITLES = {
    "num_rank": "numerical rank",
    "sigma_min": "sigma_min",
    "mean_abs_cos": "mean |cos|",
    "stable_rank": "stable rank",
}
CHECK_NAMES = (
    "g1: full rank min(n, d) at every layer (mean over excerpts)",
    "g2: sigma_min at every layer > 1e-3 x its layer-0 value",
    "g3: mean |cos| at the last layer > layer 0",
    "g4: one direction dominates at the last layer (sigma_1^2 > 2 sigma_2^2, 3 excerpts)",
    "g5: initial pairwise cosines all >= 0 (every excerpt)",
)
#: Excerpts whose full spectra and initial cosines are shown (the paper's Figs. 8-9 use 3).
SHOWN = 3
#: g2: sigma_min must stay above this fraction of its layer-0 value; g4: sigma_1^2 / sigma_2^2 above this.
SIGMA_FLOOR, DOMINANCE = 1e-3, 2.0


@dataclasses.dataclass(frozen=True)
class GeometryMeasured(Measured):
    """Per layer (means over excerpts): numerical rank (and its minimum), sigma_min, sigma_max,
    mean |cos| and stable rank; the full spectra ``(shown, layers, min(n, d))`` of the excerpts
    ``spectra_excerpts``; per excerpt the smallest initial pairwise cosine, and the fraction of
    excerpts whose are all >= 0. Off the JSON: ``min(n, d)``, the rank tolerance, the bands of
    every metric (for the figure), the initial cosines ``(shown, n, n)`` and the `ModelRun`."""

    num_rank_min: float
    num_rank: np.ndarray
    sigma_min: np.ndarray
    sigma_max: np.ndarray
    mean_abs_cos: np.ndarray
    stable_rank: np.ndarray
    spectra_excerpts: np.ndarray
    spectra: np.ndarray
    initial_min_cos: np.ndarray
    initial_fraction_nonneg: float
    full_rank: int = off_json()
    rank_tol: float = off_json(default=float("nan"))
    bands: dict | None = off_json(default=None)
    initial_cosines: np.ndarray | None = off_json(default=None)
    run: ModelRun | None = off_json(default=None)


def sizes(quick: bool) -> dict:
    """The excerpts at the checkpoint's own depth (`pretrained_common.excerpt_sizes`)."""
    return excerpt_sizes(quick)


def compute(sz: dict, seed: int, *, ckpt, cache: dict | None = None) -> GeometryMeasured:
    """Run the checkpoint as trained on the excerpts and take every layer's spectrum (numbers only)."""
    from ..._run._simulate import simulate

    ids, corpus = excerpt_ids(ckpt, sz["n"], sz["batch"], cache)
    batch, n = ids.shape
    rank_tol = 1e-4 if ckpt.dtype == np.float32 else 1e-10
    x0 = ckpt.embed(ids)
    # One compiled scan per chunk of excerpts (no SVD inside XLA: it compiles slowly on CPU); the
    # singular values of every state are taken on the host in float64.
    layer = ckpt.layers(n, "full")
    spectra, cos = [], []
    for c0 in range(0, batch, sz["chunk"]):
        xs = x0[c0 : c0 + sz["chunk"]]
        pad = sz["chunk"] - xs.shape[0]
        if pad:
            xs = jnp.concatenate([xs, jnp.repeat(xs[-1:], pad, axis=0)])
        traj = simulate(layer, xs, ckpt.num_layers, save_states=True, metrics=["mu"])
        st = np.asarray(traj.states, dtype=np.float64)[: sz["chunk"] - pad]
        spectra.append(np.linalg.svd(st, compute_uv=False))
        cos.append(_abs_cos_mean(st))
    sv = np.concatenate(spectra)  # (batch, L + 1, min(n, d))
    per = {
        "num_rank": np.sum(sv > rank_tol * sv[..., :1], axis=-1).astype(float),
        "sigma_min": sv[..., -1],
        "sigma_max": sv[..., 0],
        "stable_rank": np.sum(sv**2, axis=-1) / sv[..., 0] ** 2,
        "mean_abs_cos": np.concatenate(cos),
    }
    b = {k: band(v) for k, v in per.items()}
    # Fig. 8 and 9: full spectra and initial cosines of SHOWN excerpts drawn with the seed.
    pick = np.sort(np.random.default_rng(seed).choice(batch, size=min(SHOWN, batch), replace=False))
    cos0 = _cosines(np.asarray(x0, dtype=np.float64))  # (batch, n, n)
    min_cos0 = cos0[:, ~np.eye(n, dtype=bool)].min(axis=1)
    return GeometryMeasured(
        num_rank_min=float(np.min(b["num_rank"]["mean"])),
        num_rank=b["num_rank"]["mean"],
        sigma_min=b["sigma_min"]["mean"],
        sigma_max=b["sigma_max"]["mean"],
        mean_abs_cos=b["mean_abs_cos"]["mean"],
        stable_rank=b["stable_rank"]["mean"],
        spectra_excerpts=pick,
        spectra=sv[pick],
        initial_min_cos=min_cos0,
        initial_fraction_nonneg=float(np.mean(min_cos0 >= 0)),
        full_rank=min(n, ckpt.d),
        rank_tol=rank_tol,
        bands=b,
        initial_cosines=cos0[pick],
        run=model_run(ckpt, corpus, ids),
    )


def _abs_cos_mean(states: np.ndarray) -> np.ndarray:
    """Mean |cos| over pairs i != j of ``states (batch, layers, n, d)``: ``(batch, layers)``."""
    u = states / np.linalg.norm(states, axis=-1, keepdims=True)
    c = np.abs(np.einsum("blid,bljd->blij", u, u))
    n = c.shape[-1]
    return (c.sum(axis=(-1, -2)) - np.trace(c, axis1=-2, axis2=-1)) / (n * (n - 1))


def _cosines(x: np.ndarray) -> np.ndarray:
    """Pairwise cosines ``(batch, n, n)`` of token matrices ``(batch, n, d)``."""
    u = x / np.linalg.norm(x, axis=-1, keepdims=True)
    return np.einsum("bid,bjd->bij", u, u)


def _dominance(m: GeometryMeasured) -> np.ndarray:
    """sigma_1^2 / sigma_2^2 at the last layer of each shown excerpt."""
    s = np.asarray(m.spectra)  # (excerpts, layers, k)
    return s[:, -1, 0] ** 2 / s[:, -1, 1] ** 2


def checks(m: GeometryMeasured) -> list[V.Check]:
    """Checks g1-g5 from the measured curves (means over excerpts) and spectra (pure)."""
    sig = np.asarray(m.sigma_min)
    cos = np.asarray(m.mean_abs_cos)
    dominance = _dominance(m)
    return [
        V.check(
            CHECK_NAMES[0],
            m.num_rank_min >= m.full_rank,
            f"smallest mean rank {m.num_rank_min:.4g} of {m.full_rank}",
        ),
        V.check(
            CHECK_NAMES[1],
            bool(np.all(sig > SIGMA_FLOOR * sig[0])),
            f"min over layers of sigma_min/sigma_min(0) {float(np.min(sig / sig[0])):.3g}",
        ),
        V.check(CHECK_NAMES[2], cos[-1] > cos[0], f"mean |cos| {cos[0]:.3f} -> {cos[-1]:.3f}"),
        V.check(
            CHECK_NAMES[3],
            bool(np.all(dominance > DOMINANCE)),
            "sigma_1^2/sigma_2^2 at the last layer: " + ", ".join(f"{v:.3g}" for v in dominance),
        ),
        V.check(
            CHECK_NAMES[4],
            m.initial_fraction_nonneg == 1.0,
            f"fraction of excerpts with min cos >= 0: {m.initial_fraction_nonneg:.3g}; smallest "
            f"{float(np.min(m.initial_min_cos)):.3g}",
        ),
    ]


def table(m: GeometryMeasured) -> str:
    """The per-layer table (Markdown) of the measured means."""
    rows = [
        f"| layer | rank (of {m.full_rank}) | sigma_min | sigma_min/sigma_max | mean abs cos | stable rank |",
        "|---|---|---|---|---|---|",
    ]
    for t in range(len(m.num_rank)):
        rows.append(
            f"| {t} | {m.num_rank[t]:.4g} | {m.sigma_min[t]:.3g} | {m.sigma_min[t] / m.sigma_max[t]:.3g} | "
            f"{m.mean_abs_cos[t]:.3f} | {m.stable_rank[t]:.3g} |"
        )
    return "\n".join(rows)


def _rank_axis(ax, full_rank: int) -> None:
    """The rank panel on 0 .. min(n, d) with integer ticks and the full rank drawn: a rank is a
    whole number, and "stays at full rank" reads only against that line and zero."""
    ax.axhline(full_rank, color="0.4", lw=0.8, ls="--", zorder=0.5)
    ax.text(0.02, full_rank, f"full rank min(n, d) = {full_rank}", transform=ax.get_yaxis_transform(),
            va="top", fontsize=7, color="0.3")  # fmt: skip
    ax.set_ylim(0, 1.12 * full_rank)
    ax.set_yticks(np.unique(np.round(np.linspace(0, full_rank, 5))).astype(int))


def render(out: Path, m: GeometryMeasured, cs: list[V.Check], *, quick: bool = False) -> Rendered:
    """The three figures (Figs. 4, 8, 9) and the notes, from the numbers."""
    from ..._plotting._pretrained import plot_initial_cosines, plot_singular_spectra
    from ...plotting import plot_band_panels, save_figure

    r, model = m.run, m.run.model
    layers = np.arange(len(m.num_rank))
    panels = {TITLES[k]: {"trained model": m.bands[k]} for k in METRICS}
    fig = plot_band_panels(
        layers,
        panels,
        ncols=2,
        panel_size=(3.4, 2.6),
        sharey=False,
        ylabels={t: t for t in panels},
        linear_y=(TITLES["num_rank"], TITLES["mean_abs_cos"], TITLES["stable_rank"]),
        suptitle=f"token geometry along depth: {r.title}, {r.batch} excerpts x {r.n} tokens",
    )
    _rank_axis(fig.axes[list(panels).index(TITLES["num_rank"])], m.full_rank)
    figs = [save_figure(fig, out / "geometry.png")]
    figs.append(plot_singular_spectra(m.spectra, m.spectra_excerpts, path=out / "geometry_spectra.png"))
    figs.append(
        plot_initial_cosines(m.initial_cosines, m.spectra_excerpts, path=out / "geometry_initial_cosines.png")
    )
    passed = {c.name: c.passed for c in cs}
    notes = (
        f"Model: {model['arch']} checkpoint {model['path']} (weights sha256 {model['sha256']}) as trained: "
        f"variant full, its own {model['own_mask']} mask, eval mode, {model['num_layers']} layers (not the "
        f"paper's BERT/GPT2/T5/ALBERT). Inputs: {r.batch} excerpts of {r.n} tokens of {r.text}. Numerical "
        f"rank counts singular values above {m.rank_tol:g} x sigma_max; excerpts "
        f"{np.asarray(m.spectra_excerpts).tolist()} (drawn with the seed) for the spectra and initial "
        "cosines. Initial cosines: smallest over all pairs and excerpts "
        f"{float(np.min(m.initial_min_cos)):.3g}; fraction of excerpts with all >= 0: "
        f"{m.initial_fraction_nonneg:.3g}"
    )
    # Each conclusion is the one its check reached.
    cond = ", so Corollary 1's condition phi(0) >= 0"
    if passed[CHECK_NAMES[4]]:
        notes += f"{cond} holds on every excerpt."
    elif m.initial_fraction_nonneg == 0:
        notes += f"{cond} fails on every excerpt."
    else:
        notes += f"{cond} fails on {1 - m.initial_fraction_nonneg:.0%} of them."
    if passed[CHECK_NAMES[0]]:
        notes += f" The token matrix keeps full rank {m.full_rank} at every layer."
    else:
        notes += f" The mean numerical rank drops to {m.num_rank_min:.4g} of {m.full_rank}."
    if quick:
        notes += f" QUICK MODE: {r.batch} excerpts."
    return Rendered(figs, notes, table(m))


def describe(m: GeometryMeasured, cs: list[V.Check], sz: dict, *, seed: int, quick: bool) -> Description:
    r = m.run
    metrics = {
        "num_rank": f"#(s > {m.rank_tol:g} s_max)",
        "sigma_min": "smallest singular value",
        "mean_abs_cos": "mean |cos| over pairs i != j",
        "stable_rank": "||X||_F^2/||X||_2^2",
    }
    setting = r.setting()
    setting.update(depth=r.model["num_layers"], variant="full", mask=r.model["own_mask"])
    setting.update(rank_tol=m.rank_tol, full_rank=m.full_rank, seed=seed, dtype=r.model["dtype"])
    return Description(
        dict(setting, metrics=metrics),
        key_numbers={
            "mean |cos| layer 0": float(m.mean_abs_cos[0]),
            "mean |cos| last layer": float(m.mean_abs_cos[-1]),
            "min numerical rank": m.num_rank_min,
        },
        # The report's summary row names the model the verdict is about.
        model=r.label + f", as trained (variant full, {r.model['own_mask']} mask)",
        criterion=criterion(CHECK_NAMES),
    )
