r"""Target ``bifurcation``: folds of the rank-2 equilibria of a causal family, located by continuation.

For $n = d = 2$, the causal mask, uniform attention ($W_Q = W_K = 0$), post-LN on the circle and
$W_V = \begin{pmatrix} p & w \\ 0 & 1\end{pmatrix}$ with $p = 3/4$, `docs/theory.md`
("Continuation and bifurcations") derives two families of rank-2 equilibria:

- family A, token 1 at $(0, \pm 1)$ (the left eigenvector of eigenvalue 1): exists iff
  $|w| \ge w_A = \sqrt{2p - p^2}$, born in a fold at $w_A$;
- family B, token 1 on the left eigenvector $(p - 1, w)$ of eigenvalue $p$: exists for every
  $w$ when $p \le 1/2$, else iff $|w| \ge w_B = \sqrt{2p - 1}$, born in a fold at $w_B$.

The target runs the census at $w = $ ``W_START`` (where all of them exist), continues every
rank-2 class down in $w$ with `continue_branch`, and checks that each branch turns at one fold,
located within ``FOLD_TOL`` of its closed form, and comes back to ``W_START`` on the other
class of its family. A second check continues the rank-1 equilibrium $x_1 = x_2 = (0, 1)$ in
$p$ at fixed $w$: its multipliers are $p$ (token 1) and $p/2$ (token 2), so two branch points
(transcritical: family B and family A cross it) sit at $p = 1$ and $p = 2$, with no fold.
A phase diagram in $(w, s)$, with $W_Q = s G_Q$ and $W_K = s G_K$ for fixed standard gaussian
$G_Q, G_K$ (at $s = 0$ the family above; there the temperature is not read), says which
equilibrium classes exist and which are stable at every grid point
(`rankdyn.theory.causal_pair_phases`: token 1 on an eigenvector of $W_V$, token 2 on the circle).
It is checked against the continuation: on the row $s = 0$ each family's rank-2 region has one
boundary, and the fold located by continuation lies in that boundary's grid cell; at
$(w_{start}, 0)$ it counts as many rank-2 classes per family, and as many stable ones, as the
census and the continued branches.
The full run adds the temperature family of a BERT-like layer (complete mask, BERT-uniform
$W_Q, W_K, W_V$), whose bifurcations have no closed form: it is reported, not checked.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np

from .._target import Description, Measured, Rendered, off_json
from .._verdict import Check, check

NAME = "bifurcation"
CLAIM = (
    "Pseudo-arclength continuation passes the folds where the rank-2 equilibria of the causal n = d = 2 "
    "family with W_V = [[p, w], [0, 1]] are born, and locates them at the closed forms w = sqrt(2p - p^2) "
    "(token 1 at (0, +-1)) and w = sqrt(2p - 1) (token 1 on the other eigenvector); the rank-1 branch in p "
    "has branch points at p = 1 and p = 2."
)
P, W_START, W_END, W_FIXED = 0.75, 1.3, 0.4, 0.8
P_RANGE = (0.5, 2.5)
#: Largest accepted distance of a located bifurcation from its closed form.
FOLD_TOL = 1e-6


def closed_form_folds(p: float = P) -> dict[str, float]:
    """$w_A = \\sqrt{2p - p^2}$ and $w_B = \\sqrt{2p - 1}$ (``nan`` for $p \\le 1/2$: no fold)."""
    return {"A": float(np.sqrt(2 * p - p * p)), "B": float(np.sqrt(2 * p - 1)) if p > 0.5 else float("nan")}


def family_layer(p: float, w: float):
    """The causal, uniform-attention, post-LN layer with $W_V = [[p, w], [0, 1]]$ (n = d = 2)."""
    import jax.numpy as jnp

    from ..._theory._constructions import uniform_causal_layer

    return uniform_causal_layer(2, 2, jnp.array([[p, w], [0.0, 1.0]]))


#: The phase diagram's range of s (qk_std); w runs from W_END to W_START.
S_RANGE = (0.0, 2.0)


def sizes(quick: bool) -> dict:
    """Quick: 12 steps across each interval, a 46 x 21 phase grid; full: 40, a 181 x 81 grid, and the
    BERT-like temperature family."""
    if quick:
        return dict(divisions=12, bert=False, phase_w=46, phase_s=21)
    return dict(divisions=40, bert=True, phase_w=181, phase_s=81)


@dataclasses.dataclass(frozen=True)
class BranchSummary(Measured):
    """One continued branch: its family, end status, parameter range, folds and stability."""

    family: str
    status: str
    param_min: float
    param_end: float
    points: int
    folds: tuple[float, ...]
    branch_points: tuple[float, ...]
    other: tuple[str, ...]
    stable_before: bool
    stable_after: bool
    end_distance: float
    #: Every located point as ``(kind, parameter, normal-form coefficient, criticality)``
    #: (`Bifurcation.coefficient`, `Bifurcation.criticality`; criticality "" for a fold and a
    #: branch point without symmetry). Reported, not checked.
    normal_forms: tuple = ()


@dataclasses.dataclass(frozen=True)
class BifurcationMeasured(Measured):
    """The w-branches (from the census), the p-branch and, in the full run, the BERT-like d_QK branches."""

    p: float
    closed_form: dict
    census_classes: int
    w_branches: tuple[BranchSummary, ...]
    p_branch: BranchSummary
    bert_branches: tuple[BranchSummary, ...] = ()
    #: The phase grid's w and s values, the rank-2 counts per family on the row s = 0, and the
    #: rank-2 counts and stable counts per family at (W_START, 0).
    phase_w: tuple[float, ...] = ()
    phase_s: tuple[float, ...] = ()
    phase_row0: dict = dataclasses.field(default_factory=dict)
    phase_start: dict = dataclasses.field(default_factory=dict)
    branches: tuple = off_json(default=())
    phases: dict = off_json(default_factory=dict)


def _family_of(x: np.ndarray) -> str:
    """A if token 1 is at (0, +-1), else B."""
    return "A" if abs(x[0, 0]) < 1e-6 else "B"


def _summary(br, family: str) -> BranchSummary:
    folds = tuple(b.param for b in br.bifurcations if b.kind == "fold")
    bps = tuple(b.param for b in br.bifurcations if b.kind == "branch-point")
    other = tuple(b.kind for b in br.bifurcations if b.kind not in ("fold", "branch-point"))
    fold_step = next((b.step for b in br.bifurcations if b.kind == "fold"), None)
    before = bool(br.stable[0])
    after = bool(br.stable[fold_step + 1]) if fold_step is not None else before
    dist = float(np.max(np.abs(br.points[-1] - br.points[0])))
    ends = (float(br.params.min()), float(br.params[-1]))
    coef = [None if not np.isfinite(b.coefficient) else float(b.coefficient) for b in br.bifurcations]
    forms = tuple(
        (b.kind, float(b.param), c, b.criticality) for b, c in zip(br.bifurcations, coef) if b.located
    )
    return BranchSummary(family, br.status, *ends, len(br), folds, bps, other, before, after, dist, forms)


def _bert_branches(seed: int, divisions: int):
    """The temperature family of a BERT-like layer, as ``rankdyn continue --n 3 --d 4 --mask complete
    --qk bert --value bert --param dqk --from 4 --to 0.25 --seed SEED`` builds it: census at
    d_QK = 4, every class continued down to 0.25."""
    import jax.random as jr

    from ..._model._build import make_layer
    from ...equilibria import continue_branch, equilibrium_census

    k_layer, k_x0 = jr.split(jr.key(seed))
    spec = dict(n=3, d=4, mask="complete", qk="bert", value="bert")
    fam = lambda t: make_layer(k_layer, **spec, dqk=t)  # noqa: E731
    census = equilibrium_census(fam(4.0), k_x0, progress=False)
    return [
        continue_branch(
            fam,
            e.tokens,
            4.0,
            0.25,
            ds=3.75 / divisions,
            max_steps=4 * divisions,
            param_name="dqk",
            throw=False,
        )
        for e in census.equilibria
    ]


def compute(sz: dict, seed: int) -> BifurcationMeasured:
    import jax.random as jr

    from ...equilibria import continue_branch, equilibrium_census

    census = equilibrium_census(family_layer(P, W_START), jr.key(seed), progress=False)
    starts = [np.asarray(e.tokens) for e in census.equilibria if e.rank == 2]
    ds = (W_START - W_END) / sz["divisions"]
    w_fam = lambda w: family_layer(P, w)  # noqa: E731
    branches, summaries = [], []
    for x in starts:
        br = continue_branch(
            w_fam, x, W_START, W_END, ds=ds, max_steps=8 * sz["divisions"], param_name="w", throw=False
        )
        branches.append(br)
        summaries.append(_summary(br, _family_of(x)))
    p_fam = lambda p: family_layer(p, W_FIXED)  # noqa: E731
    x1 = np.array([[0.0, 1.0], [0.0, 1.0]])
    ds_p = (P_RANGE[1] - P_RANGE[0]) / sz["divisions"]
    pbr = continue_branch(p_fam, x1, *P_RANGE, ds=ds_p, param_name="p", throw=False)
    branches.append(pbr)
    bert = _bert_branches(seed, sz["divisions"]) if sz["bert"] else []
    ws, ss, phases = phase_grid(sz["phase_w"], sz["phase_s"], seed)
    row0 = {f: tuple(int(c) for c in phases["count"][0, :, i, 2]) for i, f in enumerate("AB")}
    j = int(np.argmin(np.abs(ws - W_START)))
    start = {
        f: {"rank2": int(phases["count"][0, j, i, 2]), "stable_rank2": int(phases["stable"][0, j, i, 2])}
        for i, f in enumerate("AB")
    }
    return BifurcationMeasured(
        P,
        closed_form_folds(P),
        len(census.equilibria),
        tuple(summaries),
        _summary(pbr, "rank-1"),
        tuple(_summary(b, "bert") for b in bert),
        tuple(float(w) for w in ws),
        tuple(float(v) for v in ss),
        row0,
        start,
        tuple(branches + bert),
        phases,
    )


def phase_grid(num_w: int, num_s: int, seed: int):
    """``(ws, ss, phases)``: `causal_pair_phases` of $W_V = [[p, w], [0, 1]]$, $W_Q = s G_Q$,
    $W_K = s G_K$ ($G$ standard gaussian from ``seed``) on ``num_s`` x ``num_w`` points."""
    from ..._theory._pair_phases import causal_pair_phases

    ws, ss = np.linspace(W_END, W_START, num_w), np.linspace(*S_RANGE, num_s)
    g = np.random.default_rng(seed).standard_normal((2, 2, 2))
    w_v = np.zeros((num_s, num_w, 2, 2))
    w_v[..., 0, 0], w_v[..., 0, 1], w_v[..., 1, 1] = P, ws, 1.0
    s = ss[:, None, None, None]
    return ws, ss, causal_pair_phases(w_v, s * g[0], s * g[1])


def checks(m: BifurcationMeasured) -> list[Check]:
    """Strict checks of the measured numbers (pure: tested on synthetic results)."""
    out = []
    fams = sorted({b.family for b in m.w_branches})
    out.append(check("census at w_start: both rank-2 families found", fams == ["A", "B"], f"families {fams}"))
    for i, b in enumerate(m.w_branches):
        ref = m.closed_form[b.family]
        err = abs(b.folds[0] - ref) if len(b.folds) == 1 else float("inf")
        out.append(
            check(
                f"branch {i} (family {b.family}): one fold, within {FOLD_TOL:g} of {ref:.10f}",
                err <= FOLD_TOL,
                f"folds {[f'{f:.12f}' for f in b.folds]}, error {err:.2e}",
            )
        )
        # Past the fold the branch comes back to w_start on the other class of its family.
        back = b.status == "parameter_end" and abs(b.param_end - W_START) <= 1e-12 and b.end_distance > 1e-3
        out.append(
            check(
                f"branch {i}: passes the fold and returns to w = {W_START} at another equilibrium",
                back,
                f"{b.status}, min w {b.param_min:.6f}, last w {b.param_end:.6f}, {b.points} points, "
                f"end-to-start distance {b.end_distance:.3g}",
            )
        )
    a = [b for b in m.w_branches if b.family == "A"]
    out.append(
        check(
            "family A: stability changes at the fold",
            bool(a) and all(b.stable_before != b.stable_after for b in a),
            "; ".join(f"stable before {b.stable_before}, after {b.stable_after}" for b in a),
        )
    )
    pb = m.p_branch
    bp = sorted(pb.branch_points)
    err = max(abs(bp[0] - 1.0), abs(bp[1] - 2.0)) if len(bp) == 2 else float("inf")
    out.append(
        check(
            f"rank-1 branch in p: branch points at p = 1 and 2 (within {FOLD_TOL:g}), no fold",
            err <= FOLD_TOL and not pb.folds and not pb.other,
            f"branch points {[f'{v:.12f}' for v in bp]}, folds {list(pb.folds)}, other {list(pb.other)}",
        )
    )
    return out + _phase_checks(m)


def _phase_checks(m: BifurcationMeasured) -> list[Check]:
    """The phase diagram against the continuation and the census (fixed before any run)."""
    out = []
    ws = np.asarray(m.phase_w)
    step = float(ws[1] - ws[0]) if ws.size > 1 else float("nan")
    for fam in ("A", "B"):
        exists = np.asarray(m.phase_row0.get(fam, ()), dtype=int) > 0
        flips = np.flatnonzero(exists[1:] != exists[:-1]) if exists.size == ws.size else np.array([])
        folds = sorted({round(f, 9) for b in m.w_branches if b.family == fam for f in b.folds})
        ok, detail = False, f"{int(exists.sum())} of {ws.size} grid points with rank-2 {fam}, folds {folds}"
        if flips.size == 1 and len(folds) == 1 and not exists[0] and exists[-1]:
            lo, hi = ws[flips[0]], ws[flips[0] + 1]
            ok = lo - 1e-12 <= folds[0] <= hi + 1e-12
            detail = f"boundary cell [{lo:.4f}, {hi:.4f}] (grid step {step:.4f}), fold {folds[0]:.10f}"
        out.append(
            check(
                f"phase diagram at qk_std = 0: the family-{fam} fold lies on its region's boundary",
                ok,
                detail,
            )
        )
    for fam in ("A", "B"):
        here = [b for b in m.w_branches if b.family == fam]
        got = m.phase_start.get(fam, {})
        want = {"rank2": len(here), "stable_rank2": sum(b.stable_before for b in here)}
        out.append(
            check(
                f"phase diagram at (w = {W_START}, 0): family-{fam} rank-2 classes and stable ones as "
                "continued",
                got == want,
                f"diagram {got}, census and branches {want}",
            )
        )
    return out


def render(out: Path, m: BifurcationMeasured, cs: list[Check], *, quick: bool = False) -> Rendered:
    """The bifurcation diagram of the w-branches and the notes."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from ..._run._io import savefig
    from ...plotting import plot_bifurcation

    wb = [b for b in m.branches if b.param_name == "w"]
    fig, ax = plt.subplots(figsize=(8, 4.8))
    labels = [f"family {s.family}" for s in m.w_branches]
    plot_bifurcation(wb, ax=ax, labels=labels, title=f"n = d = 2, causal, uniform attention, p = {m.p}")
    for fam, w in m.closed_form.items():
        ax.axvline(w, color="0.6", lw=0.8, ls=":")
        ax.annotate(f"w_{fam} closed form", (w, ax.get_ylim()[1]), fontsize=7, rotation=90, va="top")
    fig.tight_layout()
    savefig(fig, out / "bifurcation.png", dpi=120)
    plt.close(fig)
    figures = ["bifurcation.png"]
    if m.phases:
        from ...plotting import plot_pair_phases

        fig, axes = plt.subplots(1, 2, figsize=(11, 5.4))
        folds = sorted({(round(f, 6), b.family) for b in m.w_branches for f in b.folds})
        plot_pair_phases(
            m.phases, m.phase_w, m.phase_s, folds=[(f, 0.0, f"fold {fam}") for f, fam in folds], axes=axes
        )
        fig.suptitle(
            f"n = d = 2, causal, post-LN, W_V = [[{m.p}, w], [0, 1]], W_Q = s G_Q, W_K = s G_K", fontsize=9
        )
        fig.tight_layout()
        savefig(fig, out / "phase_diagram.png", dpi=120)
        plt.close(fig)
        figures.append("phase_diagram.png")
    errs = [abs(b.folds[0] - m.closed_form[b.family]) for b in m.w_branches if len(b.folds) == 1]
    notes = (
        f"{len(m.w_branches)} rank-2 classes of the census at w = {W_START} were continued; "
        f"{len(errs)} turned at exactly one fold, the largest distance to the closed form being "
        f"{max(errs) if errs else float('nan'):.2e}."
    )
    notes += " The rank-1 branch in p has branch points at " + ", ".join(
        f"{v:.10f}" for v in m.p_branch.branch_points
    )
    notes += "."
    notes += (
        " Normal forms (reported, not checked): "
        + "; ".join(_normal_form_words(b) for b in (*m.w_branches, m.p_branch) if b.normal_forms)
        + "."
    )
    if quick:
        notes += " The BERT-like d_QK family runs in the full mode only."
    elif not m.bert_branches:
        notes += " BERT-like layer: the census at d_QK = 4 found no equilibrium to continue."
    if m.bert_branches:
        found = [
            f"branch {i}: {b.status}, folds {list(b.folds)}, branch points {list(b.branch_points)}, "
            f"other {list(b.other)}, stable at d_QK = 4: {b.stable_before}"
            for i, b in enumerate(m.bert_branches)
        ]
        notes += (
            " BERT-like layer in d_QK from 4 to 0.25 (no closed form, not checked): " + "; ".join(found) + "."
        )
    if m.phases:
        stable_a = np.asarray(m.phases["stable"])[..., 0, 2] > 0
        notes += (
            f" Phase diagram on {len(m.phase_s)} x {len(m.phase_w)} points of (qk_std, w): a stable rank-2 "
            f"equilibrium (token 1 in family A) at {stable_a.mean():.0%} of them."
        )
    return Rendered(figures, notes)


def _normal_form_words(b: BranchSummary) -> str:
    """``A: fold at 0.9682458366 (coefficient -0.6455, no criticality)``: each located point's
    coefficient and criticality."""

    def one(kind, param, coef, crit):
        value = "no coefficient" if coef is None else f"coefficient {coef:.4g}"
        # A fold and a branch point without symmetry have no criticality: said, not left out.
        return f"{kind} at {param:.10g} ({value}, " + (f"{crit})" if crit else "no criticality)")

    return f"{b.family}: " + ", ".join(one(*f) for f in b.normal_forms)


def describe(m: BifurcationMeasured, cs: list[Check], sz: dict, *, seed: int, quick: bool) -> Description:
    setting = dict(
        sz, n=2, d=2, p=P, w_start=W_START, w_end=W_END, w_fixed=W_FIXED, p_range=P_RANGE, s_range=S_RANGE
    )
    errs = [abs(b.folds[0] - m.closed_form[b.family]) for b in m.w_branches if len(b.folds) == 1]
    return Description(
        dict(setting, seed=seed, quick=quick, dtype="float64"),
        key_numbers={"max fold error": max(errs) if errs else float("nan"), "w_A": m.closed_form["A"]},
    )
