"""The ``undirected`` target's figure from its measured result: the searched settings with their
attractors' basins, and every certified equilibrium (`rankdyn._plotting.plot_undirected`)."""

from __future__ import annotations

import numpy as np

from . import _undirected_known as K

__all__ = ["draw_undirected"]


def draw_undirected(m, path) -> None:
    """Draw ``undirected.png`` for the `UndirectedMeasured` ``m`` (searches, then certificates)."""
    from ...plotting import plot_undirected

    long_t = m.eval_factor * m.num_layers
    plot_undirected(
        _figure_points(m),
        certified=_figure_certified(m),
        path=path,
        title=f"LN under undirected masks: searches (held-out inputs, depth {long_t}), certified equilibria",
    )


def _figure_points(m) -> list[dict]:
    """The searched settings of the figure, each with its attractors' basin (Wilson 95%)."""
    from ._intervals import wilson_interval

    out = []
    for p in m.points:
        a = m.cells[f"N={p['n']}/{p['mask']}/{p['attention']}"]["main_sigma_2"]["attractors"]
        k = int(a["converged_rank_ge2_starts"])
        out.append(dict(p, basin=(k / m.basin_trials, *wilson_interval(k, m.basin_trials))))
    return out


def _sigma_ratio(point) -> float:
    s = np.linalg.svd(np.array([[float(v) for v in row] for row in point]), compute_uv=False)
    return float(s[1] / s[0])


def _figure_certified(m) -> list[dict]:
    """Every certified rank >= 2 equilibrium: found by this run's searches, and the stored ones
    re-proven by it (their tokens' sigma_2 / sigma_1 from the shipped points)."""
    out = []
    for c in m.certificates:
        n, mask, att = c["setting"].removeprefix("N=").split("/")
        out.append(
            dict(
                n=int(n),
                mask=mask,
                attention=att,
                source="this run",
                sigma_ratio=_sigma_ratio(c["point"]),
                bound=float(c["spectral_radius_bound"]),
                stable=bool(c.get("stability_proven")),
            )
        )
    points = {c["setting"]: c["point"] for c in (K.load() if m.stored else [])}
    for c in m.stored:
        n, mask, att = c["setting"].removeprefix("N=").split("/")
        ratio = _sigma_ratio(points[c["setting"]]) if c["setting"] in points else None
        out.append(
            dict(
                n=int(n),
                mask=mask,
                attention=att,
                source=f"stored, {c['run']} run",
                sigma_ratio=ratio,
                bound=float(c["spectral_radius_bound"]),
                stable=bool(c["stability_proven"] and c["existence_proven"]),
            )
        )
    return out
