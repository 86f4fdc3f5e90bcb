r"""Target ``flow-metastability``: long-lived multi-cluster states of the flow on the circle.

Geshkovski, Koubbi, Polyanskiy and Rigollet study the SA flow with $Q = K = V = I$ on the circle
($d = 2$): the tokens first gather into a few clusters within $O(1)$ time, and these clusters then
persist for a time that grows like $e^{c\beta}$ before merging, so the interaction energy rises in a
staircase. (Paraphrased from memory, not checked against the paper's text.) Here, for several
$\beta$ (quick mode caps $\beta$ because the plateaus last $e^{c\beta}$):

- the cluster count (cosine >= 0.99, connected components) of every trajectory, on a log-time
  grid; its longest plateau with $k \ge 2$ clusters (after the initial transient) and the median
  plateau duration per $\beta$, fitted as $\log(\text{duration}) = a + c\beta$;
- the energy $E_\beta$ along each trajectory (a staircase: non-decreasing, flat on the plateaus);
- the plateau configurations (largest $\beta$) refined to exact zeros of the field and classified
  on the tangent space modulo rotation (`rankdyn.flow.classify_equilibrium`).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import jax
import numpy as np

from .._target import Description, Measured, Rendered, off_json
from .._verdict import Check, check, untestable
from ._flow_runs import log_slope, longest_plateau, unit_starts

NAME = "flow-metastability"
CLAIM = (
    "Geshkovski, Koubbi, Polyanskiy, Rigollet (dynamic metastability): on the circle, the SA flow with "
    "Q = K = V = I forms a few clusters quickly, which stay for a time exponential in beta before merging; "
    "the energy increases in a staircase, and the long-lived configurations sit near saddle points of the "
    "energy (our summary, unverified)."
)
N, D = 32, 2
#: Relative tolerance for "the energy does not decrease" and for "flat on a plateau".
ENERGY_TOL, FLAT_FRACTION = 1e-8, 0.1
#: Share of the ended plateaus at the largest beta that must be flat.
FLAT_SHARE = 0.8


def sizes(quick: bool) -> dict:
    if quick:
        return dict(betas=[2.0, 3.0, 4.0], batch=10, t1=1e4, saves=45, refine=2)
    return dict(betas=[2.0, 3.0, 4.0, 5.0, 6.0], batch=256, t1=1e6, saves=120, refine=8)


@dataclasses.dataclass(frozen=True)
class PlateauStats(Measured):
    """One beta: how many trajectories have a multi-cluster plateau, the median longest plateau,
    the share of ended plateaus on which the energy is flat and the share censored at T, the
    plateau's cluster count per trajectory, the most negative relative energy step, the energy
    share gained on each ended plateau and the final cluster counts. Off the JSON: each run's longest
    plateau and whether it was still running at T (the figure's points)."""

    beta: float
    trajectories_with_plateau: int
    median_plateau: float
    flat_fraction: float = float("nan")
    censored_fraction: float = float("nan")
    plateau_k: tuple = ()
    min_energy_increment_rel: float = 0.0
    plateau_energy_share: tuple[float, ...] = ()
    final_clusters: tuple = ()
    durations: tuple = off_json(default=())
    censored: tuple = off_json(default=())


@dataclasses.dataclass(frozen=True)
class PlateauState(Measured):
    """A plateau configuration at the largest beta refined to a zero of the field: the plateau's
    cluster count, the zero's cluster count and residual, whether it converged, and its
    `rankdyn.flow.Classification` (``kind``, ``index``, ... as in its ``to_dict``)."""

    plateau_k: int
    clusters: int
    residual: float
    converged: bool
    kind: str
    index: int
    orbit_dim: int = 0
    max_real: float | None = None
    eigenvalues_real: tuple[float, ...] = ()
    tol: float = 0.0


@dataclasses.dataclass(frozen=True)
class FlowMetastabilityMeasured(Measured):
    """`PlateauStats` per beta, the fit ``log(median plateau) = fit_a + fit_c beta``, the refined
    `PlateauState`s, the step-limit count per beta and the largest drift off the sphere. Off the
    JSON: the saved times and 4 example starts per beta (``{"beta=b": (clusters, energy)}``)."""

    per_beta: tuple[PlateauStats, ...]
    fit_c: float
    fit_a: float
    saddles: tuple[PlateauState, ...]
    steps_limit_hit: tuple[int, ...] = ()
    drift: float = 0.0
    times: np.ndarray | None = off_json(default=None)
    examples: dict | None = off_json(default=None)


def _per_beta(b, times, clusters, energy) -> PlateauStats:
    """The plateau statistics of one beta from its cluster counts and energies ``(batch, saves)``."""
    pls = [longest_plateau(times, c) for c in clusters]
    dur = np.array([p["duration"] for p in pls if p is not None])
    cens = np.array([p["censored"] for p in pls if p is not None])
    flat = []
    for j, p in enumerate(pls):
        if p is None or p["censored"]:
            continue
        a, e = np.searchsorted(times, p["start"]) + 1, np.searchsorted(times, p["end"]) - 1
        total = energy[j, -1] - energy[j, 0]
        if e > a and total > 0:
            flat.append(float((energy[j, e] - energy[j, a]) / total))
    return PlateauStats(
        beta=float(b),
        trajectories_with_plateau=int(dur.size),
        median_plateau=float(np.median(dur)) if dur.size else float("nan"),
        flat_fraction=float(np.mean(np.asarray(flat) < FLAT_FRACTION)) if flat else float("nan"),
        censored_fraction=float(cens.mean()) if cens.size else float("nan"),
        plateau_k=tuple(p["k"] if p else None for p in pls),
        min_energy_increment_rel=float(np.min(np.diff(energy, axis=-1)) / np.max(np.abs(energy))),
        plateau_energy_share=tuple(flat),
        final_clusters=tuple(clusters[:, -1].tolist()),
        durations=tuple(dur.tolist()),
        censored=tuple(bool(c) for c in cens),
    )


def compute(sz: dict, seed: int) -> FlowMetastabilityMeasured:
    """Integrate, extract plateaus, refine and classify plateau states (the numbers only)."""
    from ..._model._masks import complete_mask
    from ...flow import FlowField, classify_equilibrium, cluster_count, find_zeros, solve_flow

    field = FlowField(complete_mask(N), D, "sa")
    times = np.concatenate([[0.0], np.geomspace(0.05, sz["t1"], sz["saves"] - 1)])
    x0 = unit_starts(seed, sz["batch"], N, D, salt=21)
    betas = np.asarray(sz["betas"], float)
    sol = solve_flow(
        field,
        x0,
        beta=betas,
        times=times,
        rtol=1e-7,
        atol=1e-10,
        max_steps=20000,
        per_trajectory=True,
        save_states=True,
    )
    clusters, energy = np.asarray(sol.metrics["clusters"]), np.asarray(sol.metrics["energy"])
    per_beta = [_per_beta(b, times, clusters[i], energy[i]) for i, b in enumerate(betas)]
    # Plateau states at the largest beta, refined to zeros of the field and classified.
    ib = len(betas) - 1
    starts, ks = [], []
    for j in range(sz["batch"]):
        p = longest_plateau(times, clusters[ib, j])
        if p is not None and len(starts) < sz["refine"]:
            starts.append(np.asarray(sol.states[ib, j, p["mid"]]))
            ks.append(p["k"])
    saddles = []
    if starts:
        with jax.enable_x64(True):
            xs, res, ok = find_zeros(field, np.stack(starts), betas[ib])
            for x, r, good, k in zip(np.asarray(xs), np.asarray(res), np.asarray(ok), ks):
                c = classify_equilibrium(field, x, betas[ib], tol=1e-9).to_dict()
                c["eigenvalues_real"] = tuple(c["eigenvalues_real"])
                saddles.append(
                    PlateauState(
                        plateau_k=k,
                        clusters=int(cluster_count(x, 0.99)),
                        residual=float(r),
                        converged=bool(good) and float(r) < 1e-10,
                        **c,
                    )
                )
    slope, icpt = log_slope(betas, [r.median_plateau for r in per_beta])
    return FlowMetastabilityMeasured(
        per_beta=tuple(per_beta),
        fit_c=slope,
        fit_a=icpt,
        saddles=tuple(saddles),
        steps_limit_hit=tuple(np.asarray(sol.steps_limit_hit).tolist()),
        drift=float(np.max(sol.drift)),
        times=times,
        examples={f"beta={b:g}": (clusters[i, :4], energy[i, :4]) for i, b in enumerate(betas)},
    )


def _multi_cluster_zeros(m: FlowMetastabilityMeasured) -> list[PlateauState]:
    return [s for s in m.saddles if s.converged and s.clusters >= 2]


def checks(m: FlowMetastabilityMeasured) -> list[Check]:
    """The strict checks of the measured numbers (a pure function: tested on synthetic results)."""
    out = []
    pb = m.per_beta
    med = [r.median_plateau for r in pb]
    has = all(r.trajectories_with_plateau > 0 for r in pb)
    out.append(
        check(
            "every beta shows a multi-cluster plateau",
            has,
            ", ".join(f"beta={r.beta:g}: {r.trajectories_with_plateau}" for r in pb),
        )
    )
    out.append(
        check(
            "median plateau length increases with beta",
            has and bool(np.all(np.diff(med) > 0)),
            ", ".join(f"{v:.3g}" for v in med),
        )
    )
    out.append(
        check(
            "fitted log(plateau) = a + c beta has c > 0",
            np.isfinite(m.fit_c) and m.fit_c > 0,
            f"c = {m.fit_c:.3g}",
        )
    )
    worst = min(r.min_energy_increment_rel for r in pb)
    out.append(
        check("energy never decreases (relative step > -1e-8)", worst > -ENERGY_TOL, f"min {worst:.2e}")
    )
    # The staircase is the large-beta picture: judged at the largest beta (every beta is reported).
    shares = pb[-1].plateau_energy_share
    if shares:
        frac = float(np.mean(np.asarray(shares) < FLAT_FRACTION))
        out.append(
            check(
                f"largest beta: energy flat on plateaus (< {FLAT_FRACTION:.0%} of its rise) "
                f"for >= {FLAT_SHARE:.0%} of them",
                frac >= FLAT_SHARE,
                f"{frac:.0%} of {len(shares)} ended plateaus",
            )
        )
    else:
        out.append(untestable("energy flat on plateaus", "no plateau ended before T"))
    conv = _multi_cluster_zeros(m)
    if conv:
        out.append(
            check(
                "refined plateau configurations are saddles",
                all(s.kind == "saddle" for s in conv),
                "; ".join(f"{s.clusters} clusters: {s.kind} of index {s.index}" for s in conv),
            )
        )
    else:
        out.append(
            untestable(
                "refined plateau configurations are saddles",
                "no plateau state converged to a multi-cluster zero of the field",
            )
        )
    return out


def render(out: Path, m: FlowMetastabilityMeasured, cs: list[Check], *, quick: bool = False) -> Rendered:
    """The plateau lengths against beta with the fit the checks test, the staircases of the example
    starts, and the notes, from the numbers."""
    from ..._plotting._flow import plot_metastability

    pb = m.per_beta
    plot_metastability(
        np.asarray(m.times)[1:],  # t = 0 is off the log-time axis
        {k: (np.asarray(c)[:, 1:], np.asarray(e)[:, 1:]) for k, (c, e) in m.examples.items()},
        [r.beta for r in pb],
        [r.durations for r in pb],
        [r.censored for r in pb],
        m.fit_c,
        m.fit_a,
        title=f"SA flow on the circle, n={N}: plateau length against beta, and 4 example starts per beta",
        path=out / "flow_metastability.png",
    )
    idx = sorted({s.index for s in _multi_cluster_zeros(m)})
    notes = (
        "Median longest plateau per beta: "
        + ", ".join(
            f"beta={r.beta:g}: {r.median_plateau:.3g} ({r.censored_fraction:.0%} censored at T)" for r in pb
        )
        + f"; fraction of ended plateaus on which the energy rises by < {FLAT_FRACTION:.0%} of its total "
        "rise: "
        + ", ".join(f"beta={r.beta:g}: {r.flat_fraction:.0%}" for r in pb)
        + f"; fit log(duration) = {m.fit_a:.2f} + {m.fit_c:.2f} beta. Saddle indices of refined plateau "
        f"states: {idx or 'none converged'}."
    )
    if any(r.censored_fraction > 0 for r in pb):
        notes += (
            " Plateaus still running at T are counted with their length up to T (a lower bound), so the "
            "fit underestimates c when many are censored."
        )
    else:
        notes += " No plateau was still running at T, so no duration in the fit is censored."
    return Rendered(["flow_metastability.png"], notes)


def describe(
    m: FlowMetastabilityMeasured, cs: list[Check], sz: dict, *, seed: int, quick: bool
) -> Description:
    setting = dict(sz, n=N, d=D, mask="complete", dynamics="sa", qkv="identity", dtype="float64")
    return Description(
        dict(setting, cos_threshold=0.99, solver="tsit5 rtol 1e-7 atol 1e-10", seed=seed, quick=quick),
        key_numbers={
            "fit c (log plateau per unit beta)": m.fit_c,
            "median plateau at largest beta": m.per_beta[-1].median_plateau,
        },
    )
