"""Figures of the self-attention flow (continuous time): metrics against t, the (t, beta) phase
diagram, cluster staircases, and the convergence of the discrete map to the flow."""

from __future__ import annotations

import numpy as np

from ._reproduce_sim import save_figure
from ._style import legend_outside, panel_grid

TIME_LABEL = "time t"


def plot_flow_metrics(times, metrics: dict, *, title: str = "", path=None):
    """Three panels against t: the number of clusters, the interaction energy, and mu of the
    normalised tokens (semi-log y); the batch mean with its min-max band. For the noisy flow's
    metrics (no energy): the order parameter, the second harmonic (or the first) and the radius drift.

    Arguments:
        times: ``(S,)`` saved times.
        metrics: ``{name: {"mean", "min", "max": (S,)}}`` (`Summary.to_dict`).
        title: figure title.
        path: save there (PNG) and close the figure; otherwise return it.
    """
    t = np.asarray(times)
    names = [("clusters", "clusters (cos >= threshold)", False), ("energy", "energy E_beta", False)]
    names.append(("mu_normalized", "mu(LN X)", True))
    if "order_parameter" in metrics and "energy" not in metrics:  # the noisy flow (DensityObserver)
        ell = "harmonic_2" if "harmonic_2" in metrics else "harmonic_1"
        names = [("order_parameter", "order parameter |mean x_i|", False)]
        names += [(ell, f"harmonic amplitude {ell[-1]}", False)] if ell in metrics else []
        names.append(("radius_drift", "max_i ||x_i| - 1| (scheme error)", True))
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


def _draw_staircases(ax_clusters, ax_energy, t, clusters: dict, energy: dict, log_t: bool) -> None:
    """Cluster-count steps and energy lines of example trajectories, one colour per beta label."""
    from matplotlib.ticker import MaxNLocator

    for i, (lab, c) in enumerate(clusters.items()):
        for j, row in enumerate(np.atleast_2d(c)):
            ax_clusters.step(
                t, row, where="post", color=f"C{i}", lw=1.0, alpha=0.8, label=lab if j == 0 else None
            )
        for j, row in enumerate(np.atleast_2d(energy[lab])):
            ax_energy.plot(t, row, color=f"C{i}", lw=1.0, alpha=0.8, label=lab if j == 0 else None)
    ax_clusters.set_ylabel("clusters")
    ax_clusters.yaxis.set_major_locator(MaxNLocator(integer=True))  # a count: no tick at 2.5 clusters
    ax_energy.set_ylabel("energy E_beta")
    for ax in (ax_clusters, ax_energy):
        ax.set_xlabel(TIME_LABEL)
        if log_t:
            ax.set_xscale("log")


def plot_staircases(times, clusters: dict, energy: dict, *, log_t: bool = True, title: str = "", path=None):
    """Cluster count and energy of example trajectories against t, one colour per beta.

    Arguments:
        times: ``(S,)`` saved times.
        clusters, energy: ``{label: (k, S)}`` example trajectories per beta label.
    """
    fig, axes = panel_grid(2, 2)
    _draw_staircases(axes[0], axes[1], np.asarray(times), clusters, energy, log_t)
    legend_outside(fig)
    if title:
        fig.suptitle(title, fontsize=9)
    return save_figure(fig, path) if path is not None else fig


def plot_plateau_lengths(ax, betas, durations, censored, fit_c: float, fit_a: float) -> None:
    r"""The longest multi-cluster plateau of every run against beta (log y), the median per beta
    and the fitted line $\log T = a + c\beta$: the quantity the metastability checks test.

    Arguments:
        ax: the axes to draw into.
        betas: ``(B,)`` the betas run.
        durations, censored: per beta, the runs' longest plateau and whether it was still running
            at the horizon (a lower bound, drawn as an open triangle).
        fit_c, fit_a: the fitted slope and intercept (natural log).
    """
    b = np.asarray(betas, float)
    step = np.min(np.diff(b)) if b.size > 1 else 1.0
    med, named = [], False
    for i, (beta, d, c) in enumerate(zip(b, durations, censored)):
        d, c = np.asarray(d, float), np.asarray(c, bool)
        med.append(float(np.median(d)) if d.size else np.nan)
        # Spread the runs of one beta sideways (deterministically) so equal lengths stay visible.
        x = beta + 0.12 * step * (np.linspace(-1, 1, d.size) if d.size > 1 else np.zeros(d.size))
        ended = dict(label="longest plateau of one run") if i == 0 else {}
        ax.plot(x[~c], d[~c], "o", ms=3, color="0.5", alpha=0.7, ls="none", **ended)
        if c.any():
            cens = {} if named else dict(label="still running at T (a lower bound)")
            ax.plot(x[c], d[c], "^", ms=4, mfc="none", color="0.3", ls="none", **cens)
            named = True
    ax.plot(b, med, "s", ms=7, color="k", ls="none", label="median per beta")
    if np.isfinite(fit_c) and np.isfinite(fit_a):
        grid = np.linspace(b.min(), b.max(), 50)
        ax.plot(grid, np.exp(fit_a + fit_c * grid), "--", color="tab:red", lw=1.2,
                label=f"fit: log T = {fit_a:.2f} + {fit_c:.2f} beta")  # fmt: skip
    ax.set_yscale("log")
    ax.set_xticks(b, [f"{v:g}" for v in b])
    ax.set_xlabel("beta")
    ax.set_ylabel("longest multi-cluster plateau T")


def plot_metastability(
    times, examples: dict, betas, durations, censored, fit_c, fit_a, *, title="", path=None
):
    """The plateau lengths against beta with their fit (`plot_plateau_lengths`), then the
    cluster-count and energy staircases of example starts (``examples[label] = (clusters, energy)``,
    each ``(starts, S)`` on the positive ``times``)."""
    fig, axes = panel_grid(3, 3)
    plot_plateau_lengths(axes[0], betas, durations, censored, fit_c, fit_a)
    axes[0].set_title("what the checks fit", fontsize=9)
    clusters = {k: np.asarray(v[0]) for k, v in examples.items()}
    energy = {k: np.asarray(v[1]) for k, v in examples.items()}
    _draw_staircases(axes[1], axes[2], np.asarray(times), clusters, energy, True)
    axes[1].set_title("example starts", fontsize=9)
    axes[2].set_title("example starts", fontsize=9)
    legend_outside(fig)
    if title:
        fig.suptitle(title, fontsize=9)
    return save_figure(fig, path) if path is not None else fig


def plot_distance_to_first(times, distances: dict, eps: float, fraction: float, *, title="", path=None):
    """Two panels against t for the causal flow: the largest distance of any token to token 1
    (median over runs, min-max band; log-log, with the tolerance ``eps``), and the share of runs with
    every token within ``eps`` of token 1 (with the required ``fraction``).

    Arguments:
        times: ``(S,)`` positive saved times.
        distances: ``{beta label: (runs, S)}`` largest distance to token 1 per run and save.
    """
    t = np.asarray(times, float)
    fig, (a, b) = panel_grid(2, 2)
    tiny = 1e-300  # distances of exactly 0 (a token on token 1) cannot be drawn on a log axis
    for i, (lab, d) in enumerate(distances.items()):
        d = np.asarray(d, float)
        c = f"C{i}"
        a.fill_between(t, np.maximum(d.min(0), tiny), d.max(0), color=c, alpha=0.2, lw=0)
        a.plot(t, np.median(d, 0), color=c, lw=1.4, label=lab)
        # The check reads the share at T: marked on each curve.
        b.plot(t, np.mean(d <= eps, 0), color=c, lw=1.4, marker="o", markevery=[t.size - 1], label=lab)
    lo = min(float(np.nanmin(np.where(np.asarray(d) > 0, d, np.inf))) for d in distances.values())
    a.set_xscale("log")
    a.set_yscale("log")
    a.set_ylim(max(min(lo, eps) / 3, 1e-16), None)
    a.axhline(eps, color="k", lw=0.8, ls="--")
    a.text(t[0], eps, f" tolerance {eps:g}", va="bottom", fontsize=7)
    a.set_xlabel(TIME_LABEL)
    a.set_ylabel("largest distance to token 1\n(median over runs, min-max band)")
    b.axhline(fraction, color="k", lw=0.8, ls="--")
    b.text(t[0], fraction, f" required {fraction:.0%}", va="top", fontsize=7)
    b.set_xscale("log")
    b.set_ylim(-0.03, 1.05)
    b.set_xlabel(TIME_LABEL)
    b.set_ylabel(f"share of runs with every token\nwithin {eps:g} of token 1")
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
