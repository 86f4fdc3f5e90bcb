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

from pathlib import Path

import jax.numpy as jnp
import numpy as np

from . import _verdict as V
from ._runs import band
from .pretrained_common import (
    checkpoint_or_none,
    excerpt_ids,
    excerpt_sizes,
    model_label,
    model_setting,
    not_testable,
)

NAME = "geometry"
CLAIM = (
    "Paper Fig. 4, 8, 9 (pretrained models): along depth the token matrix keeps full rank and its smallest "
    "singular value stays well above 0, while the mean absolute pairwise cosine rises (anisotropy), matching the "
    "full-rank but near-low-dimensional equilibria of Theorem 3; one singular direction dominates; the pairwise "
    "cosines of the initial embeddings are all non-negative (Corollary 1's phi(0) >= 0)."
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


def run(
    out: Path, *, quick: bool, seed: int, size: dict | None = None, cache: dict | None = None, checkpoint=None
) -> dict:
    from .._simulate import simulate
    from ..plotting import plot_band_panels, save_figure
    from ..plotting._pretrained import plot_initial_cosines, plot_singular_spectra

    out = Path(out)
    ckpt = checkpoint_or_none(checkpoint, cache)
    if ckpt is None:
        return not_testable(NAME, CLAIM, CHECK_NAMES, quick=quick, seed=seed, checkpoint=checkpoint)
    sz = dict(excerpt_sizes(quick) if size is None else size)
    ids, corpus = excerpt_ids(ckpt, sz["n"], sz["batch"], cache)
    batch, n = ids.shape
    depth = ckpt.num_layers
    rank_tol = 1e-4 if ckpt.dtype == np.float32 else 1e-10
    full_rank = min(n, ckpt.d)
    x0 = ckpt.embed(ids)
    layers = np.arange(depth + 1)
    # One compiled scan per chunk of excerpts (no SVD inside XLA: it compiles slowly on CPU); the
    # singular values of every state are taken on the host in float64.
    layer = ckpt.layers(n, "full")
    spectra_all = []
    for c0 in range(0, batch, sz["chunk"]):
        xs = x0[c0 : c0 + sz["chunk"]]
        pad = sz["chunk"] - xs.shape[0]
        if pad:
            xs = jnp.concatenate([xs, jnp.repeat(xs[-1:], pad, axis=0)])
        traj = simulate(layer, xs, depth, save_states=True, metrics=["mu"])
        st = np.asarray(traj.states, dtype=np.float64)[: sz["chunk"] - pad]
        spectra_all.append(np.linalg.svd(st, compute_uv=False))
        if c0 == 0:
            cos_all = [_abs_cos_mean(st)]
        else:
            cos_all.append(_abs_cos_mean(st))
    sv = np.concatenate(spectra_all)  # (batch, L + 1, min(n, d))
    per = {
        "num_rank": np.sum(sv > rank_tol * sv[..., :1], axis=-1).astype(float),
        "sigma_min": sv[..., -1],
        "sigma_max": sv[..., 0],
        "stable_rank": np.sum(sv**2, axis=-1) / sv[..., 0] ** 2,
        "mean_abs_cos": np.concatenate(cos_all),
    }
    b = {k: band(v) for k, v in per.items()}
    # Fig. 8 and 9: full spectra and initial cosines of SHOWN excerpts drawn with the seed.
    pick = np.sort(np.random.default_rng(seed).choice(batch, size=min(SHOWN, batch), replace=False))
    spectra = sv[pick]
    cos0 = _cosines(np.asarray(x0, dtype=np.float64))  # (batch, n, n)
    off = ~np.eye(n, dtype=bool)
    min_cos0 = cos0[:, off].min(axis=1)
    measured = {
        "num_rank_min": float(np.min(b["num_rank"]["mean"])),
        "num_rank": b["num_rank"]["mean"],
        "sigma_min": b["sigma_min"]["mean"],
        "sigma_max": b["sigma_max"]["mean"],
        "mean_abs_cos": b["mean_abs_cos"]["mean"],
        "stable_rank": b["stable_rank"]["mean"],
        "spectra_excerpts": pick,
        "spectra": spectra,
        "initial_min_cos": min_cos0,
        "initial_fraction_nonneg": float(np.mean(min_cos0 >= 0)),
    }
    check_list = checks(measured, full_rank)
    panels = {TITLES[k]: {"trained model": b[k]} for k in METRICS}
    fig = plot_band_panels(
        layers,
        panels,
        ncols=2,
        panel_size=(3.4, 2.6),
        sharey=False,
        ylabels={t: t for t in panels},
        linear_y=(TITLES["num_rank"], TITLES["mean_abs_cos"], TITLES["stable_rank"]),
        suptitle=f"token geometry along depth: {ckpt.arch} {Path(ckpt.path).name} (sha256 {ckpt.sha256[:12]}), "
        f"{batch} excerpts x {n} tokens",
    )
    figs = [save_figure(fig, out / "geometry.png")]
    figs.append(plot_singular_spectra(spectra, pick, path=out / "geometry_spectra.png"))
    figs.append(plot_initial_cosines(cos0[pick], pick, path=out / "geometry_initial_cosines.png"))
    rows = [
        "| layer | rank (of %d) | sigma_min | sigma_min/sigma_max | mean abs cos | stable rank |" % full_rank
    ]
    rows.append("|---|---|---|---|---|---|")
    for t in range(len(layers)):
        rows.append(
            f"| {t} | {b['num_rank']['mean'][t]:.4g} | {b['sigma_min']['mean'][t]:.3g} | "
            f"{b['sigma_min']['mean'][t] / b['sigma_max']['mean'][t]:.3g} | {b['mean_abs_cos']['mean'][t]:.3f} | "
            f"{b['stable_rank']['mean'][t]:.3g} |"
        )
    notes = (
        f"Model: {ckpt.arch} checkpoint {ckpt.path} (weights sha256 {ckpt.sha256}) as trained: variant full, "
        f"its own {ckpt.own_mask} mask, eval mode, {depth} layers (not the paper's BERT/GPT2/T5/ALBERT). Inputs: "
        f"{batch} excerpts of {n} tokens of {corpus['name']} (Python {corpus['python']}, sha256 "
        f"{corpus['sha256'][:12]}). Numerical rank counts singular values above {rank_tol:g} x sigma_max; "
        f"excerpts {pick.tolist()} (drawn with the seed) for the spectra and initial cosines. Initial cosines: "
        f"smallest over all pairs and excerpts {float(min_cos0.min()):.3g}; fraction of excerpts with all >= 0: "
        f"{measured['initial_fraction_nonneg']:.3g}."
    )
    if quick:
        notes += f" QUICK MODE: {batch} excerpts."
    return {
        "name": NAME,
        "claim": CLAIM,
        "setting": {
            "model": model_setting(ckpt),
            "corpus": corpus,
            "n": n,
            "batch": int(batch),
            "depth": depth,
            "variant": "full",
            "mask": ckpt.own_mask,
            "rank_tol": rank_tol,
            "full_rank": full_rank,
            "seed": seed,
            "dtype": str(np.dtype(ckpt.dtype)),
            "metrics": {
                "num_rank": f"#(s > {rank_tol:g} s_max)",
                "sigma_min": "smallest singular value",
                "mean_abs_cos": "mean |cos| over pairs i != j",
                "stable_rank": "||X||_F^2/||X||_2^2",
            },
        },
        "checks": V.checks_json(check_list),
        "key_numbers": {
            "mean |cos| layer 0": float(b["mean_abs_cos"]["mean"][0]),
            "mean |cos| last layer": float(b["mean_abs_cos"]["mean"][-1]),
            "min numerical rank": measured["num_rank_min"],
        },
        "measured": measured,
        "verdict": V.verdict(check_list),
        # The report's summary row names the model the verdict is about.
        "model": model_label(ckpt) + f", as trained (variant full, {ckpt.own_mask} mask)",
        "criterion": "; ".join(CHECK_NAMES) + ". " + V.VERDICT_RULE,
        "figures": figs,
        "notes": notes,
        "markdown": "\n".join(rows),
    }


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


def checks(m: dict, full_rank: int) -> list:
    """Checks g1-g5 from the measured curves (means over excerpts) and spectra."""
    sig = np.asarray(m["sigma_min"])
    cos = np.asarray(m["mean_abs_cos"])
    s = np.asarray(m["spectra"])  # (excerpts, layers, k)
    dominance = s[:, -1, 0] ** 2 / s[:, -1, 1] ** 2
    return [
        V.check(
            CHECK_NAMES[0],
            m["num_rank_min"] >= full_rank,
            f"smallest mean rank {m['num_rank_min']:.4g} of {full_rank}",
        ),
        V.check(
            CHECK_NAMES[1],
            bool(np.all(sig > 1e-3 * sig[0])),
            f"min over layers of sigma_min/sigma_min(0) {float(np.min(sig / sig[0])):.3g}",
        ),
        V.check(CHECK_NAMES[2], cos[-1] > cos[0], f"mean |cos| {cos[0]:.3f} -> {cos[-1]:.3f}"),
        V.check(
            CHECK_NAMES[3],
            bool(np.all(dominance > 2)),
            "sigma_1^2/sigma_2^2 at the last layer: " + ", ".join(f"{v:.3g}" for v in dominance),
        ),
        V.check(
            CHECK_NAMES[4],
            m["initial_fraction_nonneg"] == 1.0,
            f"fraction of excerpts with min cos >= 0: {m['initial_fraction_nonneg']:.3g}; smallest "
            f"{float(np.min(m['initial_min_cos'])):.3g}",
        ),
    ]
