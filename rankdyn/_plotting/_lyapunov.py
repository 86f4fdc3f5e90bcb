"""Figures of Lyapunov spectra: the exponents with their spread over the batch, and the running
estimates against depth (to judge convergence)."""

from __future__ import annotations

import numpy as np

from ._reproduce_sim import save_figure
from ._style import legend_outside

#: role -> (colour, marker) in the spectrum figure.
_ROLE_STYLE = {
    "neutral": ("C2", "s"),
    "contracting": ("C0", "o"),
    "expanding": ("C3", "^"),
    "rounding-limited": ("0.5", "v"),
    "not finite": ("k", "x"),
}


def plot_lyapunov_spectrum(spectrum: dict, *, title: str = "", path=None, ax=None):
    """The exponents by index: the batch mean with the min-max band (and std bars), 0 marked.

    Arguments:
        spectrum: `LyapunovResult.to_dict()` (its ``exponents`` statistics and ``unit``).
        title: figure title; path: save there (PNG) and close the figure; ax: draw there.
    """
    import matplotlib.pyplot as plt

    own = ax is None
    if own:
        fig, ax = plt.subplots(figsize=(5.6, 3.4), layout="constrained")
    e = spectrum["exponents"]
    mean, std, lo, hi = (np.asarray(e[s], dtype=float) for s in ("mean", "std", "min", "max"))
    i = np.arange(1, mean.size + 1)
    ax.fill_between(i, lo, hi, color="C0", alpha=0.25, lw=0, step="mid", label="min-max over the batch")
    roles = spectrum.get("roles") or ["exponent"] * mean.size
    for role in dict.fromkeys(roles):  # one marker style per role (docs/glossary.md), in order met
        sel = np.array([r == role for r in roles])
        color, marker = _ROLE_STYLE.get(role, ("C0", "o"))
        ax.errorbar(
            i[sel], mean[sel], yerr=std[sel], fmt=marker, ms=4, color=color, lw=1, label=f"{role}, mean+-std"
        )
    ax.axhline(0.0, color="0.4", lw=0.8, ls="--")
    if "rounding-limited" in roles and "dtype" in spectrum:
        floor = float(np.log(np.finfo(np.dtype(spectrum["dtype"])).eps))
        ax.axhline(floor, color="0.5", lw=0.8, ls=":", label=f"log eps of {spectrum['dtype']} (rounding)")
    ax.set_xlabel("index i")
    ax.set_ylabel(f"exponent lambda_i ({spectrum['unit']})")
    if title and own:  # the figure's title spans the legend's column too, so the two never collide
        fig.suptitle(title, fontsize=9)
    elif title:
        ax.set_title(title, fontsize=9)
    if own:
        legend_outside(fig, below=True)
        return save_figure(fig, path) if path is not None else fig
    return ax


def plot_lyapunov_convergence(spectrum: dict, *, title: str = "", path=None, ax=None, max_lines: int = 8):
    """Running estimates of the first ``max_lines`` exponents (batch mean and min-max band) against depth."""
    import matplotlib.pyplot as plt

    own = ax is None
    if own:
        fig, ax = plt.subplots(figsize=(5.6, 3.4), layout="constrained")
    r = spectrum["running"]
    roles = spectrum.get("roles")
    depth = np.asarray(r["depths"], dtype=float)
    mean, lo, hi = (np.asarray(r[s], dtype=float) for s in ("mean", "min", "max"))
    for j in range(min(max_lines, mean.shape[1])):
        ax.fill_between(depth, lo[:, j], hi[:, j], color=f"C{j % 10}", alpha=0.15, lw=0)
        role = f" ({roles[j]})" if roles else ""
        ax.plot(depth, mean[:, j], color=f"C{j % 10}", lw=1.2, marker=".", label=f"lambda_{j + 1}{role}")
    ax.set_xlabel("time t" if spectrum["unit"] == "per unit time" else "depth (layers or steps)")
    ax.set_ylabel(f"running estimate ({spectrum['unit']})")
    if title and own:  # the figure's title spans the legend's column too, so the two never collide
        fig.suptitle(title, fontsize=9)
    elif title:
        ax.set_title(title, fontsize=9)
    if own:
        legend_outside(fig, below=True)
        return save_figure(fig, path) if path is not None else fig
    return ax


def plot_lyapunov_rates(transverse: dict, log_bound: dict, log_mu_rate: dict, *, ax=None):
    """Per configuration: the transverse exponent, log of the theorem's bound and of mu's rate."""
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(6.4, 3.4), layout="constrained")
    keys = list(transverse)
    x = np.arange(len(keys))
    clip = lambda v: max(float(v), -5.0)  # noqa: E731  (round-off-limited values drawn at -5)
    ax.plot(x, [clip(transverse[k]) for k in keys], "o", color="C0", label="transverse exponent")
    ax.plot(x, [clip(log_mu_rate[k]) for k in keys], "x", color="C1", ms=8, label="log rate of mu (fit)")
    ax.plot(x, [clip(log_bound[k]) for k in keys], "_", color="C3", ms=14, mew=2, label="log of the bound")
    ax.set_xticks(x, keys, rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("per-layer log rate (clipped at -5)")
    ax.axhline(0.0, color="0.4", lw=0.8, ls="--")
    legend_outside(ax.figure)
    return ax
