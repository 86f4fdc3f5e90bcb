r"""The particle part of ``noisy-transition``: noisy tokens on $S^1$ and $S^2$ on either side of $\sigma_c$.

**The rule, fixed before any run** (issue 53: "particles from an i.i.d. uniform start at
$\sigma = 0.8\sigma_c$ and $1.2\sigma_c$ with $|\mathrm{mean}\ x_i| > 0.3$ below the threshold and
$< 4/\sqrt n$ above, at a time fixed before the run"). For each particle case
(``particle_cases``: quick, USA at $\beta = 2$ on $S^1$ and USA at $\beta = 1.2$ on $S^2$, both
continuous transitions by the statement of the module above, 256 tokens, 2 trajectories; full,
also SA at $\beta = 2$ on $S^1$ and $S^2$, 512 tokens, 8 trajectories; `particle_sizes`),
``particle_batch`` trajectories of ``particle_n`` tokens start i.i.d. uniform
on $S^{d-1}$ (`rankdyn.initial_tokens`, ``"sphere"``, key ``split(PRNGKey(seed))[0]``) and follow
the noisy flow (`rankdyn.flow.solve_flow`, ``noise=sigma``, complete mask, $Q = K = V = I$,
``solver="geodesic_heun"``, Brownian key ``split(PRNGKey(seed))[1]``, the same at both noise
levels) at $\sigma = 0.8\sigma_c$ and $1.2\sigma_c$, $\sigma_c$ = `rankdyn.theory.critical_noise`.

* *The time.* $T = $ ``PARTICLE_EFOLDS`` $/\lambda_1$ with $\lambda_1$ =
  `rankdyn.theory.uniform_mode_rate` (1, $\beta$, $0.8\sigma_c$) $= (d-1)(\sigma_c^2 - 0.64\sigma_c^2)/2$,
  mode 1's closed-form growth rate at $0.8\sigma_c$. ``PARTICLE_EFOLDS`` = 5: the i.i.d. start's
  order parameter is about $0.9/\sqrt n$ (0.056 at $n = 256$), so the linear growth reaches 0.3
  after $\ln(0.3\sqrt n/0.9) = 1.7$ e-folds (2.0 at $n = 512$), 3.3 from a start five times below
  the typical one; the rest is for the nonlinear saturation (the stationary clustered densities'
  order parameters at $0.8\sigma_c$ are 0.91 on $S^1$ and 0.85 on $S^2$ for these USA cases).
* *The step.* Geodesic Heun keeps $|x_i|$ to round-off, but its weak error lowers the noise's
  effective $\sigma^2$ by about $3\sigma^2 dt$ relative (docs/theory.md, "Geodesic Heun", measured
  on Brownian motion). $dt \le$ ``bias`` $/(3 (1.2\sigma_c)^2)$, with ``particle_bias`` = 0.15
  (quick) or 0.1 (full): at $1.2\sigma_c$ the effective $\sigma$ stays above $1.10\sigma_c$
  (quick; $1.14\sigma_c$ full). $T$ is cut into ``PARTICLE_SAVES`` $- 1$ equal intervals, each a
  whole number of steps.
* *The checks,* on the order parameter $r = |\frac1n\sum_i x_i|$ at $T$:
  1. below the threshold ($0.8\sigma_c$) every trajectory's $r$ is above ``ORDER_BELOW`` = 0.3;
  2. above it ($1.2\sigma_c$) the batch mean of $r$ is below ``ORDER_ABOVE`` $/\sqrt n = 4/\sqrt n$
     (i.i.d. uniform tokens give a mean near $0.9/\sqrt n$; the linear damping at $1.2\sigma_c$
     enlarges the variance of mode 1 by $\sigma^2/(\sigma^2 - \sigma_c^2) = 3.3$, so about
     $1.6/\sqrt n$ is expected);
  3. every trajectory is ``successful`` (no step limit, no non-finite state) and the radius drift
     $\max_i ||x_i| - 1|$ (never renormalised) is below ``DRIFT_MAX`` = 1e-10.

*Change of the rule, for time only.* The first run of this rule (quick, 4 trajectories, seed 0)
passed every check (order parameter at $0.8\sigma_c$: 0.85-0.92 on $S^1$, 0.85-0.87 on $S^2$; batch
mean at $1.2\sigma_c$: 0.075 and 0.117 against $4/\sqrt{256} = 0.25$; radius drift $5\cdot10^{-15}$)
but its time was over the quick tier's share (benchmarks/README.md); the quick batch went from
4 to 2 trajectories, nothing else changed.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from .._target import Measured, off_json
from .._verdict import Check, check

__all__ = ["ParticleMeasured", "particle_case", "particle_checks", "particle_sizes"]

#: sigma / sigma_c below and above the threshold.
PARTICLE_FACTORS = (0.8, 1.2)
#: T = this / lambda_1 (mode 1's closed-form growth rate at 0.8 sigma_c).
PARTICLE_EFOLDS = 5.0
#: Every trajectory's order parameter above this below the threshold.
ORDER_BELOW = 0.3
#: The batch mean of the order parameter below this / sqrt(n) above the threshold.
ORDER_ABOVE = 4.0
#: The largest accepted radius drift (geodesic Heun's is round-off).
DRIFT_MAX = 1e-10
#: Saved times (for the figure and the notes); the checks read the last.
PARTICLE_SAVES = 11


def particle_sizes(quick: bool) -> dict:
    """Quick: USA on S^1 (beta 2) and S^2 (beta 1.2), 256 tokens, 2 trajectories, bias 0.15; full:
    also SA at beta 2 on both, 512 tokens, 8 trajectories, bias 0.1. A case is (dynamics, d, beta)."""
    cases = (("usa", 2, 2.0), ("usa", 3, 1.2))
    if quick:
        return dict(particle_cases=cases, particle_n=256, particle_batch=2, particle_bias=0.15)
    cases += (("sa", 2, 2.0), ("sa", 3, 2.0))
    return dict(particle_cases=cases, particle_n=512, particle_batch=8, particle_bias=0.1)


@dataclasses.dataclass(frozen=True)
class ParticleMeasured(Measured):
    """One (dynamics, d, beta): the order parameter at ``t`` per trajectory, below and above sigma_c."""

    dynamics: str
    d: int
    beta: float
    sigma_c: float
    rate: float
    n: int
    t: float
    dt: float
    order_below: tuple[float, ...]
    order_above: tuple[float, ...]
    drift: float
    successful: bool
    #: the saved times and the batch mean order parameter below / above (for the figure).
    curve_t: tuple[float, ...] = off_json(default=())
    curve_below: tuple[float, ...] = off_json(default=())
    curve_above: tuple[float, ...] = off_json(default=())


def particle_grid(dynamics: str, d: int, beta: float, bias: float) -> tuple[float, float, float, int]:
    r"""$\sigma_c$, $\lambda_1$ at $0.8\sigma_c$, $T$ and the number of steps (module docstring)."""
    from ...theory import critical_noise, uniform_mode_rate

    sc = float(critical_noise(beta, d=d, dynamics=dynamics))
    rate = float(uniform_mode_rate(1, beta, PARTICLE_FACTORS[0] * sc, d=d, dynamics=dynamics))
    t1 = PARTICLE_EFOLDS / rate
    dt_max = bias / (3 * (PARTICLE_FACTORS[1] * sc) ** 2)
    per = PARTICLE_SAVES - 1
    return sc, rate, t1, per * math.ceil(t1 / (per * dt_max))


def particle_case(dynamics: str, d: int, beta: float, sz: dict, seed: int) -> ParticleMeasured:
    """The noisy flow at 0.8 and 1.2 sigma_c from one i.i.d. uniform start (module docstring)."""
    import jax.random as jr

    from ..._model._masks import complete_mask
    from ..._model._tokens import initial_tokens
    from ...flow import DensityObserver, FlowField, solve_flow

    n, batch = int(sz["particle_n"]), int(sz["particle_batch"])
    sc, rate, t1, steps = particle_grid(dynamics, d, beta, float(sz["particle_bias"]))
    dt = t1 / steps
    kx, kw = jr.split(jr.PRNGKey(seed))
    x0 = initial_tokens(kx, "sphere", n, d, batch=batch)
    field = FlowField(complete_mask(n), d, dynamics)
    times = np.linspace(0.0, t1, PARTICLE_SAVES)
    orders, drift, ok = [], 0.0, True
    for factor in PARTICLE_FACTORS:
        sol = solve_flow(
            field, x0, beta=beta, times=times, noise=factor * sc, key=kw, solver="geodesic_heun", dt=dt,
            max_steps=steps + 8, observe=DensityObserver(degree=1), per_trajectory=True,
        )  # fmt: skip
        orders.append(np.asarray(sol.metrics["order_parameter"]).reshape(batch, len(times)))
        drift = max(drift, float(np.max(np.asarray(sol.drift))))
        ok = ok and bool(np.all(np.asarray(sol.successful))) and int(np.sum(sol.steps_limit_hit)) == 0
    below, above = orders
    return ParticleMeasured(
        dynamics, int(d), float(beta), sc, rate, n, float(t1), float(dt),
        tuple(float(v) for v in below[:, -1]), tuple(float(v) for v in above[:, -1]), drift, ok,
        tuple(float(v) for v in times), tuple(float(v) for v in below.mean(axis=0)),
        tuple(float(v) for v in above.mean(axis=0)),
    )  # fmt: skip


def particle_checks(particles) -> list[Check]:
    """Checks 1-3 of the module docstring, one per case."""
    out = []
    for p in particles:
        tag = f"particles on S^{p.d - 1}, {p.dynamics.upper()} beta = {p.beta:g}, n = {p.n}"
        bound = ORDER_ABOVE / math.sqrt(p.n)
        mean_above = float(np.mean(p.order_above)) if p.order_above else float("nan")
        low = min(p.order_below) if p.order_below else float("nan")
        ok = p.successful and p.drift < DRIFT_MAX and low > ORDER_BELOW and mean_above < bound
        out.append(
            check(
                f"{tag}: at t = {PARTICLE_EFOLDS:g}/lambda_1 the order parameter is above {ORDER_BELOW:g} "
                f"at 0.8 sigma_c (every trajectory) and below {ORDER_ABOVE:g}/sqrt(n) at 1.2 sigma_c "
                "(batch mean)",
                ok,
                f"t = {p.t:.4f} (lambda_1 = {p.rate:.4f}, dt {p.dt:.5f}): below sigma_c min {low:.4f} of "
                f"{[round(v, 4) for v in p.order_below]}; above sigma_c mean {mean_above:.4f} (bound "
                f"{bound:.4f}) of {[round(v, 4) for v in p.order_above]}; radius drift {p.drift:.1e} "
                f"(max {DRIFT_MAX:g}); all successful {p.successful}",
            )
        )
    return out
