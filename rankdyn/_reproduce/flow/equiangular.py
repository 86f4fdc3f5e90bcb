r"""Target ``equiangular`` (extended tier): rankdyn's flow and layer against the equiangular closed forms.

Statements (docs/theory.md#closed-forms; quoted from the survey arXiv 2512.01868, section
"Equiangular model"): from an equiangular start (all cosines $\rho$) the post-LN flow with
$Q = K = V = I$ and the complete mask obeys $\dot\rho = 2e^{\beta\rho}(1-\rho)((n-1)\rho+1)/Z$
(`rankdyn.theory.equiangular_cosine`); each normalisation scheme clusters by its own law with a
$\beta$-dependent prefactor (`rankdyn.theory.equiangular_rate`); one softmax layer maps the cosine
to an exact finite-n value (`rankdyn.theory.one_layer_cosine`) whose limit at $\beta = \gamma\log n$
is 1, $4\rho/(1+3\rho)$ or $\rho$ as $p = \gamma(1-\rho)$ is below, at or above 1 (arXiv 2510.05554).

Rules, fixed before any run (float64 throughout; tokens from `rankdyn.theory.equiangular_tokens`,
$d = n + 1$ for the flow, $d = n$ for the long-context layer: an equiangular start needs $d \ge n$):

1. **Flow**: `solve_flow` (Tsit5, rtol 1e-12, atol 1e-14) from $\rho_0 = 0.2$, SA and USA,
   $\beta \in \{0, 1, 2.5\}$, 9 times on $[0, 2]$: $1 - \rho$ from $|\theta_0 - \theta_1|^2/2$ equals
   the closed form to a relative 1e-8 wherever $1 - \rho \ge 10^{-7}$ (below it the solver's absolute
   error on the tokens dominates the small difference).
2. **One layer**: `simulate`, one layer, $W_Q = W_K = W_V = I$, $d_{QK} = 1/\beta^2$, no skip,
   post sphere-LN, $n = 6$, $\rho \in \{-0.1, 0.3, 0.7\}$, $\beta \in \{0.5, 4\}$: the output cosine
   equals the finite-n formula within 1e-13.
3. **Long context, formula**: at $n = 10^2 \dots 10^6$, $\rho \in \{0.3, 0.6\}$ and
   $p \in \{1/2, 1, 3/2\}$, the distance of the exact cosine to the limit falls at every step in
   $n$, and its least-squares slope in $\log n$ is $-2(1-p)$, $-1$, $-(p-1)$ within 0.1 (the rates
   derived in docs/theory.md#one-layer-on-an-equiangular-input).
4. **Long context, simulate**: the same layer at $n = d$ (``sim_n``), $\beta = \gamma\log n$ for the
   six $(\rho, p)$: the output cosine equals the formula within 1e-12.
5. **Placements**: `solve_flow` under each of post, pre, mix (``mix_time`` 0.5), peri, ngpt
   (``ngpt_alpha`` 0.5) and lns, $n = 4$, $d = 5$, $\beta = 1$, $\rho_0 = 0.2$, radius 1, to the time
   $T$ at which the asymptote predicts $1-\rho = 10^{-6}$: exponential laws (post, ngpt, lns)
   measured/asymptote within 1e-4 (the asymptote's relative correction is $O(1-\rho)$); the
   radial ones (pre, mix, peri) $r^2(1-\rho)$ within 1e-4 of $K$ and $(1-\rho)T^2$ within 5% of the
   prefactor (its approach is $O(1/T)$).
6. No run hits the solver's step limit.

Cost: see docs/reproduce.md (the quick mode compiles eight flows and two layers).
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np

from ..._theory._equiangular import equiangular_cosine, equiangular_tokens
from ..._theory._equiangular_layer import one_layer_cosine, one_layer_limit
from ..._theory._equiangular_rates import EQUIANGULAR_PLACEMENTS, equiangular_rate
from .._target import Description, Measured, Rendered, off_json
from .._verdict import Check, check
from ._flow_runs import step_limit_check

NAME = "equiangular"
CLAIM = (
    "The equiangular closed forms (survey arXiv 2512.01868, 'Equiangular model'): the post-LN flow's scalar "
    "ODE for SA and USA, the clustering law and prefactor of each normalisation scheme, and one layer's "
    "output cosine with its limits 1, 4rho/(1+3rho), rho at beta = gamma log n (arXiv 2510.05554)."
)
RHO0, FLOW_BETAS, FLOW_T = 0.2, (0.0, 1.0, 2.5), 2.0
FLOW_REL, FLOW_MIN_GAP = 1e-8, 1e-7
LAYER_RHOS, LAYER_BETAS, LAYER_TOL = (-0.1, 0.3, 0.7), (0.5, 4.0), 1e-13
LONG_RHOS, LONG_PS, SLOPE_TOL, SIM_TOL = (0.3, 0.6), (0.5, 1.0, 1.5), 0.1, 1e-12
PL_BETA, PL_GAP, PL_ALPHA, PL_TAU, PL_EXP_REL, PL_K_REL, PL_POW_REL = 1.0, 1e-6, 0.5, 0.5, 1e-4, 1e-4, 0.05


def sizes(quick: bool) -> dict:
    if quick:
        return {
            "flow_n": 5,
            "layer_n": 6,
            "long_ns": tuple(10**k for k in range(2, 7)),
            "sim_n": 32,
            "pl_n": 4,
        }
    return {
        "flow_n": 8,
        "layer_n": 8,
        "long_ns": tuple(int(10 ** (k / 2)) for k in range(4, 13)),
        "sim_n": 96,
        "pl_n": 6,
    }


@dataclasses.dataclass(frozen=True)
class EquiangularMeasured(Measured):
    """``flow_err[dyn][beta]``: max relative error of 1 - rho; ``layer_err``; ``long_slopes[(rho, p)]``
    and ``long_monotone``; ``sim_err``; ``placements[name]``: the measured and predicted numbers."""

    flow_err: dict
    flow_compared: dict
    layer_err: float
    long_slopes: dict
    long_monotone: dict
    sim_err: float
    placements: dict
    steps_limit_hit: list
    curves: dict = off_json()


def _gap_observer(t, x, beta):
    import jax.numpy as jnp

    th = x / jnp.linalg.norm(x, axis=-1, keepdims=True)
    diff = th[0] - th[1]
    return {"gap": 0.5 * jnp.sum(diff * diff)}


def _flow(sz):
    from ..._model._masks import complete_mask
    from ...flow import FlowField, solve_flow

    n = sz["flow_n"]
    times = np.linspace(0.0, FLOW_T, 9)
    x0 = equiangular_tokens(n, n + 1, RHO0)
    err, compared, curves, hit = {}, {}, {}, []
    for dyn in ("sa", "usa"):
        field = FlowField(complete_mask(n), n + 1, dyn)
        sol = solve_flow(
            field, x0, beta=np.asarray(FLOW_BETAS), times=times, rtol=1e-12, atol=1e-14,
            observe=_gap_observer, per_trajectory=True, max_steps=20000,
        )  # fmt: skip
        hit.append(int(np.sum(sol.steps_limit_hit)))
        got = np.asarray(sol.metrics["gap"]).reshape(len(FLOW_BETAS), len(times))
        err[dyn], compared[dyn] = {}, {}
        for i, beta in enumerate(FLOW_BETAS):
            want = equiangular_cosine(times, beta, n, rho0=RHO0, dynamics=dyn, gap=True)
            keep = want >= FLOW_MIN_GAP
            err[dyn][str(beta)] = float(np.max(np.abs(got[i] - want)[keep] / want[keep]))
            compared[dyn][str(beta)] = int(keep.sum())
            curves[f"{dyn}, beta={beta:g}"] = (times, got[i], want)
    return err, compared, curves, hit


def _layer_cosines(n: int, rhos, betas) -> np.ndarray:
    """simulate's one-layer output cosine <y_0, y_1> per (beta, rho) (identity weights, dqk = 1/beta^2)."""
    import jax.numpy as jnp

    from ..._model._layer import SelfAttentionLayer
    from ..._run._simulate import simulate

    x0 = jnp.asarray(np.stack([equiangular_tokens(n, n, r) for r in rhos]))
    out = []
    for beta in betas:
        eye = jnp.eye(n)
        layer = SelfAttentionLayer(np.ones((n, n), bool), eye, eye, eye, dqk=1 / beta**2, placement="post")
        y = np.asarray(simulate(layer, x0, 1, save_states=True).states[:, -1])
        out.append(np.einsum("bd,bd->b", y[:, 0], y[:, 1]))
    return np.asarray(out)


def _long_context(sz):
    ns = np.asarray(sz["long_ns"], float)
    slopes, mono, curves = {}, {}, {}
    for rho in LONG_RHOS:
        for p in LONG_PS:
            gamma = p / (1 - rho)
            gap = np.abs(one_layer_cosine(rho, gamma * np.log(ns), ns) - one_layer_limit(rho, gamma))
            key = f"rho={rho:g}, p={p:g}"
            slopes[key] = float(np.polyfit(np.log(ns), np.log(gap), 1)[0])
            mono[key] = bool(np.all(np.diff(gap) < 0))
            curves[key] = (ns, gap)
    # simulate where an equiangular start fits: n = d
    n = sz["sim_n"]
    worst = 0.0
    for rho in LONG_RHOS:
        betas = [p / (1 - rho) * math.log(n) for p in LONG_PS]
        got = _layer_cosines(n, [rho], betas)[:, 0]
        worst = max(worst, float(np.max(np.abs(got - one_layer_cosine(rho, np.asarray(betas), n)))))
    return slopes, mono, curves, worst


def _placement_time(rate) -> float:
    if rate.law == "exp":
        return math.log(rate.prefactor / PL_GAP) / rate.exponent
    if rate.law == "exp_sqrt":
        return (math.log(rate.prefactor / PL_GAP) / rate.exponent) ** 2 - 1
    return math.sqrt(rate.prefactor / PL_GAP)


def _placements(sz):
    from ..._model._masks import complete_mask
    from ...flow import FlowField, solve_flow

    n = sz["pl_n"]
    x0 = equiangular_tokens(n, n + 1, RHO0)
    rows, curves, hit = {}, {}, []
    for pl in EQUIANGULAR_PLACEMENTS:
        kw = {"mix": {"mix_time": PL_TAU}, "ngpt": {"ngpt_alpha": PL_ALPHA}}.get(pl, {})
        rate = equiangular_rate(pl, PL_BETA, n, rho0=RHO0, **kw)
        t_end = _placement_time(rate)
        times = np.concatenate([[0.0], np.geomspace(0.05, t_end, 24)])
        field = FlowField(complete_mask(n), n + 1, "sa", placement=pl, **kw)
        sol = solve_flow(
            field, x0, beta=PL_BETA, times=times, rtol=1e-12, atol=1e-14,
            observe=_gap_observer, per_trajectory=True, max_steps=20000, save_states=True,
        )  # fmt: skip
        hit.append(int(np.sum(sol.steps_limit_hit)))
        gap = np.asarray(sol.metrics["gap"]).reshape(-1)
        # the observer sees the directions; the radius is read from the saved (ambient) states
        r = np.linalg.norm(np.asarray(sol.states).reshape(len(times), n, -1)[:, 0], axis=-1)
        if rate.law == "exp":
            asym = rate.prefactor * np.exp(-rate.exponent * times)
        elif rate.law == "exp_sqrt":
            asym = rate.prefactor * np.exp(-rate.exponent * np.sqrt(times + 1))
        else:
            asym = rate.prefactor * np.where(times > 0, times, np.nan) ** -2.0
        row = {"law": rate.law, "exponent": rate.exponent, "prefactor": rate.prefactor, "t_end": t_end}
        row["ratio"] = float(gap[-1] / asym[-1])
        if rate.law == "power":
            row["k_ratio"] = float(gap[-1] * r[-1] ** 2 / rate.radius_constant)
        rows[pl] = row
        curves[pl] = (times, gap, asym)
    return rows, curves, hit


def compute(sz: dict, seed: int) -> EquiangularMeasured:
    """Every run of the module docstring's rules (deterministic: ``seed`` is not used)."""
    flow_err, compared, flow_curves, hit = _flow(sz)
    n = sz["layer_n"]
    got = _layer_cosines(n, LAYER_RHOS, LAYER_BETAS)
    want = np.stack([one_layer_cosine(np.asarray(LAYER_RHOS), b, n) for b in LAYER_BETAS])
    slopes, mono, long_curves, sim_err = _long_context(sz)
    rows, pl_curves, hit2 = _placements(sz)
    return EquiangularMeasured(
        flow_err=flow_err,
        flow_compared=compared,
        layer_err=float(np.max(np.abs(got - want))),
        long_slopes=slopes,
        long_monotone=mono,
        sim_err=sim_err,
        placements=rows,
        steps_limit_hit=hit + hit2,
        curves={"flow": flow_curves, "placements": pl_curves, "long": long_curves},
    )


def _want_slope(key: str) -> float:
    p = float(key.split("p=")[1])
    return -2 * (1 - p) if p < 1 else (-1.0 if p == 1 else -(p - 1))


def checks(m: EquiangularMeasured) -> list[Check]:
    """The module docstring's rules 1-6."""
    worst = max(e for d in m.flow_err.values() for e in d.values())
    few = min(c for d in m.flow_compared.values() for c in d.values())
    out = [
        check(
            f"flow (SA, USA): 1 - rho equals the closed form within {FLOW_REL:g} relative",
            worst <= FLOW_REL and few >= 2,
            f"worst {worst:.2e} over {sum(c for d in m.flow_compared.values() for c in d.values())} points",
        ),
        check(
            f"one layer: simulate's cosine equals the finite-n formula within {LAYER_TOL:g}",
            m.layer_err <= LAYER_TOL,
            f"{m.layer_err:.2e}",
        ),
    ]
    bad = [
        k for k, s in m.long_slopes.items() if abs(s - _want_slope(k)) > SLOPE_TOL or not m.long_monotone[k]
    ]
    out.append(
        check(
            "long context: the exact cosine approaches 1, 4rho/(1+3rho), rho at the derived rates "
            f"(slope within {SLOPE_TOL:g}, monotone in n)",
            not bad,
            "; ".join(f"{k}: {s:.3f} (want {_want_slope(k):g})" for k, s in m.long_slopes.items()),
        )
    )
    out.append(
        check(
            f"long context: simulate at n = d equals the finite-n formula within {SIM_TOL:g}",
            m.sim_err <= SIM_TOL,
            f"{m.sim_err:.2e}",
        )
    )
    bad = []
    for pl, row in m.placements.items():
        tol = PL_EXP_REL if row["law"] != "power" else PL_POW_REL
        if abs(row["ratio"] - 1) > tol or ("k_ratio" in row and abs(row["k_ratio"] - 1) > PL_K_REL):
            bad.append(pl)
    out.append(
        check(
            "placements: 1 - rho against each law's prefactor (exp: 1e-4; r^2(1-rho) = K: 1e-4; t^-2: 5%)",
            not bad,
            "; ".join(
                f"{pl} {row['law']}: ratio {row['ratio']:.6f}"
                + (f", K ratio {row['k_ratio']:.6f}" if "k_ratio" in row else "")
                for pl, row in m.placements.items()
            ),
        )
    )
    out.append(step_limit_check(m.steps_limit_hit))
    return out


def render(out: Path, m: EquiangularMeasured, cs: list[Check], *, quick: bool = False) -> Rendered:
    from ..._plotting._equiangular import plot_equiangular

    curves = m.curves or {}
    name = plot_equiangular(
        curves.get("flow", {}),
        curves.get("placements", {}),
        curves.get("long", {}),
        path=out / "equiangular.png",
    )
    failed = [c.name for c in cs if c.testable and not c.passed]
    notes = (
        f"Flow: worst relative error {max(e for d in m.flow_err.values() for e in d.values()):.2e}; one "
        f"layer {m.layer_err:.1e}; simulate at n = d {m.sim_err:.1e}. Ratios measured/asymptote: "
        + ", ".join(f"{pl} {row['ratio']:.5f}" for pl, row in m.placements.items())
        + ". "
        + ("Every check passed." if not failed else "Not reproduced: " + "; ".join(failed) + ".")
    )
    if quick:
        notes += " QUICK MODE."
    return Rendered([name], notes)


def describe(m: EquiangularMeasured, cs: list[Check], sz: dict, *, seed: int, quick: bool) -> Description:
    setting = dict(sz, rho0=RHO0, flow_betas=FLOW_BETAS, layer_rhos=LAYER_RHOS, layer_betas=LAYER_BETAS)
    setting |= dict(
        long_rhos=LONG_RHOS, long_ps=LONG_PS, placement_beta=PL_BETA, ngpt_alpha=PL_ALPHA, mix_time=PL_TAU,
        dtype="float64", qkv="identity", mask="complete",
    )  # fmt: skip
    key = {"flow worst rel. error": max(e for d in m.flow_err.values() for e in d.values())}
    key |= {f"{pl} ratio": row["ratio"] for pl, row in m.placements.items()}
    return Description(
        setting,
        key_numbers=key,
        criterion="the six rules of the module docstring, fixed before the run.",
    )
