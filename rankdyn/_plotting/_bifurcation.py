"""Bifurcation diagrams: the parameter against a scalar measure of the equilibria along each branch.

As in BifurcationKit's diagrams: stable stretches solid, unstable (or marginal) dashed, and the
located bifurcation points marked and labelled by kind. A point with a criticality is drawn filled
when supercritical, open (white face) when subcritical and grey when degenerate, and its label says
which (`_FACES`).
"""

from __future__ import annotations

import numpy as np

from .._errors import UsageError

__all__ = [
    "plot_basins_across",
    "plot_basin_map",
    "two_angle_starts",
    "plot_bifurcation",
    "plot_pair_phases",
    "equilibrium_measure",
    "MEASURES",
]

#: Scalar measures of an equilibrium ``(n, d)`` for the diagram's y axis (the first is the default).
MEASURES = ("projection", "sigma_min", "min_cos")

_MARKERS = {"fold": "o", "branch-point": "s", "period-doubling": "D", "neimark-sacker": "^"}
#: Point labels in words (docs/glossary.md, "Bifurcations").
_WORDS = {
    "fold": "fold",
    "branch-point": "branch point",
    "period-doubling": "period doubling",
    "neimark-sacker": "Neimark-Sacker",
}


def equilibrium_measure(points, measure: str = "projection") -> np.ndarray | float:
    r"""``projection``: $\langle X, U\rangle_F$ with one fixed random unit ``U (n, d)`` (seed 0): a
    signed coordinate that separates distinct equilibria (both sheets of a fold, and branches that
    share their singular values); ``sigma_min``: the smallest singular value of each ``X (n, d)``;
    ``min_cos``: the smallest cosine between two tokens. ``points`` is ``(n, d)`` or
    ``(k, n, d)``; the states ``(k, m)`` of a map's branch (`plot_bifurcation`) are drawn by their
    first coordinate instead.

    Raises:
        ValueError: for another ``measure``.
    """
    x = np.asarray(points, dtype=float)
    one = x.ndim == 2
    x = x[None] if one else x
    if measure == "projection":
        u = np.random.default_rng(0).standard_normal(x.shape[1:])
        out = np.einsum("kid,id->k", x, u / np.linalg.norm(u))
    elif measure == "sigma_min":
        out = np.linalg.svd(x, compute_uv=False)[:, -1]
    elif measure == "min_cos":
        u = x / np.linalg.norm(x, axis=-1, keepdims=True)
        out = np.min(np.einsum("kid,kjd->kij", u, u), axis=(1, 2))
    else:
        raise UsageError(f"measure must be one of {MEASURES}, got {measure!r}.")
    return out[0] if one else out


#: Marker face per criticality: filled (supercritical), open (subcritical), grey (degenerate).
_FACES = {"supercritical": "k", "subcritical": "white", "degenerate": "0.6", "": "k"}


def _get(b, name):
    return b[name] if isinstance(b, dict) else getattr(b, name)


def _criticality(bif) -> str:
    """The point's criticality ('' for a fold, a record written before it existed, or none)."""
    return (bif.get("criticality", "") if isinstance(bif, dict) else bif.criticality) or ""


def plot_bifurcation(branches, *, ax=None, measure: str = "projection", labels=None, title=None, xlabel=None):
    """Bifurcation diagram of one or several branches (`Branch` objects or their ``to_dict()``).

    Super-, subcritical and degenerate points are drawn filled, open and grey (module docstring).

    Arguments:
        branches: the branches.
        ax: matplotlib Axes (created when None).
        measure: the y axis, one of `MEASURES`.
        labels: one legend label per branch (default ``branch i``).
        title, xlabel: the title and the x label (default the branches' ``param_name``).

    Returns:
        The Axes.
    """
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(7, 4.5))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    seen, crits, spots = set(), set(), {}
    drawn = []  # (label, p, y) of the branches drawn so far, to find a branch hidden under another
    for i, b in enumerate(branches):
        p = np.asarray(_get(b, "params"), dtype=float)
        pts = np.asarray(_get(b, "points"))
        # A map's branch has 1-D states (k, m): its first coordinate separates the sheets of a fold.
        on_map = pts.ndim == 2
        y = pts[:, 0] if on_map else equilibrium_measure(pts, measure)
        stable = np.asarray(_get(b, "stable"), dtype=bool)
        color = colors[i % len(colors)]
        label = labels[i] if labels is not None else f"branch {i}"
        under = next((lab for lab, q, z in drawn if _on_curve(p, y, q, z)), None)
        drawn.append((label, p, y))
        cuts = {}
        for bif in _get(b, "bifurcations"):
            if _get(bif, "located") and 0 <= int(_get(bif, "step")) < len(p) - 1:
                bp = np.asarray(_get(bif, "point"))
                cuts[int(_get(bif, "step"))] = (
                    float(_get(bif, "param")),
                    bp[0] if on_map else equilibrium_measure(bp, measure),
                )
        # One line per run of equal stability (solid: stable, dashed: unstable), not one per
        # segment: a segment of its own restarts the dash pattern, so a dense unstable branch
        # would read as solid. A run ends at the located bifurcation where stability changes.
        if under is None:
            style = {True: dict(ls="-", lw=1.8), False: dict(ls="--", lw=1.2)}
        else:
            # The same curve as a branch drawn before (the other end of one fold's two sheets):
            # drawn wide and pale under it, with its points marked, so it is not hidden.
            style = {
                s_: dict(ls="-" if s_ else "--", lw=5.0, alpha=0.35, zorder=1, marker="o", ms=3)
                for s_ in (True, False)
            }
            same = label == under  # one family's two ends, labelled alike
            label = f"{label} ({'the same curve from its other end' if same else f'on the curve of {under}'})"
        runs = _runs(p, y, stable, cuts)
        for px, py, solid in runs:
            ax.plot(px, py, color=color, **style[solid])
        # The legend's key in the branch's own style: solid if any of it is stable, else dashed.
        key = "-" if any(solid for *_, solid in runs) else "--"
        ax.plot(
            [], [], color=color, ls=key, label=label, **({} if under is None else dict(lw=5.0, alpha=0.35))
        )
        for bif in _get(b, "bifurcations"):
            kind = _get(bif, "kind")
            bp = np.asarray(_get(bif, "point"))
            yb = bp[0] if on_map else equilibrium_measure(bp, measure)
            pb = float(_get(bif, "param"))
            crit = _criticality(bif)
            ax.scatter(
                [pb],
                [yb],
                marker=_MARKERS[kind],
                s=45,
                facecolors=_FACES[crit],
                edgecolors="k",
                zorder=5,
                label=None if kind in seen else kind,
            )
            seen.add(kind)
            crits.add(crit)
            # Branches through one bifurcation (both sheets of a fold) share one label naming each.
            spot = (kind, f"{pb:.4g}", round(float(yb), 2), crit)
            text = (
                f"{_WORDS[kind]} {pb:.4g}"
                + ("" if _get(bif, "located") else " (bracket)")
                + (f" ({crit})" if crit else "")
            )
            spots.setdefault(spot, (text, pb, yb, []))[3].append(labels[i] if labels is not None else f"{i}")
    for text, pb, yb, owners in spots.values():
        many = len(owners) > 1
        who = (" of branches " if labels is None else " of ") + ", ".join(owners) if many else ""
        ax.annotate(text + who, (pb, yb), textcoords="offset points", xytext=(5, 5), fontsize=8)
    if any(ln.get_linestyle() == "-" for ln in ax.get_lines() if len(ln.get_xdata())):
        ax.plot([], [], color="0.3", ls="-", label="stable")
    if any(ln.get_linestyle() == "--" for ln in ax.get_lines() if len(ln.get_xdata())):
        ax.plot([], [], color="0.3", ls="--", label="unstable / marginal")
    for crit in ("supercritical", "subcritical", "degenerate"):
        if crit in crits:
            ax.scatter([], [], marker="o", s=45, facecolors=_FACES[crit], edgecolors="k", label=crit)
    names = {_get(b, "param_name") for b in branches}
    ax.set_xlabel(xlabel or (names.pop() if len(names) == 1 else "parameter"))
    maps = all(np.ndim(_get(b, "points")) == 2 for b in branches) and len(branches) > 0
    names_y = {
        "projection": "<X, U> (U: a fixed random direction)",
        "sigma_min": "smallest singular value of X",
        "min_cos": "min cos between tokens",
    }
    ax.set_ylabel("first coordinate of x" if maps else names_y[measure])
    if title:
        ax.set_title(title, fontsize=9)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    return ax


def _runs(p, y, stable, cuts):
    """``(p, y, stable)`` polylines, one per run of equal stability; a run ends at the located
    bifurcation ``cuts[j] = (p, y)`` inside the segment j where stability changes (else at the
    segment's end: the change is drawn where it happens, not at the next branch point)."""
    out, xs, ys, cur = [], [p[0]], [y[0]], bool(stable[0])
    for j in range(len(p) - 1):
        nxt = bool(stable[j + 1])
        if nxt == cur:
            xs.append(p[j + 1])
            ys.append(y[j + 1])
            continue
        pc, yc = cuts.get(j, (p[j + 1], y[j + 1]))
        if j in cuts:
            xs.append(pc)
            ys.append(yc)
        else:  # no located point: the segment is drawn as the unstable side
            if cur:  # stable -> unstable: the segment starts the unstable run
                out.append((xs, ys, True))
                xs, ys, cur = [p[j], p[j + 1]], [y[j], y[j + 1]], False
            else:  # unstable -> stable: the segment ends the unstable run
                xs.append(p[j + 1])
                ys.append(y[j + 1])
                out.append((xs, ys, False))
                xs, ys, cur = [p[j + 1]], [y[j + 1]], True
            continue
        out.append((xs, ys, cur))
        xs, ys, cur = [pc, p[j + 1]], [yc, y[j + 1]], nxt
    out.append((xs, ys, cur))
    return [(np.asarray(a, float), np.asarray(b, float), s) for a, b, s in out if len(a) > 1]


def _on_curve(p, y, q, z, tol: float = 5e-3) -> bool:
    """Whether every point ``(p, y)`` lies on the polyline ``(q, z)`` within ``tol`` of the x and y
    ranges: a branch hidden under one drawn before it (the same curve, from its other end)."""
    if len(q) < 2 or len(p) < 2:
        return False
    sx = max(np.ptp(np.r_[p, q]), 1e-12)
    sy = max(np.ptp(np.r_[y, z]), 1e-12)
    a = np.c_[q[:-1] / sx, z[:-1] / sy]
    d = np.c_[q[1:] / sx, z[1:] / sy] - a
    pt = np.c_[p / sx, y / sy]
    # Distance of each point to each segment of the other polyline.
    t = np.clip(
        np.einsum("ksd,sd->ks", pt[:, None, :] - a[None], d) / np.maximum((d * d).sum(1), 1e-300), 0, 1
    )
    near = a[None] + t[..., None] * d[None]
    return bool(np.max(np.min(np.linalg.norm(pt[:, None, :] - near, axis=-1), axis=1)) <= tol)


def plot_basins_across(scan, *, ax=None, names=None, title=None, xlabel="parameter", folds=()):
    """Stacked basin fractions of each attractor across the parameter (`rankdyn.theory.basins_across`),
    with the not-settled share on top and each attractor's Wilson 95% interval as error bars.

    The fold the scan is about is marked: an attractor reached by no start at the first values and
    by some at a later one is born between the last value without it and the first with it (an
    attractor of a smooth family appears in a fold or a branch point: a grey span, labelled), and
    each ``folds`` value (located by continuation) is a dotted line.

    Arguments:
        scan: a `BasinScan`.
        ax: matplotlib Axes (created when None).
        names: one legend name per attractor (default ``period k, label l``).
        title, xlabel: the title and the x label.
        folds: ``(value, words)`` pairs: folds located by continuation, drawn as dotted lines.

    Returns:
        The Axes.
    """
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(7, 4.5))
    _mark_births(ax, scan, names, folds)
    p = np.asarray(scan.params)
    order = np.argsort(p)
    labels = names or [f"period {k}, label {v}" for k, v in scan.attractors]
    layers = [scan.fractions[order, i] for i in range(len(scan.attractors))] + [scan.not_settled[order]]
    ax.stackplot(p[order], *layers, labels=list(labels) + ["not settled"], alpha=0.8)
    base, reach = np.zeros(p.size), 1.0
    for i in range(len(scan.attractors)):
        top = base + scan.fractions[order, i]
        err = np.stack(
            [scan.fractions[order, i] - scan.lo[order, i], scan.hi[order, i] - scan.fractions[order, i]]
        )
        ax.errorbar(p[order], top, yerr=err, fmt="none", ecolor="k", elinewidth=0.6, capsize=1.5)
        reach = max(reach, float(np.max(top + err[1])))
        base = top
    ax.set_xlabel(xlabel)
    ax.set_ylabel("basin fraction")
    ax.set_ylim(0, reach)  # an interval stacked on a share of 1 reaches past 1: not cut off
    if title:
        ax.set_title(title, fontsize=9)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    return ax


def _mark_births(ax, scan, names, folds) -> None:
    """`plot_basins_across`'s fold marks: where an attractor is first reached, and given folds."""
    p = np.asarray(scan.params, float)
    order = np.argsort(p)
    p = p[order]
    for i, (k, v) in enumerate(scan.attractors):
        f = np.asarray(scan.fractions, float)[order, i]
        hit = np.flatnonzero(f > 0)
        if hit.size and hit[0] > 0:  # absent at the first values, then reached: born in between
            lo, hi = p[hit[0] - 1], p[hit[0]]
            name = names[i] if names else f"period {k}, label {v}"
            ax.axvspan(lo, hi, color="0.6", alpha=0.25, lw=0, zorder=3)
            ax.annotate(
                f"{name}:\nfirst reached in ({lo:.3g}, {hi:.3g}]\n(born there: a fold or branch point)",
                (hi, 0.5),
                xycoords=("data", "axes fraction"),
                xytext=(-4, 0),
                textcoords="offset points",
                ha="right",
                va="center",
                fontsize=7,
                zorder=6,
                bbox=dict(boxstyle="round", fc="white", ec="0.6", alpha=0.9),
            )
    for value, words in folds:
        ax.axvline(value, color="k", lw=0.9, ls=":", zorder=4, label=words)


def _edges(v):
    """Cell edges around grid values ``v`` (midpoints; half a step beyond the ends)."""
    v = np.asarray(v, dtype=float)
    if v.size == 1:
        return np.array([v[0] - 0.5, v[0] + 0.5])
    mid = 0.5 * (v[1:] + v[:-1])
    return np.concatenate([[2 * v[0] - mid[0]], mid, [2 * v[-1] - mid[-1]]])


def _categories(ax, codes, xs, ys, names, title):
    """A categorical map: one colour per code present (cells drawn as polygons with their colour,
    no colour scale), named in a legend below the panel."""
    import matplotlib.pyplot as plt
    from matplotlib.collections import PolyCollection
    from matplotlib.patches import Patch

    codes = np.asarray(codes)
    present = sorted(set(codes.ravel().tolist()))
    colors = plt.get_cmap("tab10").colors
    ex, ey = _edges(xs), _edges(ys)
    x0, y0 = np.meshgrid(ex[:-1], ey[:-1])
    x1, y1 = np.meshgrid(ex[1:], ey[1:])
    verts = np.stack([np.stack(c, -1) for c in ((x0, y0), (x1, y0), (x1, y1), (x0, y1))], axis=-2)
    face = [colors[present.index(c) % len(colors)] for c in codes.ravel().tolist()]
    ax.add_collection(PolyCollection(verts.reshape(-1, 4, 2), facecolors=face, edgecolors="none"))
    ax.set_xlim(ex[0], ex[-1])
    ax.set_ylim(ey[0], ey[-1])
    handles = [Patch(color=colors[i % len(colors)], label=names(c)) for i, c in enumerate(present)]
    ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.14), fontsize=7, frameon=False)
    ax.set_title(title, fontsize=9)


def plot_pair_phases(
    phases, xs, ys, *, families=("A", "B"), xlabel="w", ylabel="qk_std", folds=(), axes=None
):
    """Phase diagram of the causal two-token layer (`rankdyn.theory.causal_pair_phases` on a grid):
    which rank-2 equilibrium classes exist (left) and which classes are stable (right).

    Arguments:
        phases: the dict of `causal_pair_phases` for weights on the grid ``(len(ys), len(xs))``.
        xs, ys: the grid's parameter values.
        families: names of token 1's two families (largest eigenvalue first).
        xlabel, ylabel: the parameters' names.
        folds: ``(x, y, label)`` points to mark (e.g. folds located by continuation).
        axes: two matplotlib Axes (created when None).

    Returns:
        The two Axes.
    """
    import matplotlib.pyplot as plt

    if axes is None:
        _, axes = plt.subplots(1, 2, figsize=(10, 4.6))
    count, stable = np.asarray(phases["count"]), np.asarray(phases["stable"])
    rank2 = (count[..., 2] > 0).astype(int) @ np.array([1, 2])
    exist_names = ["no rank-2 equilibrium", f"rank 2, token 1 in {families[0]}", f"rank 2, token 1 in "
                   f"{families[1]}", f"rank 2 in {families[0]} and in {families[1]}"]  # fmt: skip
    _categories(axes[0], rank2, xs, ys, lambda c: exist_names[c], "rank-2 equilibria that exist")
    words = ("x2 = x1", "x2 = -x1", "rank 2")
    classes = [f"{f}: {r}" for f in families for r in words]
    bits = (stable.reshape(stable.shape[:-2] + (6,)) > 0).astype(int) @ (2 ** np.arange(6))

    def stable_names(code):
        return ", ".join(c for i, c in enumerate(classes) if code >> i & 1) or "none stable"

    _categories(axes[1], bits, xs, ys, stable_names, "stable equilibria (token 1 in family: token 2)")
    for ax in axes:
        for x, y, label in folds:
            ax.plot([x], [y], "ko", ms=5)
            ax.annotate(label, (x, y), textcoords="offset points", xytext=(4, 4), fontsize=7)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
    return axes


def two_angle_starts(angles1, angles2) -> np.ndarray:
    r"""Starts of two tokens on the unit circle over a grid of their angles, for a basin map.

    Token $i$ is $(\cos\theta_i, \sin\theta_i)$; the grid is ``angles1`` x ``angles2`` in row-major
    order, so the per-start results of `rankdyn.theory.basins_across` (``attractor[p]``, ``(S,)``)
    reshape to ``(len(angles1), len(angles2))`` for `plot_basin_map`.

    Returns:
        ``(len(angles1) * len(angles2), 2, 2)`` tokens.
    """
    a1, a2 = (np.asarray(a, dtype=float).reshape(-1) for a in (angles1, angles2))
    t1, t2 = np.meshgrid(a1, a2, indexing="ij")
    tok = lambda t: np.stack([np.cos(t), np.sin(t)], axis=-1).reshape(-1, 2)  # noqa: E731
    return np.stack([tok(t1), tok(t2)], axis=1)


def plot_basin_map(angles1, angles2, attractor, *, names=None, ax=None, title=None):
    r"""The basin map over two angles: each start of `two_angle_starts` coloured by its attractor.

    Arguments:
        angles1, angles2: the grid's angles $\theta_1$ (rows, the y axis) and $\theta_2$ (the x axis).
        attractor: ``(len(angles1) * len(angles2),)`` or ``(len(angles1), len(angles2))`` integer
            attractor index per start (`BasinScan.attractor` at one parameter value); -1 is "not
            settled".
        names: one legend name per attractor index (default ``attractor i``).
        ax: matplotlib Axes (created when None).
        title: the title.

    Returns:
        The Axes: one colour per attractor in a legend, no colour bar (the map is categorical).
    """
    import matplotlib.pyplot as plt
    from matplotlib.colors import BoundaryNorm, ListedColormap
    from matplotlib.patches import Patch

    a1, a2 = (np.asarray(a, dtype=float).reshape(-1) for a in (angles1, angles2))
    grid = np.asarray(attractor).reshape(a1.size, a2.size)
    classes = sorted(int(c) for c in np.unique(grid))
    colours = ["0.85" if c < 0 else plt.cm.tab10(i % 10) for i, c in enumerate(classes)]
    index = np.searchsorted(classes, grid)
    if ax is None:
        _, ax = plt.subplots(figsize=(5.5, 5), layout="constrained")
    cmap = ListedColormap(colours)
    norm = BoundaryNorm(np.arange(len(classes) + 1) - 0.5, len(classes))
    ax.pcolormesh(a2, a1, index, cmap=cmap, norm=norm, shading="nearest")
    label = lambda c: "not settled" if c < 0 else (names[c] if names else f"attractor {c}")  # noqa: E731
    handles = [Patch(color=col, label=label(c)) for c, col in zip(classes, colours)]
    ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=min(3, len(handles)))
    ax.set_xlabel(r"$\theta_2$ (token 2)")
    ax.set_ylabel(r"$\theta_1$ (token 1)")
    ax.set_aspect("equal")
    if title:
        ax.set_title(title)
    return ax
