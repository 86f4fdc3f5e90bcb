r"""Figures of the trained-checkpoint targets and notebook 05.

Singular spectra, initial cosines, weight spectra.
"""

from __future__ import annotations

import numpy as np

from ._style import DEPTH_LABEL, legend_outside, printable_size

__all__ = [
    "plot_singular_spectra",
    "plot_initial_cosines",
    "plot_weight_spectra",
    "plot_census",
    "plot_attention_sinks",
]


def _finish(fig, path):
    if path is None:
        return fig
    from ._reproduce_sim import save_figure

    return save_figure(fig, path)


def plot_singular_spectra(spectra, excerpts, *, path=None):
    r"""Paper Fig. 8: the singular values $\sigma_k(X^{(t)})$ of each layer, one panel per excerpt.

    Arguments:
        spectra: ``(excerpts, layers, k)`` singular values, largest first.
        excerpts: the excerpt indices (panel titles).
        path: save there (PNG) and return the file name; None returns the ``Figure``.
    """
    import matplotlib.pyplot as plt

    spectra = np.asarray(spectra)
    num, layers, _ = spectra.shape
    fig, axes = plt.subplots(
        1, num, figsize=printable_size(3.4 * num, 2.8), squeeze=False, sharey=True, layout="constrained"
    )
    colors = plt.cm.viridis(np.linspace(0, 1, layers))
    for ax, s, e in zip(axes[0], spectra, excerpts):
        for t in range(layers):
            ax.semilogy(np.arange(1, s.shape[1] + 1), s[t], color=colors[t], lw=1, label=f"layer {t}")
        ax.set_title(f"excerpt {int(e)}", fontsize=9)
        ax.set_xlabel("index k", fontsize=8)
        ax.set_ylabel("sigma_k", fontsize=8)
    legend_outside(fig, title=DEPTH_LABEL)
    fig.suptitle("singular spectrum of the token matrix at every layer", fontsize=10)
    return _finish(fig, path)


def plot_initial_cosines(cos, excerpts, *, path=None):
    r"""Paper Fig. 9: the pairwise cosines of the initial embeddings, one matrix per excerpt.

    A diverging colour map centred at 0 (blue < 0 < red), each side scaled to its own extreme (the
    most negative cosine is full blue).

    Arguments:
        cos: ``(excerpts, n, n)`` cosines.
        excerpts: the excerpt indices (panel titles).
        path: save there (PNG) and return the file name; None returns the ``Figure``.
    """
    import matplotlib.pyplot as plt
    from matplotlib.colors import TwoSlopeNorm

    cos = np.asarray(cos)
    fig, axes = plt.subplots(
        1, len(cos), figsize=printable_size(3.2 * len(cos), 3.0), squeeze=False, layout="constrained"
    )
    # Centred at 0, each side stretched to its own extreme: the negative cosines of embeddings are
    # small (-0.1 .. -0.3), and on a symmetric -1 .. 1 scale they would be pale cells.
    off = cos[:, ~np.eye(cos.shape[-1], dtype=bool)]
    low = min(float(np.min(off)), -1e-3)
    norm = TwoSlopeNorm(vcenter=0.0, vmin=low, vmax=1.0)
    im = None
    for ax, c, e in zip(axes[0], cos, excerpts):
        im = ax.imshow(c, norm=norm, cmap="RdBu_r", interpolation="nearest")
        neg = np.mean(c[~np.eye(len(c), dtype=bool)] < 0)
        ax.set_title(f"excerpt {int(e)}: {100 * neg:.1f}% < 0", fontsize=9)
        ax.set_xlabel("token j", fontsize=8)
        ax.set_ylabel("token i", fontsize=8)
    bar = fig.colorbar(im, ax=axes[0].tolist(), shrink=0.8, label="cos(x_i, x_j) (blue < 0 < red)")
    bar.set_ticks(sorted({np.ceil(100 * low) / 100, 0.0, 0.5, 1.0}))  # the lowest inside the scale
    fig.suptitle("pairwise cosines of the initial embeddings", fontsize=10)
    return _finish(fig, path)


def plot_weight_spectra(reports: dict, *, path=None):
    r"""Singular values of $W_V$ (all heads) and of $W_{VO} = \sum_h W_V^h W_O^h$ per layer.

    With the line $\sigma = 1$.

    Arguments:
        reports: ``{layer label: rankdyn._trained._analysis.value_output_report(...)}``.
        path: save there (PNG) and return the file name; None returns the ``Figure``.
    """
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(8.0, 3.0), sharey=True, layout="constrained")
    for (label, rep), color in zip(reports.items(), plt.cm.tab10.colors):
        for ax, key in zip(axes, ("w_v", "w_vo_sum")):
            s = rep[key]["singular_values"]
            ax.semilogy(np.arange(1, len(s) + 1), s, color=color, lw=1, label=f"{label}")
    for ax, title in zip(axes, ("W_V (all heads)", "sum_h W_V^h W_O^h")):
        ax.axhline(1.0, color="0.4", lw=0.8, ls="--")
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("index k", fontsize=8)
        ax.set_ylabel("sigma_k", fontsize=8)
    legend_outside(fig, title="layer")
    return _finish(fig, path)


def plot_census(counts: dict, *, ax=None, title=None):
    """Stacked bars of where the iterates of one layer's map end, per (layer, mask) row.

    Arguments:
        counts: ``{row label: {outcome: count}}`` (the ``counts`` of
            `rankdyn._trained._analysis.attractor_census`).
    """
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(6.4, 0.35 * len(counts) + 1.2))
    outcomes = sorted({k for c in counts.values() for k in c})
    left = np.zeros(len(counts))
    rows = list(counts)
    for i, k in enumerate(outcomes):
        v = np.array([counts[r].get(k, 0) for r in rows], dtype=float)
        ax.barh(rows, v, left=left, color=f"C{i}", label=k)
        left += v
    ax.set_xlabel("starts", fontsize=8)
    ax.set_ylabel("layer, mask", fontsize=8)
    if title:
        ax.set_title(title, fontsize=9)
    legend_outside(ax)
    return ax


def plot_attention_sinks(stats: dict, *, title: str = "", path=None):
    """Attention on token 0 over its uniform baseline (left) and the mean cosine to token 0 (right)
    against depth, one line per model (``stats``: name -> `rankdyn._run._sinks.SinkStats`)."""
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.6), layout="constrained")  # the title above the labels
    for name, s in stats.items():
        ratio = np.asarray(s.sink_ratio, float)
        (line,) = a.plot(np.arange(1, len(ratio) + 1), ratio, marker=".", label=name)
        b.plot(np.arange(len(s.cos_first)), s.cos_first, color=line.get_color(), label=name)
        b.plot(np.arange(len(s.cos_others)), s.cos_others, color=line.get_color(), ls=":")
    a.axhline(1.0, color="k", lw=0.8, ls="--")
    a.set_yscale("log")
    a.set_xlabel("layer")
    a.set_ylabel("attention on token 0 / uniform")
    b.set_xlabel(DEPTH_LABEL)
    b.set_ylabel("mean cos to token 0\n(dotted: among the others)")  # one line would outgrow the panel
    legend_outside(b)
    fig.suptitle(title, fontsize=9)
    return _finish(fig, path)
