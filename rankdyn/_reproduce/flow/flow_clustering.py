r"""Target ``flow-clustering``: for $Q = K = V = I$ in $d \ge 3$, almost every start ends in one cluster.

Geshkovski, Letrouit, Polyanskiy and Rigollet ("A mathematical perspective on Transformers")
prove that for $d \ge 3$ and Lebesgue-almost every initial configuration, the USA flow with
$Q = K = V = I$ converges to a single cluster for every $\beta \ge 0$, and the SA flow does in
the regimes of $\beta$ their argument covers (small $\beta$, or $\beta$ large compared with $n^2$);
they conjecture it for every $\beta$ and show phase diagrams of the fraction of clustered runs
in the $(t, \beta)$ plane. (Paraphrased from memory, not checked against the paper's text.)

Here: $n = 32$, $d = 3$, the complete mask, SA, a grid of $\beta$ and (full mode) 1000 uniform
starts, integrated by Tsit5 to a horizon $T$; a run is clustered at $t$ when its diameter
$\max_{ij}|x_i - x_j| \le 10^{-2}$. The figure is the fraction clustered against $(t, \beta)$.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np

from .._target import Description, Measured, Rendered, off_json
from .._verdict import Check, check
from ._flow_runs import step_limit_check, unit_starts

NAME = "flow-clustering"
CLAIM = (
    "Geshkovski, Letrouit, Polyanskiy, Rigollet: for Q = K = V = I in d >= 3, almost every initial "
    "configuration of the self-attention flow converges to a single cluster (proved for USA and every beta, "
    "for SA in their beta regimes; our summary, unverified). Shown as the fraction of the starts clustered "
    "at time t against beta, n = 32."
)
N, D = 32, 3
#: Fraction of starts that must be in one cluster at T (the "almost every" of the claim, with room for
#: starts whose clustering takes longer than T).
FRACTION = 0.99


def sizes(quick: bool) -> dict:
    if quick:
        return dict(betas=[0.5, 1.0, 2.0, 3.0], batch=48, t1=3000.0, saves=41)
    return dict(betas=[0.25, 0.5, 1.0, 2.0, 3.0, 4.0, 6.0, 8.0], batch=1000, t1=1e5, saves=81)


@dataclasses.dataclass(frozen=True)
class FlowClusteringMeasured(Measured):
    """Per beta: the fraction of starts in one cluster at T, the most clusters any start has left
    at T and the median time to one cluster; the step-limit count and the largest drift off the
    sphere. Off the JSON: the saved times, the clustered fraction at every save ``(beta, saves)``
    and the number of starts."""

    betas: tuple[float, ...]
    final_fraction: tuple[float, ...]
    final_clusters_max: tuple[float, ...]
    median_time_to_cluster: tuple[float, ...]
    steps_limit_hit: tuple[int, ...]
    drift: float
    times: np.ndarray = off_json()
    fraction: np.ndarray = off_json()
    batch: int = off_json()


def compute(sz: dict, seed: int) -> FlowClusteringMeasured:
    from ..._model._masks import complete_mask
    from ...flow import FlowField, solve_flow

    field = FlowField(complete_mask(N), D, "sa")
    times = np.concatenate([[0.0], np.geomspace(0.1, sz["t1"], sz["saves"] - 1)])
    x0 = unit_starts(seed, sz["batch"], N, D, salt=11)
    sol = solve_flow(
        field, x0, beta=np.asarray(sz["betas"]), times=times, rtol=1e-6, atol=1e-9, max_steps=20000
    )
    frac = np.asarray(sol.stat("clustered"))  # (beta, S): the mean of the 0/1 indicator
    ttc = np.asarray(sol.time_to_cluster)
    return FlowClusteringMeasured(
        betas=tuple(sz["betas"]),
        final_fraction=tuple(frac[:, -1].tolist()),
        final_clusters_max=tuple(np.asarray(sol.stat("clusters", "max"))[:, -1].tolist()),
        median_time_to_cluster=tuple(float(np.median(r)) for r in ttc),
        steps_limit_hit=tuple(np.asarray(sol.steps_limit_hit).tolist()),
        drift=float(np.max(sol.drift)),
        times=times,
        fraction=frac,
        batch=int(sz["batch"]),
    )


def checks(m: FlowClusteringMeasured) -> list[Check]:
    """Strict checks of the measured numbers (pure: tested on synthetic results)."""
    frac = np.asarray(m.fraction, float)
    out = [
        check(
            f"beta={b:g}: >= {FRACTION:.0%} of starts in one cluster at T",
            f >= FRACTION,
            f"{f:.3f} (at most {int(k)} cluster{'s' * (int(k) != 1)} left)",
        )
        for b, f, k in zip(m.betas, m.final_fraction, m.final_clusters_max)
    ]
    # A single cluster is stable: once clustered, a run stays clustered (the fraction never drops).
    drop = float(np.min(np.diff(frac, axis=1))) if frac.shape[1] > 1 else 0.0
    out.append(
        check("the clustered fraction never decreases in t", drop >= 0, f"largest drop {max(0.0, -drop):.3g}")
    )
    out.append(step_limit_check(m.steps_limit_hit))
    return out


def render(out: Path, m: FlowClusteringMeasured, cs: list[Check], *, quick: bool = False) -> Rendered:
    """The phase diagram (fraction clustered against t and beta) and the notes, from the numbers."""
    from ... import plotting

    plotting.plot_phase_diagram(
        m.times[1:],
        m.betas,
        np.asarray(m.fraction)[:, 1:],
        title=f"SA flow, Q=K=V=I, n={N}, d={D}: fraction of {m.batch} starts with diameter <= 1e-2",
        path=out / "flow_clustering.png",
    )
    t1 = float(m.times[-1])
    notes = (
        "Fraction in one cluster at T: "
        + ", ".join(f"beta={b:g}: {f:.3f}" for b, f in zip(m.betas, m.final_fraction))
        + "; median time to one cluster: "
        + ", ".join(f"beta={b:g}: {t:.3g}" for b, t in zip(m.betas, m.median_time_to_cluster))
        + f". T = {t1:g}."
    )
    short = [b for b, f in zip(m.betas, m.final_fraction) if f < FRACTION]
    if short:
        notes += (
            f" Below {FRACTION:.0%} at T for beta = {', '.join(f'{b:g}' for b in short)}; a run not yet "
            "clustered at T counts against the claim although it may cluster later."
        )
    else:
        notes += f" At least {FRACTION:.0%} of the starts are in one cluster at T for every beta."
    return Rendered(["flow_clustering.png"], notes)


def describe(m: FlowClusteringMeasured, cs: list[Check], sz: dict, *, seed: int, quick: bool) -> Description:
    setting = dict(sz, n=N, d=D, mask="complete", dynamics="sa", qkv="identity", eps=1e-2, dtype="float64")
    return Description(
        dict(setting, solver="tsit5 rtol 1e-6 atol 1e-9", seed=seed, quick=quick),
        key_numbers={f"clustered at T, beta={b:g}": f for b, f in zip(m.betas, m.final_fraction)},
    )
