r"""The particle part of ``noisy-transition``: noisy tokens on the circle on either side of $\sigma_c$.

**The rule, fixed before any run.** For each particle case (quick: USA at $\beta = 2$; full: also
USA at $\beta = 3$), ``particle_batch`` trajectories of ``particle_n`` tokens start i.i.d. uniform
on $S^1$ (`rankdyn.initial_tokens`, ``"sphere"``, $d = 2$, key ``seed``) and follow the noisy flow
(`rankdyn.flow.solve_flow` with ``noise=sigma``: complete mask, $Q = K = V = I$, fixed-step Heun,
$dt$ = ``PARTICLE_DT``) at $\sigma = 0.8\sigma_c$ and at $\sigma = 1.2\sigma_c$ (the same key: the
same Brownian paths). At the time

$$T = \frac{\texttt{PARTICLE\_RATE\_TIMES}}{\lambda_1},\qquad
\lambda_1 = \frac{\sigma_c^2 - (0.8\sigma_c)^2}{2} = 0.18\,\sigma_c^2,$$

ten e-folds of mode 1's linear growth at $0.8\sigma_c$ (docs/theory.md, "Mean-field densities":
mode $k$ grows at $k^2(I_k(\beta)/(\beta Z) - \sigma^2/2)$), from a start whose order parameter is
of order $n^{-1/2}$:

1. below the threshold ($0.8\sigma_c$) every trajectory's order parameter $|\frac1n\sum_i x_i|$ is
   above ``ORDER_BELOW`` = 0.3 (the tokens have clustered);
2. above it ($1.2\sigma_c$) the batch mean of the order parameter is below
   ``ORDER_ABOVE`` $/\sqrt n$ = $4/\sqrt n$ (the uniform state's fluctuations: i.i.d. uniform
   tokens give a mean of $\sqrt{\pi/(4n)} \approx 0.89/\sqrt n$, and the linear damping at
   $1.2\sigma_c$ enlarges its variance by $\sigma^2/(\sigma^2 - \sigma_c^2) = 3.3$);
3. every trajectory is ``successful`` (no step limit, no non-finite state). The radius drift
   $\max_i ||x_i| - 1|$ (the scheme's error, never renormalised) is reported, not checked.
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
#: T = this / lambda_1, lambda_1 = 0.18 sigma_c^2 (mode 1's growth rate at 0.8 sigma_c).
PARTICLE_RATE_TIMES = 10.0
#: Heun's fixed step.
PARTICLE_DT = 0.1
#: Every trajectory's order parameter above this below the threshold.
ORDER_BELOW = 0.3
#: The batch mean of the order parameter below this / sqrt(n) above the threshold.
ORDER_ABOVE = 4.0
#: Saved times (for the figure); the check reads the last.
PARTICLE_SAVES = 21


def particle_sizes(quick: bool) -> dict:
    """Quick: USA at beta = 2, 256 tokens, 4 trajectories; full: also USA at beta = 3, 1024 tokens, 8."""
    if quick:
        return dict(particle_cases=(("usa", 2.0),), particle_n=256, particle_batch=4)
    return dict(particle_cases=(("usa", 2.0), ("usa", 3.0)), particle_n=1024, particle_batch=8)


@dataclasses.dataclass(frozen=True)
class ParticleMeasured(Measured):
    """One (dynamics, beta): the order parameter at ``t`` per trajectory, below and above sigma_c."""

    dynamics: str
    beta: float
    sigma_c: float
    n: int
    t: float
    dt: float
    order_below: tuple[float, ...]
    order_above: tuple[float, ...]
    drift_below: float
    drift_above: float
    successful: bool
    #: the saved times and the batch mean order parameter below / above (for the figure).
    curve_t: tuple[float, ...] = off_json(default=())
    curve_below: tuple[float, ...] = off_json(default=())
    curve_above: tuple[float, ...] = off_json(default=())


def particle_time(sc: float) -> float:
    r"""$T = $ ``PARTICLE_RATE_TIMES`` $/ \lambda_1$ with $\lambda_1 = (\sigma_c^2 - (0.8\sigma_c)^2)/2$."""
    lam = (sc**2 - (PARTICLE_FACTORS[0] * sc) ** 2) / 2
    return PARTICLE_RATE_TIMES / lam


def particle_case(dynamics: str, beta: float, sc: float, sz: dict, seed: int) -> ParticleMeasured:
    """The noisy flow at 0.8 and 1.2 sigma_c from one i.i.d. uniform start (module docstring)."""
    import jax.random as jr

    from ..._model._masks import complete_mask
    from ..._model._tokens import initial_tokens
    from ...flow import DensityObserver, FlowField, solve_flow

    n, batch = int(sz["particle_n"]), int(sz["particle_batch"])
    t1 = particle_time(sc)
    # dt divides T into a whole number of steps near PARTICLE_DT.
    steps = math.ceil(t1 / PARTICLE_DT)
    dt = t1 / steps
    kx, kw = jr.split(jr.PRNGKey(seed))
    x0 = initial_tokens(kx, "sphere", n, 2, batch=batch)
    field = FlowField(complete_mask(n), 2, dynamics)
    times = np.linspace(0.0, t1, PARTICLE_SAVES)
    orders, drifts, ok = [], [], True
    for factor in PARTICLE_FACTORS:
        sol = solve_flow(
            field, x0, beta=beta, times=times, noise=factor * sc, key=kw, solver="heun", dt=dt,
            max_steps=steps + 8, observe=DensityObserver(degree=1), per_trajectory=True,
        )  # fmt: skip
        orders.append(np.asarray(sol.metrics["order_parameter"]).reshape(batch, len(times)))
        drifts.append(float(np.max(np.asarray(sol.drift))))
        ok = ok and bool(np.all(np.asarray(sol.successful))) and int(np.sum(sol.steps_limit_hit)) == 0
    below, above = orders
    return ParticleMeasured(
        dynamics,
        float(beta),
        float(sc),
        n,
        float(t1),
        float(dt),
        tuple(float(v) for v in below[:, -1]),
        tuple(float(v) for v in above[:, -1]),
        drifts[0],
        drifts[1],
        ok,
        tuple(float(v) for v in times),
        tuple(float(v) for v in below.mean(axis=0)),
        tuple(float(v) for v in above.mean(axis=0)),
    )


def particle_checks(particles) -> list[Check]:
    """Rules 1-3 of the module docstring, one check per case."""
    out = []
    for p in particles:
        tag = f"particles, {p.dynamics.upper()} beta = {p.beta:g}, n = {p.n}"
        bound = ORDER_ABOVE / math.sqrt(p.n)
        mean_above = float(np.mean(p.order_above)) if p.order_above else float("nan")
        low = min(p.order_below) if p.order_below else float("nan")
        out.append(
            check(
                f"{tag}: at t = {PARTICLE_RATE_TIMES:g}/lambda_1 the order parameter is above "
                f"{ORDER_BELOW:g} at 0.8 sigma_c (every trajectory) and below {ORDER_ABOVE:g}/sqrt(n) "
                "at 1.2 sigma_c (batch mean)",
                p.successful and low > ORDER_BELOW and mean_above < bound,
                f"t = {p.t:.4f} (dt {p.dt:.4f}): below sigma_c min {low:.4f} over "
                f"{[round(v, 4) for v in p.order_below]}; above sigma_c mean {mean_above:.4f} "
                f"(bound {bound:.4f}); radius drift {p.drift_below:.1e} / {p.drift_above:.1e}; "
                f"all successful {p.successful}",
            )
        )
    return out
