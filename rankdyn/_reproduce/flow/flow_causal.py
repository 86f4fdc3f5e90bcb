r"""Target ``flow-causal``: the flow under the causal mask with $V = I$ collapses onto the first token.

Karagodin, Polyanskiy and Rigollet ("Clustering in causal attention masking") study the SA flow
with the causal mask, where token $i$ attends to tokens $j \le i$: the first token attends only to
itself and, with $V = I$, does not move; they prove that every token converges to it (a single
cluster at $x_1$), for general $Q, K$, and observe long-lived intermediate multi-cluster states,
which they relate to a Rényi-parking picture. (Paraphrased from memory, not checked against the text.)

Here: $n = 32$, $d = 3$, $Q = K = V = I$, several $\beta$; we measure the displacement of token 1,
the distance of every token to it at $T$, and how long the intermediate multi-cluster states last
(the longest plateau of the cluster count with $k \ge 2$).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np

from .._target import Description, Measured, Rendered, off_json
from .._verdict import Check, check
from ._flow_runs import longest_plateau, step_limit_check, unit_starts

NAME = "flow-causal"
CLAIM = (
    "Karagodin, Polyanskiy, Rigollet: under causal masking with V = I, the first token does not move and "
    "every token converges to it; intermediate multi-cluster states can last long (our summary, unverified)."
)
N, D = 32, 3
#: Distance to token 1 at T below which a token has converged, and the fraction of runs required.
EPS, FRACTION = 1e-2, 0.95
#: Largest displacement of token 1 that counts as "does not move" (float64 round-off over the run).
STILL = 1e-12


def sizes(quick: bool) -> dict:
    if quick:
        return dict(betas=[1.0, 4.0], batch=32, t1=3000.0, saves=41)
    return dict(betas=[0.5, 1.0, 2.0, 4.0, 8.0], batch=500, t1=3e4, saves=81)


@dataclasses.dataclass(frozen=True)
class CausalBeta(Measured):
    """One beta: the fraction of runs with every token within `EPS` of token 1 at T, the largest
    such distance, the longest multi-cluster plateau (median and max over runs) and the median
    time to one cluster."""

    beta: float
    converged_fraction: float
    max_distance_to_token1: float
    median_longest_plateau: float = float("nan")
    max_longest_plateau: float = float("nan")
    median_time_to_one_cluster: float = float("nan")


@dataclasses.dataclass(frozen=True)
class FlowCausalMeasured(Measured):
    """The largest displacement of token 1, the `CausalBeta` rows and the step-limit count per
    beta. Off the JSON: the saved times, the cluster-count and energy series of 4 example starts per
    beta (``{"beta=b": (clusters, energy)}``) and, for the figure, the largest distance of any token
    to token 1 of every run at every save, ``(betas, batch, saves)``."""

    first_token_displacement: float
    per_beta: tuple[CausalBeta, ...]
    steps_limit_hit: tuple[int, ...]
    times: np.ndarray | None = off_json(default=None)
    examples: dict | None = off_json(default=None)
    distances: np.ndarray | None = off_json(default=None)


def compute(sz: dict, seed: int) -> FlowCausalMeasured:
    from ..._model._masks import causal_mask
    from ...flow import FlowField, solve_flow

    field = FlowField(causal_mask(N), D, "sa")
    times = np.concatenate([[0.0], np.geomspace(0.1, sz["t1"], sz["saves"] - 1)])
    x0 = unit_starts(seed, sz["batch"], N, D, salt=31)
    sol = solve_flow(
        field,
        x0,
        beta=np.asarray(sz["betas"]),
        times=times,
        rtol=1e-7,
        atol=1e-10,
        max_steps=20000,
        per_trajectory=True,
        save_states=True,
    )
    st = np.asarray(sol.states)  # (beta, batch, S, n, d)
    moved = float(np.max(np.linalg.norm(st[:, :, :, 0] - st[:, :, :1, 0], axis=-1)))
    along = np.linalg.norm(st - st[:, :, :, :1], axis=-1).max(axis=-1)  # (beta, batch, S)
    dist = along[:, :, -1]  # (beta, batch): at T
    cl = np.asarray(sol.metrics["clusters"])
    rows = []
    for i, b in enumerate(sz["betas"]):
        pls = [longest_plateau(times, cl[i, j]) for j in range(sz["batch"])]
        dur = [p["duration"] for p in pls if p is not None]
        rows.append(
            CausalBeta(
                beta=float(b),
                converged_fraction=float(np.mean(dist[i] <= EPS)),
                max_distance_to_token1=float(dist[i].max()),
                median_longest_plateau=float(np.median(dur)) if dur else float("nan"),
                max_longest_plateau=float(np.max(dur)) if dur else float("nan"),
                median_time_to_one_cluster=float(np.median(np.asarray(sol.time_to_cluster)[i])),
            )
        )
    energy = np.asarray(sol.metrics["energy"])
    return FlowCausalMeasured(
        first_token_displacement=moved,
        per_beta=tuple(rows),
        steps_limit_hit=tuple(np.asarray(sol.steps_limit_hit).tolist()),
        times=times,
        examples={f"beta={b:g}": (cl[i, :4], energy[i, :4]) for i, b in enumerate(sz["betas"])},
        distances=along,
    )


def checks(m: FlowCausalMeasured) -> list[Check]:
    """Strict checks of the measured numbers (pure: tested on synthetic results)."""
    out = [
        check(
            f"token 1 does not move (displacement < {STILL:g})",
            m.first_token_displacement < STILL,
            f"{m.first_token_displacement:.2e}",
        )
    ]
    for r in m.per_beta:
        out.append(
            check(
                f"beta={r.beta:g}: >= {FRACTION:.0%} of runs have every token within {EPS:g} of token 1 at T",
                r.converged_fraction >= FRACTION,
                f"{r.converged_fraction:.3f} (largest distance {r.max_distance_to_token1:.3g})",
            )
        )
    out.append(step_limit_check(m.steps_limit_hit))
    return out


def render(out: Path, m: FlowCausalMeasured, cs: list[Check], *, quick: bool = False) -> Rendered:
    """Every run's distance to token 1 against t and the share of runs within `EPS` of it (what the
    checks test), and the notes, from the numbers."""
    from ..._plotting._flow import plot_distance_to_first

    rows = m.per_beta
    moved = m.first_token_displacement
    plot_distance_to_first(
        np.asarray(m.times)[1:],  # t = 0 is off the log-time axis
        {f"beta={r.beta:g}": np.asarray(m.distances)[i, :, 1:] for i, r in enumerate(rows)},
        EPS,
        FRACTION,
        title=f"SA flow, causal mask, n={N}, d={D}, {np.asarray(m.distances).shape[1]} runs per beta: does "
        f"every token reach token 1?\ntoken 1 moved by at most {moved:.1e} (allowed: {STILL:g})",
        path=out / "flow_causal.png",
    )
    notes = (
        "Intermediate multi-cluster states (longest plateau of the cluster count with k >= 2, "
        "median / max over runs): "
        + ", ".join(
            f"beta={r.beta:g}: {r.median_longest_plateau:.3g} / {r.max_longest_plateau:.3g}" for r in rows
        )
        + "; median time to one cluster: "
        + ", ".join(f"beta={r.beta:g}: {r.median_time_to_one_cluster:.3g}" for r in rows)
        + "."
    )
    notes += f" Token 1 moved by at most {moved:.2e}" + (
        ", so it stays put as the claim says." if moved < STILL else f", more than the {STILL:g} allowed."
    )
    short = [f"{r.beta:g}" for r in rows if r.converged_fraction < FRACTION]
    if short:
        notes += f" Fewer than {FRACTION:.0%} of runs reached token 1 by T for beta = {', '.join(short)}."
    else:
        notes += (
            f" At every beta at least {FRACTION:.0%} of runs have every token within {EPS:g} of token 1 at T."
        )
    return Rendered(["flow_causal.png"], notes)


def describe(m: FlowCausalMeasured, cs: list[Check], sz: dict, *, seed: int, quick: bool) -> Description:
    setting = dict(sz, n=N, d=D, mask="causal", dynamics="sa", qkv="identity", eps=EPS, dtype="float64")
    return Description(
        dict(setting, cos_threshold=0.99, solver="tsit5 rtol 1e-7 atol 1e-10", seed=seed, quick=quick),
        key_numbers={f"converged at T, beta={r.beta:g}": r.converged_fraction for r in m.per_beta},
    )
