"""Figures of the long-context targets: collapse against the graph radius, the critical inverse
temperature against n, and the attention mass by key position of a trained decoder."""

from __future__ import annotations

import numpy as np

from ._style import floor_band, legend_outside


def plot_radius_collapse(curves, runs, radius, rho, lambda2, w, exponent):
    """Left: mu_t / mu_0 against depth per run at the largest n (semi-log). Right: 1 - rho against
    the radius r (log-log) per n, the uniform window's 1 - lambda_2 (open squares), a slope -2 guide."""
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(9.6, 3.6), layout="constrained")
    # The curves at the largest n only: at a smaller n with the same r they lie on top (the rate
    # depends on r, not n), which the right panel shows.
    top = max(int(name.split("n=")[1].split()[0]) for name in runs)
    for i, name in enumerate(r for r in runs if int(r.split("n=")[1].split()[0]) == top):
        t, rel = curves[name]
        # Held at 1e-17 (below float64's round-off floor): an exact 0 has no place on a log axis.
        a.semilogy(t, np.maximum(np.asarray(rel, float), 1e-17), lw=1, label=name, color=f"C{i % 10}")
    a.set_xlabel("layer t")
    a.set_ylabel("mu_t / mu_0")
    # mu_t / mu_0 is scale-free: the plateaus near 1e-15 are float64's round-off, shaded.
    floor_band(a, np.float64)
    win = [i for i, x in enumerate(w) if x]
    ns = sorted({name.split()[1] for name in (runs[i] for i in win)})
    dashes = ("-", "--", "-.", (0, (1, 1)))
    for k, nlabel in enumerate(ns):
        sel = [i for i in win if runs[i].split()[1] == nlabel]
        r = np.asarray([radius[i] for i in sel], float)
        # One dash per n: at equal r the points of different n coincide (the rate follows r).
        b.loglog(
            r,
            [1 - rho[i] for i in sel],
            marker="o",
            ls=dashes[k % 4],
            color=f"C{k}",
            label=f"measured, {nlabel}",
        )
    if win:
        sel = [i for i in win if runs[i].split()[1] == ns[-1]]
        r = np.asarray([radius[i] for i in sel], float)
        b.loglog(
            r,
            [1 - lambda2[i] for i in sel],
            "s",
            mfc="none",
            ms=9,
            color="k",
            label=f"uniform window 1 - lambda_2, {ns[-1]}",
        )
        ref = 1 - lambda2[sel[0]]
        b.loglog(r, ref * (r / r[0]) ** -2.0, color="0.5", ls=(0, (4, 4)), lw=0.8, label="slope -2")
    b.set_xlabel("graph radius r")
    b.set_ylabel("1 - rho (per layer)")
    b.set_title(f"fitted exponent p = {exponent:.2f}", fontsize=9)
    legend_outside(fig, below=True)
    return fig


def plot_critical_temperature(ns, dims, beta_c, grid, curves, law_exp):
    """Left: mean self-attention weight against beta / n^(2/(d-1)) per (d, n). Right: the measured
    beta_c(n) per d (log-log) with the power law n^(2/(d-1)) through the largest n."""
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(9.6, 3.6), layout="constrained")
    for k, d in enumerate(dims):
        for j, n in enumerate(ns):
            scale = n ** law_exp[k]
            a.semilogx(
                np.asarray(grid[k][j]) / scale,
                curves[k][j],
                color=f"C{k}",
                alpha=0.35 + 0.65 * (j + 1) / len(ns),
                lw=1,
                label=f"d={d}" if j == len(ns) - 1 else None,
            )
        bc = np.asarray(beta_c[k], float)
        b.loglog(ns, bc, "o-", color=f"C{k}", label=f"d={d} measured")
        nn = np.asarray(ns, float)
        b.loglog(nn, bc[-1] * (nn / nn[-1]) ** law_exp[k], ":", color=f"C{k}", label=f"n^(2/(d-1)), d={d}")
    a.axhline(0.5, color="0.4", lw=0.8, ls="--")
    a.set_xlabel("beta / n^(2/(d-1))")
    a.set_ylabel("mean self-attention weight A_ii")
    b.set_xlabel("n")
    b.set_ylabel("beta_c (A_ii = 1/2)")
    legend_outside(fig, below=True)
    return fig


def plot_position_profile(mu, profiles, sink, uniform_sink, title=""):
    """Left: mu by layer per model. Middle: attention mass on token 0 / uniform, by layer. Right: the
    attention mass by key-position bin (mean over layers, heads and the last queries), per model."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(10.8, 3.7), layout="constrained")
    for k, (name, v) in enumerate(mu.items()):
        axes[0].semilogy(np.arange(len(v)), v, color=f"C{k}", label=name)
        axes[1].semilogy(np.arange(len(sink[name])), np.asarray(sink[name]) / uniform_sink, color=f"C{k}")
        p = np.asarray(profiles[name], float)
        # Log scale: the recent keys get 10x uniform, the start and the middle a fraction of it.
        axes[2].semilogy((np.arange(p.size) + 0.5) / p.size, p, "o-", ms=3, color=f"C{k}")
    axes[0].set_xlabel("layer")
    axes[0].set_ylabel("mu")
    axes[1].axhline(1.0, color="0.4", lw=0.8, ls="--")
    axes[1].set_xlabel("layer")
    axes[1].set_ylabel("attention on token 0 / uniform")
    axes[2].set_xlabel("key position / n (token 0 left out)")
    axes[2].set_ylabel("attention mass per key / uniform")
    if title:
        fig.suptitle(title, fontsize=9)
    legend_outside(fig, below=True)
    return fig
