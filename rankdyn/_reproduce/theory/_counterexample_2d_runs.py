"""The runs of the 2-D example on the circle (`counterexample_2d`): tokens at angles, the
per-layer observers that follow token 2, and the first-token, basin and joint-dynamics runs."""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp
import numpy as np

from .._layer_observers import observe_sigma_ratio as _observe_ratio, sigma_ratio as _sigma_ratio
from .._target import Measured, off_json

__all__ = [
    "_tokens",
    "_observe_token2",
    "_observe_joint",
    "_token2",
    "_observe_noln",
    "first_token_ratio",
    "basin_of_b",
    "joint_noncollapse",
    "pick_start",
    "BasinRun",
    "JointRun",
    "NoLNRun",
    "basin_run",
    "joint_run",
    "fig1_runs",
]


def _tokens(theta_deg) -> np.ndarray:
    """Unit vectors at the given angles (degrees), stacked on the last axis."""
    th = np.deg2rad(np.asarray(theta_deg, dtype=np.float64))
    return np.stack([np.cos(th), np.sin(th)], axis=-1)


# Observers are module-level functions: `simulate` is jitted with ``observe`` as a static
# argument, so reusing the same function object across w values reuses the compiled program.
def _observe_token2(t, x, args):
    # Scalars only (Trajectory.metrics is typed as one scalar per saved layer).
    return {"x21": x[1, 0], "x22": x[1, 1]}


def _observe_joint(t, x, args):
    return {"ratio": _sigma_ratio(x), "x21": x[1, 0], "x22": x[1, 1]}


def _token2(metrics, idx):
    """Token 2 at the saved-layer indices ``idx``: ``(..., len(idx), 2)``."""
    return np.stack([np.asarray(metrics["x21"])[..., idx], np.asarray(metrics["x22"])[..., idx]], axis=-1)


def _observe_noln(t, x, args):
    from ..._observe._metrics import mu

    cos = jnp.dot(x[0], x[1]) / (jnp.linalg.norm(x[0]) * jnp.linalg.norm(x[1]))
    return {"mu": mu(x), "cos": cos}


def first_token_ratio(layer, theta1_deg, num_steps: int) -> dict:
    r"""Check $X_{1,2}/X_{1,1} \mapsto X_{1,2}/X_{1,1} + w$ and the sign invariance of $X_{1,1}$.

    Token 1 attends only to itself, so its path does not depend on token 2 (set to token 1).
    Two starts and the trajectory run's observer and depth: the compiled program is shared with
    the Fig. 1 trajectories.

    Returns:
        dict with ``ratios`` (num_starts, num_steps + 1), ``max_rel_increment_error``
        (max over steps of $|\Delta r - w| / w$), ``sign_preserved`` and ``limit_error`` (the
        distance of token 1 to $(0, \operatorname{sign} X^{(0)}_{1,1})$ at the end) and
        ``algebraic_constant`` ($t\,w\,|X_{1,1}^{(t)}|$ at the end, which tends to 1: algebraic
        $1/(wt)$ convergence, our earlier measurement, docs/theory.md#constructions).
    """
    from ..._run._simulate import simulate

    w = float(layer.weights.w_v[0, 0, 1])
    x1 = _tokens(theta1_deg)
    x0 = jnp.asarray(np.stack([x1, x1], axis=-2))
    tr = simulate(layer, x0, num_steps, save_states=True, observe=_observe_ratio)
    xs = np.asarray(tr.states)[..., 0, :]  # token 1: (starts, steps + 1, 2)
    r = xs[..., 1] / xs[..., 0]
    inc = np.diff(r, axis=-1)
    sign0 = np.sign(x1[:, 0])
    limit = np.stack([np.zeros_like(sign0), sign0], axis=-1)
    return {
        "ratios": r,
        "max_rel_increment_error": float(np.max(np.abs(inc - w)) / w),
        "sign_preserved": bool(np.all(np.sign(xs[..., 0]) == sign0[:, None])),
        "limit_error": float(np.max(np.linalg.norm(xs[:, -1] - limit, axis=-1))),
        "algebraic_constant": (num_steps * w * np.abs(xs[:, -1, 0])).tolist(),
    }


def basin_of_b(layer, ex: dict, step_deg: float, num_steps: int) -> dict:
    r"""Basin of $B$ for token 2 with token 1 held at $(0, 1)$ (a fixed point of token 1's map).

    Token 2 starts at the cell centres $\theta_k = (k + 1/2)\,\Delta$ of a grid of step
    $\Delta$ (so no start sits exactly on $A$ or on the singular point $(0, -1)$).

    Returns:
        dict with ``angles`` (deg), ``outcome`` (1 = converged to B, 0 = converged to (0, 1),
        -1 = neither within 1e-8 after ``num_steps``), the measured arc ``(lo, hi)`` (midpoints
        between the last outside and first inside grid cell), the number of contiguous basin
        arcs, and the predicted arc ``(theta_A, 270)``.
    """
    from ..._run._simulate import simulate

    angles = (np.arange(int(round(360.0 / step_deg))) + 0.5) * step_deg
    x2 = _tokens(angles)
    x1 = np.broadcast_to(np.array([0.0, 1.0]), x2.shape)
    x0 = jnp.asarray(np.stack([x1, x2], axis=-2))
    tr = simulate(layer, x0, num_steps, save_every=num_steps, observe=_observe_token2, per_trajectory=True)
    x2_end = _token2(tr.metrics, -1)
    d_b = np.linalg.norm(x2_end - np.asarray(ex["B"]), axis=-1)
    d_e = np.linalg.norm(x2_end - np.asarray(ex["e"]), axis=-1)
    outcome = np.where(d_b < 1e-8, 1, np.where(d_e < 1e-8, 0, -1))
    inside = outcome == 1
    # Contiguous runs of the basin on the circle (wrap-around aware).
    starts = np.flatnonzero(inside & ~np.roll(inside, 1))
    ends = np.flatnonzero(inside & ~np.roll(inside, -1))
    lo = hi = float("nan")
    if starts.size == 1 and ends.size == 1:
        lo = float(angles[starts[0]] - step_deg / 2)
        hi = float(angles[ends[0]] + step_deg / 2)
        if hi < lo:
            hi += 360.0
    return {
        "angles": angles,
        "outcome": outcome,
        "num_arcs": int(starts.size),
        "measured_arc": (lo, hi),
        "predicted_arc": (float(ex["theta_A"]), 270.0),
        "num_undecided": int(np.sum(outcome == -1)),
        "degenerate": int(tr.summary.degenerate),
    }


def joint_noncollapse(layer, ex: dict, step_deg: float, horizons, save_every: int) -> dict:
    r"""Joint dynamics from a grid of $(\theta_1, \theta_2)$, $\theta_1 \in (-90^\circ, 90^\circ)$.

    Both tokens move (no "first token already converged" simplification,
    docs/theory.md#ambiguities-and-choices). A start does not collapse at horizon $T$ if
    $\sigma_2/\sigma_1 > 10^{-2}$ there (docs/theory.md#stability's rule).
    Starts with $\theta_2 = \theta_1 + 180^\circ$ average to zero at the first step (LN divides
    by 0); they are flagged degenerate and excluded from the fractions.

    Returns:
        dict with the grid, the per-start ``noncollapse`` (len(horizons), n1, n2) and
        ``near_b`` (token 2 within 0.05 of B) at each horizon, the fractions, the counts and the
        smallest $\theta_1$ that avoids collapse at the last horizon.
    """
    from ..._run._simulate import simulate
    from ._intervals import wilson_interval

    th1 = np.arange(-90.0 + step_deg, 90.0 - step_deg / 2, step_deg)
    th2 = np.arange(0.0, 360.0 - step_deg / 2, step_deg)
    t1, t2 = np.meshgrid(th1, th2, indexing="ij")
    x0 = jnp.asarray(np.stack([_tokens(t1), _tokens(t2)], axis=-2))
    horizons = [int(h) for h in horizons]
    tr = simulate(
        layer, x0, max(horizons), save_every=save_every, observe=_observe_joint, per_trajectory=True
    )
    layers = np.asarray(tr.layers)
    idx = [int(np.flatnonzero(layers == h)[0]) for h in horizons]
    ratio = np.asarray(tr.metrics["ratio"])[..., idx]  # (n1, n2, H)
    d_b = np.linalg.norm(_token2(tr.metrics, idx) - np.asarray(ex["B"]), axis=-1)
    ok = ~np.asarray(tr.degenerate) & ~np.asarray(tr.nonfinite)
    nonc = (ratio > 1e-2) & ok[..., None]
    near_b = (d_b < 0.05) & ok[..., None]
    n_ok = int(ok.sum())
    counts = nonc.reshape(-1, len(horizons)).sum(0)
    ci = [wilson_interval(int(c), n_ok) for c in counts]
    last = nonc[..., -1]
    min_theta1 = float(th1[np.any(last, axis=1)].min()) if last.any() else float("nan")
    return {
        "theta1": th1,
        "theta2": th2,
        "horizons": horizons,
        "noncollapse": np.moveaxis(nonc, -1, 0),
        "counts": counts,
        "num_valid": n_ok,
        "num_degenerate": int((~ok).sum()),
        "fraction": counts / max(n_ok, 1),
        "ci": ci,
        "fraction_near_b": near_b.reshape(-1, len(horizons)).sum(0) / max(n_ok, 1),
        "min_theta1_noncollapse": min_theta1,
    }


def pick_start(theta1, theta2, noncollapse_end, theta1_want: float, theta2_want: float, want: bool):
    """The grid start closest to the wanted one whose final outcome is ``want`` (non-collapse).

    Arguments:
        theta1, theta2: the grid's angles (deg) of `joint_noncollapse`.
        noncollapse_end: ``(len(theta1), len(theta2))`` outcome at the last horizon.
        theta1_want, theta2_want: the wanted start (deg).
        want: the outcome the start must have (True = keeps rank 2).

    Returns:
        ``(theta1, theta2)`` in degrees (the wanted start when no grid start has ``want``).
    """
    t1, t2 = np.meshgrid(theta1, theta2, indexing="ij")
    mask = np.asarray(noncollapse_end) == want
    if not mask.any():
        return theta1_want, theta2_want
    dist = np.hypot(t1 - theta1_want, (t2 - theta2_want + 180.0) % 360.0 - 180.0)
    k = np.argmin(np.where(mask, dist, np.inf))
    return float(t1.flat[k]), float(t2.flat[k])


@dataclasses.dataclass(frozen=True)
class BasinRun(Measured):
    """One w with token 1 at (0, 1): token 1's ratio increments and the basin of B of token 2.

    The `off_json` fields (figure data) are the angle grid (deg) and the per-start outcome
    (1 = converged to B, 0 = converged to (0, 1), -1 = neither), as `basin_of_b` returns them.
    """

    theta_A_deg: float
    first_token_max_rel_increment_error: float
    first_token_sign_preserved: bool
    first_token_t_w_x11_at_end: tuple[float, ...]
    basin_measured_arc_deg: tuple[float, float]
    basin_predicted_arc_deg: tuple[float, float]
    basin_boundary_error_deg: tuple[float, float]
    basin_num_arcs: int
    basin_undecided: int
    basin_fraction_of_circle: float
    angles: np.ndarray = off_json(default=None, repr=False, compare=False)
    outcome: np.ndarray = off_json(default=None, repr=False, compare=False)


@dataclasses.dataclass(frozen=True)
class JointRun(Measured):
    """One w in the joint dynamics: the non-collapse fraction per horizon with Wilson 95% intervals.

    The `off_json` fields (figure data) are the grid (deg) and the per-start outcome
    ``(len(horizons), n1, n2)``.
    """

    horizons: tuple[int, ...]
    noncollapse_fraction: np.ndarray
    wilson95: tuple[tuple[float, float], ...]
    fraction_token2_near_B: np.ndarray
    num_starts_valid: int
    num_starts_degenerate: int
    min_theta1_deg_noncollapse: float
    spec_fraction_at_20000: float | None
    theta1: np.ndarray = off_json(default=None, repr=False, compare=False)
    theta2: np.ndarray = off_json(default=None, repr=False, compare=False)
    noncollapse: np.ndarray = off_json(default=None, repr=False, compare=False)


@dataclasses.dataclass(frozen=True)
class NoLNRun(Measured):
    """The run without LN from the Fig. 1 start; its states (`off_json`) are drawn."""

    steps: int
    mu_0: float
    mu_T: float
    one_minus_cos_T: float
    row_norm_T: np.ndarray
    states: np.ndarray = off_json(default=None, repr=False, compare=False)


def basin_run(layer, ex: dict, sz: dict) -> BasinRun:
    """Token 1's ratio and the basin of B at one w (`first_token_ratio`, `basin_of_b`)."""
    ft = first_token_ratio(layer, [30.0, 200.0], sz["traj_steps"])
    bs = basin_of_b(layer, ex, sz["basin_step"], sz["basin_steps"])
    (lo, hi), (plo, phi) = bs["measured_arc"], bs["predicted_arc"]
    return BasinRun(
        theta_A_deg=float(ex["theta_A"]),
        first_token_max_rel_increment_error=ft["max_rel_increment_error"],
        first_token_sign_preserved=ft["sign_preserved"],
        first_token_t_w_x11_at_end=tuple(ft["algebraic_constant"]),
        basin_measured_arc_deg=(lo, hi),
        basin_predicted_arc_deg=(plo, phi),
        basin_boundary_error_deg=(lo - plo, hi - phi),
        basin_num_arcs=bs["num_arcs"],
        basin_undecided=bs["num_undecided"],
        basin_fraction_of_circle=float(np.mean(bs["outcome"] == 1)),
        angles=bs["angles"],
        outcome=bs["outcome"],
    )


def joint_run(layer, ex: dict, sz: dict, reference: float | None) -> JointRun:
    """The joint dynamics at one w (`joint_noncollapse`); ``reference``: the earlier fraction (T = 20000)."""
    jt = joint_noncollapse(layer, ex, sz["joint_step"], sz["horizons"], sz["save_every"])
    return JointRun(
        horizons=tuple(jt["horizons"]),
        noncollapse_fraction=jt["fraction"],
        wilson95=tuple(jt["ci"]),
        fraction_token2_near_B=jt["fraction_near_b"],
        num_starts_valid=jt["num_valid"],
        num_starts_degenerate=jt["num_degenerate"],
        min_theta1_deg_noncollapse=jt["min_theta1_noncollapse"],
        spec_fraction_at_20000=reference,
        theta1=jt["theta1"],
        theta2=jt["theta2"],
        noncollapse=jt["noncollapse"],
    )


def fig1_runs(ex: dict, jt: JointRun, sz: dict):
    r"""The Fig. 1 trajectories at the w of ``ex``: with LN (joint dynamics) from a grid start of
    ``jt`` that keeps rank 2 and one that collapses, and without LN from the first.

    Returns:
        ``(starts, sigma_ratio, states_ln, noln)``: the two starts ``(theta1, theta2)`` (deg) and
        $\sigma_2/\sigma_1$ at the end of their LN runs (keyed "non-collapsing", "collapsing"),
        the LN states ``(2, traj_steps + 1, 2, 2)``, and W_V label -> `NoLNRun`.
    """
    from ..._model._weights import spectral_normalized
    from ..._run._simulate import simulate
    from ..._theory._constructions import uniform_causal_layer

    starts = {
        "non-collapsing": pick_start(jt.theta1, jt.theta2, jt.noncollapse[-1], 75.0, 200.0, True),
        "collapsing": pick_start(jt.theta1, jt.theta2, jt.noncollapse[-1], 30.0, 200.0, False),
    }
    x_keep, x_fall = (jnp.asarray(_tokens(np.array(t))) for t in starts.values())
    layer_ln = uniform_causal_layer(2, 2, ex["W_V"])
    tr_ln = simulate(
        layer_ln, jnp.stack([x_keep, x_fall]), sz["traj_steps"], save_states=True, observe=_observe_ratio
    )
    # No LN: the paper's matrix as printed, and rescaled to spectral norm 1 (A3,
    # docs/theory.md#ambiguities-and-choices).
    noln = {}
    for label, wv in (("W_V", ex["W_V"]), ("W_V/||W_V||_2", spectral_normalized(ex["W_V"]))):
        layer_no = uniform_causal_layer(2, 2, wv, placement="none")
        tr_no = simulate(layer_no, x_keep, sz["noln_steps"], save_states=True, observe=_observe_noln)
        mu = np.asarray(tr_no.metrics["mu"])
        states = np.asarray(tr_no.states)
        noln[label] = NoLNRun(
            steps=sz["noln_steps"],
            mu_0=float(mu[0]),
            mu_T=float(mu[-1]),
            one_minus_cos_T=float(1 - np.asarray(tr_no.metrics["cos"])[-1]),
            row_norm_T=np.linalg.norm(states[-1], axis=-1),
            states=states,
        )
    r_ln = np.asarray(tr_ln.metrics["ratio"])[:, -1]
    r_ln = np.asarray(tr_ln.metrics["ratio"])[:, -1]
    ratio = {"non-collapsing": float(r_ln[0]), "collapsing": float(r_ln[1])}
    return starts, ratio, np.asarray(tr_ln.states), noln
