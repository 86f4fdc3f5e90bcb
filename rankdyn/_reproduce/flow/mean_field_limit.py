r"""Target ``mean-field-limit`` (extended tier): n particles against the density they approximate.

The setting: tokens on $S^1$ ($d = 2$), complete mask, $Q = K = V = I$, SA at $\beta = 1$,
without noise. The empirical measure $\mu^n_t = \frac1n\sum_i\delta_{\theta_i(t)}$ of the flow
(`rankdyn.flow.solve_flow`) is then an exact weak solution of the continuity equation that
`rankdyn.meanfield.solve_density` integrates ($\sigma = 0$; docs/theory.md, "Mean-field
densities"; the continuity equation of Geshkovski, Letrouit, Polyanskiy, Rigollet, "A
mathematical perspective on Transformers"), and Dobrushin's stability estimate for a smooth
interaction kernel (the classical mean-field argument, stated here from the general theory, not
quoted from that paper) bounds $W_1(\mu^n_t, \rho_t) \le e^{Lt}\,W_1(\mu^n_0, \rho_0)$ with an $L$
that does not depend on $n$.
For i.i.d. starts from $\rho_0$, $W_1(\mu^n_0, \rho_0)$ falls as $n^{-1/2}$, so at a fixed $t$
the distance falls as $n^{-1/2}$ too.

**Why these parameters.** Without noise the uniform density is unstable (mode 1 grows at
$I_1(\beta)/(\beta I_0(\beta)) = 0.446$ at $\beta = 1$): the fluctuations of order $n^{-1/2}$ are
amplified as the flow goes on, by an $n$-independent factor only while the growth is linear. The
time is therefore short, $t = 1 < 1/0.446$, before one e-fold of that growth, and the start $\rho_0 \propto
e^{\kappa\cos\theta}$, $\kappa = 1$, is far from clustered. The control check makes sure that at
this $t$ the density has moved by more than the particles' sampling error.

**The rule, fixed before any run.** For each $n$ in ``groups`` (quick: 64, 128, 256 together and
512 alone, with 32 seeds; full: 256 to 16384 by doubling with 6 seeds), ``seeds`` trajectories
start i.i.d. from $\rho_0$ (NumPy's von Mises sampler, ``default_rng([seed, n, r])`` for
trajectory $r$) and follow the flow to $t = 1$ (Tsit5, rtol 1e-6, atol 1e-9: the final positions
move by about 1e-9 from rtol 1e-9's, against a smallest $W_1$ near 0.05). The systems of one group
run as one array whose mask is block diagonal (one complete block per $n$): under SA each block is
exactly its own $n$-token system, and the group compiles once. The density solves the same
equation (``num_modes`` = 96, rtol 1e-10), sampled at the midpoints of ``CELLS`` = 4096 cells.
$W_1$ on the circle is `rankdyn.flow.circle_wasserstein1`. Fit $\log W_1 = p\log n + c$ by least
squares over every (n, seed) value; its interval is the 2.5-97.5% range of ``BOOTSTRAP`` = 2000
refits with the seeds resampled with replacement at each $n$ (NumPy ``default_rng(seed)``).

1. *Rate*: the interval contains $-1/2$ and $|p + 1/2| \le$ ``EXPONENT_TOL`` = 0.1.
2. *Control*: at the largest $n$, the mean $W_1$ of the particles to $\rho_0$ (the density
   without the dynamics) is at least ``CONTROL_FACTOR`` = 3 times their mean $W_1$ to $\rho_t$.
3. The density solve is ``successful`` (mass kept, no negative or under-resolved density) and no
   particle run hits the solver's step limit.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np

from .._target import Description, Measured, Rendered, off_json
from .._verdict import Check, check
from ._flow_runs import step_limit_check

NAME = "mean-field-limit"
CLAIM = (
    "The empirical measure of n tokens of the self-attention flow on the circle approaches the mean-field "
    "density (the continuity equation of Geshkovski et al., 'A mathematical perspective on Transformers') "
    "at a fixed time at the rate n^(-1/2) in Wasserstein-1."
)
BETA, KAPPA, T, DYNAMICS = 1.0, 1.0, 1.0, "sa"
NUM_MODES, CELLS, BOOTSTRAP = 96, 4096, 2000
RTOL, ATOL, PDE_RTOL = 1e-6, 1e-9, 1e-10
EXPONENT_TOL, CONTROL_FACTOR = 0.1, 3.0


def sizes(quick: bool) -> dict:
    """Quick: n = 64, 128, 256 side by side and 512 alone (two compiled programs; packed together
    the block-diagonal mask would cost 2.6 times the separate systems' work) with 32 seeds; full:
    256 to 16384, one group each, with 6 seeds."""
    if quick:
        return dict(groups=((64, 128, 256), (512,)), seeds=32)
    return dict(groups=tuple((256 * 2**k,) for k in range(7)), seeds=6)


@dataclasses.dataclass(frozen=True)
class MeanFieldLimitMeasured(Measured):
    """``w1[i][r]``: W1 of trajectory r at n = ns[i] to the density at T; ``w1_start`` the same to
    rho_0 (the control); the fitted exponent and its bootstrap interval."""

    ns: tuple[int, ...]
    w1: tuple[tuple[float, ...], ...]
    w1_start: tuple[tuple[float, ...], ...]
    exponent: float
    interval: tuple[float, float]
    density_status: str
    density_mass_error: float
    steps_limit_hit: tuple[int, ...]
    #: the density at T and at 0 on the cells, and the largest run's angles (for the figure).
    density: tuple[float, ...] = off_json(default=())
    density_start: tuple[float, ...] = off_json(default=())
    angles: tuple[float, ...] = off_json(default=())


def start_density(theta: np.ndarray) -> np.ndarray:
    r"""$\rho_0(\theta) = e^{\kappa\cos\theta} / (2\pi I_0(\kappa))$."""
    from scipy.special import i0

    return np.exp(KAPPA * np.cos(theta)) / (2 * math.pi * float(i0(KAPPA)))


def _densities():
    """rho_0 and rho_T at the cell midpoints, the solve's status and its mass error."""
    from ...meanfield import density_values, solve_density

    grid = 2 * math.pi * np.arange(4 * NUM_MODES) / (4 * NUM_MODES)
    sol = solve_density(
        start_density(grid), beta=BETA, sigma=0.0, t1=T, times=[0.0, T], dynamics=DYNAMICS,
        num_modes=NUM_MODES, rtol=PDE_RTOL,
    )  # fmt: skip
    # Values at theta_j = 2 pi j / (2 CELLS): the odd j are the cells' midpoints.
    vals = np.asarray(density_values(sol.coefficients, 2 * CELLS))[:, 1::2]
    mass = float(np.max(np.abs(np.asarray(sol.mass) - 1)))
    status = "successful" if bool(np.all(np.asarray(sol.successful))) else "not successful"
    return vals[0], vals[1], status, mass


def _particles(group, seeds: int, seed: int):
    """The flow of the systems of ``group`` (sizes) side by side under a block-diagonal mask, from
    i.i.d. von Mises starts: per size, the angles ``(seeds, n)`` at 0 and at T; and the step-limit
    count."""
    from ...flow import FlowField, solve_flow

    sizes_ = [int(n) for n in group]
    total = sum(sizes_)
    edges = np.cumsum([0, *sizes_])
    mask = np.zeros((total, total), bool)
    for lo, hi in zip(edges[:-1], edges[1:]):
        mask[lo:hi, lo:hi] = True
    th = np.stack(
        [
            np.concatenate([np.random.default_rng([seed, n, r]).vonmises(0.0, KAPPA, size=n) for n in sizes_])
            for r in range(seeds)
        ]
    )
    x0 = np.stack([np.cos(th), np.sin(th)], axis=-1)
    sol = solve_flow(
        FlowField(mask, 2, DYNAMICS), x0, beta=BETA, times=np.asarray([0.0, T]), rtol=RTOL, atol=ATOL,
        save_states=True, per_trajectory=True, max_steps=4096,
    )  # fmt: skip
    xs = np.asarray(sol.states).reshape(seeds, 2, total, 2)
    parts = [(xs[:, 0, lo:hi], xs[:, -1, lo:hi]) for lo, hi in zip(edges[:-1], edges[1:])]
    return parts, int(np.sum(sol.steps_limit_hit))


def fit_exponent(ns, w1, seed: int) -> tuple[float, tuple[float, float]]:
    """Least-squares slope of log W1 on log n over every (n, seed) value, and the 2.5-97.5% range of
    ``BOOTSTRAP`` refits with the seeds resampled at each n."""
    ln = np.log(np.asarray(ns, float))
    y = np.log(np.asarray(w1, float))  # (len(ns), seeds)
    x = np.repeat(ln[:, None], y.shape[1], axis=1)
    slope = float(np.polyfit(x.ravel(), y.ravel(), 1)[0])
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, y.shape[1], size=(BOOTSTRAP, *y.shape))
    ys = np.take_along_axis(np.broadcast_to(y, idx.shape), idx, axis=-1).reshape(BOOTSTRAP, -1)
    xc = x.ravel() - x.mean()
    boot = (ys - ys.mean(axis=1, keepdims=True)) @ xc / (xc @ xc)
    lo, hi = np.percentile(boot, [2.5, 97.5])
    return slope, (float(lo), float(hi))


def compute(sz: dict, seed: int) -> MeanFieldLimitMeasured:
    """The density once, then the particles at each n (module docstring's rule)."""
    import jax
    import jax.numpy as jnp

    from ...flow import circle_wasserstein1

    rho0, rho_t, status, mass = _densities()
    w1_batch = jax.vmap(circle_wasserstein1, in_axes=(0, None))
    ns, w1, w0, hits, angles = [], [], [], [], ()
    for group in sz["groups"]:
        parts, hit = _particles(group, int(sz["seeds"]), seed)
        hits.append(hit)
        for n, (_, xt) in zip(group, parts):
            ns.append(int(n))
            w1.append(tuple(float(v) for v in w1_batch(jnp.asarray(xt), jnp.asarray(rho_t))))
            w0.append(tuple(float(v) for v in w1_batch(jnp.asarray(xt), jnp.asarray(rho0))))
            angles = tuple(float(a) for a in np.mod(np.arctan2(xt[0, :, 1], xt[0, :, 0]), 2 * math.pi))
    order = np.argsort(ns)
    ns, w1, w0 = [ns[i] for i in order], [w1[i] for i in order], [w0[i] for i in order]
    p, interval = fit_exponent(ns, w1, seed)
    return MeanFieldLimitMeasured(
        tuple(ns),
        tuple(w1),
        tuple(w0),
        p,
        interval,
        status,
        mass,
        tuple(hits),
        tuple(float(v) for v in rho_t),
        tuple(float(v) for v in rho0),
        angles,
    )


def checks(m: MeanFieldLimitMeasured) -> list[Check]:
    """Rules 1-3 of the module docstring."""
    lo, hi = m.interval
    top, top0 = float(np.mean(m.w1[-1])), float(np.mean(m.w1_start[-1]))
    return [
        check(
            f"W1 to the mean-field density at t = {T:g} falls as n^p with p within {EXPONENT_TOL:g} of -1/2 "
            "and its 95% bootstrap interval containing -1/2",
            lo <= -0.5 <= hi and abs(m.exponent + 0.5) <= EXPONENT_TOL,
            f"p = {m.exponent:.4f}, interval [{lo:.4f}, {hi:.4f}] over n = {list(m.ns)}",
        ),
        check(
            f"control: at the largest n, W1 to rho_0 is at least {CONTROL_FACTOR:g} times W1 to rho_t",
            top0 >= CONTROL_FACTOR * top,
            f"n = {m.ns[-1]}: W1 to rho_t {top:.3e}, to rho_0 {top0:.3e} (ratio {top0 / top:.1f})",
        ),
        check(
            "the density solve is successful and keeps its mass",
            m.density_status == "successful" and m.density_mass_error <= 1e-12,
            f"{m.density_status}, mass error {m.density_mass_error:.1e}",
        ),
        step_limit_check(m.steps_limit_hit),
    ]


def render(out: Path, m: MeanFieldLimitMeasured, cs: list[Check], *, quick: bool = False) -> Rendered:
    """W1 against n with the fit and the n^(-1/2) line; the density against the largest run's histogram."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from ..._run._io import savefig

    ns = np.asarray(m.ns, float)
    w = np.asarray(m.w1, float)
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(12, 4.2))
    ax.loglog(np.repeat(ns, w.shape[1]), w.ravel(), ".", color="0.6", ms=4, label="each seed")
    ax.loglog(ns, w.mean(axis=1), "o-", label="mean")
    c = float(np.exp(np.mean(np.log(w)) - m.exponent * np.mean(np.log(ns))))
    ax.loglog(ns, c * ns**m.exponent, "-", lw=0.8, label=f"fit: p = {m.exponent:.3f}")
    c2 = float(np.exp(np.mean(np.log(w)) + 0.5 * np.mean(np.log(ns))))
    ax.loglog(ns, c2 / np.sqrt(ns), ":", color="k", label="n^(-1/2)")
    ax.set_xlabel("n (tokens)")
    ax.set_ylabel(f"W1(empirical, density) at t = {T:g}")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)
    if m.density:
        cells = (np.arange(len(m.density)) + 0.5) * 2 * math.pi / len(m.density)
        bx.hist(m.angles, bins=64, range=(0, 2 * math.pi), density=True, color="0.8", label=f"n = {m.ns[-1]}")
        bx.plot(cells, m.density, label=f"rho at t = {T:g}")
        bx.plot(cells, m.density_start, "--", lw=0.8, label="rho_0")
        bx.set_xlabel("theta")
        bx.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)
    fig.suptitle(f"Mean-field limit on the circle (SA, beta = {BETA:g}, no noise)", fontsize=9)
    fig.tight_layout()
    savefig(fig, out / "mean_field_limit.png", dpi=120)
    plt.close(fig)
    lo, hi = m.interval
    inside = lo <= -0.5 <= hi and abs(m.exponent + 0.5) <= EXPONENT_TOL
    notes = (
        f"Fitted exponent {m.exponent:.3f}, 95% bootstrap interval [{lo:.3f}, {hi:.3f}] over n = "
        f"{m.ns[0]} to {m.ns[-1]}: " + ("consistent with n^(-1/2)." if inside else "not the n^(-1/2) law.")
    )
    if quick:
        notes += " QUICK MODE."
    return Rendered(["mean_field_limit.png"], notes)


def describe(m: MeanFieldLimitMeasured, cs: list[Check], sz: dict, *, seed: int, quick: bool) -> Description:
    setting = dict(
        sz, groups=[list(g) for g in sz["groups"]], beta=BETA, kappa=KAPPA, t=T, dynamics=DYNAMICS, d=2,
        mask="complete per system (block diagonal per group)", noise=0.0,
        num_modes=NUM_MODES, cells=CELLS, bootstrap=BOOTSTRAP, rtol=RTOL, atol=ATOL, pde_rtol=PDE_RTOL,
        seed=seed, quick=quick, dtype="float64",
    )  # fmt: skip
    return Description(
        setting,
        key_numbers={"exponent": m.exponent, "interval low": m.interval[0], "interval high": m.interval[1]},
        criterion="the three rules of the module docstring, fixed before the run.",
    )
