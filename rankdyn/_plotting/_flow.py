"""Figures of the self-attention flow (continuous time): metrics against t, the (t, beta) phase
diagram, cluster staircases, and the convergence of the discrete map to the flow."""

from __future__ import annotations

import numpy as np

from ._reproduce_sim import save_figure
from ._style import legend_outside, panel_grid

TIME_LABEL = "time t"


def plot_flow_metrics(times, metrics: dict, *, title: str = "", path=None):
    """Three panels against t: the number of clusters, the interaction energy, and mu of the
    normalised tokens (semi-log y); the batch mean with its min-max band.

    Arguments:
        times: ``(S,)`` saved times.
        metrics: ``{name: {"mean", "min", "max": (S,)}}`` (`Summary.to_dict`).
        title: figure title.
        path: save there (PNG) and close the figure; otherwise return it.
    """
    t = np.asarray(times)
    names = [("clusters", "clusters (cos >= threshold)", False), ("energy", "energy E_beta", False)]
    names.append(("mu_normalized", "mu(LN X)", True))
    fig, axes = panel_grid(len(names), 3)
    for ax, (key, label, log) in zip(axes, names):
        m = metrics[key]
        mean, lo, hi = (np.asarray(m[s], dtype=float) for s in ("mean", "min", "max"))
        ax.fill_between(t, lo, hi, color="C0", alpha=0.25, lw=0, label="min-max over the batch")
        ax.plot(t, mean, color="C0", lw=1.4, label="batch mean")
        if log:
            ax.set_yscale("log")
        ax.set_xlabel(TIME_LABEL)
        ax.set_ylabel(label)
    legend_outside(fig)
    if title:
        fig.suptitle(title, fontsize=9)
    return save_figure(fig, path) if path is not None else fig


def plot_phase_diagram(times, betas, fraction, *, title: str = "", path=None, ax=None):
    """The fraction of starts clustered at time t, on the (t, beta) plane (colour: 0 to 1).

    Arguments:
        times: ``(S,)`` positive save times; betas: ``(B,)``; fraction: ``(B, S)`` values in [0, 1].
    """
    import matplotlib.pyplot as plt

    own = ax is None
    if own:
        fig, ax = plt.subplots(figsize=(5.6, 3.6), layout="constrained")
    t, b, f = np.asarray(times, float), np.asarray(betas), np.asarray(fraction, dtype=float)
    # One row per beta that was run (equal heights, a tick at each: no tick at a beta never run),
    # and log time: the clustering happens within the first decades of a horizon of 1e3 - 1e5.
    rows = np.arange(len(b) + 1) - 0.5
    mid = np.sqrt(t[1:] * t[:-1])
    edges = (
        np.concatenate([[t[0] ** 2 / mid[0]], mid, [t[-1] ** 2 / mid[-1]]]) if t.size > 1 else t * [0.5, 2]
    )
    mesh = ax.pcolormesh(edges, rows, f, vmin=0, vmax=1, shading="flat", cmap="viridis")
    ax.figure.colorbar(mesh, ax=ax, label="fraction of starts in one cluster")
    ax.set_xscale("log")
    ax.set_yticks(np.arange(len(b)), [f"{v:g}" for v in b])
    ax.set_xlabel(TIME_LABEL + " (log)")
    ax.set_ylabel("beta (one row per value run)")
    if title:
        ax.set_title(title, fontsize=9)
    return save_figure(ax.figure, path) if (own and path is not None) else ax


def plot_staircases(times, clusters: dict, energy: dict, *, log_t: bool = True, title: str = "", path=None):
    """Cluster count and energy of example trajectories against t, one colour per beta.

    Arguments:
        times: ``(S,)`` saved times.
        clusters, energy: ``{label: (k, S)}`` example trajectories per beta label.
    """
    t = np.asarray(times)
    fig, axes = panel_grid(2, 2)
    for i, (lab, c) in enumerate(clusters.items()):
        for j, row in enumerate(np.atleast_2d(c)):
            axes[0].step(
                t, row, where="post", color=f"C{i}", lw=1.0, alpha=0.8, label=lab if j == 0 else None
            )
        for j, row in enumerate(np.atleast_2d(energy[lab])):
            axes[1].plot(t, row, color=f"C{i}", lw=1.0, alpha=0.8, label=lab if j == 0 else None)
    axes[0].set_ylabel("clusters")
    axes[1].set_ylabel("energy E_beta")
    for ax in axes:
        ax.set_xlabel(TIME_LABEL)
        if log_t:
            ax.set_xscale("log")
    legend_outside(fig)
    if title:
        fig.suptitle(title, fontsize=9)
    return save_figure(fig, path) if path is not None else fig


def plot_order(hs, errors, order: float | dict, *, title: str = "", path=None):
    """Error of the discrete map at fixed T against its step h (log-log), with the fitted slope.

    Arguments:
        hs: the steps run (each gets a tick, labelled with its value).
        errors, order: one setting's errors at each h and fitted order, or ``{setting: errors}``
            and ``{setting: order}`` to draw every setting that was checked.
    """
    import matplotlib.pyplot as plt

    from ._style import LINE_STYLES

    h = np.asarray(hs, dtype=float)
    series = errors if isinstance(errors, dict) else {"": errors}
    orders = order if isinstance(order, dict) else {"": order}
    fig, ax = plt.subplots(figsize=(5.8, 3.8), layout="constrained")
    for k, (name, err) in enumerate(series.items()):
        e, c = np.asarray(err, dtype=float), f"C{k}"
        what = f"{name}: " if name else ""
        ax.loglog(h, e, "os^D"[k % 4] + "-", color=c, label=f"{what}max |X_h(T) - X(T)|")
        fit = e[-1] * (h / h[-1]) ** orders[name]
        ax.loglog(h, fit, ls=LINE_STYLES[1 + k % (len(LINE_STYLES) - 1)], color=c, lw=0.9,
                  label=f"{what}slope {orders[name]:.2f} (fit)")  # fmt: skip
    # A labelled tick at every h that was run, and none elsewhere (the leftmost had none).
    ax.set_xticks(h, [f"{v:g}" for v in h])
    ax.xaxis.set_minor_locator(plt.NullLocator())
    ax.set_xlabel("step h")
    ax.set_ylabel("error at time T")
    legend_outside(ax)
    if title:
        ax.set_title(title, fontsize=9)
    return save_figure(fig, path)
