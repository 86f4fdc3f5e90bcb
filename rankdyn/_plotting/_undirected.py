r"""The ``undirected`` target's figure: what the searches found, and the certified equilibria.

Top panel: per setting (size $N = d$, mask, attention), the share of held-out sphere inputs whose
tokens keep $\sigma_2 > 10^{-3}\sigma_1$ at the long depth under the searched $W_V$ (circles), the
share of uniform starts that reach a rank $\ge 2$ attractor (squares: the basin), both with Wilson
95% intervals on a linear axis (a share of 0 sits at 0, its interval above it), and the paper's
$W_V = I + wS$ (crosses). Bottom panels: every certified equilibrium of rank $\ge 2$ (found by this
run, or stored and re-proven by it): $\sigma_2/\sigma_1$ of its tokens, and the interval bound on
the spectral radius of $DF$ over its existence box (stable when below 1). An undirected mask with
such an equilibrium is the counterexample; the causal mask is the positive control.
"""

from __future__ import annotations

import numpy as np

from .._run._io import savefig
from ._style import legend_outside

#: The rank threshold of the searches (sigma_2 > RANK_TOL sigma_1), drawn in the sigma-ratio panel.
RANK_TOL = 1e-3
#: Marker per source of a certificate.
_SOURCE_MARK = {"this run": "o", "stored, full run": "s", "stored, quick run": "D"}


def _setting_label(n, mask, attention=None) -> str:
    tail = "\n(control)" if mask == "causal" else ""
    return f"N={n}\n{mask}{tail}" + (f"\n{attention}" if attention else "")


def plot_undirected(points, *, certified=(), ax=None, path=None, title=None):
    r"""The searches next to the certified equilibria (module docstring).

    Arguments:
        points: the searched settings, dicts with ``n``, ``mask``, ``attention``, ``share``, ``lo``,
            ``hi`` (held-out share and its interval), optionally ``paper`` (the paper's W_V share),
            ``basin`` (``(share, lo, hi)`` of the uniform starts reaching a rank >= 2 attractor)
            and ``trials`` (held-out inputs, written next to a share of 0).
        certified: the certified rank >= 2 equilibria, dicts with ``n``, ``mask``, ``attention``,
            ``source`` (``"this run"``, ``"stored, full run"``, ...), ``sigma_ratio``
            (sigma_2 / sigma_1), ``bound`` (interval bound on the spectral radius) and ``stable``
            (the bound proves stability).
        ax: a matplotlib Axes for the searches' panel only (no certificate panels).
        path: save the figure here (and close it).
        title: figure title.

    Returns:
        The Figure.
    """
    import matplotlib.pyplot as plt

    atts = list(dict.fromkeys(p["attention"] for p in points))
    colours = {a: f"C{i}" for i, a in enumerate(atts)}
    if ax is None:
        keys = sorted({(p["n"], p["mask"]) for p in points})
        width = max(10.0, 0.9 * len(keys) + 3.5, 1.1 * len(certified) + 3.5)
        fig, axd = plt.subplot_mosaic(
            [["search", "search"], ["ratio", "radius"]], figsize=(width, 7.2), layout="constrained"
        )
        ax = axd["search"]
    else:
        fig, axd = ax.figure, {"search": ax}
    _searches(ax, points, colours)
    if "ratio" in axd:
        _certified(axd["ratio"], axd["radius"], list(certified))
    legend_outside(fig, below=True)
    if title:
        fig.suptitle(title)
    if path is not None:
        savefig(fig, path, dpi=110)
        plt.close(fig)
    return fig


def _searches(ax, points, colours) -> None:
    """Held-out shares (circles), basins (squares) and the paper's W_V (crosses), per setting."""
    keys = sorted({(p["n"], p["mask"]) for p in points}, key=lambda k: (k[0], k[1] != "causal", k[1]))
    atts = list(colours)
    labelled = set()
    top = 0.0
    for p in points:
        j = atts.index(p["attention"])
        x0 = keys.index((p["n"], p["mask"])) + (j - (len(atts) - 1) / 2) * 0.25
        c = colours[p["attention"]]
        lab = None if p["attention"] in labelled else f"{p['attention']} attention"
        labelled.add(p["attention"])
        share, lo, hi = p["share"], max(p["lo"], 0.0), p["hi"]
        ax.errorbar(
            x0 - 0.05, share, yerr=[[share - lo], [hi - share]], fmt="o", color=c, ms=5, capsize=2, label=lab
        )
        top = max(top, hi)
        if share == 0:
            said = f"0 of {p['trials']}" if p.get("trials") else "0"
            ax.annotate(
                said,
                (x0 - 0.05, 0),
                xytext=(0, -11),
                textcoords="offset points",
                ha="center",
                fontsize=6,
                color=c,
            )
        if p.get("basin") is not None:
            b, blo, bhi = p["basin"]
            lab_b = None if "basin" in labelled else "squares: uniform starts reaching a rank >= 2 attractor"
            labelled.add("basin")
            ax.errorbar(
                x0 + 0.05,
                b,
                yerr=[[b - max(blo, 0.0)], [bhi - b]],
                fmt="s",
                mfc="white",
                color=c,
                ms=5,
                capsize=2,
                label=lab_b,
            )
            top = max(top, bhi)
        if p.get("paper") is not None:
            lab_p = None if "paper" in labelled else "crosses: the paper's W_V = I + wS"
            labelled.add("paper")
            ax.plot(x0, p["paper"], "x", color="k", ms=7, label=lab_p)
            top = max(top, p["paper"])
    top = max(0.02, 1.15 * top)
    ax.set_ylim(-0.12 * top, top)  # room under 0 for the "0 of k" notes
    ax.axhline(0, color="0.6", lw=0.6, zorder=0)
    ax.set_xlim(-0.6, len(keys) - 0.4)
    ax.set_xticks(range(len(keys)), [_setting_label(n, m) for n, m in keys], fontsize=8)
    ax.set_ylabel("share keeping rank >= 2\n(circles: held-out inputs; Wilson 95%)", fontsize=8)
    ax.set_title("searched W_V: what the searches found", fontsize=9)


def _certified(ax_ratio, ax_radius, certified) -> None:
    """sigma_2 / sigma_1 and the spectral-radius bound of each certified equilibrium."""
    order = sorted(range(len(certified)), key=lambda i: (certified[i]["mask"] == "causal", certified[i]["n"]))
    certified = [certified[i] for i in order]
    x = np.arange(len(certified))
    labelled = set()
    for i, c in enumerate(certified):
        # Colour: the mask's kind (an undirected one is the counterexample); marker: who found it.
        control = c["mask"] == "causal"
        col = "0.45" if control else "tab:red"
        mark = _SOURCE_MARK.get(c["source"], "o")
        kind = "causal mask (control)" if control else "undirected mask"
        lab = None if (kind, c["source"]) in labelled else f"certified, {kind}, {c['source']}"
        labelled.add((kind, c["source"]))
        face = col if c["stable"] else "white"
        if c.get("sigma_ratio") is not None:
            ax_ratio.plot(i, c["sigma_ratio"], mark, color=col, mfc=face, ms=7, label=lab)
            lab = None
        ax_radius.plot(i, c["bound"], mark, color=col, mfc=face, ms=7, label=lab)
    names = [_setting_label(c["n"], c["mask"], c["attention"]) for c in certified]
    for ax in (ax_ratio, ax_radius):
        ax.set_xlim(-0.6, max(len(certified), 1) - 0.4)
        ax.set_xticks(x, names, fontsize=7)
    ax_ratio.set_yscale("log")
    ratios = [c["sigma_ratio"] for c in certified if c.get("sigma_ratio") is not None]
    ax_ratio.set_ylim(RANK_TOL / 3, 1.5 if not ratios else max(1.5, 1.5 * max(ratios)))
    _threshold(ax_ratio, RANK_TOL, RANK_TOL * 1.15, "rank >= 2 above this line", va="bottom")
    ax_ratio.set_ylabel("sigma_2 / sigma_1 of the equilibrium", fontsize=8)
    ax_ratio.set_title("certified rank >= 2 equilibria (interval existence proofs)", fontsize=9)
    bounds = [c["bound"] for c in certified] or [1.0]
    ax_radius.set_ylim(min(0.5, 0.9 * min(bounds)), max(1.1, 1.05 * max(bounds)))
    _threshold(ax_radius, 1.0, 0.99, "stable below 1", va="top")
    ax_radius.set_ylabel("interval bound on the spectral radius of DF", fontsize=8)
    ax_radius.set_title("their stability: a bound < 1 proves it (filled: proven)", fontsize=9)
    undirected = [c for c in certified if c["mask"] != "causal"]
    if undirected and all(str(c["source"]).startswith("stored") for c in undirected):
        # The counterexample rests on stored certificates, not on this run's searches: say so.
        ax_ratio.text(  # between the rank line (1e-3) and the equilibria (above 1e-2)
            0.98,
            0.4,
            "undirected masks: stored certificates only\n"
            "(re-proven by this run; it certified none of its own)",
            transform=ax_ratio.transAxes,
            ha="right",
            va="bottom",
            fontsize=7,
            color="tab:red",
        )
    if not certified:
        for ax in (ax_ratio, ax_radius):
            ax.text(0.5, 0.5, "no certified equilibrium in this run", transform=ax.transAxes, ha="center")


def _threshold(ax, y: float, text_y: float, caption: str, *, va: str) -> None:
    """A dashed threshold line at ``y`` and its small caption at ``text_y``, on the left."""
    ax.axhline(y, color="0.5", lw=0.8, ls="--")
    ax.text(0.01, text_y, caption, transform=ax.get_yaxis_transform(), fontsize=6, color="0.35", va=va)
