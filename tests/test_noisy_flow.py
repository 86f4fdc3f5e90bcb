"""The noisy flow (`solve_flow(..., noise=, key=)`): the Stratonovich SDE on the sphere against
closed forms (Brownian motion on S^1 and S^2), the deterministic flow at sigma = 0, its radius drift,
bitwise reproducibility across chunks, common noise, the blocked drift, and refusals.

Statistical tolerances are fixed before the runs: four standard errors of the estimate (the
standard error from the closed-form variance), with fixed seeds.
"""

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest

from rankdyn._errors import UsageError
from rankdyn.cli import main
from rankdyn.flow import RK4, FlowField, ProjectedSolver, solve_flow

# One configuration shared by the sigma = 0 check and the chunk check: one compilation.
N, D, BATCH, DT, T = 8, 3, 4, 0.05, 0.5


@pytest.fixture(scope="module")
def small():
    field = FlowField(np.ones((N, N), bool), D, "sa")
    x0 = jr.normal(jr.PRNGKey(3), (BATCH, N, D))
    x0 = x0 / jnp.linalg.norm(x0, axis=-1, keepdims=True)
    kw = dict(beta=1.0, saves=3, dt=DT, per_trajectory=True, save_states=True)
    return field, x0, kw


def test_zero_noise_is_the_deterministic_flow_with_heun(small):
    """sigma = 0: the SDE path (Heun, MultiTerm with a zero diffusion) gives the states of the ODE
    path with the same fixed-step Heun to 1e-12 over the first piece (the observer reads directions
    in both). From there the ODE path projects its state to the sphere and the SDE path does not,
    so they differ by the order of the drift, which is Heun's own and reported."""
    field, x0, kw = small
    ode = solve_flow(field, x0, T, solver=diffrax.Heun(), **kw)
    sde = solve_flow(field, x0, T, noise=0.0, key=jr.PRNGKey(0), **kw)
    states = np.asarray(sde.states)
    u = states / np.linalg.norm(states, axis=-1, keepdims=True)
    err = np.max(np.abs(u - np.asarray(ode.states)), axis=(0, 2, 3))
    assert err[1] < 1e-12, err  # t = T / 2, the end of the first piece
    assert bool(jnp.all(sde.successful))
    assert 0 < float(sde.drift) < 1e-4
    assert err[2] < 10 * float(sde.drift), err


@pytest.fixture(scope="module")
def noisy(small):
    field, x0, kw = small
    return solve_flow(field, x0, T, noise=0.5, key=jr.PRNGKey(7), **kw)


def test_bitwise_across_chunks_and_the_key_decides(small, noisy):
    """One key: chunk 1 and chunk 4 give the same bits (states and every metric); another key
    gives another path; the drift is recorded per saved time as ``radius_drift``."""
    field, x0, kw = small
    a = noisy
    b = solve_flow(field, x0, T, noise=0.5, key=jr.PRNGKey(7), chunk=1, **kw)
    c = solve_flow(field, x0, T, noise=0.5, key=jr.PRNGKey(8), **kw)
    assert np.array_equal(np.asarray(a.states), np.asarray(b.states))
    for m in a.metrics:
        assert np.array_equal(a.metrics[m], b.metrics[m]), m
    assert not np.allclose(np.asarray(a.states[:, -1]), np.asarray(c.states[:, -1]))
    assert float(a.drift) == float(np.max(a.metrics["radius_drift"])) > 0
    assert set(a.metrics) >= {"order_parameter", "harmonic_1", "harmonic_2", "harmonic_3", "clustered"}


def test_radius_drift_falls_with_the_step(small, noisy):
    """The drift is the scheme's error: a quarter of the step gives less than half the drift
    (Heun's radius error is O(dt)), and both are reported, never renormalised away."""
    field, x0, kw = small
    fine = solve_flow(field, x0, T, noise=0.5, key=jr.PRNGKey(7), **{**kw, "dt": DT / 4})
    print("drift", float(noisy.drift), float(fine.drift))
    assert 0 < float(fine.drift) < float(noisy.drift) / 2
    # The same Brownian path at both steps: the two solutions agree to the scheme's error.
    assert np.max(np.abs(np.asarray(fine.states - noisy.states))) < 0.05


def _free_field(n, d):
    """A field that is identically zero (V = 0): the SDE is Brownian motion on the sphere."""
    return FlowField(np.ones((n, n), bool), d, "usa", v=np.zeros((d, d)))


@pytest.mark.slow  # 3000 tokens (or 1000 trajectories): a statistical oracle
def test_brownian_motion_on_the_circle_has_angle_variance_sigma2_t():
    """d = 2, zero field, 3000 tokens from angle 0: the angle is sigma B_t, variance sigma^2 t.
    n = 3000 > 1024 also runs the row-blocked drift."""
    n, sigma, t = 3000, 0.5, 1.0
    x0 = np.tile(np.array([[1.0, 0.0]]), (n, 1))
    sol = solve_flow(_free_field(n, 2), x0, t, beta=0.0, saves=2, noise=sigma, key=jr.PRNGKey(1), dt=0.02,
                     save_states=True)  # fmt: skip
    x = np.asarray(sol.states[0, -1])
    theta = np.arctan2(x[:, 1], x[:, 0])
    var = sigma**2 * t
    se = var * np.sqrt(2 / n)  # the sample variance of a normal: sd var * sqrt(2 / n)
    assert abs(np.mean(theta**2) - var) < 4 * se, (np.mean(theta**2), var)
    # Stratonovich keeps the radius: only Heun's error moves it, and it is reported.
    assert 0 < float(sol.drift) < 2e-3


@pytest.mark.slow  # 3000 tokens (or 1000 trajectories): a statistical oracle
def test_brownian_motion_on_s2_mean_cosine_is_exp_minus_sigma2_t():
    r"""d = 3, zero field: $E\langle x_0, x_t\rangle = e^{-\sigma^2 t (d-1)/2} = e^{-\sigma^2 t}$.

    The Itô solution of the same coefficients (Diffrax's Euler) has no drift, so its
    $E\langle x_0, x_t\rangle$ stays 1 and its radius grows ($E|x_t|^2 = 1 + 2\sigma^2 t$): this
    oracle separates the two by far more than the tolerance."""
    n, sigma, t = 3000, 1.0, 0.5
    x0 = np.tile(np.array([[0.0, 0.0, 1.0]]), (n, 1))
    sol = solve_flow(_free_field(n, 3), x0, t, beta=0.0, saves=2, noise=sigma, key=jr.PRNGKey(2), dt=0.01,
                     save_states=True)  # fmt: skip
    cos = np.asarray(sol.states[0, -1, :, 2])
    exact = np.exp(-(sigma**2) * t)
    # Var cos = E cos^2 - (E cos)^2, E cos^2 = 1/3 + 2/3 e^{-3 sigma^2 t} (the l = 2 mode).
    sd = np.sqrt(1 / 3 + 2 / 3 * np.exp(-3 * sigma**2 * t) - exact**2)
    assert abs(np.mean(cos) - exact) < 4 * sd / np.sqrt(n), (np.mean(cos), exact)
    # Heun's radius error is O(dt) per token; the largest over 3000 tokens is reported.
    radius = np.linalg.norm(np.asarray(sol.states[0, -1]), axis=-1)
    assert 0 < float(sol.drift) == np.max(np.abs(radius - 1)) < 0.05
    # Heun's mean radius bias is O(dt) (0.006 here); the Itô solution's E|x_t|^2 = 1 + 2 sigma^2 t
    # would put the mean radius near 1.4.
    assert abs(np.mean(radius) - 1) < 0.01


@pytest.mark.slow  # 3000 tokens (or 1000 trajectories): a statistical oracle
def test_common_noise_is_shared_and_has_rate_sigma2_over_d():
    """Common noise: two tokens that start together stay together (one W for both; independent
    noise would part them), and with A_i = x (SA, both tokens equal) each token is a Brownian
    motion of rate sigma^2 / d, so E<x_0, x_t> = exp(-sigma^2 t (d - 1) / (2 d))."""
    batch, sigma, t, d = 1000, 1.0, 0.5, 3
    field = FlowField(np.ones((2, 2), bool), d, "sa")
    x0 = np.tile(np.array([[[0.0, 0.0, 1.0], [0.0, 0.0, 1.0]]]), (batch, 1, 1))
    sol = solve_flow(field, x0, t, beta=1.0, saves=2, noise=sigma, key=jr.PRNGKey(4), dt=0.01,
                     common_noise=True, save_states=True)  # fmt: skip
    xs = np.asarray(sol.states[:, -1])
    assert np.max(np.abs(xs[:, 0] - xs[:, 1])) < 1e-12
    exact = np.exp(-(sigma**2) * t * (d - 1) / (2 * d))
    assert np.std(xs[:, 0, 2]) > 0.05  # it moved
    se = np.std(xs[:, 0, 2]) / np.sqrt(batch)
    assert abs(np.mean(xs[:, 0, 2]) - exact) < 4 * se + 1e-3, (np.mean(xs[:, 0, 2]), exact)


@pytest.mark.slow
def test_spark_adaptive_succeeds_with_a_small_drift(small):
    """``spark`` (adaptive, space-time Lévy area) at its default tolerance 1e-3: every trajectory
    succeeds and the radius drift stays within a few tolerances."""
    field, x0, _ = small
    sol = solve_flow(field, x0, T, beta=1.0, saves=3, noise=0.5, key=jr.PRNGKey(5))
    assert bool(jnp.all(sol.successful)) and 0 < float(sol.drift) < 1e-2


# The dense and the blocked attention of one field, under one compiled program per dynamics (eager,
# every op compiles its own program, and the blocked one's scan one more).
@eqx.filter_jit
def _dense_and_blocked(field, x):
    from rankdyn._flow._noise import _block_rows

    return field.attention(x, 0.7), _block_rows(field, x, 0.7, 3)


def test_blocked_drift_matches_the_dense_field():
    """The row-blocked attention (blocks of 3 over 10 tokens: padding) equals the dense one for SA
    and USA under a causal mask with general Q, K, V."""
    rng = np.random.default_rng(0)
    n, d = 10, 4
    mask = np.tril(np.ones((n, n), bool))
    q, k, v = (rng.normal(size=(d, d)) for _ in range(3))
    x = jnp.asarray(rng.normal(size=(n, d)))
    for dyn in ("sa", "usa"):
        field = FlowField(mask, d, dyn, q=q, k=k, v=v)
        dense, blocked = _dense_and_blocked(field, x)
        assert np.max(np.abs(np.asarray(blocked - dense))) < 1e-14 * np.max(np.abs(np.asarray(dense))), dyn


def test_refusals_before_compute(tmp_path, capsys):
    """Negative or non-finite sigma, Itô Euler and the ODE solvers with noise, a ProjectedSolver, a
    missing key, key without noise, the noisy solver names without noise, a radial scheme: each a
    UsageError; on the command line one ``error:`` line and exit 2, before JAX is imported."""
    field = FlowField(np.ones((3, 3), bool), 2)
    x0 = np.random.default_rng(0).normal(size=(3, 2))
    key = jr.PRNGKey(0)
    cases = [
        (dict(noise=-0.1, key=key, dt=0.1), "finite number >= 0"),
        (dict(noise=float("nan"), key=key, dt=0.1), "finite number >= 0"),
        (dict(noise=float("inf"), key=key, dt=0.1), "finite number >= 0"),
        (dict(noise=0.1, key=key, solver="euler", dt=0.1), "Itô"),
        (dict(noise=0.1, key=key, solver="rk4", dt=0.1), "not an SDE solver"),
        (dict(noise=0.1, key=key, solver="tsit5"), "not an SDE solver"),
        (dict(noise=0.1, key=key, solver=ProjectedSolver(RK4()), dt=0.1), "renormalises"),
        (dict(noise=0.1, key=key, solver=diffrax.Euler(), dt=0.1), "Stratonovich solver"),
        (dict(noise=0.1, solver="heun", dt=0.1), "needs key="),
        (dict(noise=0.1, key=key, solver="heun"), "needs a step dt"),
        (dict(noise=0.1, key=key, solver="geodesic_heun"), "needs a step dt"),
        (dict(noise=0.1, key=key, solver="geodesic_heun", dt=0.1, rtol=1e-3), "spark only"),
        (dict(solver="geodesic_heun", dt=0.1), "pass noise="),
        (dict(key=key), "go with noise="),
        (dict(solver="heun", dt=0.1), "pass noise="),
        (dict(noise=0.1, key=key, dt=0.1, metrics="mu"), "DensityObserver"),
    ]
    for kwargs, words in cases:
        with pytest.raises(UsageError, match=words):
            solve_flow(field, x0, 1.0, beta=1.0, **kwargs)
    with pytest.raises(UsageError, match="moves the radius"):
        solve_flow(FlowField(np.ones((3, 3), bool), 2, placement="pre"), x0, 1.0, beta=1.0, noise=0.1,
                   key=key, dt=0.1)  # fmt: skip
    out = str(tmp_path / "o")
    for argv, words in [
        (["--noise", "-1"], "--noise must be finite and >= 0"),
        (["--noise", "nan"], "--noise must be finite and >= 0"),
        (["--noise", "0.5", "--solver", "euler", "--dt", "0.1"], "Ito"),
        (["--noise", "0.5", "--solver", "rk4", "--dt", "0.1"], "not an SDE solver"),
        (["--noise", "0.5", "--solver", "tsit5"], "not an SDE solver"),
        (["--solver", "heun", "--dt", "0.1"], "add --noise"),
        (["--solver", "geodesic_heun", "--dt", "0.1"], "add --noise"),
        (["--noise", "0.5", "--solver", "geodesic_heun"], "give its step with --dt"),
        (["--common-noise"], "--common-noise needs --noise"),
    ]:
        assert main(["flow", *argv, "--out", out]) == 2
        err = capsys.readouterr().err
        assert err.count("error:") == 1 and words in err, (argv, err)


@pytest.mark.slow  # one compilation of the noisy piece
def test_geodesic_heun_by_name_keeps_the_radius(small, noisy):
    """``solver="geodesic_heun"`` through `solve_flow`: the radius drift is round-off (Heun's is
    reported above 1e-3 on the same run), and on the same Brownian path (same key) the directions
    agree with Heun's to the strong error of the two fixed-step schemes."""
    field, x0, kw = small
    geo = solve_flow(field, x0, T, noise=0.5, key=jr.PRNGKey(7), solver="geodesic_heun", **kw)
    assert bool(jnp.all(geo.successful))
    assert float(geo.drift) < 1e-13 < 1e-3 < float(noisy.drift)
    states = np.asarray(noisy.states)
    u = states / np.linalg.norm(states, axis=-1, keepdims=True)
    assert np.max(np.abs(np.asarray(geo.states) - u)) < 0.05


@pytest.mark.slow
def test_cli_noise_writes_the_order_parameter(tmp_path):
    """``rankdyn flow --noise 0.3 --dt 0.05``: metrics.json has the order parameter and the drift."""
    import json

    out = tmp_path / "o"
    argv = ["flow", "--noise", "0.3", "--dt", "0.05", "--n", "16", "--batch", "2", "--time", "0.5",
            "--saves", "3", "--x64", "--no-progress", "--out", str(out)]  # fmt: skip
    assert main(argv) == 0
    res = json.loads((out / "metrics.json").read_text())
    assert res["solver"]["name"] == "heun" and res["noise"]["sigma"] == 0.3
    r = res["metrics"]["order_parameter"]["mean"]
    assert len(r) == 3 and all(0 <= v <= 1 for v in r)
    assert 0 < res["solver"]["drift_from_sphere"] < 1e-2


@pytest.mark.slow  # lowers the noisy piece program twice
def test_noisy_piece_holds_no_host_callback(monkeypatch):
    """JAX never writes a program with a host callback to the persistent compilation cache: the
    noisy piece (Heun and geodesic Heun) holds none once Diffrax's re-checks of what `solve_flow`
    checked on the host (the times, dt, the Brownian tree's range [0, T]) are left out; with them
    left in (the control) it holds some."""
    import contextlib

    from rankdyn._flow import _sde
    from rankdyn.flow import DensityObserver, GeodesicHeun

    n, d = 16, 2
    field = FlowField(np.ones((n, n), bool), d, "usa")

    def text(solver, chunk):
        x = jnp.ones((1, chunk, n, d)) / np.sqrt(2)
        keys = jax.vmap(lambda i: jr.fold_in(jr.PRNGKey(0), i))(jnp.arange(chunk))
        cfg = (solver, diffrax.ConstantStepSize(), 0.1, 20, False, False, 0.1 / 16, 1.0)
        args = (jnp.ones(1), jnp.asarray(1.0), keys, jnp.asarray([0.0, 0.5]), jnp.ones(chunk, bool), cfg)
        return _sde._noisy_piece.lower(field, DensityObserver(degree=1), x, *args).as_text()

    for solver in (diffrax.Heun(), GeodesicHeun()):
        assert "callback" not in text(solver, 2), solver
    monkeypatch.setattr(_sde, "host_checked_times", contextlib.nullcontext)
    assert "callback" in text(diffrax.Heun(), 3)  # another shape: traced again
