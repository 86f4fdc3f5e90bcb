r"""Target ``counterexample-2d``: the paper's 2-D example (Fig. 1 and Fig. 5; docs/theory.md#constructions).

$N = d = 2$, causal mask, uniform attention ($W_Q = W_K = 0$) and
$W_V = \begin{bmatrix}1 & w\\0 & 1\end{bmatrix}$. With post-LN (eq. 3) the first token obeys
$X_{1,2}/X_{1,1} \mapsto X_{1,2}/X_{1,1} + w$ and tends to $(0, \operatorname{sign} X_{1,1})$;
with token 1 at $(0, 1)$ the second token converges to
$B = (-1/w, -\sqrt{1 - 1/w^2})$ from the open arc $(\theta_A, 270^\circ)$, so the limit has
rank 2. Without LN (eq. 2) both tokens collapse to one point (Theorem 1).

Measured here:

1. the first-token ratio increments (exactly $w$ per step) and the sign invariance;
2. the basin of $B$ with token 1 at $(0, 1)$ on a fine angle grid against the predicted arc;
3. the joint dynamics (no "first token already converged" simplification) on a grid of
   $(\theta_1, \theta_2)$: the non-collapse fraction against the horizon $T$;
4. the no-LN run from the same start: $\mu \to 0$.

Everything runs in float64 (``jax.enable_x64`` inside the target) with `rankdyn.simulate`.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np

from ..._run._io import to_jsonable
from .._target import Description, Measured, Rendered, off_json
from .._verdict import VERDICT_RULE, Check, check
from ._counterexample_2d_runs import BasinRun, JointRun, NoLNRun, basin_run, fig1_runs, joint_run

NAME = "counterexample-2d"
CLAIM = (
    "Theorem 3 / Fig. 1 and Fig. 5 (App. E): with N = d = 2, the causal mask, uniform attention and "
    "W_V = [[1, w], [0, 1]], LayerNorm prevents rank collapse: token 1 tends to (0, 1) with its "
    "coordinate ratio growing by w per step, and with token 1 at (0, 1) token 2 converges to "
    "B = (-1/w, -sqrt(1 - 1/w^2)) from a set of positive measure (rank-2 limit), whereas without LN "
    "both tokens collapse to the same point."
)

#: Our earlier measurement (docs/theory.md#ambiguities-and-choices): joint-dynamics fraction of
#: starts ending at B (5 degree grid, 20 000 steps).
REFERENCE_JOINT_FRACTION = {1.5: 0.055, 2.0: 0.071, 5.0: 0.098}


def sizes(quick: bool, tiny: bool = False) -> dict:
    """Every size of the run; ``tiny`` is for the unit tests."""
    if tiny:
        return dict(
            basin_ws=(2.0,),
            basin_step=1.0,
            basin_steps=300,
            joint_ws=(2.0,),
            joint_step=15.0,
            horizons=(100, 400),
            save_every=100,
            noln_steps=60,
            traj_steps=60,
        )
    if quick:
        return dict(
            basin_ws=(1.5, 2.0, 3.0),
            basin_step=0.1,
            basin_steps=400,
            joint_ws=(2.0,),
            joint_step=5.0,
            horizons=(100, 1000, 5000),
            save_every=100,
            noln_steps=60,
            traj_steps=200,
        )
    return dict(
        basin_ws=(1.5, 2.0, 3.0),
        basin_step=0.02,
        basin_steps=1000,
        joint_ws=(1.5, 2.0, 5.0),
        joint_step=5.0,
        horizons=(100, 1000, 10000, 20000),
        save_every=100,
        noln_steps=60,
        traj_steps=400,
    )


#: The verdict's rule in words (the target's ``criterion``).
CRITERION = (
    "reproduced iff (a) the first-token ratio grows by w per step (relative error < 1e-9) with the sign "
    "of x11 preserved; (b) for every w the measured basin of B (token 1 at (0,1)) is one arc whose two "
    "boundaries are within half a grid step of the predicted (theta_A, 270 deg), with every other start "
    "converging to (0,1); (c) without LN mu(T) < 1e-8 mu(0); and (d) in the joint dynamics the 95% "
    "Wilson lower bound of the non-collapse fraction at the largest T is > 0 (positive measure). "
    + VERDICT_RULE
)


@dataclasses.dataclass(frozen=True)
class Counterexample2DMeasured(Measured):
    """Every run of the target; ``to_dict`` gives the JSON's keys (``"w=2"``, ``"joint w=2"``,
    ``"no-LN W_V"``, the Fig. 1 starts); the `off_json` fields stay out of it.

    Attributes:
        basins: w -> `BasinRun`; joints: w -> `JointRun`; noln: W_V label -> `NoLNRun`.
        fig1_starts: ``{"non-collapsing", "collapsing"}`` -> ``(theta1, theta2)`` (deg).
        fig1_sigma_ratio: the same keys -> $\\sigma_2/\\sigma_1$ at the end of the LN run.
        basin_step_deg: the basin grid's step (the boundary tolerance is half of it).
        fig1_w, fig1_example, fig1_states_ln: the Fig. 1 run's w, `example_2d` and LN states.
    """

    basins: dict[float, BasinRun]
    joints: dict[float, JointRun]
    noln: dict[str, NoLNRun]
    fig1_starts: dict[str, tuple[float, float]]
    fig1_sigma_ratio: dict[str, float]
    basin_step_deg: float = off_json()
    fig1_w: float | None = off_json(default=None)
    fig1_example: dict | None = off_json(default=None, repr=False, compare=False)
    fig1_states_ln: np.ndarray | None = off_json(default=None, repr=False, compare=False)

    def to_dict(self) -> dict:
        out = {f"w={w:g}": b.to_dict() for w, b in self.basins.items()}
        out.update({f"joint w={w:g}": j.to_dict() for w, j in self.joints.items()})
        out.update({f"no-LN {k}": r.to_dict() for k, r in self.noln.items()})
        out["fig1 starts (theta1, theta2) deg"] = to_jsonable(self.fig1_starts)
        out["fig1 sigma2/sigma1 at end"] = to_jsonable(self.fig1_sigma_ratio)
        return out


def compute(sz: dict, seed: int) -> Counterexample2DMeasured:
    """Every run, in float64 (call inside ``jax.enable_x64``); ``seed`` is unused (angle grids)."""
    from ..._run._progress import plan_steps, step_done
    from ..._theory._constructions import example_2d, uniform_causal_layer

    plan_steps(len(sz["basin_ws"]) + len(sz["joint_ws"]))  # progress: one step per w and part
    basins, joints = {}, {}
    # 1-2. first-token ratio and basin of B, per w
    for w in sz["basin_ws"]:
        ex = example_2d(w)
        basins[w] = basin_run(uniform_causal_layer(2, 2, ex["W_V"]), ex, sz)
        step_done(f"basin w={w:g}")
    # 3. joint dynamics against the horizon
    for w in sz["joint_ws"]:
        ex = example_2d(w)
        ref = REFERENCE_JOINT_FRACTION.get(float(w))
        joints[w] = joint_run(uniform_causal_layer(2, 2, ex["W_V"]), ex, sz, ref)
        step_done(f"joint w={w:g}")
    # 4. Fig. 1 trajectories: with LN (joint dynamics) and without LN
    w0 = 2.0 if 2.0 in joints else sz["joint_ws"][0]
    ex = example_2d(w0)
    starts, ratio_ln, states_ln, noln = fig1_runs(ex, joints[w0], sz)
    return Counterexample2DMeasured(
        basins=basins,
        joints=joints,
        noln=noln,
        fig1_starts=starts,
        fig1_sigma_ratio=ratio_ln,
        basin_step_deg=float(sz["basin_step"]),
        fig1_w=float(w0),
        fig1_example=ex,
        fig1_states_ln=states_ln,
    )


def checks(m: Counterexample2DMeasured) -> list[Check]:
    """The paper's claims and the joint-dynamics positive-measure check (pure: tested on
    synthetic results). Every check counts."""
    out = []
    for w, b in m.basins.items():
        out.append(
            check(
                f"ratio w={w:g}",
                b.first_token_max_rel_increment_error < 1e-9 and b.first_token_sign_preserved,
            )
        )
        within = all(abs(e) <= m.basin_step_deg / 2 + 1e-9 for e in b.basin_boundary_error_deg)
        out.append(check(f"basin w={w:g}", b.basin_num_arcs == 1 and b.basin_undecided == 0 and within))
    for w, j in m.joints.items():
        out.append(check(f"joint w={w:g} positive", j.wilson95[-1][0] > 0))
    for label, r in m.noln.items():
        out.append(check(f"no-LN collapse {label}", r.mu_T < 1e-8 * r.mu_0))
    return out


def _joint_notes(m: Counterexample2DMeasured, horizons) -> list[str]:
    """Per w the joint non-collapse fraction against the reference, and whether it moved with T."""
    notes = []
    for w, j in m.joints.items():
        ref, f, t_end = j.spec_fraction_at_20000, float(j.noncollapse_fraction[-1]), j.horizons[-1]
        if ref is not None and t_end == 20000:
            lo, hi = j.wilson95[-1]
            notes.append(
                f"joint dynamics, w={w:g}: {100 * f:.2f}% of {j.num_starts_valid} grid starts keep rank 2 "
                f"after 20000 steps (our earlier measurement: {100 * ref:.1f}%, difference "
                f"{100 * (f - ref):+.2f} points, {'inside' if lo <= ref <= hi else 'outside'} the Wilson 95% "
                f"interval; our denominator excludes the {j.num_starts_degenerate} singular starts "
                "theta2 = theta1 + 180)."
            )
        else:
            notes.append(
                f"joint dynamics, w={w:g}: {100 * f:.2f}% keep rank 2 at T={t_end} (the reference numbers "
                "are at T = 20000; convergence is algebraic, so the fraction may depend on T)."
            )
    flat = [w for w, j in m.joints.items() if np.all(j.noncollapse_fraction == j.noncollapse_fraction[0])]
    if len(horizons) > 1 and m.joints:
        notes.append(
            f"For {len(flat)} of {len(m.joints)} values of w the non-collapse count is the same at every "
            f"horizon T in {list(horizons)}"
            + (
                f": the outcome is decided within the first {horizons[0]} steps."
                if len(flat) == len(m.joints)
                else f"; for the others it still changes after T = {horizons[0]}."
            )
        )
    return notes


def _basin_notes(m: Counterexample2DMeasured) -> list[str]:
    """The conditional basin against the joint dynamics, and token 1's algebraic convergence."""
    arcs = ", ".join(
        f"w={w:g}: ({b.basin_measured_arc_deg[0]:.1f}, {b.basin_measured_arc_deg[1]:.1f}) deg, "
        f"{100 * b.basin_fraction_of_circle:.1f}% of the circle"
        for w, b in m.basins.items()
    )
    notes = [f"The conditional basin of B (token 1 frozen at (0, 1)) measures {arcs}."]
    both = [w for w in m.joints if w in m.basins]
    if both:
        pairs = [
            (float(m.joints[w].noncollapse_fraction[-1]), m.basins[w].basin_fraction_of_circle) for w in both
        ]
        far = all(jf < bf / 2 for jf, bf in pairs)
        notes.append(
            "In the joint dynamics token 1 moves as well: "
            + ", ".join(
                f"w={w:g}: {100 * jf:.2f}% keep rank 2 (conditional basin {100 * bf:.1f}%)"
                for w, (jf, bf) in zip(both, pairs)
            )
            + (
                ", far fewer than the conditional basin (the paper's analysis assumes token 1 has already "
                "converged, docs/theory.md#ambiguities-and-choices)."
                if far
                else "."
            )
        )
    min_th = ", ".join(f"w={w:g}: {j.min_theta1_deg_noncollapse:g} deg" for w, j in m.joints.items())
    if min_th:
        notes.append(
            f"Smallest non-collapsing theta1 on the grid: {min_th} (docs/theory.md#constructions: about "
            "25 deg for w=2, 15 deg for w=5)."
        )
    c = [v for b in m.basins.values() for v in b.first_token_t_w_x11_at_end]
    if c:
        near = all(abs(v - 1) < 0.05 for v in c)
        notes.append(
            f"At the end of the trajectory runs t w |x11| of token 1 is {min(c):.3f}-{max(c):.3f}"
            + (
                ", close to 1: token 1 converges algebraically (like 1/(w t)), not exponentially."
                if near
                else ", not within 0.05 of the 1 of an algebraic 1/(w t) law."
            )
        )
    return notes


def _noln_notes(m: Counterexample2DMeasured) -> list[str]:
    """The no-LN runs: alignment (mu) and the token norms, from the numbers."""
    notes = ["The no-LN panel is drawn with W_V rescaled to spectral norm 1 (A3)."]
    p = m.noln.get("W_V")
    if p is not None:
        norms = ", ".join(f"{v:.3g}" for v in np.asarray(p.row_norm_T))
        aligned = p.mu_T < 1e-8 * p.mu_0
        notes.append(
            f"With the printed W_V, mu goes from {p.mu_0:.3g} to {p.mu_T:.3g} in {p.steps} steps "
            + ("(the tokens align) " if aligned else "(not below 1e-8 mu(0): no alignment by this rule) ")
            + f"while the token norms reach {norms} from 1"
            + (" (they grow, docs/theory.md#ambiguities-and-choices)." if np.min(p.row_norm_T) > 1 else ".")
        )
    return notes


def _tables(m: Counterexample2DMeasured, horizons) -> str:
    rows = [
        "| w | theta_A (deg) | measured arc (deg) | predicted arc (deg) | max boundary error (deg) |",
        "|---|---|---|---|---|",
    ]
    for w, b in m.basins.items():
        (lo, hi), pa = b.basin_measured_arc_deg, b.basin_predicted_arc_deg[0]
        err = max(abs(x) for x in b.basin_boundary_error_deg)
        rows.append(f"| {w:g} | {pa:.3f} | ({lo:.3f}, {hi:.3f}) | ({pa:.3f}, 270) | {err:.3f} |")
    rows += [
        "",
        "| w | " + " | ".join(f"T={h}" for h in horizons) + " | reference (T=20000) |",
        "|---|" + "---|" * (len(horizons) + 1),
    ]
    for w, j in m.joints.items():
        cells = [
            f"{100 * f:.2f}% [{100 * lo:.2f}, {100 * hi:.2f}]"
            for f, (lo, hi) in zip(j.noncollapse_fraction, j.wilson95)
        ]
        ref = j.spec_fraction_at_20000
        rows.append(f"| {w:g} | " + " | ".join(cells) + f" | {'' if ref is None else f'{100 * ref:.1f}%'} |")
    return "\n".join(rows)


def render(out: Path, m: Counterexample2DMeasured, cs: list[Check], *, quick: bool = False) -> Rendered:
    """The Fig. 1 and basin figures, the notes and the tables, from the numbers."""
    from ... import plotting

    plotting.plot_counterexample_2d(
        m.noln["W_V/||W_V||_2"].states,
        m.fig1_states_ln,
        m.fig1_example,
        title_w=m.fig1_w,
        path=out / "counterexample_2d_trajectories.png",
    )
    basins = {
        w: {"angles": b.angles, "outcome": b.outcome, "predicted_arc": b.basin_predicted_arc_deg}
        for w, b in m.basins.items()
    }
    joints = {
        w: {
            "theta1": j.theta1,
            "theta2": j.theta2,
            "horizons": list(j.horizons),
            "noncollapse": j.noncollapse,
            "fraction": j.noncollapse_fraction,
            "ci": list(j.wilson95),
        }
        for w, j in m.joints.items()
    }
    plotting.plot_counterexample_2d_basins(
        basins, joints, REFERENCE_JOINT_FRACTION, path=out / "counterexample_2d_basin.png"
    )
    horizons = next(iter(m.joints.values())).horizons if m.joints else ()
    notes = _joint_notes(m, horizons) + _basin_notes(m) + _noln_notes(m)
    figures = ["counterexample_2d_trajectories.png", "counterexample_2d_basin.png"]
    return Rendered(figures, " ".join(notes), _tables(m, horizons))


def describe(
    m: Counterexample2DMeasured, cs: list[Check], sz: dict, *, seed: int, quick: bool
) -> Description:
    """The setting (``seed`` is recorded but unused: every input here is a deterministic angle grid)."""
    setting = {
        "n": 2,
        "d": 2,
        "mask": "causal",
        "attention": "uniform (W_Q = W_K = 0)",
        "norm": "sphere, post-LN",
        "dtype": "float64",
        "seed": seed,
        "seed_used": False,
        "quick": quick,
        **sz,
        "basin_start_token1": [0.0, 1.0],
        "noncollapse_rule": "sigma2/sigma1 > 1e-2",
        "basin_rule": "token 2 within 1e-8 of B after basin_steps steps",
    }
    key = {
        f"non-collapse fraction w={w:g}, T={j.horizons[-1]}": j.noncollapse_fraction[-1]
        for w, j in m.joints.items()
    }
    key["max basin boundary error (deg)"] = max(
        (abs(e) for b in m.basins.values() for e in b.basin_boundary_error_deg), default=float("nan")
    )
    return Description(setting, key_numbers=key, criterion=CRITERION)
