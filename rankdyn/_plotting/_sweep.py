"""Summary plots of a sweep dataset (`rankdyn.run_sweep`): mu curves, rate heat maps, final ranks.

Every function takes the `xarray.Dataset` of a sweep and returns a matplotlib ``Figure``; none
calls ``plt.show()``.
"""

from __future__ import annotations

import itertools

import numpy as np

from .._errors import UsageError
from ._collapse import plot_metric_band
from ._style import _unique_handles, floor_band, gap_axes, legend_outside, panel_grid

#: Per-layer metrics that go to 0 at collapse: they get the round-off band.
_COLLAPSING = ("mu", "mu_rel", "mu_normalized")

__all__ = ["plot_sweep_mu", "plot_sweep_rate", "plot_sweep_rank", "sweep_axes"]


def sweep_axes(ds) -> tuple[str, ...]:
    """The grid axes of a sweep dataset, in config order (dims of ``mu_rate``)."""
    return tuple(ds["mu_rate"].dims)


def _label(ds, dim, value) -> str:
    """``dim=value``; a mask also shows the radius r of its graph when that is one number."""
    text = f"{dim}={value}"
    if dim == "mask":
        r = np.unique(ds["radius"].sel({dim: value}).values)
        if r.size == 1 and np.isfinite(r[0]):
            text += f" (r={int(r[0])})"
    return text


def _combos(ds, dims, limit):
    values = [ds[d].values for d in dims]
    combos = list(itertools.product(*values))
    return combos[:limit], len(combos)


def plot_sweep_mu(
    ds, *, hue: str | None = None, metric: str = "mu", max_panels: int = 24, loglog: bool = False
):
    """Small multiples of a per-layer metric (default mu, mean +- std band) against depth.

    Semi-log y (``loglog=True``: the paper's log-log), one y range for all panels unless it would
    squeeze a panel's curves into under a third of its height (`SHARE_MIN`; then each panel keeps
    its own), a y label on every panel, one legend right of the grid or in the empty cells of its
    last row. For the collapsing metrics (mu, mu_rel,
    mu_normalized) the round-off floor of the sweep's dtype (``ds.attrs["dtype"]``) is shaded.

    One panel per combination of the axes other than ``hue``; inside a panel one curve per value
    of ``hue`` (default ``dqk`` if it is an axis, else the last axis). At most ``max_panels``
    panels are drawn (the first ones in grid order; the title says how many were left out).

    Returns:
        The matplotlib ``Figure``.
    """
    import matplotlib.pyplot as plt

    axes = sweep_axes(ds)
    if hue is None and axes:
        hue = "dqk" if "dqk" in axes else axes[-1]
    if hue is not None and hue not in axes:
        raise UsageError(f"hue={hue!r} is not an axis of this sweep; axes: {', '.join(axes)}.")
    panel_dims = [a for a in axes if a != hue]
    combos, total = _combos(ds, panel_dims, max_panels)
    fig, grid = panel_grid(len(combos), 4, (3.4, 2.7))
    hues = ds[hue].values if hue is not None else [None]
    colors = plt.get_cmap("viridis")(np.linspace(0, 0.9, len(hues)))
    dtype = ds.attrs.get("dtype") if metric in _COLLAPSING else None
    for ax, combo in zip(grid, combos):
        sel = dict(zip(panel_dims, combo))
        for h, c in zip(hues, colors):
            s = dict(sel) if h is None else sel | {hue: h}
            da = ds[metric].sel(s)
            plot_metric_band(
                ds["layer"].values,
                da.sel(stat="mean").values,
                da.sel(stat="std").values,
                ax=ax,
                label=None if h is None else f"{hue}={h:g}" if isinstance(h, float) else f"{hue}={h}",
                loglog=loglog,
                color=c,
            )
        if loglog:  # minor labels of a short log axis overlap
            from matplotlib.ticker import NullFormatter

            ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_title(", ".join(_label(ds, k, v) for k, v in sel.items()) or metric, fontsize=8)
        ax.set_ylabel(f"{metric} (mean +- std)", fontsize=8)
    _share_unless_squeezed(grid)
    if dtype is not None:
        for ax in grid:
            finite = [
                ln.get_ydata()[np.isfinite(ln.get_ydata()) & (ln.get_ydata() > 0)] for ln in ax.get_lines()
            ]
            scale = max((float(f[0]) for f in finite if f.size), default=1.0)
            floor_band(ax, dtype, scale)
    gap = gap_axes(fig, grid) if hue is not None else None
    if gap is not None:  # the empty cells of a shortened last row hold the legend: no blank cell
        gap.legend(*_unique_handles(grid), loc="center", fontsize=8, frameon=False)
    elif hue is not None:
        legend_outside(fig)
    extra = f" (first {len(combos)} of {total} panels)" if total > len(combos) else ""
    fig.suptitle(f"{ds.attrs.get('name', 'sweep')}: {metric} against depth{extra}", fontsize=10)
    return fig


#: Panels share one y range unless it would squeeze a panel's data into less than this share of
#: its height (in decades on a log axis): then each keeps its own, so no curve is drawn flat.
SHARE_MIN = 1 / 3


def _share_unless_squeezed(axes) -> None:
    """One y range for compared panels when it hides nothing, else each panel its own."""
    axes = [ax for ax in axes if ax.has_data()]
    if len(axes) < 2:
        return
    f = np.log10 if all(ax.get_yscale() == "log" for ax in axes) else (lambda v: v)
    own = np.array([f(np.asarray(ax.get_ylim(), float)) for ax in axes])
    union = own.max() - own.min()
    if union > 0 and np.min(own[:, 1] - own[:, 0]) / union < SHARE_MIN:
        return
    lo, hi = (
        float(np.min([ax.get_ylim()[0] for ax in axes])),
        float(np.max([ax.get_ylim()[1] for ax in axes])),
    )
    for ax in axes:
        ax.set_ylim(lo, hi)


def plot_sweep_rate(ds, x: str, y: str, *, variable: str = "mu_rate", max_panels: int = 12):
    r"""Heat maps of the decay per layer, $1 - \rho$ (``rho = mu_rate``), over axes ``x`` and ``y``.

    One heat map per combination of the remaining axes (at most ``max_panels``), on a shared log
    colour scale: factors $\rho$ near 1 (0.97 against 0.999) differ by decades in $1 - \rho$,
    which a linear colour scale of $\rho$ hides. Each cell is annotated with $1 - \rho$; a cell
    with $\rho \ge 1$ (no decay) or no fit is grey and says so.

    Returns:
        The matplotlib ``Figure``.

    Raises:
        ValueError: if ``x`` or ``y`` is not an axis of the sweep, or they are equal.
    """
    import matplotlib.pyplot as plt

    axes = sweep_axes(ds)
    for a in (x, y):
        if a not in axes:
            raise UsageError(f"plot axis {a!r} is not an axis of this sweep; axes: {', '.join(axes)}.")
    if x == y:
        raise UsageError(f"the two plot axes must differ, got {x!r} twice.")
    rest = [a for a in axes if a not in (x, y)]
    combos, total = _combos(ds, rest, max_panels)
    ncol = min(3, len(combos))
    nrow = int(np.ceil(len(combos) / ncol))
    nx, ny = ds.sizes[x], ds.sizes[y]
    fig, grid = plt.subplots(
        nrow,
        ncol,
        figsize=(1.2 + 0.9 * nx * ncol + 1.5 * ncol, 0.6 + 0.45 * ny * nrow + 0.8 * nrow),
        squeeze=False,
        layout="constrained",
    )
    from matplotlib.colors import LogNorm

    gap_all = 1.0 - ds[variable]
    pos = gap_all.values[np.isfinite(gap_all.values) & (gap_all.values > 0)]
    vmin, vmax = (float(pos.min()), float(pos.max())) if pos.size else (1e-3, 1.0)
    norm = LogNorm(vmin=vmin, vmax=max(vmax, vmin * 10))
    cmap = plt.get_cmap("magma_r").with_extremes(bad="0.85")
    for ax, combo in zip(grid.flat, combos):
        sel = dict(zip(rest, combo))
        img = gap_all.sel(sel).transpose(y, x).values
        im = ax.imshow(np.where(img > 0, img, np.nan), origin="lower", aspect="auto", cmap=cmap, norm=norm)
        mid = np.sqrt(norm.vmin * norm.vmax)
        for (i, j), v in np.ndenumerate(img):
            text = "no fit" if not np.isfinite(v) else "no decay" if v <= 0 else f"{v:.2g}"
            ax.text(
                j,
                i,
                text,
                ha="center",
                va="center",
                fontsize=6,
                color="white" if np.isfinite(v) and v > mid else "black",
            )
        ax.set_xticks(
            range(nx), [_label(ds, x, v).split("=", 1)[1] for v in ds[x].values], fontsize=7, rotation=30
        )
        ax.set_yticks(range(ny), [_label(ds, y, v).split("=", 1)[1] for v in ds[y].values], fontsize=7)
        ax.set_xlabel(x)
        ax.set_ylabel(y)
        ax.set_title(", ".join(f"{k}={v}" for k, v in sel.items()) or variable, fontsize=8)
        fig.colorbar(im, ax=ax, fraction=0.05, label="1 - per-layer factor")
    for ax in list(grid.flat)[len(combos) :]:
        fig.delaxes(ax)
    extra = f" (first {len(combos)} of {total})" if total > len(combos) else ""
    fig.suptitle(
        f"decay per layer of mean mu, 1 - fitted factor (rankdyn.theory.fit_rate){extra}", fontsize=10
    )
    return fig


def plot_sweep_rank(ds, *, metric: str = "num_rank", ax=None):
    """Distribution of a final-layer rank over the samples of every grid cell.

    An image with one row per cell and one column per rank value; the colour is the fraction of
    the cell's samples with that value (``final_<metric>``, NaN samples left out).

    Returns:
        The matplotlib ``Figure``.
    """
    import matplotlib.pyplot as plt

    name = f"final_{metric}"
    if name not in ds:
        raise UsageError(f"the dataset has no {name!r}; add {metric!r} to [observe] final.")
    axes = sweep_axes(ds)
    da = ds[name].transpose(*axes, "sample")
    vals = da.values.reshape(-1, da.sizes["sample"])
    finite = vals[np.isfinite(vals)]
    top = int(np.nanmax(finite)) if finite.size else 1
    bins = np.arange(0, top + 2) - 0.5
    hist = np.stack(
        [np.histogram(v[np.isfinite(v)], bins=bins)[0] / max(np.isfinite(v).sum(), 1) for v in vals]
    )
    labels = [
        ", ".join(f"{k}={v}" for k, v in zip(axes, combo))
        for combo in itertools.product(*(ds[a].values for a in axes))
    ]
    if ax is None:
        fig, ax = plt.subplots(
            figsize=(2.5 + 0.12 * (top + 1) + 2.5, 1.0 + 0.18 * len(labels)), layout="constrained"
        )
    else:
        fig = ax.figure
    im = ax.imshow(
        hist,
        aspect="auto",
        cmap="Blues",
        vmin=0,
        vmax=1,
        interpolation="nearest",
        extent=(-0.5, top + 0.5, len(labels) - 0.5, -0.5),
    )
    ax.set_yticks(range(len(labels)), labels, fontsize=6)
    ax.set_xlabel(f"{metric} at the last layer")
    ax.set_ylabel("grid cell")
    ax.set_title(f"final-layer {metric}: fraction of samples per cell", fontsize=9)
    fig.colorbar(im, ax=ax, fraction=0.04, label="fraction of samples")
    return fig
