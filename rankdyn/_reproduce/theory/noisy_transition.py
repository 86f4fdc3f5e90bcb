r"""Target ``noisy-transition``: the uniform density's transition under noise on the circle, by continuation.

The setting: tokens on $S^1$ (``d = 2``), complete mask, $Q = K = V = I$, each angle driven by
$\sigma\,dB$; the density solves $\partial_t\rho = -\partial_\theta(\rho u[\rho]) +
\frac{\sigma^2}{2}\partial_\theta^2\rho$ (`rankdyn.meanfield`, docs/theory.md "Mean-field
densities"). Linearising at the uniform density, mode $k$ grows at rate
$k^2(I_k(\beta)/(\beta Z) - \sigma^2/2)$, $Z = 1$ (USA) or $I_0(\beta)$ (SA), so mode 1 turns
unstable below

$$\sigma_c^2 = \frac{2 I_1(\beta)}{\beta}\ (\mathrm{USA}),\qquad
\sigma_c^2 = \frac{2 I_1(\beta)}{\beta I_0(\beta)}\ (\mathrm{SA}).$$

For noisy USA, arXiv 2606.05140 (Mun, Rosenzweig) states the transition continuous below a
$\beta^*$ solving $I_{d/2+1}(\beta)/I_{d/2}(\beta) = 1/d$ and discontinuous above; on the circle
($d = 2$): supercritical iff $I_2(\beta)/I_1(\beta) < 1/2$ (issue 53 quotes this statement; it is
checked here as stated, not derived).

**The rule, fixed before any run.** For each case (quick: USA at $\beta = 2$ and $3$, where
$I_2/I_1 = 0.433$ and $0.568$, and SA at $\beta = 2$; full: also USA at $\beta = 1.5, 4$ and SA
at $\beta = 3$), with ``num_modes`` even cosine modes:

1. *Threshold.* The uniform density, continued in $\sigma$ from $1.25\sigma_c$ down to
   $0.75\sigma_c$ with `rankdyn.meanfield.continue_density` (the IMEX step map, whose multiplier
   crosses $+1$ exactly where the rate crosses 0), reports branch points only, the first (largest)
   within ``THRESHOLD_TOL`` = 1e-6 of the closed form $\sigma_c$, and the others one per mode
   $k \ge 2$ whose threshold $\sigma_k^2 = 2 I_k(\beta)/(\beta Z)$ lies in the interval, each within
   the same tolerance (at $\beta = 3$ mode 2 turns at $0.754\sigma_c$); and the branch is stable at
   $1.25\sigma_c$, unstable at $0.75\sigma_c$.
2. *Type* (USA only; SA's type is measured and reported, no statement is checked). The clustered
   branch, found by Newton (`stationary_density`) from von Mises guesses $e^{\kappa\cos\theta}$,
   $\kappa \in \{2, 4, 8\}$, at $\sigma = 0.8\sigma_c$ (the solution with the largest order
   parameter, which must be stable and above 0.3), is continued in $\sigma$ up to $1.3\sigma_c$.
   It must end at ``parameter_end`` with at least one fold; the transition is *supercritical* if
   its largest fold lies at or below $\sigma_c(1 + 10^{-5})$ (the branch bends back to the
   uniform state from the unstable side, $\sigma < \sigma_c$) and *subcritical* otherwise (it
   first reaches beyond $\sigma_c$, folds there, and meets the uniform state from the stable
   side). The type must be the statement's.

The $S^2$ part (threshold and type on the sphere, $d = 3$) has its rule in
`noisy_transition_sphere.py`.

3. *Particles* (their rule in full in `rankdyn._reproduce.theory._noisy_particles`). Tokens from an
   i.i.d. uniform start on $S^1$ and $S^2$ follow the noisy flow (geodesic Heun, which keeps every
   $|x_i|$) at $0.8\sigma_c$ and $1.2\sigma_c$; at $T = 5/\lambda_1$ ($\lambda_1$ mode 1's
   closed-form growth rate at $0.8\sigma_c$) every trajectory's order parameter
   $|\frac1n\sum_i x_i|$ is above 0.3 below the threshold, and the batch mean is below $4/\sqrt n$
   above it.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np

from .._target import Description, Measured, Rendered, off_json
from .._verdict import Check, check
from ._noisy_particles import ParticleMeasured, particle_case, particle_checks, particle_sizes
from .noisy_transition_sphere import SphereCaseMeasured, sphere_case, sphere_checks, sphere_sizes

NAME = "noisy-transition"
CLAIM = (
    "With noise sigma dB on each token, the uniform density on the circle loses stability at "
    "sigma_c^2 = 2 I_1(beta)/beta (USA) or 2 I_1(beta)/(beta I_0(beta)) (SA), located by continuation of "
    "the mean-field equation; for USA the transition is supercritical iff I_2(beta)/I_1(beta) < 1/2."
)
#: Largest accepted distance of the located branch point from the closed-form threshold.
THRESHOLD_TOL = 1e-6
#: A fold above sigma_c (1 + this) makes the transition subcritical.
FOLD_MARGIN = 1e-5
KAPPAS = (2.0, 4.0, 8.0)


def sigma_c(beta: float, dynamics: str, k: int = 1) -> float:
    r"""The closed-form threshold of mode ``k`` (SciPy's Bessel functions); mode 1's is $\sigma_c$."""
    from scipy.special import iv

    z = float(iv(0, beta)) if dynamics == "sa" else 1.0
    return math.sqrt(2 * float(iv(k, beta)) / (beta * z))


def mode_thresholds(beta: float, dynamics: str, lo: float, hi: float) -> tuple[float, ...]:
    r"""The thresholds $\sigma_k$ in ``[lo, hi]``, decreasing (mode 1 first)."""
    out, k = [], 1
    while (s := sigma_c(beta, dynamics, k)) >= lo:
        if s <= hi:
            out.append(s)
        k += 1
    return tuple(out)


def bessel_ratio(beta: float) -> float:
    r"""$I_2(\beta)/I_1(\beta)$: below 1/2 the circle's USA transition is supercritical."""
    from scipy.special import iv

    return float(iv(2, beta) / iv(1, beta))


def sizes(quick: bool) -> dict:
    """Quick: USA at beta = 2, 3 and SA at 2, 24 modes; full: also USA at 1.5, 4 and SA at 3, 40 modes;
    the S^2 cases (`sphere_sizes`) and the particle cases (`particle_sizes`)."""
    if quick:
        cases = (("usa", 2.0), ("usa", 3.0), ("sa", 2.0))
        out = dict(cases=cases, num_modes=24, divisions=20, **sphere_sizes(True))
    else:
        cases = (("usa", 1.5), ("usa", 2.0), ("usa", 3.0), ("usa", 4.0), ("sa", 2.0), ("sa", 3.0))
        out = dict(cases=cases, num_modes=40, divisions=60, **sphere_sizes(False))
    return out | particle_sizes(quick)


@dataclasses.dataclass(frozen=True)
class CaseMeasured(Measured):
    """One (dynamics, beta): the uniform branch's bifurcations and the clustered branch's folds."""

    dynamics: str
    beta: float
    sigma_c: float
    bessel_ratio: float
    uniform_status: str
    branch_points: tuple[float, ...]
    other: tuple[str, ...]
    stable_above: bool
    unstable_below: bool
    mode_thresholds: tuple[float, ...]
    cluster_order: float
    cluster_stable: bool
    cluster_status: str
    folds: tuple[float, ...]
    #: sigma / sigma_c and the signed order parameter pi a_1 along the clustered branch (for the figure;
    #: the branch passes the uniform state onto its mirror image, a_1 < 0).
    curve_sigma: tuple[float, ...] = off_json(default=())
    curve_order: tuple[float, ...] = off_json(default=())
    curve_stable: tuple[bool, ...] = off_json(default=())

    @property
    def threshold_error(self) -> float:
        r"""Mode 1's branch point against $\sigma_c$ (inf unless one branch point per expected mode)."""
        bps, want = sorted(self.branch_points, reverse=True), self.mode_thresholds
        return abs(bps[0] - want[0]) if len(bps) == len(want) and want else float("inf")

    @property
    def modes_error(self) -> float:
        """The largest distance of a branch point from its mode's threshold (inf on a count mismatch)."""
        bps, want = sorted(self.branch_points, reverse=True), self.mode_thresholds
        if len(bps) != len(want) or not want:
            return float("inf")
        return max(abs(b - w) for b, w in zip(bps, want))

    @property
    def supercritical(self) -> bool | None:
        """From the clustered branch: its largest fold at or below sigma_c (None without a fold)."""
        if not self.folds:
            return None
        return max(self.folds) <= self.sigma_c * (1 + FOLD_MARGIN)


@dataclasses.dataclass(frozen=True)
class NoisyTransitionMeasured(Measured):
    """Every case, in the order of ``sizes``."""

    num_modes: int
    cases: tuple[CaseMeasured, ...]
    sphere: tuple[SphereCaseMeasured, ...] = ()  # the S^2 part (noisy_transition_sphere.py)
    particles: tuple[ParticleMeasured, ...] = ()  # the particle part (_noisy_particles.py)


def _case(dynamics: str, beta: float, sz: dict) -> CaseMeasured:
    from ...meanfield import continue_density, stationary_density

    kk, sc = sz["num_modes"], sigma_c(beta, dynamics)
    common = dict(param="sigma", beta=beta, sigma=sc, dynamics=dynamics, num_modes=kk, throw=False)
    uni = continue_density(np.zeros(kk), 1.25 * sc, 0.75 * sc, ds=0.5 * sc / sz["divisions"], **common)
    bps = tuple(float(b.param) for b in uni.bifurcations if b.kind == "branch-point")
    other = tuple(b.kind for b in uni.bifurcations if b.kind != "branch-point")
    theta = 2 * np.pi * np.arange(4 * kk) / (4 * kk)
    found = [
        stationary_density(
            np.exp(k * np.cos(theta)), beta=beta, sigma=0.8 * sc, dynamics=dynamics, num_modes=kk
        )
        for k in KAPPAS
    ]
    best = max(found, key=lambda s: float(s.order_parameter))
    br = continue_density(
        np.asarray(best.coefficients)[1 : kk + 1],
        0.8 * sc,
        1.3 * sc,
        ds=0.5 * sc / sz["divisions"],
        max_steps=8 * sz["divisions"],
        **common,
    )
    return CaseMeasured(
        dynamics,
        beta,
        sc,
        bessel_ratio(beta),
        uni.status,
        bps,
        other,
        bool(uni.stable[0]),
        not bool(uni.stable[-1]),
        mode_thresholds(beta, dynamics, 0.75 * sc, 1.25 * sc),
        float(best.order_parameter),
        bool(best.stable),
        br.status,
        tuple(float(b.param) for b in br.bifurcations if b.kind == "fold"),
        tuple(float(p / sc) for p in br.params),
        tuple(float(math.pi * x[0]) for x in br.points),
        tuple(bool(s) for s in br.stable),
    )


def compute(sz: dict, seed: int) -> NoisyTransitionMeasured:
    # The densities are deterministic (Newton from fixed guesses, continuation); ``seed`` keys the
    # particles' starts and Brownian paths.
    sphere = tuple(
        sphere_case(d, b, sz["sphere_band"], sz["divisions"]) for d, b in sz.get("sphere_cases", ())
    )
    particles = tuple(particle_case(dyn, d, b, sz, seed) for dyn, d, b in sz.get("particle_cases", ()))
    return NoisyTransitionMeasured(
        sz["num_modes"], tuple(_case(dyn, b, sz) for dyn, b in sz["cases"]), sphere, particles
    )


def checks(m: NoisyTransitionMeasured) -> list[Check]:
    """The rule of the module docstring, one check per case and part (pure)."""
    out = []
    for c in m.cases:
        tag = f"{c.dynamics.upper()} beta = {c.beta:g}"
        ok = c.uniform_status == "parameter_end" and not c.other and c.modes_error <= THRESHOLD_TOL
        out.append(
            check(
                f"{tag}: the uniform density's branch points are the modes' thresholds, the first within "
                f"{THRESHOLD_TOL:g} of sigma_c = {c.sigma_c:.10f}",
                ok,
                f"branch points {[f'{b:.12f}' for b in c.branch_points]}, closed forms "
                f"{[f'{b:.12f}' for b in c.mode_thresholds]}, other {list(c.other)}, "
                f"largest error {c.modes_error:.2e}, {c.uniform_status}",
            )
        )
        out.append(
            check(
                f"{tag}: the uniform density is stable at 1.25 sigma_c and unstable at 0.75 sigma_c",
                c.stable_above and c.unstable_below,
                f"stable above {c.stable_above}, unstable below {c.unstable_below}",
            )
        )
        if c.dynamics != "usa":
            continue
        want = c.bessel_ratio < 0.5
        got = c.supercritical
        ok = (
            c.cluster_status == "parameter_end" and c.cluster_stable and c.cluster_order > 0.3 and got == want
        )
        word = {True: "supercritical", False: "subcritical", None: "no fold"}
        out.append(
            check(
                f"{tag}: the transition is {word[want]} (I_2/I_1 = {c.bessel_ratio:.4f} "
                f"{'<' if want else '>='} 1/2)",
                ok,
                f"measured {word[got]}: folds at sigma/sigma_c = "
                f"{[f'{f / c.sigma_c:.6f}' for f in c.folds]}; "
                f"cluster at 0.8 sigma_c: order {c.cluster_order:.4f}, stable {c.cluster_stable}; "
                f"{c.cluster_status}",
            )
        )
    return out + sphere_checks(m.sphere) + particle_checks(m.particles)


def render(out: Path, m: NoisyTransitionMeasured, cs: list[Check], *, quick: bool = False) -> Rendered:
    """The clustered branches' order parameter against sigma / sigma_c, and the notes."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from ..._run._io import savefig

    fig, (ax, axp) = plt.subplots(1, 2, figsize=(12.5, 4.5), width_ratios=(1.4, 1))
    for c in m.cases:
        s, r, st = (np.asarray(v, dtype=float) for v in (c.curve_sigma, c.curve_order, c.curve_stable))
        if s.size == 0:
            continue
        ls = "-" if c.dynamics == "usa" else "--"
        line = ax.plot(s, r, lw=1.2, ls=ls, label=f"{c.dynamics.upper()}, beta = {c.beta:g}")[0]
        ax.plot(s[st > 0], r[st > 0], ".", ms=3, color=line.get_color())
    ax.axhline(0.0, color="0.3", lw=0.8)  # the uniform density
    ax.axvline(1.0, color="0.6", lw=0.8, ls=":")
    ax.set_xlabel("sigma / sigma_c (closed form)")
    ax.set_ylabel("pi a_1 (order parameter, signed)")
    ax.set_title("Clustered stationary densities on the circle (dots: stable)", fontsize=9)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)
    for p in m.particles:
        tt = np.asarray(p.curve_t) / p.t if p.t else np.asarray(p.curve_t)
        tag = f"S^{p.d - 1} {p.dynamics.upper()} beta {p.beta:g}"
        line = axp.plot(tt, p.curve_below, lw=1.2, label=f"{tag}, 0.8 sigma_c")[0]
        axp.plot(tt, p.curve_above, lw=1.2, ls="--", color=line.get_color(), label=f"{tag}, 1.2 sigma_c")
    if m.particles:
        axp.axhline(0.3, color="0.6", lw=0.8, ls=":")
        axp.set_xlabel("t / T (T = 5 / lambda_1)")
        axp.set_ylabel("batch mean |mean x_i|")
        axp.set_title("Noisy particles from a uniform start", fontsize=9)
        axp.legend(fontsize=7)
    else:
        axp.set_axis_off()
    fig.tight_layout()
    savefig(fig, out / "noisy_transition.png", dpi=120)
    plt.close(fig)
    errs = [c.threshold_error for c in m.cases]
    notes = (
        f"{len(m.cases)} cases at {m.num_modes} cosine modes; the largest distance of a located "
        f"threshold from its closed form is {max(errs):.2e}."
    )
    for c in m.cases:
        kind = {True: "supercritical", False: "subcritical", None: "without a fold"}[c.supercritical]
        notes += f" {c.dynamics.upper()} beta = {c.beta:g}: the clustered branch is {kind}"
        notes += (
            f" (folds at sigma/sigma_c = {', '.join(f'{f / c.sigma_c:.6f}' for f in c.folds) or 'none'})."
        )
    for p in m.particles:
        notes += (
            f" Particles on S^{p.d - 1} ({p.dynamics.upper()} beta = {p.beta:g}, n = {p.n}, "
            f"{len(p.order_below)} trajectories, geodesic Heun dt = {p.dt:.4f}) at t = {p.t:.2f}: order "
            f"parameter {np.mean(p.order_below):.3f} at 0.8 sigma_c, {np.mean(p.order_above):.4f} at 1.2 "
            f"sigma_c (4/sqrt(n) = {4 / math.sqrt(p.n):.4f}); radius drift {p.drift:.1e}."
        )
    return Rendered(["noisy_transition.png"], notes)


def describe(m: NoisyTransitionMeasured, cs: list[Check], sz: dict, *, seed: int, quick: bool) -> Description:
    setting = dict(sz, cases=[list(c) for c in sz["cases"]], d=2, mask="complete", seed=seed, quick=quick)
    errs = [c.threshold_error for c in m.cases]
    key = {"max threshold error": max(errs), "sigma_c USA beta=2": sigma_c(2.0, "usa")}
    for p in m.particles:
        tag = f"particles S^{p.d - 1} {p.dynamics.upper()} beta={p.beta:g}"
        key[f"{tag}: min order at 0.8 sigma_c"] = float(np.min(p.order_below))
        key[f"{tag}: mean order at 1.2 sigma_c"] = float(np.mean(p.order_above))
    return Description(
        dict(setting, dtype="float64"),
        key_numbers=key,
    )
