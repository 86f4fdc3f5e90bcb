r"""Target ``lyapunov-rates``: the collapse rate as a Lyapunov exponent, against the theorems and mu.

For the paper's four masks, without LN (eq. 2, space $\mathbb R^{nd}$) and with post sphere-LN
(eq. 3, tangent space of $(\mathbb S^{d-1})^n$), one shared layer with a Haar-orthogonal $W_V$
(Theorem 2's setting) is iterated from a batch of gaussian tokens and its spectrum computed by
the QR method (`rankdyn.lyapunov_spectrum`). With $W_V$ orthogonal the consensus manifold is
neutral: its $c$ directions ($c = d$ without LN, $d - 1$ on the spheres: the common token is
rotated by $W_V$) have exponent 0, and the collapse rate is the next one, the *transverse*
exponent $\lambda_{c+1}$. It is compared with $\log$ of Theorem 1's per-layer bound (no LN),
Theorem 2's (LN, strongly connected masks) or Corollary 1's (LN, quasi-strongly connected), all
upper bounds, and with $\log\rho$ of the per-layer rate of mu fitted on the same trajectories.
Then stable equilibria of a small layer found by `rankdyn.equilibrium_census` are checked: their
exponents must be $\log|\mu_i|$ of the multipliers (`rankdyn.stability`), to 1e-4 in float64.

Rules, fixed before the run (docs/theory.md, "Verdict rules fixed before the run"): the post-LN
bound comparisons (Theorem 2 needs n <= d, Corollary 1 nonnegative initial cosines; here n > d
from gaussian starts) are outside the hypotheses: reported under ``outside_hypotheses``, not
checks. The transverse exponent is compared with its limit at consensus, $\lambda^* =
\log|\lambda_2(A^*)|$ with $A^* = D^{-1}M$ the uniform attention over the mask: taken over
$[3T/4, T]$ of the running estimate, it has converged when that differs from the average over
$[T/2, 3T/4]$ by at most `CONV_TOL` (else not testable), and must then be within `LIMIT_TOL` of
$\lambda^*$. mu's fitted rate is reported, not scored (it is a transient: mu reaches the
round-off floor first).
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from ..._model._graph import graph_info
from ..._theory._rates import corollary1_rate, fit_rate_window, theorem1_rate, theorem2_rate
from .. import _verdict as V
from .._dtype import rel_floor
from .._masktable import MASK_LABELS, PAPER_MASKS, masks_for
from .._target import Description, Measured, Rendered, off_json

NAME = "lyapunov-rates"
CLAIM = (
    "The top transverse Lyapunov exponent of the layer map is the collapse rate: it lies below the log of "
    "Theorem 1's (no LN) and Theorem 2's / Corollary 1's (LN, orthogonal W_V) per-layer bounds, agrees with "
    "the fitted per-layer rate of mu, the consensus directions are neutral (exponent 0), and at stable "
    "equilibria the exponents are the log-moduli of the multipliers."
)
PLACEMENTS = ("none", "post")
#: Converged: the exponent's averages over [T/2, 3T/4] and [3T/4, T] differ by at most CONV_TOL.
CONV_TOL = 0.01
#: A converged exponent (over [3T/4, T]) equals its consensus limit log|lambda_2(A*)| within LIMIT_TOL.
LIMIT_TOL = 0.02
#: |lambda_i| below this for the c neutral consensus directions.
NEUTRAL_TOL = 0.02
#: Exponents against log-moduli at the census' stable equilibria (float64), moduli above MODULUS_MIN
#: (smaller ones are log(0)-like: the QR clamps at the dtype's smallest normal number).
EQUILIBRIUM_TOL, MODULUS_MIN = 1e-4, 1e-8
#: A transverse exponent below log(1e-6) per layer is a collapse to round-off within a few layers
#: (near-uniform attention at consensus has multipliers ~0): the exponent is then limited by
#: rounding and mu's fit by its floor, so only "at most mu's rate" is checked.
SUPERFAST_LOG = math.log(1e-6)


def sizes(quick: bool) -> dict:
    """``depth``/``batch``: the mu runs (mu reaches the round-off floor early); ``lyap_depth`` /
    ``lyap_batch``: the QR runs, deep enough for the exponent to converge (a Jordan block of size
    n - 1 under the uni window makes its finite-depth bias decay like log(t)/t)."""
    if quick:
        return {
            "n": 8,
            "d": 4,
            "batch": 4,
            "depth": 128,
            "lyap_depth": 512,
            "lyap_batch": 1,
            "census_starts": 32,
        }
    return {
        "n": 16,
        "d": 6,
        "batch": 16,
        "depth": 256,
        "lyap_depth": 1024,
        "lyap_batch": 4,
        "census_starts": 256,
    }


@dataclasses.dataclass(frozen=True)
class LyapunovRatesMeasured(Measured):
    """Per "placement/mask": the spectrum head, the transverse exponent, log of the bound and of mu's rate
    (``mu_at_floor``: the layer where mu reached the round-off floor before two points were usable, else 0);
    per stable equilibrium of the census: the largest |exponent - log modulus|."""

    exponents: dict[str, list[float]]
    #: The transverse exponent averaged over [3T/4, T] (checked) and over [T/2, 3T/4] (convergence).
    transverse: dict[str, float]
    transverse_early: dict[str, float]
    #: log|lambda_2(A*)|: the transverse exponent at consensus (uniform attention over the mask).
    limit: dict[str, float]
    log_bound: dict[str, float]
    bound_name: dict[str, str]
    #: "placement/mask" -> why its bound comparison is outside the theorem's hypotheses (not a check).
    outside_hypotheses: dict[str, str]
    log_mu_rate: dict[str, float]
    mu_at_floor: dict[str, int]
    neutral_dims: dict[str, int]
    equilibrium_errors: list[float]
    equilibrium_classes: dict
    setting: dict = off_json()


def _layers(sz, seed, dtype):
    from ..._model._layer import SelfAttentionLayer
    from ..._model._weights import gaussian, orthogonal

    n, d = sz["n"], sz["d"]
    kv, kq, kk, kx = jax.random.split(jax.random.key(seed), 4)
    wv = orthogonal(kv, d, dtype)
    wq, wk = (gaussian(k, (d, d), 1 / math.sqrt(d), dtype) for k in (kq, kk))
    masks = masks_for(PAPER_MASKS, n)
    layers = {
        f"{pl}/{name}": (SelfAttentionLayer(m, wq, wk, wv, placement=pl), m, pl)
        for pl in PLACEMENTS
        for name, m in masks.items()
    }
    return layers, jax.random.normal(kx, (sz["batch"], n, d), dtype)


def _bound(pl: str, m, eps: float, n: int) -> tuple[str, float]:
    """The theorem that applies to this placement and mask, and log of its per-layer factor."""
    g = graph_info(np.asarray(m))
    if pl == "none":
        name, rho = "Theorem 1", theorem1_rate(eps, g.radius)
    elif g.strongly_connected:
        name, rho = "Theorem 2", theorem2_rate(eps, g.radius, n)
    else:
        name, rho = "Corollary 1", corollary1_rate(eps, g.radius, g.num_centers)
    return name, (math.log(rho) if rho > 0 else -math.inf)


def consensus_limit(mask) -> float:
    r"""$\log|\lambda_2(A^*)|$, $A^* = D^{-1}M$ the uniform attention over the mask: at a consensus
    the logits are equal and $dA\,\mathbf 1 = 0$, so with an orthogonal $W_V$ the transverse
    multipliers are the eigenvalues of $A^*$ other than the consensus 1 (with or without sphere-LN).
    A triangular $A^*$ (causal, uni window) gives them exactly on its diagonal (no round-off in a
    Jordan block); the most negative value returned is ``-inf`` (rank-one $A^*$, complete mask)."""
    m = np.asarray(mask, float)
    a = m / m.sum(axis=1, keepdims=True)
    ev = np.diag(a) if not np.triu(a, 1).any() else np.linalg.eigvals(a)
    mod = np.sort(np.abs(ev))[::-1]
    second = float(mod[1]) if mod.size > 1 else 0.0
    return math.log(second) if second > 1e-14 else -math.inf


def _windows(res, c: int, discard: int, depth: int) -> tuple[float, float]:
    """The transverse exponent averaged over [T/2, 3T/4] and over [3T/4, T], from the running
    estimates (averages from ``discard``) at the record nearest 3T/4 and at T."""
    depths = np.asarray(res.depths, float)
    run = np.asarray(res.running_mean, float)[:, c]
    i = int(np.argmin(np.abs(depths - (discard + depth) / 2)))
    t1, t2 = depths[i] - discard, depths[-1] - discard
    early = float(run[i])
    late = float((run[-1] * t2 - run[i] * t1) / (t2 - t1))
    return early, late


def _outside(pl: str, bound_name: str, n: int, d: int) -> str:
    """Why a bound comparison is outside its theorem's hypotheses ('' when inside)."""
    if pl == "none":
        return ""
    if bound_name == "Theorem 2":
        return f"Theorem 2 needs n <= d and X^(0) of full rank n; here n = {n} > d = {d}"
    return "Corollary 1 needs nonnegative initial cosines; the gaussian starts have negative ones"


def stable_layer(sz: dict, dtype):
    """A small layer with a stable equilibrium: complete mask, skip, post sphere-LN,
    W_V = diag(1.5, 1, 0.6)."""
    from ..._model._layer import SelfAttentionLayer

    n, d = 4, 3
    wq = 0.3 * jax.random.normal(jax.random.key(1), (d, d), dtype)
    wk = 0.3 * jax.random.normal(jax.random.key(2), (d, d), dtype)
    wv = jnp.diag(jnp.asarray([1.5, 1.0, 0.6], dtype))
    return SelfAttentionLayer(np.ones((n, n), bool), wq, wk, wv, skip=True)


def _equilibria(sz, seed, dtype):
    from ...equilibria import JointOptions, equilibrium_census
    from ...lyapunov import lyapunov_spectrum

    layer = stable_layer(sz, dtype)
    census = equilibrium_census(
        layer,
        jax.random.key(seed),
        search="joint-search",
        joint=JointOptions(starts=sz["census_starts"], chunk=sz["census_starts"], deflation_rounds=0),
        progress=False,
    )
    errors = []
    for rec in census.equilibria:
        if rec.classification != "stable":
            continue
        x = jnp.asarray(rec.tokens, dtype)
        res = lyapunov_spectrum(layer, x, 300, discard=60, key=jax.random.key(0))
        want = np.sort(np.log(np.maximum(np.asarray(rec.moduli, float), 1e-300)))[::-1]
        keep = want > math.log(MODULUS_MIN)
        errors.append(float(np.max(np.abs(np.asarray(res.exponents)[keep] - want[keep]))))
    return errors, census.by_rank_and_class


def compute(sz: dict, seed: int) -> LyapunovRatesMeasured:
    r"""Spectra, bounds and mu fits for every (placement, mask); the census' stable equilibria.

    Arguments:
        sz: ``n, d, batch, depth, census_starts`` (`sizes`).
        seed: key(seed) -> (W_V, W_Q, W_K, tokens); the census' starts.

    Returns:
        A `LyapunovRatesMeasured` (float64 throughout).
    """
    from ..._run._simulate import simulate
    from ...lyapunov import lyapunov_spectrum

    dtype = jnp.float64
    n, d, depth, ldepth = sz["n"], sz["d"], sz["depth"], sz["lyap_depth"]
    floor = rel_floor(dtype)
    layers, x0 = _layers(sz, seed, dtype)
    names = ("exponents", "transverse", "early", "limit", "log_bound", "bound_name", "outside")
    out = {k: {} for k in names + ("log_mu_rate", "floor", "c")}
    for key, (layer, m, pl) in layers.items():
        c = d - 1 if pl == "post" else d
        res = lyapunov_spectrum(
            layer, x0[: sz["lyap_batch"]], ldepth, k=c + 2, discard=ldepth // 2, key=jax.random.key(0)
        )
        tr = simulate(layer, x0, depth, metrics="mu,mu_rel,eps_min", chunk=x0.shape[0])
        mean = np.asarray(res.mean, float)
        out["early"][key], out["transverse"][key] = _windows(res, c, ldepth // 2, ldepth)
        out["limit"][key] = consensus_limit(m)
        mu, rel = (np.asarray(tr.summary.mean[k], float) for k in ("mu", "mu_rel"))
        t = np.asarray(tr.layers)
        # The house fit (`fit_rate_window`): the second half of the layers above the round-off floor.
        rho, window = fit_rate_window(t, mu, rel, floor, start=1)
        out["floor"][key] = int(window[1]) if window is not None and window[0] == 0 else 0
        out["exponents"][key] = mean.tolist()
        out["c"][key] = c
        eps = float(np.min(np.asarray(tr.summary.min["eps_min"])))
        out["bound_name"][key], out["log_bound"][key] = _bound(pl, m, eps, n)
        out["outside"][key] = _outside(pl, out["bound_name"][key], n, d)
        out["log_mu_rate"][key] = math.log(rho) if rho > 0 else -math.inf
    errors, classes = _equilibria(sz, seed, dtype)
    return LyapunovRatesMeasured(
        exponents=out["exponents"],
        transverse=out["transverse"],
        transverse_early=out["early"],
        limit=out["limit"],
        log_bound=out["log_bound"],
        bound_name=out["bound_name"],
        outside_hypotheses={k: v for k, v in out["outside"].items() if v},
        log_mu_rate=out["log_mu_rate"],
        mu_at_floor=out["floor"],
        neutral_dims=out["c"],
        equilibrium_errors=errors,
        equilibrium_classes=classes,
        setting=_setting(sz, seed),
    )


def _setting(sz: dict, seed: int) -> dict:
    return {
        **sz,
        "seed": seed,
        "dtype": "float64",
        "masks": list(PAPER_MASKS),
        "placements": list(PLACEMENTS),
        "discard": sz["lyap_depth"] // 2,
        "model": "one shared layer: Haar-orthogonal W_V, gaussian W_Q, W_K (std 1/sqrt(d)), one head, "
        "no skip",
        "x0": "gaussian N(0,1)",
        "equilibria": "census (joint search, no deflation) of n=4, d=3, complete mask, skip, "
        "W_V=diag(1.5,1,0.6)",
    }


#: The per-layer factor of each bound (`rankdyn._theory._rates`).
FACTORS = {
    "Theorem 1": "(1 - eps^r)^(1/r)",
    "Theorem 2": "(1 - n eps^(2r))^(1/(2r))",
    "Corollary 1": "(1 - c eps^(2r))^(1/(2r))",
}


def _bound_check(name: str, lam: float, log_bound: float, bound_name: str) -> V.Check:
    """``lambda_trans <= log bound`` as per-layer factors (`V.bound_check`); where the factor is 1
    within `V.BOUND_ONE_TOL`, untestable, with why: eps (the smallest attention weight) raised to
    the graph radius r (or 2r) is that small for the windows at this n, so the theorem says
    nothing a collapsing rate could contradict (the rate is compared with its consensus limit)."""
    chk = V.bound_check(name, math.exp(lam), math.exp(log_bound))
    if chk.testable or not math.isfinite(log_bound):
        return chk
    deficit = -math.expm1(log_bound)
    gap = f"1 - {deficit:.2g}" if deficit > 0 else "1 to float64 precision"
    return V.untestable(
        name,
        f"{chk.detail}. The per-layer factor {FACTORS.get(bound_name, '')} is {gap}: the smallest "
        "attention weight eps raised to this mask's graph radius r is that small, so any non-expanding rate "
        f"passes; lambda_trans = {lam:.4g} is compared with its consensus limit instead",
    )


def limit_check(label: str, late: float, early: float, limit: float) -> V.Check:
    """The converged transverse exponent against its consensus limit (rule fixed before the run):
    not testable unless the windows [T/2, 3T/4] and [3T/4, T] agree within `CONV_TOL`; then
    ``|late - limit| <= LIMIT_TOL``; a limit below `SUPERFAST_LOG` asks ``late < SUPERFAST_LOG``."""
    detail = f"[3T/4, T] {late:.4g}, [T/2, 3T/4] {early:.4g}, limit {limit:.4g}"
    if limit < SUPERFAST_LOG:
        return V.check(
            f"{label}: lambda_trans < log(1e-6), as its limit (-inf: rank-one A*)",
            late < SUPERFAST_LOG,
            detail,
        )
    name = f"{label}: lambda_trans = log|lambda_2(A*)| (within {LIMIT_TOL:g}, converged within {CONV_TOL:g})"
    if not abs(late - early) <= CONV_TOL:
        return V.untestable(
            name, detail + f": not converged at this depth (windows differ by {abs(late - early):.3g})"
        )
    return V.check(name, abs(late - limit) <= LIMIT_TOL, detail)


def checks(m: LyapunovRatesMeasured) -> list[V.Check]:
    """Per (placement, mask): (1) lambda_trans <= log of Theorem 1's bound (no LN only: the post-LN
    comparisons are outside their theorems' hypotheses and are not checks), (2) neutral consensus
    directions, (3) the converged lambda_trans equals its consensus limit (`limit_check`); then (4)
    every stable equilibrium's exponents equal its log-moduli. mu's fitted rate is reported only."""
    out = []
    for key, lam in m.transverse.items():
        label = f"{key.split('/')[0]} LN, {MASK_LABELS[key.split('/')[1]]}"
        if key not in m.outside_hypotheses:
            out.append(
                _bound_check(
                    f"{label}: lambda_trans <= log({m.bound_name[key]} bound)",
                    lam,
                    m.log_bound[key],
                    m.bound_name[key],
                )
            )
        c = m.neutral_dims[key]
        head = m.exponents[key][:c]
        out.append(
            V.check(
                f"{label}: {c} neutral consensus directions (|lambda| <= {NEUTRAL_TOL:g})",
                max(abs(v) for v in head) <= NEUTRAL_TOL,
                ", ".join(f"{v:.3g}" for v in head),
            )
        )
        out.append(limit_check(label, lam, m.transverse_early[key], m.limit[key]))
    errs = m.equilibrium_errors
    if errs:
        out.append(
            V.check(
                f"stable equilibria: exponents = log|multipliers| (within {EQUILIBRIUM_TOL:g})",
                max(errs) <= EQUILIBRIUM_TOL,
                f"{len(errs)} stable classes, largest error {max(errs):.2g}",
            )
        )
    else:
        out.append(V.untestable("stable equilibria: exponents = log|multipliers|", "the census found none"))
    return out


def table(m: LyapunovRatesMeasured) -> str:
    rows = [
        "| placement / mask | lambda_trans [3T/4, T] | [T/2, 3T/4] | limit log|lambda_2(A*)| | log bound | "
        "log rho_mu (reported) |",
        "|---|---|---|---|---|---|",
    ]
    for key, lam in m.transverse.items():
        star = " (floor)" if m.mu_at_floor[key] else ""
        out = " outside its hypotheses, not checked" if key in m.outside_hypotheses else ""
        rows.append(
            f"| {key} | {lam:.4g} | {m.transverse_early[key]:.4g} | {m.limit[key]:.4g} | "
            f"{m.log_bound[key]:.3g} ({m.bound_name[key]}{out}) | {m.log_mu_rate[key]:.4g}{star} |"
        )
    return "\n".join(rows)


def render(out: Path, m: LyapunovRatesMeasured, cs: list[V.Check], *, quick: bool = False) -> Rendered:
    """What the checks test: per (placement, mask) the exponent's two windows, its limit, the bound
    (hollow where outside its hypotheses) and mu's rate (reported); and the notes."""
    from ..._plotting._verdict_figures import plot_rate_limits
    from ...plotting import save_figure

    rows = {
        k: {
            "late": m.transverse[k],
            "early": m.transverse_early[k],
            "limit": m.limit[k],
            "bound": m.log_bound[k],
            "bound_checked": k not in m.outside_hypotheses,
            "log_mu_rate": m.log_mu_rate[k],
        }
        for k in m.transverse
    }
    s = m.setting
    fig = plot_rate_limits(
        rows,
        title=f"transverse exponent vs its consensus limit (n={s['n']}, d={s['d']}, T={s['lyap_depth']})",
    )
    figs = [save_figure(fig, out / "lyapunov_rates.png")]
    text = (
        "lambda_trans is the exponent after the c neutral ones (c = d without LN, d - 1 on the spheres), "
        f"averaged over layers {3 * s['lyap_depth'] // 4}..{s['lyap_depth']} (checked) and "
        f"{s['discard']}..{3 * s['lyap_depth'] // 4} (convergence). Its limit is log|lambda_2(A*)| of the "
        "uniform attention over the mask at consensus. "
    )
    if m.outside_hypotheses:
        text += (
            "Outside the hypotheses, reported and not checked: "
            + "; ".join(f"{k}: {v}" for k, v in m.outside_hypotheses.items())
            + ". "
        )
    floors = [k for k, v in m.mu_at_floor.items() if v]
    text += "mu's fitted rate is a transient (reported, not scored)"
    text += (
        f"; for {', '.join(floors)} mu reached the round-off floor within a layer or two." if floors else "."
    )
    return Rendered(figs, text, table(m))


def describe(m: LyapunovRatesMeasured, cs: list[V.Check], sz: dict, *, seed: int, quick: bool) -> Description:
    key_numbers = {f"lambda_trans {k}": v for k, v in m.transverse.items()}
    key_numbers |= {f"limit {k}": v for k, v in m.limit.items() if k.startswith("none/")}
    return Description(
        m.setting,
        key_numbers=key_numbers,
        criterion="rule fixed before the run (docs/theory.md): per placement and mask, the transverse "
        "exponent is below log of Theorem 1's bound (no LN; the post-LN bounds of Theorem 2 and Corollary 1 "
        "are outside their hypotheses here, reported and not checked), the consensus directions are neutral "
        f"(|lambda| <= {NEUTRAL_TOL:g}), and the exponent over [3T/4, T], when it agrees with [T/2, 3T/4] "
        f"within {CONV_TOL:g} (else not testable), equals log|lambda_2(A*)| within {LIMIT_TOL:g}; at the "
        "census' stable "
        f"equilibria the exponents equal the log-moduli within {EQUILIBRIUM_TOL:g}. " + V.VERDICT_RULE,
    )
