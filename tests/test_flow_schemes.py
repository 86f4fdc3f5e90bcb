"""The flow's normalisation schemes against an independent fixed-step RK4 in NumPy (float64).

The oracle integrates the normalised attention dynamics in the coordinates the paper writes them
in (arXiv 2510.22026, eq. (NA) and Table 2, as transcribed in rankdyn/_flow/_schemes.py): the
direction $\\theta_j$ with $\\dot\\theta_j = P_{\\theta_j} A_j / s_j$ and the radius $r_j$ with its own
$\\dot r_j$, not the ambient velocity rankdyn integrates.
"""

import jax
import numpy as np
import pytest

from rankdyn import UsageError
from rankdyn.flow import RK4, FlowField, ProjectedSolver, classify_equilibrium, find_zeros, solve_flow
from rankdyn.masks import causal_mask

N, D, TAU, ALPHA = 5, 3, 0.4, 0.6


def _attention(theta, beta, q, k, v):
    s = beta * (theta @ q.T) @ (theta @ k.T).T
    s = np.where(causal_mask(N), s, -np.inf)
    w = np.exp(s - s.max(axis=1, keepdims=True))
    w = w / w.sum(axis=1, keepdims=True)
    return w @ (theta @ v.T)


def _polar_field(scheme, theta, r, t, beta, mats):
    """(theta_dot, r_dot): Table 2's speed factor s_j and radial equation, row by row."""
    a = _attention(theta, beta, *mats)
    along = np.sum(theta * a, axis=1)
    tangent = a - along[:, None] * theta
    size = np.linalg.norm(a, axis=1)
    s, r_dot = {
        "post": (np.ones(N), np.zeros(N)),
        "pre": (r, along),
        "peri": (r * size, along / size),
        "ngpt": (size / ALPHA, np.zeros(N)),
        "lns": (np.full(N, np.sqrt(t + 1)), np.zeros(N)),
    }[scheme]
    return tangent / s[:, None], r_dot


def _rk4(scheme, theta, r, t0, t1, beta, mats, steps=400):
    h = (t1 - t0) / steps
    for i in range(steps):
        t = t0 + i * h
        k1 = _polar_field(scheme, theta, r, t, beta, mats)
        k2 = _polar_field(scheme, theta + h / 2 * k1[0], r + h / 2 * k1[1], t + h / 2, beta, mats)
        k3 = _polar_field(scheme, theta + h / 2 * k2[0], r + h / 2 * k2[1], t + h / 2, beta, mats)
        k4 = _polar_field(scheme, theta + h * k3[0], r + h * k3[1], t + h, beta, mats)
        theta = theta + h / 6 * (k1[0] + 2 * k2[0] + 2 * k3[0] + k4[0])
        r = r + h / 6 * (k1[1] + 2 * k2[1] + 2 * k3[1] + k4[1])
    return theta / np.linalg.norm(theta, axis=1, keepdims=True), r


def _oracle(scheme, x0, beta, mats):
    """Tokens r * theta at t = 1; Mix-LN as two legs, post-LN on [0, tau] and pre-LN on [tau, 1]."""
    r = np.linalg.norm(x0, axis=1)
    theta = x0 / r[:, None]
    if scheme == "mix":
        theta, r = _rk4("post", theta, r, 0.0, TAU, beta, mats, 160)
        theta, r = _rk4("pre", theta, r, TAU, 1.0, beta, mats, 240)
    else:
        theta, r = _rk4(scheme, theta, r, 0.0, 1.0, beta, mats)
    return r[:, None] * theta


@pytest.mark.slow
def test_schemes_match_independent_polar_rk4():
    rng = np.random.default_rng(3)
    mats = tuple(np.eye(D) + 0.4 * rng.normal(size=(D, D)) for _ in range(3))
    x0 = rng.normal(size=(N, D)) * rng.uniform(0.5, 2.0, size=(N, 1))  # radii other than 1
    beta, times = 1.5, np.array([0.0, TAU, 1.0])
    kw = {"mix": {"mix_time": TAU}, "ngpt": {"ngpt_alpha": ALPHA}}
    ends = {}
    for scheme in ("pre", "mix", "peri", "ngpt", "lns"):
        field = FlowField(causal_mask(N), D, "sa", *mats, placement=scheme, **kw.get(scheme, {}))
        sol = solve_flow(field, x0, beta=beta, times=times, rtol=1e-11, atol=1e-13, save_states=True)
        assert bool(np.all(sol.successful)) and int(np.sum(sol.steps_limit_hit)) == 0
        got = np.asarray(sol.states[0, -1])
        ref = _oracle(
            scheme, x0 if field.radial else x0 / np.linalg.norm(x0, axis=1, keepdims=True), beta, mats
        )
        err = np.max(np.abs(got - ref))
        assert err < 1e-7, (scheme, err)
        ends[scheme] = got
    # The oracle can fail: each scheme's end differs from every other's by far more than 1e-7
    # (mix from pre by its post-LN leg, lns from post by its 1/sqrt(t+1)).
    post = _oracle("post", x0 / np.linalg.norm(x0, axis=1, keepdims=True), beta, mats)
    names = list(ends)
    for i, a in enumerate(names):
        assert np.max(np.abs(ends[a] - post)) > 1e-3, a
        for b in names[i + 1 :]:
            assert np.max(np.abs(ends[a] - ends[b])) > 1e-3, (a, b)


def test_scheme_arguments_are_checked():
    mask = causal_mask(3)
    with pytest.raises(UsageError, match="placement must be one of"):
        FlowField(mask, 2, placement="deepnorm")
    with pytest.raises(UsageError, match="needs ngpt_alpha"):
        FlowField(mask, 2, placement="ngpt")
    with pytest.raises(UsageError, match="ngpt_alpha must be a finite number > 0"):
        FlowField(mask, 2, placement="ngpt", ngpt_alpha=0.0)
    with pytest.raises(UsageError, match="needs mix_time"):
        FlowField(mask, 2, placement="mix")
    with pytest.raises(UsageError, match="mix_time applies to placement='mix' only"):
        FlowField(mask, 2, placement="pre", mix_time=1.0)
    x0 = np.eye(3)[:, :2] + 0.1
    mix = FlowField(mask, 2, placement="mix", mix_time=0.5)
    with pytest.raises(UsageError, match="constant step"):
        solve_flow(mix, x0, 1.0, beta=1.0, solver="rk4", dt=0.1)
    with pytest.raises(UsageError, match="ProjectedSolver"):
        solve_flow(
            FlowField(mask, 2, placement="peri"), x0, 1.0, beta=1.0, solver=ProjectedSolver(RK4()), dt=0.1
        )
    with pytest.raises(UsageError, match="post-LN flow on the sphere only"):
        find_zeros(FlowField(mask, 2, placement="pre"), x0[None], 1.0)
    with pytest.raises(UsageError, match="post-LN flow on the sphere only"):
        classify_equilibrium(FlowField(mask, 2, placement="ngpt", ngpt_alpha=0.5), x0, 1.0)
    from rankdyn.lyapunov import lyapunov_spectrum_flow

    with pytest.raises(UsageError, match="post-LN flow on the sphere only"):
        lyapunov_spectrum_flow(FlowField(mask, 2, placement="lns"), x0, 1.0, beta=1.0, key=jax.random.key(0))


@pytest.mark.parametrize(
    "argv, words",
    [
        (["--placement", "ngpt"], ["--placement 'ngpt' needs --ngpt-alpha"]),
        (["--ngpt-alpha", "0.5"], ["--ngpt-alpha applies to --placement 'ngpt' only"]),
        (["--placement", "mix"], ["needs --mix-time"]),
        (["--placement", "mix", "--mix-time", "1", "--solver", "rk4", "--dt", "0.1"], ["adaptive solver"]),
        (["--placement", "pre", "--lyapunov", "2"], ["--lyapunov", "--placement pre"]),
    ],
)
def test_flow_command_refuses_scheme_flags_by_name(tmp_path, capsys, argv, words):
    from rankdyn.cli import main

    rc = main(["flow", "--n", "3", "--d", "3", "--batch", "2", "--out", str(tmp_path / "o"), *argv])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("error:") == 1 and "Traceback" not in err, err
    for w in words:
        assert w in err, (w, err)
    assert not (tmp_path / "o").exists()


def test_flow_command_choices_are_the_flows_schemes():
    from rankdyn._commands.flow import FLOW_PLACEMENT_CHOICES
    from rankdyn._flow._schemes import FLOW_PLACEMENTS

    assert sorted(FLOW_PLACEMENT_CHOICES) == sorted(FLOW_PLACEMENTS)


@pytest.mark.slow
def test_flow_command_runs_a_scheme_that_moves_the_radius(tmp_path, capsys):
    import json

    from rankdyn.cli import main

    out = tmp_path / "pre"
    argv = ["flow", "--placement", "pre", "--n", "4", "--d", "3", "--batch", "2", "--time", "1"]
    rc = main([*argv, "--saves", "3", "--no-progress", "--out", str(out)])
    text = capsys.readouterr().out
    assert rc == 0 and "the radius moves under --placement pre" in text, text
    res = json.loads((out / "metrics.json").read_text())
    assert res["config"]["placement"] == "pre" and (out / "flow.png").exists()
