"""`basins_across`: basin fractions of a map's attractors across a parameter, matched by label.

Oracle: x' = x + (p + x - x^3) / 2 has a stable fixed point x > 0 for every p near 0.385 and
gains a second one, x < 0, in the fold at p* = 2 / (3 sqrt 3) (located by `continue_branch`): the
x < 0 attractor has basin fraction exactly 0 just above p* and a Wilson 95% interval that
excludes 0 just below.
"""

import jax.numpy as jnp
import numpy as np
import pytest

from rankdyn import RESULTS
from rankdyn._errors import UsageError
from rankdyn.equilibria import continue_branch
from rankdyn.theory import basins_across


def f(x, p):
    return x + 0.5 * (p + x - x**3)


def sign(x, p):
    return jnp.where(x[0] > 0, 1, -1)


def test_attractor_born_at_a_fold_has_basin_zero_before_it():
    br = continue_branch(f, np.array([-1.0]), 0.0, 1.0, ds=0.05)
    (fold,) = [b for b in br.bifurcations if b.kind == "fold"]
    assert fold.located and abs(fold.param - 2 / (3 * np.sqrt(3))) <= 1e-9
    starts = np.linspace(-2, 2, 401)[:, None]
    scan = basins_across(f, starts, [fold.param + 1e-3, fold.param - 1e-3], horizon=3000, label=sign)
    assert scan.attractors == ((1, -1), (1, 1)) and scan.label.shape == (2, 401)
    neg = scan.attractors.index((1, -1))
    assert scan.fractions[0, neg] == 0 and scan.hi[0, neg] > 0  # absent, with an honest upper end
    assert scan.lo[1, neg] > 0 and scan.fraction(1, -1)[1] > 0.2
    assert np.all(scan.not_settled == 0) and np.allclose(scan.fractions.sum(axis=1), 1)
    # Per-start labels: after the fold the starts just left of the unstable point (x = -0.58) end
    # at x < 0 (far-left starts overshoot to x > 0: f(-2) = 1 + p / 2).
    near = (starts[:, 0] > -1) & (starts[:, 0] < -0.7)
    assert np.all(scan.attractor[1, near] == neg) and np.all(scan.attractor[0] != neg)
    import matplotlib

    matplotlib.use("Agg")
    from rankdyn.plotting import plot_basins_across

    ax = plot_basins_across(scan, names=["x < 0", "x > 0"])
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["x < 0", "x > 0", "not settled"]


def test_cycles_and_bad_input():
    logistic = lambda x, r: r * x * (1 - x)  # noqa: E731
    # r = 3.9 is chaotic (no cycle of period <= 8 settles); from x = 1.5 the map runs to -inf.
    scan = basins_across(logistic, np.array([[0.3], [0.6], [1.5]]), [2.8, 3.2, 3.5, 3.9], horizon=2000)
    assert scan.period.tolist() == [[1, 1, 0], [2, 2, 0], [4, 4, 0], [0, 0, 0]]
    assert scan.attractors == ((1, 0), (2, 0), (4, 0))
    ok, nf = ["successful"] * 2 + ["nonfinite"], "nonfinite"
    assert scan.status.tolist() == [ok, ok, ok, ["not_settled", "not_settled", nf]]
    assert np.asarray(scan.result == RESULTS.successful).tolist() == [[True, True, False]] * 3 + [[False] * 3]
    assert np.array_equal(scan.attractor < 0, scan.status != "successful")
    assert np.allclose(scan.not_settled, [1 / 3, 1 / 3, 1 / 3, 1])
    with pytest.raises(UsageError, match="shape it is given"):
        basins_across(lambda x, p: x[:0], np.zeros((2, 1)), [1.0])
    with pytest.raises(UsageError, match="finite"):
        basins_across(logistic, np.zeros((2, 1)), [np.nan])
    with pytest.raises(UsageError, match=r"\(S, m\)"):
        basins_across(logistic, np.zeros(3), [1.0])


def test_layer_family_attractor_born_at_its_fold():
    # The causal n = d = 2 family of the bifurcation target: its stable rank-2 equilibrium (token 1
    # at (0, +-1)) is born at the fold w_A = sqrt(2p - p^2) (continuation locates it there to 1e-6:
    # tests/test_continuation.py).
    from rankdyn.theory import token_class_label, token_class_name, uniform_causal_layer

    p = 0.75

    def family(w):
        return uniform_causal_layer(2, 2, jnp.array([[p, w], [0.0, 1.0]]))

    w_a = np.sqrt(2 * p - p * p)
    starts = np.random.default_rng(1).standard_normal((400, 2, 2))
    starts /= np.linalg.norm(starts, axis=-1, keepdims=True)
    scan = basins_across(family, starts, [w_a - 0.05, w_a + 0.05], horizon=400, settle_tol=1e-9,
                         label=token_class_label(2))  # fmt: skip
    assert np.all(scan.not_settled == 0) and np.allclose(scan.params, [w_a - 0.05, w_a + 0.05])
    names = [token_class_name(v, 2) for _, v in scan.attractors]
    assert names == ["rank 1: x1 = x2", "rank 2: tokens distinct"], names
    assert scan.fractions[0, 1] == 0 and scan.lo[1, 1] > 0
    with pytest.raises(UsageError, match=r"starts must be \(S, 2, 2\)"):
        basins_across(family, np.zeros((3, 3, 2)), [1.0])
    with pytest.raises(UsageError, match="one structure"):
        basins_across(
            lambda w: family(w) if w < 1 else uniform_causal_layer(2, 3, jnp.eye(3)), starts, [0.5, 1.5]
        )


def test_basin_map_over_two_angles_matches_the_sign_oracle():
    # Each token of x -> normalise(diag(1 + p, 1) x) tends to +-e1, the sign of its first
    # coordinate: the attractor of the start (theta1, theta2) is known in closed form.
    import matplotlib

    matplotlib.use("Agg")
    from rankdyn.plotting import plot_basin_map, two_angle_starts

    def f(x, p):
        t = x.reshape(2, 2) * jnp.array([[1.0 + p, 1.0]])
        return (t / jnp.linalg.norm(t, axis=-1, keepdims=True)).reshape(-1)

    a1 = np.linspace(-3.0, 3.0, 7) + 0.05  # no angle at +-pi/2, where the sign is 0
    a2 = np.linspace(-3.0, 3.0, 6) + 0.05
    starts = two_angle_starts(a1, a2)
    assert starts.shape == (42, 2, 2) and np.allclose(np.linalg.norm(starts, axis=-1), 1)
    label = lambda x, p: (x[0] > 0).astype(int) + 2 * (x[2] > 0).astype(int)  # noqa: E731
    scan = basins_across(f, starts.reshape(42, 4), [0.5], horizon=200, label=label)
    got = np.array([scan.attractors[i][1] for i in scan.attractor[0]]).reshape(7, 6)
    want = (np.cos(a1)[:, None] > 0) + 2 * (np.cos(a2)[None, :] > 0)
    np.testing.assert_array_equal(got, want)
    ax = plot_basin_map(a1, a2, scan.attractor[0], names=[f"signs {v}" for _, v in scan.attractors])
    mesh = ax.collections[0]
    assert (
        np.asarray(mesh.get_array()).reshape(7, 6).tolist()
        == np.asarray(scan.attractor[0]).reshape(7, 6).tolist()
    )
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert legend == [f"signs {v}" for _, v in scan.attractors] and not ax.figure.axes[1:]  # no colour bar


def test_the_period_search_holds_no_array_of_length_max_period():
    """The search for the first k <= max_period with |f^k(x) - x| <= tol carries the first hit alone:
    memory does not depend on ``max_period`` (``--max-period 100000000`` kept every gap and ran out
    of memory)."""
    import jax.numpy as jnp

    from rankdyn._theory._basins_across import _run

    max_period = 987_654  # a length no other array has
    program = _run(lambda x, p: x / 2 + p, lambda x, p: jnp.int32(0), 10, max_period, 1e-8)
    text = program.classify.lower(jnp.zeros((2, 3, 1)), jnp.zeros(2)).as_text()
    assert str(max_period) in text  # the bound is in the program (as the loop's limit) ...
    assert f",{max_period}]" not in text and f"<{max_period}x" not in text  # ... but in no shape


@pytest.mark.slow  # a census or a basin scan and their compiles
def test_basins_stop_between_pieces_after_a_signal(tmp_path, capsys, monkeypatch):
    """A SIGTERM that arrives during the first piece of the horizon (set as the handler sets it)
    stops `rankdyn basins` before the next piece: exit 143, one line, no basins.nc (it ignored
    SIGINT and SIGTERM: one compiled call ran the whole horizon)."""
    import signal

    from rankdyn._run import _interrupt
    from rankdyn._theory import _basins_across
    from rankdyn.cli import main

    real, calls = _basins_across._Pieces.__call__, []

    def advance_then_signal(self, x0, ps):
        real_advance = self.advance

        def advance(*args):
            calls.append(1)
            out = real_advance(*args)
            _interrupt._state["signum"] = signal.SIGTERM  # "arrived" during this piece
            return out

        self.advance = advance
        return real(self, x0, ps)

    monkeypatch.setattr(_basins_across._Pieces, "__call__", advance_then_signal)
    argv = ["basins", "--param", "w", "--from", "0.6", "--to", "1.2", "--steps", "2", "--starts", "4"]
    try:
        code = main([*argv, "--horizon", "50", "--out", str(tmp_path / "o")])
    finally:
        _interrupt._state["signum"] = None
    err = capsys.readouterr().err
    assert code == 143 and len(calls) == 1, (code, calls, err)
    assert "rankdyn basins: interrupted" in err and "Traceback" not in err
    assert not (tmp_path / "o" / "basins.nc").exists()
