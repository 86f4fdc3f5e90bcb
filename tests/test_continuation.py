"""Pseudo-arclength continuation (`continue_branch`): folds and bifurcations against closed forms.

Oracles (docs/theory.md, "Continuation and bifurcations"): for n = d = 2, the causal mask, uniform
attention and W_V = [[p, w], [0, 1]], the rank-2 equilibria with token 1 at (0, +-1) are born in
a fold at w = sqrt(2p - p^2), those with token 1 on the other eigenvector at w = sqrt(2p - 1);
the rank-1 point x_1 = x_2 = (0, 1) has multipliers p and p / 2, hence branch points at p = 1, 2.
One token with W_V = diag(1, q) has the multiplier q (period doubling at q = -1); with
W_V = 1 (+) rho R(theta) the pair rho e^{+-i theta} (Neimark-Sacker at rho = 1).
"""

import dataclasses
import json

import jax.numpy as jnp
import numpy as np
import pytest

from rankdyn import RESULTS
from rankdyn._errors import UsageError
from rankdyn._model._layer import SelfAttentionLayer
from rankdyn._reproduce.theory import bifurcation as target
from rankdyn._theory._constructions import uniform_causal_layer
from rankdyn.cli import main
from rankdyn.equilibria import continue_branch

P = 0.75
W_A, W_B = np.sqrt(2 * P - P * P), np.sqrt(2 * P - 1)


def fam_w(w):
    return uniform_causal_layer(2, 2, jnp.array([[P, w], [0.0, 1.0]]))


def start_a(w, side=1.0):
    """Token 1 at (0, 1); token 2 on the line w a + (1 - p) b = -1, on one side of its foot."""
    r2 = w**2 + (1 - P) ** 2
    foot = -np.array([w, 1 - P]) / r2
    x2 = foot + side * np.sqrt(1 - 1 / r2) * np.array([1 - P, -w]) / np.sqrt(r2)
    return np.array([[0.0, 1.0], x2])


def start_b(w):
    """Token 1 on the left eigenvector (p - 1, w) of eigenvalue p; token 2 = alpha v + beta u."""
    r = np.hypot(P - 1, w)
    v, u = np.array([P - 1, w]) / r, np.array([0.0, 1.0])
    al, c = P / (1 - P), w / r
    be = -al * c + np.sqrt(al**2 * c**2 - al**2 + 1)
    return np.array([v, al * v + be * u])


@pytest.mark.slow
def test_closed_form_folds_located_and_passed():
    for start, ref in ((start_a(1.3), W_A), (start_b(1.3), W_B)):
        br = continue_branch(fam_w, start, 1.3, 0.5, ds=0.05, param_name="w")
        (fold,) = [b for b in br.bifurcations if b.kind == "fold"]
        assert fold.located and abs(fold.param - ref) <= 1e-6, (fold.param, ref)
        # The bracket's ends are a step away: a location "between step k and k + 1" fails above.
        assert min(abs(np.asarray(fold.bracket) - ref)) > 1e-6
        # Through the fold and back: the parameter turns, and the branch ends at p_start.
        k = fold.step
        assert br.tangents_p[k] < 0 < br.tangents_p[k + 1]
        assert br.status == "parameter_end" and br.params[-1] == 1.3 and br.params.min() > ref
        assert np.max(np.abs(br.points[-1] - br.points[0])) > 0.1  # the other equilibrium
        assert np.all(br.residuals <= 1e-10)
        if ref == W_A:  # token 1 has multiplier p < 1: the fold exchanges stability
            assert br.stable[k] != br.stable[k + 1]
            assert len(set(br.stable[: k + 1])) == 1 and len(set(br.stable[k + 1 :])) == 1


@pytest.mark.slow
def test_location_off_by_a_step_fails_the_oracle():
    br = continue_branch(fam_w, start_a(1.3), 1.3, 0.5, ds=0.05, locate_bifurcations=False, param_name="w")
    (fold,) = [b for b in br.bifurcations if b.kind == "fold"]
    assert not fold.located and abs(fold.param - W_A) > 1e-6


@pytest.mark.slow
def test_branch_points_period_doubling_neimark_sacker():
    fam_p = lambda p: uniform_causal_layer(2, 2, jnp.array([[p, 0.8], [0.0, 1.0]]))  # noqa: E731
    br = continue_branch(fam_p, np.array([[0.0, 1.0], [0.0, 1.0]]), 0.5, 2.5)
    assert [b.kind for b in br.bifurcations] == ["branch-point", "branch-point"]
    assert np.allclose([b.param for b in br.bifurcations], [1.0, 2.0], atol=1e-6, rtol=0)
    assert br.stable[0] and not br.stable[-1]

    fam_q = lambda q: uniform_causal_layer(1, 2, jnp.array([[1.0, 0.0], [0.0, q]]))  # noqa: E731
    br = continue_branch(fam_q, np.array([[1.0, 0.0]]), -0.5, -1.5)
    assert [b.kind for b in br.bifurcations] == ["period-doubling"]
    assert abs(br.bifurcations[0].param + 1) <= 1e-6

    def fam_rho(rho, th=0.7):
        rot = rho * jnp.array([[np.cos(th), -np.sin(th)], [np.sin(th), np.cos(th)]])
        return uniform_causal_layer(1, 3, jnp.zeros((3, 3)).at[0, 0].set(1.0).at[1:, 1:].set(rot))

    br = continue_branch(fam_rho, np.array([[1.0, 0.0, 0.0]]), 0.6, 1.4)
    assert [b.kind for b in br.bifurcations] == ["neimark-sacker"]
    assert abs(br.bifurcations[0].param - 1) <= 1e-6


@pytest.mark.slow
def test_continuous_symmetry_is_quotiented():
    # Complete mask, uniform attention, W_V = diag(a, a, 1): rotations in the (1, 2) plane commute
    # with the layer, so x_1 = x_2 = u in that plane lies on a circle of equilibria (multiplier +1).
    def fam(a):
        z = jnp.zeros((3, 3))
        return SelfAttentionLayer(jnp.ones((2, 2), bool), z, z, jnp.diag(jnp.array([a, a, 1.0])))

    u = np.array([0.6, 0.8, 0.0])
    br = continue_branch(fam, np.stack([u, u]), 1.5, 0.5)
    assert br.symmetry_dims == 1
    # The other multiplier is 1 / a: stable for a > 1, a branch point at a = 1.
    assert br.stable[0] and not br.stable[-1]
    assert [b.kind for b in br.bifurcations] == ["branch-point"]
    assert abs(br.bifurcations[0].param - 1) <= 1e-6
    raw = continue_branch(fam, np.stack([u, u]), 1.5, 1.2, symmetries=False)
    assert not raw.stable.any()  # the orbit's multiplier 1 is left in: never "stable"


def test_bad_input_is_refused():
    x = start_a(1.3)
    with pytest.raises(UsageError, match="equal"):
        continue_branch(fam_w, x, 1.3, 1.3)
    with pytest.raises(UsageError, match="non-finite"):
        continue_branch(fam_w, np.full((2, 2), np.nan), 1.3, 0.5)
    with pytest.raises(UsageError, match=r"residual_tol = 1\.0e-10"):
        continue_branch(fam_w, start_a(1.2), 1.3, 0.5)
    const = lambda w: fam_w(1.3)  # noqa: E731
    with pytest.raises(UsageError, match="does not depend"):
        continue_branch(const, x, 1.3, 0.5)


@pytest.mark.slow
def test_newton_failure_ends_with_a_status():
    # The family jumps at w = 1.1 (token 2's map changes): no branch to follow past it.
    def jump(w):
        return fam_w(w) if w > 1.1 else uniform_causal_layer(2, 2, jnp.array([[P, -w], [0.0, 1.0]]))

    br = continue_branch(jump, start_a(1.3), 1.3, 0.5, ds=0.05, throw=False)
    assert br.result == RESULTS.newton_failed and br.status == "newton_failed"
    assert br.params.min() > 1.1 and "did not converge" in br.to_dict()["message"]


def test_cli_continue_max_steps_and_refusals(tmp_path, capsys):
    x = np.array([[0.0, 1.0], [0.0, 1.0]])  # e_d twice: an equilibrium of the bidiagonal W_V for every w
    np.save(tmp_path / "x.npy", x)
    base = ["continue", "--n", "2", "--d", "2", "--no-progress"]
    out = tmp_path / "c"
    # --period 2: fixed points of F^2 (e_d twice is one); float64 without --x64.
    rc = main(base + ["--param", "w", "--from", "2", "--to", "3", "--start", str(tmp_path / "x.npy"),
                      "--max-steps", "2", "--period", "2", "--out", str(out)])  # fmt: skip
    assert rc == 0
    err = capsys.readouterr().err
    assert "stopped at --max-steps 2" in err
    res = json.loads((out / "branches.json").read_text())
    (br,) = res["branches"]
    assert br["status"] == "max_steps_reached" and br["num_points"] == 3 and br["period"] == 2
    assert res["config"]["period"] == 2 and np.asarray(br["points"]).dtype == np.float64
    assert res["seed"] == 0 and res["config"]["param"] == "w" and "versions" in res["provenance"]
    assert (out / "bifurcation.png").stat().st_size > 0
    np.save(tmp_path / "bad.npy", np.array([[0.0, 1.0], [1.0, 0.0]]))
    refusals = {
        "--from and --to are equal": ["--param", "w", "--from", "2", "--to", "2"],
        "--param w: the model does not read w": ["--value", "orthogonal", "--param", "w", "--from", "1",
                                                 "--to", "2"],
        "uniform attention does not read the temperature": ["--param", "dqk", "--from", "1", "--to", "2"],
        "--w 3.0 is ignored": ["--w", "3", "--param", "w", "--from", "1", "--to", "2"],
        "not an equilibrium": ["--param", "w", "--from", "1", "--to", "2", "--start",
                               str(tmp_path / "bad.npy")],
        "--to -1.0 for --param dqk": ["--qk", "bert", "--param", "dqk", "--from", "1", "--to", "-1"],
        "n * d = 4096 is above 2048": ["--n", "64", "--d", "64", "--param", "w", "--from", "1", "--to", "2"],
        "always computes in float64": ["--x64", "--param", "w", "--from", "1", "--to", "2"],
        "--period 0: expected an integer >= 1": ["--period", "0", "--param", "w", "--from", "1", "--to", "2"],
        "--param2 needs --from2 and --to2": ["--param", "w", "--from", "1", "--to", "2", "--param2", "dqk"],
        "--from2 need --param2": ["--param", "w", "--from", "1", "--to", "2", "--from2", "1"],
        "--param2 w is --param too": ["--param", "w", "--from", "1", "--to", "2", "--param2", "w", "--from2",
                                      "1", "--to2", "2"],
        "the range of --param2 is empty": ["--qk", "bert", "--param", "w", "--from", "1", "--to", "2",
                                           "--param2", "dqk", "--from2", "1", "--to2", "1"],
        "--from2 nan: expected a finite number": ["--qk", "bert", "--param", "w", "--from", "1", "--to", "2",
                                                  "--param2", "dqk", "--from2", "nan", "--to2", "1"],
    }  # fmt: skip
    for text, flags in refusals.items():
        assert main(base + flags + ["--out", str(tmp_path / "r")]) == 2, text
        err = capsys.readouterr().err
        assert "error:" in err and text in err and "Traceback" not in err, (text, err)
    assert not (tmp_path / "r").exists()


def _measured(**over):
    fold = target.closed_form_folds(target.P)
    br = lambda fam, f: target.BranchSummary(
        fam, "parameter_end", f + 1e-3, target.W_START, 9, (f,), (), (), fam == "A", fam != "A", 1.3
    )  # noqa: E731,E501
    m = target.BifurcationMeasured(
        target.P,
        fold,
        6,
        (br("A", fold["A"]), br("A", fold["A"]), br("B", fold["B"]), br("B", fold["B"])),
        target.BranchSummary("rank-1", "parameter_end", 0.5, 2.5, 16, (), (1.0, 2.0), (), True, False, 0.0),
        phase_w=tuple(np.linspace(target.W_END, target.W_START, 46)),
        phase_s=(0.0, 1.0),
        phase_row0=_row0(fold),
        phase_start={"A": {"rank2": 2, "stable_rank2": 2}, "B": {"rank2": 2, "stable_rank2": 0}},
    )
    return dataclasses.replace(m, **over)


def _row0(fold, shift=0):
    """Rank-2 counts on the phase grid's row qk_std = 0: 2 from each family's fold on (``shift``
    grid points later)."""
    ws = np.linspace(target.W_END, target.W_START, 46)
    return {f: tuple(2 if i >= np.searchsorted(ws, fold[f]) + shift else 0 for i in range(46)) for f in "AB"}


def test_target_checks_pass_and_fail():
    good = _measured()
    assert all(c.passed for c in target.checks(good))
    off = dataclasses.replace(good.w_branches[0], folds=(good.closed_form["A"] + 2e-6,))
    lost = dataclasses.replace(good.w_branches[2], status="newton_failed")
    no_change = dataclasses.replace(good.w_branches[1], stable_after=True, stable_before=True)
    pb = dataclasses.replace(good.p_branch, folds=(1.0,))
    for bad in (
        _measured(w_branches=(off,) + good.w_branches[1:]),
        _measured(w_branches=good.w_branches[:2] + (lost, good.w_branches[3])),
        _measured(w_branches=(good.w_branches[0], no_change) + good.w_branches[2:]),
        _measured(w_branches=good.w_branches[:2]),
        _measured(p_branch=pb),
        _measured(phase_row0=_row0(target.closed_form_folds(target.P), shift=1)),  # boundary one cell off
        _measured(phase_start={"A": {"rank2": 2, "stable_rank2": 1}, "B": {"rank2": 2, "stable_rank2": 0}}),
    ):
        assert not all(c.passed for c in target.checks(bad))
