r"""Target ``critical-temperature``: the inverse temperature where attention turns identity-like, by n.

Two 2025-26 laws, quoted from their abstracts (found with the tool library's search; the full
texts' theorem statements were not found, so only these sentences are relied on):

- arXiv:2605.08505 (Bruno, Rigollet, Chen, Polyanskiy, Lin, "Scaling Limits of Long-Context
  Transformers"), Abstract: "We show that the critical scale at which selectivity emerges is
  determined by the local exponent of the distance-to-query distribution near zero rather than
  by global features of the context, and scales like $\beta_n^\ast \asymp n^{2/(d-1)}$ for uniform
  keys on $\mathbb{S}^{d-1}$." Above it "all mass concentrates on the closest key".
- arXiv:2510.05554 (Chen, Lin, Polyanskiy, Rigollet, "Critical attention scaling in long-context
  transformers", ICLR 2026), Abstract: "We analyze a simplified yet tractable model that magnifies
  the effect of attention scaling. In this model, attention exhibits a phase transition governed
  by the scaling factor $\beta_n$: insufficient scaling collapses all tokens to a single
  direction, while excessive scaling reduces attention to identity [...]. Our main result
  identifies the critical scaling $\beta_n \asymp \log n$". Its model is the equiangular one, as
  the survey arXiv:2512.01868 states it (section "Long context Transformers", Theorem
  `thm:long-context-phase-transition`, docs/theory.md#one-layer-on-an-equiangular-input): $n$ unit
  tokens with all cosines $\rho \in (0, 1)$, one softmax layer at $\beta_n = \gamma\log n$, whose
  output cosine tends to 1, $4\rho/(1+3\rho)$ or $\rho$ as $\gamma(1-\rho)$ is below, at or above 1.
  The law is tested there, with the exact finite-n output cosine (`rankdyn.theory.one_layer_cosine`,
  checked against `rankdyn.simulate` in tests/test_theory_equiangular.py); the transition of uniform
  keys at d = 64 is reported next to $\ln n$.

Measurement: $n$ tokens uniform on $\mathbb S^{d-1}$ attend to each other (complete mask,
$W_Q = W_K = I$, scores $\beta \langle x_i, x_j \rangle$). Each token is its own closest key, so
the weight on itself, $A_{ii}(\beta) = 1 / (1 + \sum_{j \ne i} e^{-\beta (1 - \langle x_i, x_j
\rangle)})$, rises monotonically from about $1/n$ (uniform averaging: the collapse side) to 1
(identity). The transition $\beta_c(n)$ is where the mean of $A_{ii}$ over tokens crosses 1/2
(a 16-point log grid over $[0.1, 10 n]$, then 12 points inside the bracketing interval,
log-linear interpolation; NumPy, float64). Per $d$ the exponent $s_d$ of
$\beta_c \propto n^{s_d}$ is fitted by least squares over the swept $n$; the law of 2605.08505 says $2/(d-1)$.

Rule, fixed before the numbers were seen: for each $d \in \{3, 4, 8\}$, $|s_d - 2/(d-1)| \le
0.25 \cdot 2/(d-1)$.

The log n law in its model (rule added with issue 53, written before its numbers were computed;
until then the check was "not testable here"): for $\rho \in \{0.25, 0.5, 0.75\}$ and
$n = 10^2, 10^3, \dots, 10^6$, $\beta_c(n)$ is where the exact one-layer output cosine
$\rho'(\beta)$ crosses the midpoint $(1+\rho)/2$ between collapse (1) and identity ($\rho$)
(``scipy.optimize.brentq``); the least-squares slope of $\beta_c$ against $\ln n$ must equal the
theorem's critical $\gamma = 1/(1-\rho)$ within 1%, for each $\rho$.

Cost: quick (n in {256, 512, 1024, 2048}, d in {3, 4, 8, 64}, about 2048 tokens per n) and full
(n in {256, 1024, 4096, 16384}, 8192 tokens per n; minutes on a 2-core CPU, under 1 GB): measured:
benchmarks/README.md.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np
from scipy import optimize

from ..._theory._equiangular_layer import one_layer_cosine
from .. import _verdict as V
from .._target import Description, Measured, Rendered, off_json

NAME = "critical-temperature"
CLAIM = (
    "Long-context temperature laws of 2025-26: the inverse temperature at which softmax attention turns "
    "from averaging to selecting the closest key scales like n^(2/(d-1)) for uniform keys on S^(d-1) "
    "(arXiv:2605.08505), and like log n in the simplified model of arXiv:2510.05554."
)
#: |s_d - 2/(d-1)| <= EXPONENT_REL * 2/(d-1) for the small dimensions.
EXPONENT_REL = 0.25
#: Points of the coarse log grid over [0.1, 10 n], and of the fine one inside the bracket.
COARSE, FINE = 16, 12
#: The dimensions the power law is tested at (d = 64 is reported next to ln n only).
SMALL_D = (3, 4, 8)
#: The log n law in its equiangular model: cosines, sequence lengths, and the tolerance on the slope.
EQUI_RHOS = (0.25, 0.5, 0.75)
EQUI_NS = (10**2, 10**3, 10**4, 10**5, 10**6)
LOG_N_REL = 0.01
QUOTES = {
    "arXiv:2605.08505, Abstract": (
        "the critical scale at which selectivity emerges ... scales like beta_n^* ~ n^{2/(d-1)} for uniform "
        "keys on S^{d-1}"
    ),
    "arXiv:2510.05554, Abstract": (
        "In this model, attention exhibits a phase transition governed by the scaling factor beta_n: "
        "insufficient scaling collapses all tokens to a single direction, while excessive scaling reduces "
        "attention to identity ... Our main result identifies the critical scaling beta_n ~ log n"
    ),
}


def sizes(quick: bool) -> dict:
    if quick:
        return {"ns": (256, 512, 1024, 2048), "dims": (3, 4, 8, 64), "rows": 2048, "block": 1024}
    return {"ns": (256, 1024, 4096, 16384), "dims": (3, 4, 8, 64), "rows": 8192, "block": 1024}


@dataclasses.dataclass(frozen=True)
class CriticalTemperatureMeasured(Measured):
    """``beta_c[k][j]``: the measured transition for ``dims[k]``, ``ns[j]``; ``exponent[k]`` and its
    standard error: the fitted s_d; ``law[k]``: 2/(d-1)."""

    ns: list[int]
    dims: list[int]
    beta_c: list[list[float]]
    exponent: list[float]
    exponent_se: list[float]
    law: list[float]
    beta_c_over_log_n: list[list[float]]
    grid: list = off_json()
    curves: list = off_json()
    setting: dict = off_json()
    #: The equiangular model of arXiv:2510.05554: beta_c[k][j] at EQUI_RHOS[k], EQUI_NS[j], and the
    #: slope of beta_c against ln n per rho (the law: 1 / (1 - rho)).
    equi_rhos: list[float] = dataclasses.field(default_factory=lambda: list(EQUI_RHOS))
    equi_ns: list[int] = dataclasses.field(default_factory=lambda: list(EQUI_NS))
    equi_beta_c: list[list[float]] = dataclasses.field(default_factory=list)
    equi_slope: list[float] = dataclasses.field(default_factory=list)


def _mean_self_weight(x: np.ndarray, betas, block: int) -> np.ndarray:
    """Mean over the tokens of ``x`` (``(samples, n, d)``, unit rows) of A_ii at each beta.

    NumPy in blocks of ``block`` query rows: one pass over the (rows, n) gaps per beta, no compile
    per (n, d) cell, and memory ``block * n`` at any n.
    """
    samples, n, _ = x.shape
    total = np.zeros(len(betas))
    for xs in x:
        for i0 in range(0, n, block):
            # 1 - <x_i, x_j>: float64 keeps it to 1e-16 absolute, ~1e-13 relative at the nearest keys.
            g = np.maximum(1.0 - xs[i0 : i0 + block] @ xs.T, 0.0)
            rows = np.arange(g.shape[0])
            g[rows, i0 + rows] = np.inf
            for k, beta in enumerate(betas):
                total[k] += np.sum(1.0 / (1.0 + np.exp(-beta * g).sum(axis=1)))
    return total / (samples * n)


def _crossing(grid, curve) -> tuple[float, int]:
    """log-linear interpolation of beta where the (increasing) curve crosses 1/2; (nan, -1) if never."""
    c = np.asarray(curve, float)
    above = np.flatnonzero(c >= 0.5)
    if above.size == 0 or above[0] == 0:
        return float("nan"), -1
    i = int(above[0])
    lb0, lb1 = math.log(grid[i - 1]), math.log(grid[i])
    f = (0.5 - c[i - 1]) / (c[i] - c[i - 1])
    return math.exp(lb0 + f * (lb1 - lb0)), i


def _transition(n: int, d: int, rows: int, block: int, rng):
    x = rng.standard_normal((max(1, rows // n), n, d))
    x /= np.linalg.norm(x, axis=-1, keepdims=True)
    coarse = np.geomspace(0.1, 10.0 * n, COARSE)
    cc = _mean_self_weight(x, coarse, block)
    _, i = _crossing(coarse, cc)
    if i < 0:
        return float("nan"), coarse, cc
    fine = np.geomspace(coarse[i - 1], coarse[i], FINE + 2)[1:-1]
    cf = _mean_self_weight(x, fine, block)
    grid = np.concatenate([coarse[:i], fine, coarse[i:]])
    curve = np.concatenate([cc[:i], cf, cc[i:]])
    beta, _ = _crossing(grid, curve)
    return beta, grid, curve


def _fit(ns, betas) -> tuple[float, float]:
    x, y = np.log(np.asarray(ns, float)), np.log(np.asarray(betas, float))
    if not np.all(np.isfinite(y)):
        return float("nan"), float("nan")
    a = np.vstack([np.ones_like(x), x]).T
    coef, *_ = np.linalg.lstsq(a, y, rcond=None)
    res = y - a @ coef
    cov = (res @ res / max(x.size - 2, 1)) * np.linalg.inv(a.T @ a)
    return float(coef[1]), float(math.sqrt(cov[1, 1]))


def equiangular_beta_c(rho: float, n: int) -> float:
    """beta where the exact one-layer output cosine of n equiangular tokens at cosine rho crosses
    (1 + rho) / 2 (it falls from 1 at beta = 0 to rho as beta grows)."""
    mid = (1 + rho) / 2
    hi = 4 * (math.log(n) + 10) / (1 - rho)
    return float(
        optimize.brentq(lambda b: one_layer_cosine(rho, b, n) - mid, 0.0, hi, xtol=1e-12, rtol=1e-14)
    )


def _equiangular_law() -> tuple[list[list[float]], list[float]]:
    betas = [[equiangular_beta_c(r, n) for n in EQUI_NS] for r in EQUI_RHOS]
    logn = np.log(np.asarray(EQUI_NS, float))
    slopes = [float(np.polyfit(logn, np.asarray(b), 1)[0]) for b in betas]
    return betas, slopes


def compute(sz: dict, seed: int) -> CriticalTemperatureMeasured:
    """beta_c(n) for every (d, n), the fitted exponents, and the curves A_ii(beta).

    Arguments:
        sz: ``ns, dims, rows`` (tokens per n: rows // n samples of n tokens), ``block`` (query rows
            per pass).
        seed: ``numpy.random.default_rng([seed, d, n])`` draws each cell's tokens.
    """
    beta_c, grids, curves, expo, se, ratio = [], [], [], [], [], []
    for d in sz["dims"]:
        row_b, row_g, row_c = [], [], []
        for n in sz["ns"]:
            rng = np.random.default_rng([seed, d, n])
            b, g, c = _transition(n, d, sz["rows"], sz["block"], rng)
            row_b.append(b)
            row_g.append(np.asarray(g).tolist())
            row_c.append(np.asarray(c).tolist())
        s, e = _fit(sz["ns"], row_b)
        beta_c.append(row_b)
        grids.append(row_g)
        curves.append(row_c)
        expo.append(s)
        se.append(e)
        ratio.append([b / math.log(n) for b, n in zip(row_b, sz["ns"])])
    equi_beta_c, equi_slope = _equiangular_law()
    return CriticalTemperatureMeasured(
        ns=list(sz["ns"]),
        dims=list(sz["dims"]),
        beta_c=beta_c,
        exponent=expo,
        exponent_se=se,
        law=[2.0 / (d - 1) for d in sz["dims"]],
        beta_c_over_log_n=ratio,
        equi_beta_c=equi_beta_c,
        equi_slope=equi_slope,
        grid=grids,
        curves=curves,
        setting={
            **sz,
            "seed": seed,
            "dtype": "float64",
            "tokens": "uniform on S^(d-1) (normalised gaussians)",
            "attention": "complete mask, W_Q = W_K = I, scores beta <x_i, x_j>, one layer",
            "transition": "mean over tokens of A_ii = 1/2",
            "quotes": QUOTES,
        },
    )


def checks(m: CriticalTemperatureMeasured) -> list[V.Check]:
    """Per small d: the fitted exponent against 2/(d-1); the log n law of 2510.05554 in its
    equiangular model (the exact one-layer formula)."""
    out = []
    for k, d in enumerate(m.dims):
        if d not in SMALL_D:
            continue
        law, s = m.law[k], m.exponent[k]
        out.append(
            V.check(
                f"d={d}: beta_c ~ n^s, s = 2/(d-1) = {law:.3g} within {EXPONENT_REL:.0%} (arXiv:2605.08505)",
                abs(s - law) <= EXPONENT_REL * law,
                f"s = {s:.3f} +- {m.exponent_se[k]:.2g}; beta_c = "
                + ", ".join(f"{b:.4g}" for b in m.beta_c[k]),
            )
        )
    big = [k for k, d in enumerate(m.dims) if d not in SMALL_D]
    shown = "; ".join(
        f"d={m.dims[k]}: beta_c / ln n = " + ", ".join(f"{r:.3g}" for r in m.beta_c_over_log_n[k])
        for k in big
    )
    if not m.equi_slope:
        out.append(
            V.untestable("beta_n ~ log n (arXiv:2510.05554)", f"no equiangular sweep recorded. {shown}")
        )
        return out
    laws = [1 / (1 - r) for r in m.equi_rhos]
    ok = all(abs(s / law - 1) <= LOG_N_REL for s, law in zip(m.equi_slope, laws))
    out.append(
        V.check(
            f"beta_n ~ log n (arXiv:2510.05554) in its equiangular model: slope of beta_c against ln n = "
            f"1/(1-rho) within {LOG_N_REL:.0%}, n = {m.equi_ns[0]:.0e}..{m.equi_ns[-1]:.0e}",
            ok,
            "; ".join(
                f"rho={r:g}: slope {s:.5g} vs {law:.5g}" for r, s, law in zip(m.equi_rhos, m.equi_slope, laws)
            )
            + f". Uniform keys: {shown}",
        )
    )
    return out


def table(m: CriticalTemperatureMeasured) -> str:
    head = "| d | " + " | ".join(f"beta_c, n={n}" for n in m.ns) + " | fitted s | 2/(d-1) |"
    rows = [head, "|" + "---|" * (len(m.ns) + 3)]
    for k, d in enumerate(m.dims):
        cells = " | ".join(f"{b:.4g}" for b in m.beta_c[k])
        rows.append(f"| {d} | {cells} | {m.exponent[k]:.3f} +- {m.exponent_se[k]:.2g} | {m.law[k]:.3f} |")
    return "\n".join(rows)


def render(out: Path, m: CriticalTemperatureMeasured, cs: list[V.Check], *, quick: bool = False) -> Rendered:
    from ..._plotting._long_context import plot_critical_temperature
    from ...plotting import save_figure

    fig = plot_critical_temperature(m.ns, m.dims, m.beta_c, m.grid, m.curves, m.law)
    figs = [save_figure(fig, out / "critical_temperature.png")]
    parts = [f"d={d}: s = {m.exponent[k]:.3f} against 2/(d-1) = {m.law[k]:.3f}" for k, d in enumerate(m.dims)]
    notes = (
        "beta_c(n): where the mean self-attention weight of n uniform tokens on S^(d-1) crosses 1/2. "
        + "; ".join(parts)
        + ". The log n law of arXiv:2510.05554, in its equiangular model (exact one-layer cosine): "
        + "beta_c / ln n "
        + ", ".join(
            f"{b[-1] / math.log(m.equi_ns[-1]):.4g} at rho = {r:g} (law {1 / (1 - r):.4g})"
            for r, b in zip(m.equi_rhos, m.equi_beta_c)
        )
        + f" at n = {m.equi_ns[-1]:.0e}."
    )
    if quick:
        notes += f" QUICK MODE: n up to {max(m.ns)}, {m.setting['rows']} tokens per n."
    return Rendered(figs, notes, table(m))


def describe(
    m: CriticalTemperatureMeasured, cs: list[V.Check], sz: dict, *, seed: int, quick: bool
) -> Description:
    key = {f"s (d={d})": m.exponent[k] for k, d in enumerate(m.dims)}
    key |= {f"equiangular slope (rho={r:g})": s for r, s in zip(m.equi_rhos, m.equi_slope)}
    return Description(
        m.setting,
        key_numbers=key,
        criterion=(
            f"checks: for d in {SMALL_D}, the least-squares exponent s_d of beta_c(n) is 2/(d-1) within "
            f"{EXPONENT_REL:.0%} (rule fixed before the run); the log n law of arXiv:2510.05554 in its "
            f"equiangular model: the slope of beta_c against ln n is 1/(1-rho) within {LOG_N_REL:.0%} for "
            f"rho in {EQUI_RHOS} (rule added with issue 53). " + V.VERDICT_RULE
        ),
        extra={"quotes": QUOTES},
    )
