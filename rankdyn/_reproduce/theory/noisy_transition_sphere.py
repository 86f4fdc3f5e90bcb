r"""Target ``noisy-transition``, its $S^2$ part: the uniform density's transition on the sphere ($d = 3$).

The setting: tokens on $S^2$, complete mask, $Q = K = V = I$, noise $\sigma\,dB$ of generator
$\frac{\sigma^2}{2}\Delta$; axisymmetric (zonal) densities, `rankdyn.meanfield.continue_zonal_density`
(docs/theory.md, "Mean-field densities on the sphere"). A degree-$l$ harmonic grows at
$l(l+1)(i_l(\beta)/(\beta Z) - \sigma^2/2)$ ($i_l$ the modified spherical Bessel functions,
$Z = 1$ for USA, $i_0(\beta)$ for SA), so degree $l$ turns unstable below
$\sigma_l^2 = 2i_l(\beta)/(\beta Z)$, and $\sigma_c = \sigma_1$ is
`rankdyn.theory.critical_noise(beta, d=3)`. For noisy USA, arXiv 2606.05140 (Mun, Rosenzweig)
states the transition continuous below $\beta^*$ with $I_{5/2}(\beta^*)/I_{3/2}(\beta^*) = 1/3$
($\beta^* = 1.8162$, `rankdyn.theory.transition_beta(3)`) and discontinuous above
(`rankdyn.theory.transition_type(beta, d=3)`); checked here as stated.

**The rule, fixed before any run.** For each case (USA at $\beta = 1.2$, continuous by the
statement, and $\beta = 3$, discontinuous; SA at $\beta = 2$, threshold only), at band limit
``SPHERE_BAND`` = 24 (at least what the kernel needs up to $\beta = 6$):

1. *Threshold.* The uniform density, continued in $\sigma$ from $1.25\sigma_c$ down to
   $0.75\sigma_c$, reports branch points only, one per degree whose $\sigma_l$ lies in the
   interval, each within ``THRESHOLD_TOL`` = 1e-6 of it; stable at $1.25\sigma_c$, unstable at
   $0.75\sigma_c$.
2. *Type* (USA). The clustered zonal branch, found by Newton from $e^{\kappa\cos\theta}$,
   $\kappa \in \{2, 4, 8\}$, at $0.8\sigma_c$ (the largest order parameter, stable, above 0.3), is
   continued in $\sigma$ to $1.3\sigma_c$; it must end at ``parameter_end`` with a fold, and the
   transition is continuous iff its largest fold lies at or below $\sigma_c(1 + 10^{-5})$. The
   type must be the statement's.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from .._target import Measured
from .._verdict import Check, check

__all__ = ["SPHERE_BAND", "SphereCaseMeasured", "sphere_sizes", "sphere_case", "sphere_checks"]

SPHERE_BAND = 24
THRESHOLD_TOL = 1e-6
FOLD_MARGIN = 1e-5
KAPPAS = (2.0, 4.0, 8.0)


def degree_threshold(beta: float, dynamics: str, l: int) -> float:
    r"""$\sigma_l = \sqrt{2\,\mathrm{gain}_l}$ (`rankdyn.theory.uniform_mode_gain`, $d = 3$)."""
    from ...theory import uniform_mode_gain

    return math.sqrt(2 * uniform_mode_gain(l, beta, d=3, dynamics=dynamics))


def degree_thresholds(beta: float, dynamics: str, lo: float, hi: float) -> tuple[float, ...]:
    """The thresholds $\\sigma_l$ in ``[lo, hi]``, decreasing (degree 1 first)."""
    out, l = [], 1
    while (s := degree_threshold(beta, dynamics, l)) >= lo:
        if s <= hi:
            out.append(s)
        l += 1
    return tuple(out)


def sphere_sizes(quick: bool) -> dict:
    """The $S^2$ cases (the same in quick and full runs) and the band limit."""
    del quick
    return dict(sphere_cases=(("usa", 1.2), ("usa", 3.0), ("sa", 2.0)), sphere_band=SPHERE_BAND)


@dataclasses.dataclass(frozen=True)
class SphereCaseMeasured(Measured):
    """One (dynamics, beta) on $S^2$: the uniform branch's bifurcations, the clustered branch's folds."""

    dynamics: str
    beta: float
    sigma_c: float
    continuous_stated: bool
    uniform_status: str
    branch_points: tuple[float, ...]
    other: tuple[str, ...]
    stable_above: bool
    unstable_below: bool
    degree_thresholds: tuple[float, ...]
    cluster_order: float = float("nan")
    cluster_stable: bool = False
    cluster_status: str = ""
    folds: tuple[float, ...] = ()

    @property
    def threshold_error(self) -> float:
        """The largest distance of a branch point from its degree's threshold (inf on a count mismatch)."""
        bps, want = sorted(self.branch_points, reverse=True), self.degree_thresholds
        if len(bps) != len(want) or not want:
            return float("inf")
        return max(abs(b - w) for b, w in zip(bps, want))

    @property
    def continuous(self) -> bool | None:
        """From the clustered branch: its largest fold at or below sigma_c (None without a fold)."""
        if not self.folds:
            return None
        return max(self.folds) <= self.sigma_c * (1 + FOLD_MARGIN)


def sphere_case(dynamics: str, beta: float, band: int, divisions: int) -> SphereCaseMeasured:
    """Measure one case by the rule of the module docstring."""
    from ...meanfield import continue_zonal_density, stationary_zonal_density
    from ...theory import critical_noise, transition_type

    sc = float(critical_noise(beta, d=3, dynamics=dynamics))
    common = dict(param="sigma", beta=beta, sigma=sc, dynamics=dynamics, band_limit=band, throw=False)
    ds = 0.5 * sc / divisions
    uni = continue_zonal_density(np.zeros(band - 1), 1.25 * sc, 0.75 * sc, ds=ds, **common)
    base = dict(
        dynamics=dynamics,
        beta=beta,
        sigma_c=sc,
        continuous_stated=transition_type(beta, d=3) == "continuous",
        uniform_status=uni.status,
        branch_points=tuple(float(b.param) for b in uni.bifurcations if b.kind == "branch-point"),
        other=tuple(b.kind for b in uni.bifurcations if b.kind != "branch-point"),
        stable_above=bool(uni.stable[0]),
        unstable_below=not bool(uni.stable[-1]),
        degree_thresholds=degree_thresholds(beta, dynamics, 0.75 * sc, 1.25 * sc),
    )
    if dynamics != "usa":
        return SphereCaseMeasured(**base)
    nodes = np.polynomial.legendre.leggauss(2 * band)[0]
    found = [
        stationary_zonal_density(
            np.exp(k * nodes), beta=beta, sigma=0.8 * sc, dynamics=dynamics, band_limit=band, throw=False
        )
        for k in KAPPAS
    ]
    best = max(found, key=lambda s: float(s.order_parameter))
    br = continue_zonal_density(
        np.asarray(best.coefficients)[1:], 0.8 * sc, 1.3 * sc, ds=ds, max_steps=8 * divisions, **common
    )
    return SphereCaseMeasured(
        **base,
        cluster_order=float(best.order_parameter),
        cluster_stable=bool(best.stable),
        cluster_status=br.status,
        folds=tuple(float(b.param) for b in br.bifurcations if b.kind == "fold"),
    )


def sphere_checks(cases) -> list[Check]:
    """The rule of the module docstring, one check per case and part (pure)."""
    out = []
    for c in cases:
        tag = f"S^2 {c.dynamics.upper()} beta = {c.beta:g}"
        ok = c.uniform_status == "parameter_end" and not c.other and c.threshold_error <= THRESHOLD_TOL
        out.append(
            check(
                f"{tag}: the uniform density's branch points are the degrees' thresholds, the first within "
                f"{THRESHOLD_TOL:g} of sigma_c = {c.sigma_c:.10f}",
                ok and c.stable_above and c.unstable_below,
                f"branch points {[f'{b:.12f}' for b in c.branch_points]}, closed forms "
                f"{[f'{b:.12f}' for b in c.degree_thresholds]}, other {list(c.other)}, largest error "
                f"{c.threshold_error:.2e}, {c.uniform_status}; stable above {c.stable_above}, "
                f"unstable below {c.unstable_below}",
            )
        )
        if c.dynamics != "usa":
            continue
        want, got = c.continuous_stated, c.continuous
        word = {True: "continuous", False: "discontinuous", None: "no fold"}
        ok = (
            c.cluster_status == "parameter_end" and c.cluster_stable and c.cluster_order > 0.3 and got == want
        )
        out.append(
            check(
                f"{tag}: the transition is {word[want]} (transition_type(beta, d=3))",
                ok,
                f"measured {word[got]}: folds at sigma/sigma_c = "
                f"{[f'{f / c.sigma_c:.6f}' for f in c.folds]}; cluster at 0.8 sigma_c: order "
                f"{c.cluster_order:.4f}, stable {c.cluster_stable}; {c.cluster_status}",
            )
        )
    return out
