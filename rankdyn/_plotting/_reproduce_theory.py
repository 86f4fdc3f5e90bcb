"""Figures of the theory targets of ``rankdyn reproduce``: the 2-D example (Fig. 1/5), the
closed-form equilibria of every rank (Theorem 3) and the positive-measure checks (Lemma 13).

Every function takes results as the experiment modules return them (NumPy arrays / dicts) and
returns the matplotlib ``Figure``; with ``path=`` it also saves the figure and closes it.
"""

from __future__ import annotations

import numpy as np

from .._run._io import savefig
from ._style import legend_outside, tidy_log_ticks

_TOKEN_COLORS = (
    "tab:blue",
    "tab:red",
    "tab:green",
    "tab:purple",
    "tab:orange",
    "tab:brown",
    "tab:pink",
    "tab:olive",
)


def _finish(fig, path):
    if path is not None:
        import matplotlib.pyplot as plt

        tidy_log_ticks(fig)
        savefig(fig, path, dpi=120, bbox_inches="tight")
        plt.close(fig)
    return fig


def _arc(ax, lo_deg, hi_deg, radius, **kw):
    th = np.deg2rad(np.linspace(lo_deg, hi_deg, 200))
    ax.plot(radius * np.cos(th), radius * np.sin(th), **kw)


def plot_counterexample_2d(states_noln, states_ln, example: dict, *, title_w=None, path=None):
    r"""Fig. 1 style: token paths without LN (left, in $\mathbb R^2$) and with LN (right, on $S^1$).

    Arguments:
        states_noln: ``(S, 2, 2)`` states of the no-LN run.
        states_ln: ``(R, S, 2, 2)`` states of R runs with LN (the first is drawn solid, the
            others dashed).
        example: `rankdyn._theory._constructions.example_2d` output (``A``, ``B``, ``theta_A``).
        title_w: the w shown in the titles.
        path: save the figure here (and close it).
    """
    import matplotlib.pyplot as plt

    fig, (ax0, ax1) = plt.subplots(1, 2, figsize=(11, 4.8), layout="constrained")
    s = np.asarray(states_noln)
    for i in range(s.shape[1]):
        ax0.plot(s[:, i, 0], s[:, i, 1], "o-", ms=3, color=_TOKEN_COLORS[i], label=f"token {i + 1}")
        ax0.plot(s[0, i, 0], s[0, i, 1], "s", ms=8, mfc="none", color=_TOKEN_COLORS[i])
    ax0.plot(s[-1, :, 0], s[-1, :, 1], "k*", ms=10, label=f"t = {s.shape[0] - 1}")
    _arc(ax0, 0, 360, 1.0, color="0.8", lw=1, zorder=0)
    ax0.set_aspect("equal")
    ax0.set_xlabel("x_1 (first coordinate)")
    ax0.set_ylabel("x_2 (second coordinate)")
    ax0.set_title(f"no LN (eq. 2), W_V/||W_V||_2{'' if title_w is None else f', w={title_w:g}'}: collapse")
    legend_outside(ax0)

    _arc(ax1, 0, 360, 1.0, color="0.8", lw=1, zorder=0)
    lo = float(example["theta_A"])
    # On the unit circle itself (the states live there), under the paths: a wide pale band.
    _arc(
        ax1,
        lo,
        270.0,
        1.0,
        color="tab:red",
        lw=7,
        alpha=0.3,
        solid_capstyle="butt",
        zorder=0.5,
        label="predicted basin of B (token 1 at (0,1))",
    )
    a, b = np.asarray(example["A"]), np.asarray(example["B"])
    ax1.plot(*a, "kx", ms=10)
    ax1.annotate("A", a, xytext=(6, 6), textcoords="offset points")
    ax1.plot(*b, "k*", ms=12)
    ax1.annotate("B", b, xytext=(6, -12), textcoords="offset points")
    sl = np.asarray(states_ln)
    for r in range(sl.shape[0]):
        ls = "-" if r == 0 else "--"
        for i in range(sl.shape[2]):
            p = sl[r, :, i]
            ax1.plot(
                p[:, 0],
                p[:, 1],
                ls,
                marker=".",
                ms=3,
                lw=0.8,
                color=_TOKEN_COLORS[i],
                label=f"token {i + 1}" + (" (run 2, collapses)" if r else ""),
            )
            ax1.plot(p[0, 0], p[0, 1], "s", ms=8, mfc="none", color=_TOKEN_COLORS[i])
    ax1.set_aspect("equal")
    ax1.set_xlim(-1.3, 1.3)
    ax1.set_ylim(-1.3, 1.3)
    ax1.set_xlabel("x_1 (first coordinate)")
    ax1.set_ylabel("x_2 (second coordinate)")
    ax1.set_title(f"post-LN (eq. 3), joint dynamics, {sl.shape[1] - 1} steps: rank 2")
    legend_outside(ax1)
    return _finish(fig, path)


def plot_counterexample_2d_basins(basins: dict, joints: dict, reference: dict | None = None, *, path=None):
    r"""Basin of $B$ on the angle grid against the predicted arc, the joint-dynamics outcome map
    and the non-collapse fraction against the horizon (Wilson 95% bars).

    Arguments:
        basins: ``{w: _counterexample_2d_runs.basin_of_b(...)}`` (experiments.theory; the keys it reads).
        joints: ``{w: _counterexample_2d_runs.joint_noncollapse(...)}`` (the keys it reads).
        reference: ``{w: fraction}`` reference values at T = 20000 (a longer rankdyn run,
            see docs/theory.md#experiments), drawn as stars.
        path: save the figure here (and close it).
    """
    import matplotlib.pyplot as plt

    # The basin strip spans the top row (wide, as its angle axis is); the outcome map and the
    # fractions share the bottom row: no cell of the grid is left empty.
    fig, grid = plt.subplot_mosaic([["basin", "basin"], ["joint", "fraction"]], figsize=(12, 8.0),
                                   layout="constrained", height_ratios=(0.6, 1.0))  # fmt: skip
    axes = [grid["basin"], grid["joint"], grid["fraction"]]
    ax = axes[0]
    for row, (w, bs) in enumerate(basins.items()):
        ang, out = np.asarray(bs["angles"]), np.asarray(bs["outcome"])
        ax.scatter(
            ang[out == 1],
            np.full((out == 1).sum(), row),
            s=2,
            color="tab:red",
            label="-> B (measured)" if row == 0 else None,
        )
        ax.scatter(
            ang[out == 0],
            np.full((out == 0).sum(), row),
            s=2,
            color="0.75",
            label="-> (0,1) (collapse)" if row == 0 else None,
        )
        if (out == -1).any():
            ax.scatter(
                ang[out == -1],
                np.full((out == -1).sum(), row),
                s=6,
                color="k",
                marker="x",
                label="undecided" if row == 0 else None,
            )
        lo, hi = bs["predicted_arc"]
        ax.plot(
            [lo, hi],
            [row + 0.25, row + 0.25],
            color="k",
            lw=2,
            label="predicted (theta_A, 270)" if row == 0 else None,
        )
    ax.set_yticks(range(len(basins)), [f"w={w:g}" for w in basins])
    ax.set_ylim(-0.6, len(basins) - 0.4 + 0.5)
    ax.set_xlim(0, 360)
    ax.set_xlabel("initial angle of token 2 (deg), token 1 at (0,1)")
    ax.set_ylabel("w (shear of W_V)")
    ax.set_title("basin of B: measured grid vs predicted arc")
    legend_outside(ax)

    ax = axes[1]
    w0 = 2.0 if 2.0 in joints else next(iter(joints))
    jt = joints[w0]
    nonc = np.asarray(jt["noncollapse"][-1], dtype=float)
    th1, th2 = np.asarray(jt["theta1"]), np.asarray(jt["theta2"])
    # Two outcomes, two colours and a legend of both (a colour bar would suggest a continuum).
    from matplotlib.colors import ListedColormap
    from matplotlib.patches import Patch

    colors = ("0.93", "tab:red")
    ax.imshow(
        nonc.T,
        origin="lower",
        aspect="auto",
        cmap=ListedColormap(colors),
        vmin=0,
        vmax=1,
        interpolation="nearest",
        extent=(
            th1[0] - (th1[1] - th1[0]) / 2,
            th1[-1] + (th1[1] - th1[0]) / 2,
            th2[0] - (th2[1] - th2[0]) / 2,
            th2[-1] + (th2[1] - th2[0]) / 2,
        ),
    )
    kept = float(np.mean(nonc))
    ax.legend(
        [Patch(facecolor=c, edgecolor="0.5") for c in colors],
        [f"collapsed ({1 - kept:.1%} of starts)", f"rank 2 kept ({kept:.1%})"],
        title="outcome at T",
        loc="upper center",
        bbox_to_anchor=(0.5, -0.13),
        ncol=2,
        fontsize=7,
        title_fontsize=7,
        frameon=False,
    )
    ax.set_xlabel("theta1 (deg)")
    ax.set_ylabel("theta2 (deg)")
    ax.set_title(f"joint dynamics w={w0:g}, T={jt['horizons'][-1]}: outcome of every start")

    ax = axes[2]
    for j, (w, jt) in enumerate(joints.items()):
        dodge = 1.08 ** (j - (len(joints) - 1) / 2)  # side by side: equal fractions stay visible
        plot_fraction_vs_horizon(
            jt["horizons"], jt["fraction"], jt["ci"], ax=ax, label=f"w={w:g}", dodge=dodge
        )
        if reference and float(w) in reference:
            ax.plot(
                [20000],
                [reference[float(w)]],
                "*",
                ms=10,
                color=ax.lines[-1].get_color(),
                label=f"reference (longer run, T = 20000), w={w:g}",
            )
    ax.set_title("joint non-collapse fraction vs horizon")
    legend_outside(ax)
    return _finish(fig, path)


def plot_fraction_vs_horizon(horizons, fraction, ci=None, *, ax=None, label=None, color=None, dodge=1.0):
    """A fraction against the horizon T (log x axis) with confidence-interval error bars.

    Points with their intervals; a line joins them only from 3 horizons on (two points joined by
    a flat segment suggest a plateau that was never measured in between).

    Arguments:
        horizons: the T values.
        fraction: the fractions at each T.
        ci: ``[(lo, hi), ...]`` per T (e.g. Wilson 95%).
        dodge: factor on T for this series, so the error bars of several series at the same
            horizons sit side by side instead of on top of each other (e.g. 0.94, 1, 1.06).

    Returns:
        The ``Axes``.
    """
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(5, 3.5))
    t = np.asarray(horizons, dtype=float)
    f = np.asarray(fraction, dtype=float)
    yerr = None
    if ci is not None:
        c = np.asarray(ci, dtype=float).reshape(-1, 2)
        yerr = np.stack([np.maximum(f - c[:, 0], 0), np.maximum(c[:, 1] - f, 0)])
    ax.errorbar(
        t * dodge,
        f,
        yerr=yerr,
        marker="o",
        ms=4,
        capsize=3,
        label=label,
        color=color,
        ls="-" if t.size >= 3 else "none",
    )
    ax.set_xscale("log")
    ax.set_xlabel("horizon T (steps)")
    ax.set_ylabel("non-collapse fraction")
    # Room above the highest interval (a fraction near 1 has its bar's cap at 1): never clipped.
    top = max(ax.get_ylim()[1], 1.08 * float(np.nanmax(f if yerr is None else f + yerr[1])))
    ax.set_ylim(0, top)
    return ax


def plot_equilibria_ranks(results, *, path=None):
    r"""Stable rank against the rank $k$ with the App. F.2 bound, and the largest multiplier modulus.

    Arguments:
        results: list of `rankdyn._reproduce.theory.equilibria_ranks.analyse` dicts (one per (N, w)).
        path: save the figure here (and close it).
    """
    import matplotlib.pyplot as plt

    fig, (ax0, ax1) = plt.subplots(1, 2, figsize=(12, 4.2), layout="constrained")
    m = max(len(results), 1)
    for j, r in enumerate(results):
        off = (j - (m - 1) / 2) * 0.12
        k = np.asarray(r["k"], dtype=float) + off
        label = f"N=d={r['n']}, w={r['w']:g}"
        (pts,) = ax0.plot(k, r["stable_rank"], "o", ms=3, alpha=0.6, label=label)
        ax0.plot(
            [r["n"] + off - 0.3, r["n"] + off + 0.3],
            [r["bound_full_rank"]] * 2,
            "-",
            lw=2,
            color=pts.get_color(),
        )
        ax1.plot(k, r["spectral_radius"], "o", ms=3, alpha=0.6, color=pts.get_color(), label=label)
    ax0.set_xlabel("rank k of the equilibrium")
    ax0.set_ylabel("stable rank ||X||_F^2 / ||X||_2^2")
    ax0.set_title("stable rank (bars: App. F.2 bound for k = N)")
    ax1.axhline(1.0, color="k", lw=0.8, ls="--")
    ax1.set_xlabel("rank k of the equilibrium")
    ax1.set_ylabel("largest |multiplier| (tangent space)")
    ax1.set_title("linear stability: > 1 means unstable (saddle)")
    legend_outside(ax1)
    return _finish(fig, path)


def plot_positive_measure(results: dict, *, path=None):
    r"""Non-collapse fraction against the horizon (joint dynamics, Wilson 95% bars) and the
    Lemma 13 frozen-token checks.

    The reference fractions at $T = 20000$ (a longer rankdyn run, stored as a reference) are dotted
    horizontal lines in their series' colour, so they do not stretch the horizon axis beyond the
    horizons measured here. Series at the same horizons are dodged side by side; one legend for
    the two fraction panels sits right of the figure.

    Arguments:
        results: ``{"lemma": {(d, w): {condition: dict}}, "joint": {(n, d, w): {"random": ...,
            "token1_at_e_d": ...}}, "spec_joint": {(n, d, w): fraction}}`` as built by
            `rankdyn._reproduce.theory.positive_measure.render`.
        path: save the figure here (and close it).
    """
    import matplotlib.pyplot as plt

    from ._style import printable_size

    fig, (ax0, ax1, ax2) = plt.subplots(1, 3, figsize=printable_size(15, 4.4), layout="constrained")
    spec = results.get("spec_joint", {})
    num = max(len(results["joint"]), 1)
    for j, (key, res) in enumerate(results["joint"].items()):
        n, d, w = key
        color, dodge = f"C{j % 10}", 1.08 ** (j - (num - 1) / 2)
        label = f"N={n}, d={d}, w={w:g}"
        r = res["random"]
        plot_fraction_vs_horizon(
            r["horizons"], r["fraction"], r["wilson95"], ax=ax0, label=label, color=color, dodge=dodge
        )
        if key in spec:
            ax0.axhline(
                spec[key], color=color, ls=":", lw=1.2, label=f"{label}: reference, longer run (T = 20000)"
            )
        e = res["token1_at_e_d"]
        plot_fraction_vs_horizon(
            e["horizons"], e["fraction"], e["wilson95"], ax=ax1, label=label, color=color, dodge=dodge
        )
    ax0.set_title("joint dynamics, uniform random inputs", fontsize=9)
    ax1.set_title("token 1 at e_d (exactly fixed), others random", fontsize=9)

    labels, keep, over = [], [], []
    for (d, w), res in results["lemma"].items():
        for cond, r in res.items():
            # "paper": condition (41) as printed, f <= sqrt(w^2 - 1); "proof": f <= w^2 - 1 (its proof).
            labels.append(  # short lines: six of them side by side stay apart (the x label says more)
                f"d={d}\nw={w:g}\n" + {"paper": "printed", "proof": "proof"}.get(cond, cond)
            )
            keep.append(r["noncollapse"] / r["samples"])
            over.append(r["invariance_violated_any_step"] / r["samples"])
    x = np.arange(len(labels))
    ax2.bar(x - 0.2, keep, width=0.4, color="0.35", label="Lemma 13: keep rank 2 at T")
    ax2.bar(x + 0.2, over, width=0.4, color="0.7", label="Lemma 13: violate X_(2,d-1) <= -1/w at some step")
    ax2.set_xticks(x, labels, fontsize=7)
    ax2.set_xlabel("condition (41): as printed, or as in its proof", fontsize=8)
    ax2.set_ylim(0, 1.05)
    ax2.set_ylabel("fraction of starts")
    ax2.set_title("Lemma 13 starts, token 1 at e_d (N = 2)", fontsize=9)
    legend_outside(fig)  # one legend: the series of both fraction panels and the Lemma 13 bars
    return _finish(fig, path)
