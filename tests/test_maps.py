"""`continue_branch` on plain maps f(x, p): bifurcations against closed forms, one crossing at a time.

Oracles: the Henon map x' = 1 - a x^2 + y, y' = b x has fixed points a x^2 + (1 - b) x - 1 = 0,
born in a fold at a = -(1 - b)^2 / 4; the one with x > 0 doubles its period at a = 3 (1 - b)^2 / 4.
The delayed logistic map x' = a x (1 - y), y' = x has the fixed point x = y = 1 - 1/a with
multipliers lambda^2 - lambda + (a - 1) = 0: a Neimark-Sacker point at a = 2, angle pi / 3.
"""

import dataclasses
import json

import jax.numpy as jnp
import numpy as np
import pytest

from rankdyn._errors import UsageError
from rankdyn._model._layer import SelfAttentionLayer
from rankdyn.equilibria import continue_branch, switch_branch

B = 0.3
A_FOLD, A_PD = -((1 - B) ** 2) / 4, 3 * (1 - B) ** 2 / 4


def henon(z, a):
    return jnp.stack([1 - a * z[0] ** 2 + z[1], B * z[0]])


def henon_fixed(a):
    x = (-(1 - B) + np.sqrt((1 - B) ** 2 + 4 * a)) / (2 * a)
    return np.array([x, B * x])


def test_henon_fold_and_period_doubling_closed_forms():
    br = continue_branch(henon, henon_fixed(0.1), 0.1, 1.0, ds=0.05)
    assert br.points.shape[1:] == (2,) and br.space == "full" and br.status == "parameter_end"
    (pd,) = br.bifurcations
    # Classified by the multiplier that crossed: -1 (the other multiplier is -b / lambda = 0.3).
    assert pd.kind == "period-doubling" and pd.located and abs(pd.param - A_PD) <= 1e-9, pd
    assert br.stable[0] and not br.stable[-1]
    # The diagram draws the loss of stability at the located point, not at the next branch point.
    import matplotlib

    matplotlib.use("Agg")
    from rankdyn.plotting import plot_bifurcation

    lines = [ln for ln in plot_bifurcation([br]).lines if len(ln.get_xdata()) >= 2]
    solid_ends = [max(ln.get_xdata()) for ln in lines if ln.get_linestyle() == "-"]
    assert max(solid_ends) == pd.param
    br = continue_branch(henon, henon_fixed(0.1), 0.1, -0.5, ds=0.05, max_steps=30, throw=False)
    folds = [b for b in br.bifurcations if b.kind == "fold"]
    assert len(folds) == 1 and folds[0].located and abs(folds[0].param - A_FOLD) <= 1e-9, folds
    assert "branch-point" not in [b.kind for b in br.bifurcations]


def test_delayed_logistic_neimark_sacker_angle():
    def f(z, a):
        return jnp.stack([a * z[0] * (1 - z[1]), z[0]])

    x = 1 - 1 / 1.8
    br = continue_branch(f, np.array([x, x]), 1.8, 2.2, ds=0.05)
    (ns,) = br.bifurcations
    assert ns.kind == "neimark-sacker" and ns.located and abs(ns.param - 2) <= 1e-9
    assert abs(ns.theta - np.pi / 3) <= 1e-9 and ns.resonance == 0
    assert "theta = 1.0472" in ns.describe("a")
    # branches.json: each point's multipliers as [re, im] pairs (a complex pair here), no padding.
    rows = json.loads(json.dumps(br.to_dict()))["multipliers"]
    assert [len(r) for r in rows] == [2] * len(br)
    np.testing.assert_array_equal([[complex(*z) for z in r] for r in rows], br.multipliers[:, :2])
    assert np.all(np.isnan(br.multipliers[:, 2:]))  # the array's pads, left out of the JSON
    padded = br.multipliers.copy()
    padded[0, 1] = np.nan  # a point with one multiplier fewer
    rows = dataclasses.replace(br, multipliers=padded).to_dict()["multipliers"]
    assert len(rows[0]) == 1 and rows[0][0] == [br.multipliers[0, 0].real, br.multipliers[0, 0].imag]


def test_two_crossings_in_one_step_are_located_apart():
    # Multipliers -(1 + (p - 0.3)) (crosses -1 at p = 0.3) and 1 + (p - 0.32) with a transcritical
    # term (a branch point at p = 0.32): both fall in one step of 0.1. Classified by the multiplier
    # nearest the circle, they would be one event of a single kind.
    def f(z, p):
        return jnp.stack([-(1 + (p - 0.3)) * z[0], (1 + (p - 0.32)) * z[1] - z[1] ** 2])

    br = continue_branch(f, np.zeros(2), 0.25, 0.45, ds=0.1, ds_max=0.1)
    kinds = {b.kind: b for b in br.bifurcations}
    assert sorted(kinds) == ["branch-point", "period-doubling"], br.bifurcations
    assert abs(kinds["period-doubling"].param - 0.3) <= 1e-9
    assert abs(kinds["branch-point"].param - 0.32) <= 1e-9
    assert all(b.located for b in br.bifurcations)


def test_unlocated_is_a_bracket():
    def f(z, a):
        return jnp.stack([a * z[0] * (1 - z[1]), z[0]])

    x = 1 - 1 / 1.8
    br = continue_branch(f, np.array([x, x]), 1.8, 2.2, ds=0.05, locate_bifurcations=False)
    (ns,) = br.bifurcations
    lo, hi = sorted(ns.bracket)
    assert (
        not ns.located
        and lo < 2 < hi
        and ns.describe("a") == f"neimark-sacker in [{lo:.6g}, {hi:.6g}], not located"
    )
    # The diagram draws a map's branch by its first coordinate and labels the point in words,
    # once where two branches reach it.
    import matplotlib

    matplotlib.use("Agg")
    from rankdyn.plotting import plot_bifurcation

    ax = plot_bifurcation([br])
    assert ax.get_ylabel() == "first coordinate of x"
    assert [t.get_text() for t in ax.texts] == [f"Neimark-Sacker {ns.param:.4g} (bracket)"]
    np.testing.assert_allclose(ax.lines[0].get_ydata()[:2], br.points[:2, 0])
    assert len(plot_bifurcation([br, br]).texts) == 1


def test_map_bad_input_is_refused():
    x = henon_fixed(0.1)
    with pytest.raises(UsageError, match="shape it is given"):
        continue_branch(lambda z, a: z[:1] * a, np.array([0.0, 0.0]), 0.1, 1.0)
    with pytest.raises(UsageError, match=r"fixed point \(m,\)"):
        continue_branch(henon, np.zeros((2, 2, 2)), 0.1, 1.0)
    with pytest.raises(UsageError, match="period must be an integer >= 1"):
        continue_branch(henon, x, 0.1, 1.0, period=0)
    with pytest.raises(UsageError, match="finite"):
        continue_branch(henon, x, 0.1, np.nan)
    with pytest.raises(UsageError, match="not a fixed point"):
        continue_branch(henon, x + 0.1, 0.1, 1.0)
    with pytest.raises(UsageError, match="does not depend"):
        continue_branch(lambda z, a: z, x, 0.1, 1.0)


def logistic(x, r):
    return r * x * (1 - x)


@pytest.mark.slow
def test_logistic_cascade_feigenbaum_ratios():
    # r_1 = 3 and r_2 = 1 + sqrt(6) in closed form; the ratios of the gaps tend to 4.6692...
    x, p, period, rs, gap = np.array([1 - 1 / 2.8]), 2.8, 1, [], 0.45
    for _ in range(6):
        br = continue_branch(logistic, x, p, 3.5699, period=period, ds=gap / 20, max_steps=200)
        pd = next(b for b in br.bifurcations if b.kind == "period-doubling")
        assert pd.located and br.period == period
        rs.append(pd.param)
        gap = rs[-1] - rs[-2] if len(rs) > 1 else gap
        start = switch_branch(br, pd)
        assert (
            start.period == 2 * period and abs(logistic(logistic(start.x, start.p), start.p) - start.x)[0] > 0
        )
        x, p, period = start.x, start.p, start.period
    r = np.array(rs)
    assert abs(r[0] - 3) <= 1e-9 and abs(r[1] - (1 + np.sqrt(6))) <= 1e-9
    ratios = (r[2:-1] - r[1:-2]) / (r[3:] - r[2:-1])  # k = 3, 4, 5
    assert np.all(np.abs(ratios[1:] - 4.6692) <= 1e-2), ratios


def test_period_and_switch_bad_input():
    br = continue_branch(logistic, np.array([1 - 1 / 2.8]), 2.8, 3.1, ds=0.05)
    (pd,) = br.bifurcations
    assert pd.kind == "period-doubling" and abs(pd.param - 3) <= 1e-9
    start = switch_branch(br, pd)
    # A point of the 2-cycle, not of the fixed point: f(x) != x, f(f(x)) = x.
    assert abs(logistic(start.x, start.p) - start.x)[0] > 1e-4 and start.p > 3
    unlocated = dataclasses.replace(pd, located=False)
    with pytest.raises(UsageError, match="not located"):
        switch_branch(br, unlocated)
    with pytest.raises(UsageError, match="needs a period doubling"):
        switch_branch(br, dataclasses.replace(pd, kind="fold"))
    with pytest.raises(UsageError, match="per-layer stack"):
        # Two layers of weights (a leading layer axis): a different map at every depth.
        z = jnp.zeros((2, 1, 2, 2))
        continue_branch(
            lambda w: SelfAttentionLayer(jnp.tril(jnp.ones((2, 2), bool)), z, z, z + w),
            np.array([[0.0, 1.0], [0.0, 1.0]]), 1.0, 2.0, period=2,
        )  # fmt: skip


def test_default_diagram_measure_separates_what_sigma_min_merges():
    from rankdyn._plotting._bifurcation import equilibrium_measure

    # Two equilibria with the same singular values (tokens swapped), e.g. two sheets of a fold.
    x = np.array([[0.0, 1.0], [0.6, 0.8]])
    pair = np.stack([x, x[::-1]])
    assert np.ptp(equilibrium_measure(pair, "sigma_min")) <= 1e-12
    assert np.ptp(equilibrium_measure(pair)) > 1e-3


def test_float32_brackets_below_resolution_are_flagged():
    from types import SimpleNamespace

    from rankdyn._equilibria._bifurcations import below_resolution

    def end(v):
        return SimpleNamespace(tp=v, tests={"+1": v, "-1": v, "complex": v})

    tiny, clear = end(3e-5), end(2e-2)  # 3e-5 < 1e3 eps_32 = 1.2e-4 < 2e-2
    assert below_resolution("period-doubling", tiny, end(-3e-5), np.float32)
    assert not below_resolution("period-doubling", tiny, end(-2e-2), np.float32)
    assert not below_resolution("fold", tiny, end(-3e-5), np.float64)
    assert not below_resolution("fold", clear, end(-2e-2), np.float32)


def test_neutral_multipliers_never_split_a_conjugate_pair():
    from rankdyn._equilibria._bifurcations import crossing_tests, drop_neutral

    # Three neutral multipliers to leave out, the third nearest 1 one half of a complex pair: a
    # product over the rest would be complex, and the sign of its real part arbitrary.
    eig = np.array([1.0, 1.0 + 1e-12, 0.9 + 0.3j, 0.9 - 0.3j, -0.5])
    assert drop_neutral(eig, 3).tolist() == [-0.5]
    assert crossing_tests(eig, 3) == {"+1": -1.0, "-1": 0.5, "complex": 1.0}
