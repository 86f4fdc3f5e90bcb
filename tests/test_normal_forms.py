"""Normal-form coefficients, criticality, branch switching at branch points and codimension-2 points
on curves, against closed forms.

Oracles (Kuznetsov, Elements of Applied Bifurcation Theory, ch. 8, with <p, q> = 1, |q| = 1):
- x' = -(1 + p) x + b x^3 doubles its period at p = 0 with coefficient b (supercritical iff b > 0);
  with a coupled slave y' = y / 2 + x^2 and a term x y / 2 the centre-manifold term adds
  3 <p, B(q, (I - A)^-1 B(q, q))> / 6 = 1, so x' = -(1 + p) x + x y / 2 + 0.3 x^3 has b = 0.3 + 1.
- z' = (1 + p + a |z|^2) R(theta) z on R^2: Neimark-Sacker at p = 0 with d = 2 a (|q| = 1 puts
  |z|^2 = 2 |w|^2 for the complex coordinate w).
- x' = x + p - s x^2: a fold with a = -s.
- x' = (1 + p) x - s x^3: a pitchfork at p = 0, cubic coefficient e = -s, branches x = +-sqrt(p / s);
  x' = (1 + p) x - x y - x^3 / 2, y' = y / 2 + x^2: y = 2 x^2 on the centre manifold, e = -5 / 2.
- x' = x + p x - x^2: a transcritical point (no symmetry), the other branch x = p, coefficient -1.
- The causal n = d = 2 layer with uniform attention and W_V = diag(a, 1) at x_1 = x_2 = (0, 1):
  token 2's angle maps as tan(phi') = a tan(phi / 2), a pitchfork at a = 2 with e = -1/4 and
  branches tan^2(phi / 2) = 1 - 2 / a.
"""

import dataclasses
import json

import jax.numpy as jnp
import numpy as np
import pytest

from rankdyn import RESULTS, SolveError
from rankdyn._errors import UsageError
from rankdyn._theory._constructions import uniform_causal_layer
from rankdyn.equilibria import (
    SpecialPoint,
    branch_point_starts,
    continue_branch,
    continue_curve,
    switch_branch,
)


def _only(branch):
    (bif,) = branch.bifurcations
    assert bif.located
    return bif


def test_period_doubling_coefficient_both_signs_and_the_centre_manifold_term():
    branches = []
    for b in (0.7, -0.4):
        f = lambda x, p, b=b: -(1 + p) * x + b * x**3  # noqa: E731
        branches.append(continue_branch(f, np.zeros(1), -0.3, 0.3, ds=0.05))
        bif = _only(branches[-1])
        assert bif.kind == "period-doubling" and abs(bif.coefficient - b) <= 1e-12
        assert bif.criticality == ("supercritical" if b > 0 else "subcritical")
        assert bif.describe().endswith(f"({bif.criticality})")
    # The diagram draws the supercritical point filled, the subcritical one open, and says which.
    import matplotlib

    matplotlib.use("Agg")
    from rankdyn.plotting import plot_bifurcation

    ax = plot_bifurcation(branches)
    faces = [tuple(c.get_facecolors()[0]) for c in ax.collections if len(c.get_offsets())]
    assert faces == [(0.0, 0.0, 0.0, 1.0), (1.0, 1.0, 1.0, 1.0)]
    texts = [t.get_text() for t in ax.texts]
    assert texts[0].endswith("(supercritical)") and texts[1].endswith("(subcritical)")
    assert {"supercritical", "subcritical"} <= {t.get_text() for t in ax.get_legend().get_texts()}

    def coupled(z, p):
        return jnp.stack([-(1 + p) * z[0] + 0.5 * z[0] * z[1] + 0.3 * z[0] ** 3, 0.5 * z[1] + z[0] ** 2])

    bif = _only(continue_branch(coupled, np.zeros(2), -0.3, 0.3, ds=0.05))
    assert abs(bif.coefficient - 1.3) <= 1e-12 and bif.criticality == "supercritical"
    # A linear period doubling has b = 0 exactly: degenerate, not given a sign.
    bif = _only(continue_branch(lambda x, p: -(1 + p) * x, np.zeros(1), -0.3, 0.3, ds=0.05))
    assert bif.coefficient == 0.0 and bif.criticality == "degenerate"
    record = json.loads(json.dumps(bif.to_dict()))
    assert record["criticality"] == "degenerate" and record["coefficient"] == 0.0


def test_neimark_sacker_first_lyapunov_coefficient():
    th = 1.1
    rot = jnp.array([[np.cos(th), -np.sin(th)], [np.sin(th), np.cos(th)]])
    for a in (0.8, -0.5):
        f = lambda z, p, a=a: (1 + p + a * (z @ z)) * (rot @ z)  # noqa: E731
        bif = _only(continue_branch(f, np.zeros(2), -0.3, 0.3))
        assert bif.kind == "neimark-sacker" and abs(bif.theta - th) <= 1e-9
        assert abs(bif.coefficient - 2 * a) <= 1e-12
        assert bif.criticality == ("supercritical" if a < 0 else "subcritical")
        assert f"theta = 1.1, {bif.criticality})" in bif.describe()


def test_fold_coefficient_has_no_criticality():
    br = continue_branch(lambda x, p: x + p - 0.7 * x**2, np.array([0.5]), 0.175, -0.3, ds=0.05, throw=False)
    fold = next(b for b in br.bifurcations if b.kind == "fold")
    assert abs(fold.coefficient + 0.7) <= 1e-9 and fold.criticality == ""
    assert "critical" not in fold.describe()


def test_pitchfork_both_branches_by_switching():
    for s in (1.0, -1.0):
        bp = _only(continue_branch(lambda x, p, s=s: (1 + p) * x - s * x**3, np.zeros(1), -0.3, 0.3, ds=0.05))
        assert bp.kind == "branch-point" and abs(bp.coefficient + s) <= 1e-12
        assert bp.criticality == ("supercritical" if s > 0 else "subcritical")

    def sym(z, p):
        return jnp.stack([(1 + p) * z[0] - z[0] * z[1] - 0.5 * z[0] ** 3, 0.5 * z[1] + z[0] ** 2])

    br = continue_branch(sym, np.zeros(2), -0.3, 0.3, ds=0.05)
    bp = _only(br)
    assert abs(bp.coefficient + 2.5) <= 1e-12 and bp.criticality == "supercritical"
    starts = branch_point_starts(br, bp)
    assert len(starts) == 2 and starts[0].x[0] * starts[1].x[0] < 0  # one on each half
    for st in starts:
        assert st.period == 1 and abs(st.x[0]) > 1e-4
        other = continue_branch(sym, st.x, st.p, 0.3)
        x, y = other.points[-1]
        assert abs(abs(x) - np.sqrt(0.3 / 2.5)) <= 1e-9 and abs(y - 2 * x**2) <= 1e-9


def test_transcritical_point_switches_onto_the_other_line():
    br = continue_branch(lambda x, p: x + p * x - x**2, np.zeros(1), -0.3, 0.3, ds=0.05)
    bp = _only(br)
    assert abs(bp.coefficient + 1) <= 1e-12 and bp.criticality == ""
    starts = branch_point_starts(br, bp)
    assert sorted(np.sign([s.p for s in starts])) == [-1, 1]
    for st in starts:  # on the branch x = p, not on x = 0
        assert abs(st.x[0] - st.p) <= 1e-12 and abs(st.x[0]) > 1e-4


def test_switching_refusals():
    br = continue_branch(lambda x, p: -(1 + p) * x + x**3, np.zeros(1), -0.3, 0.3, ds=0.05)
    pd = _only(br)
    with pytest.raises(UsageError, match="needs a branch point.*switch_branch"):
        branch_point_starts(br, pd)
    with pytest.raises(UsageError, match="not located"):
        branch_point_starts(br, dataclasses.replace(pd, kind="branch-point", located=False))
    bp = dataclasses.replace(pd, kind="branch-point")
    with pytest.raises(UsageError, match="branch_point_starts"):
        switch_branch(br, bp)
    with pytest.raises(UsageError, match="no family"):
        branch_point_starts(dataclasses.replace(br, family=None), bp)


@pytest.mark.slow
def test_layer_pitchfork_coefficient_and_branches():
    fam = lambda a: uniform_causal_layer(2, 2, jnp.array([[a, 0.0], [0.0, 1.0]]))  # noqa: E731
    br = continue_branch(fam, np.array([[0.0, 1.0], [0.0, 1.0]]), 1.5, 2.5, ds=0.1)
    bp = _only(br)
    assert abs(bp.param - 2) <= 1e-9 and abs(bp.coefficient + 0.25) <= 1e-9
    assert bp.criticality == "supercritical"
    for st in branch_point_starts(br, bp):
        other = continue_branch(fam, st.x, st.p, 2.5)
        x2 = other.points[-1][1]
        assert abs(np.tan(np.arctan2(x2[0], x2[1]) / 2) ** 2 - (1 - 2 / 2.5)) <= 1e-9
    # One token with W_V = diag(1, q): in the gnomonic chart u = x_2 / x_1 the map is u -> q u,
    # linear, so its period doubling at q = -1 has b = 0 to rounding: degenerate.
    fam_q = lambda q: uniform_causal_layer(1, 2, jnp.array([[1.0, 0.0], [0.0, q]]))  # noqa: E731
    pd = _only(continue_branch(fam_q, np.array([[1.0, 0.0]]), -0.5, -1.5))
    assert pd.kind == "period-doubling" and abs(pd.coefficient) <= 1e-12 and pd.criticality == "degenerate"


def test_generalised_period_doubling_on_a_curve():
    def f2(x, p, q):
        return -(1 + p) * x + q * x**3 - x**5

    pd = _only(continue_branch(lambda x, p: f2(x, p, 0.5), np.zeros(1), -0.2, 0.2, ds=0.05))
    c = continue_curve(f2, pd, 0.5, -0.5)
    assert c.result == RESULTS.parameter_end and c.status == "parameter_end"
    assert np.max(np.abs(c.coefficients - c.q)) <= 1e-12  # b = q along the curve p = 0
    (gpd,) = c.special_points
    assert isinstance(gpd, SpecialPoint) and gpd.kind == "generalised-period-doubling"
    assert abs(gpd.q) <= 1e-12 and abs(gpd.p) <= 1e-12 and not c.cusps
    assert json.loads(json.dumps(c.to_dict()))["special_points"][0]["kind"] == "generalised-period-doubling"


@pytest.mark.slow
def test_chenciner_and_a_strong_resonance_on_neimark_sacker_curves():
    th = 1.0
    rot = jnp.array([[np.cos(th), -np.sin(th)], [np.sin(th), np.cos(th)]])

    def chenciner(z, p, q):
        r = z @ z
        return (1 + p + q * r - r * r) * (rot @ z)

    ns = _only(continue_branch(lambda z, p: chenciner(z, p, -0.5), np.zeros(2), -0.2, 0.2, ds=0.05))
    c = continue_curve(chenciner, ns, -0.5, 0.5)
    assert np.max(np.abs(c.coefficients - 2 * c.q)) <= 1e-12  # d = 2 q on the curve p = 0
    assert [s.kind for s in c.special_points] == ["chenciner"] and abs(c.special_points[0].q) <= 1e-12

    def resonant(z, p, q):
        r = jnp.array([[jnp.cos(q), -jnp.sin(q)], [jnp.sin(q), jnp.cos(q)]])
        return jnp.exp(p) * r @ (z - (z @ z) * z)

    ns = _only(continue_branch(lambda z, p: resonant(z, p, 1.4), np.zeros(2), -0.2, 0.2, ds=0.05))
    c = continue_curve(resonant, ns, 1.4, 1.7)
    (r4,) = c.special_points
    assert r4.kind == "resonance-1:4" and abs(r4.q - np.pi / 2) <= 1e-10 and abs(r4.p) <= 1e-10


def test_curve_result_throw_and_renamed_arguments():
    def f2(x, p, q):
        return -(1 + p) * x + q * x**3

    pd = _only(continue_branch(lambda x, p: f2(x, p, 0.5), np.zeros(1), -0.2, 0.2, ds=0.05))
    with pytest.raises(SolveError, match="throw=False"):
        continue_curve(f2, pd, 0.5, -0.5, max_steps=2)
    c = continue_curve(f2, pd, 0.5, -0.5, max_steps=2, throw=False, param_name="a", param2_name="b")
    assert c.result == RESULTS.max_steps_reached and c.status == "max_steps_reached" and len(c) == 3
    assert c.param_names == ("a", "b") and c.to_dict()["status"] == "max_steps_reached"
    with pytest.raises(UsageError, match="'tol' is now 'residual_tol'"):
        continue_curve(f2, pd, 0.5, -0.5, tol=1e-9)
    with pytest.raises(UsageError, match="'param_names' is now"):
        continue_curve(f2, pd, 0.5, -0.5, param_names=("a", "b"))
