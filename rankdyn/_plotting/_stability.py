"""Stability and basin plots: multiplier moduli per equilibrium, the 2-D example on S^1 (Fig. 1)."""

from __future__ import annotations

import numpy as np

from .._errors import UsageError


def _moduli(rep):
    """Moduli from a `StabilityReport`, its ``to_dict()`` or a plain array of eigenvalues/moduli."""
    if isinstance(rep, dict):
        if "moduli" in rep:
            return np.asarray(rep["moduli"], dtype=float)
        ev = np.asarray(rep["eigenvalues"], dtype=float)
        return np.hypot(ev[:, 0], ev[:, 1])
    if hasattr(rep, "moduli"):
        return np.asarray(rep.moduli, dtype=float)
    return np.abs(np.asarray(rep))


def plot_eigen_moduli(reports_by_rank, *, ax=None, log=True, jitter=0.25, title=None):
    """Multiplier moduli of every equilibrium, grouped by rank, with the unit line |lambda| = 1.

    Arguments:
        reports_by_rank: ``{rank: [report, ...]}`` where a report is a `rankdyn.StabilityReport`,
            its ``to_dict()``, or an array of (complex) eigenvalues.
        ax: matplotlib Axes (created when None).
        log: log-scale the modulus axis.
        jitter: horizontal spread of the equilibria of one rank.

    Returns:
        The Axes.
    """
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(6, 4))
    ranks = sorted(reports_by_rank)
    for r in ranks:
        reps = list(reports_by_rank[r])
        offs = np.linspace(-jitter, jitter, len(reps)) if len(reps) > 1 else np.zeros(1)
        for off, rep in zip(offs, reps):
            m = _moduli(rep)
            if log:
                m = np.maximum(m, 1e-6)
            color = "tab:red" if np.any(m > 1 + 1e-6) else "tab:blue"
            ax.scatter(np.full(m.shape, r + off), m, s=8, color=color, alpha=0.6, linewidths=0)
    ax.axhline(1.0, color="k", lw=0.8, ls="--", label="|λ| = 1")
    if log:
        ax.set_yscale("log")
    ax.set_xticks(ranks)
    ax.set_xlabel("rank of the equilibrium")
    ax.set_ylabel("|multiplier| (tangent Jacobian)")
    ax.scatter([], [], color="tab:red", s=8, label="unstable equilibrium")
    ax.scatter([], [], color="tab:blue", s=8, label="stable / marginal")
    ax.legend(loc="best", fontsize=8)
    if title:
        ax.set_title(title)
    return ax


def plot_circle_trajectories(states, *, ax=None, points=None, show_circle=True, cmap="viridis", title=None):
    """Token trajectories of the 2-D example on S^1, in the style of the paper's Fig. 1.

    Arguments:
        states: ``(T, n, 2)`` for one trajectory or ``(batch, T, n, 2)`` (e.g.
            ``Trajectory.states``); each token is drawn as a path from o (start) to x (end).
        ax: matplotlib Axes.
        points: optional ``{label: (x, y)}`` marked on the circle (e.g. A, B, (0, 1)).
        show_circle: draw the unit circle (omit for the un-normalised dynamics).

    Returns:
        The Axes.
    """
    import matplotlib.pyplot as plt

    s = np.asarray(states, dtype=float)
    if s.ndim == 3:
        s = s[None]
    if s.ndim != 4 or s.shape[-1] != 2:
        raise UsageError(f"states must be (T, n, 2) or (batch, T, n, 2), got shape {np.shape(states)}.")
    if ax is None:
        _, ax = plt.subplots(figsize=(4.5, 4.5))
    if show_circle:
        th = np.linspace(0, 2 * np.pi, 400)
        ax.plot(np.cos(th), np.sin(th), color="0.8", lw=1)
    colors = plt.get_cmap(cmap)(np.linspace(0, 0.9, s.shape[2]))
    for b in range(s.shape[0]):
        for i in range(s.shape[2]):
            path = s[b, :, i]
            ax.plot(
                path[:, 0],
                path[:, 1],
                color=colors[i],
                lw=1,
                alpha=0.8,
                label=f"token {i + 1}" if b == 0 else None,
            )
            ax.plot(*path[0], "o", color=colors[i], ms=4, mfc="none")
            ax.plot(*path[-1], "x", color=colors[i], ms=6)
    for label, (px, py) in (points or {}).items():
        ax.plot(px, py, "k*", ms=9)
        ax.annotate(label, (px, py), textcoords="offset points", xytext=(6, 4))
    ax.set_aspect("equal")
    ax.legend(loc="lower left", fontsize=8)
    if title:
        ax.set_title(title)
    return ax


def plot_basin_fractions(results, *, ax=None, labels=None, title=None):
    """Bar chart of basin fractions with their Wilson 95% intervals.

    Arguments:
        results: a `rankdyn.theory.basin_fractions` dict, or ``{setting: dict}`` for several settings
            (grouped bars, one group per class).
        ax: matplotlib Axes.
        labels: optional display names for the settings.

    Returns:
        The Axes.
    """
    import matplotlib.pyplot as plt

    if "fractions" in results:
        results = {"": results}
    if ax is None:
        _, ax = plt.subplots(figsize=(6, 3.5))
    settings = list(results)
    classes = sorted({c for r in results.values() for c in r["fractions"]}, key=lambda c: (len(c), c))
    width = 0.8 / max(len(settings), 1)
    x = np.arange(len(classes))
    for j, name in enumerate(settings):
        r = results[name]
        frac = np.array([r["fractions"].get(c, 0.0) for c in classes])
        ci = np.array([r["ci95"].get(c, [0.0, 0.0]) for c in classes])
        err = np.stack([frac - ci[:, 0], ci[:, 1] - frac])
        lab = (labels or {}).get(name, name) or None
        ax.bar(x + (j - (len(settings) - 1) / 2) * width, frac, width, yerr=err, capsize=3, label=lab)
    ax.set_xticks(x)
    ax.set_xticklabels(classes)
    ax.set_xlabel("class of the final state")
    ax.set_ylabel("fraction of inputs (95% CI)")
    ax.set_ylim(0, 1)
    if any(settings):
        ax.legend(fontsize=8)
    if title:
        ax.set_title(title)
    return ax
