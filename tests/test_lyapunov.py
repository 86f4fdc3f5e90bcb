"""Lyapunov spectra (rankdyn.lyapunov): known exponents of maps, multipliers of a stable fixed
point of the layer map, the flow's single cluster, bad input and flags. (Sharded over several
devices: tests/test_sharding.py, in its one multi-device process.)"""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import rankdyn
from rankdyn._lyapunov._orthonormal import _lower_inverse, orthonormalise
from rankdyn._lyapunov._plan import MAX_EVERY, make_plan, next_every
from rankdyn.flow import FlowField
from rankdyn.lyapunov import (
    FLAG_NONFINITE,
    FLAG_UNDERFLOW,
    LyapunovResult,
    flag_names,
    lyapunov_spectrum_flow,
    spectrum_dim,
)

# Hénon (a = 1.4, b = 0.3): lambda_1 = 0.41922 (Sprott, "Chaos and Time-Series Analysis", table
# of exponents; ChaosTools' test checks ~0.419); lambda_1 + lambda_2 = log b exactly (det Df = -b).
HENON_L1 = 0.41922


#: `next_every` as the QR loop runs it, traced (one program per plan and shape; called op by op,
#: each of its operations compiled a program of its own).
_next_every = eqx.filter_jit(next_every)


def henon(x):
    return jnp.stack([1 - 1.4 * x[0] ** 2 + x[1], 0.3 * x[0]])


def logistic(x):
    return 4.0 * x * (1 - x)


@pytest.mark.slow
def test_henon_and_logistic_oracles(getkey):
    x0 = 0.1 * jax.random.uniform(getkey(), (32, 2))
    r = rankdyn.lyapunov_spectrum_map(henon, x0, 20000, discard=500, key=jax.random.key(0))
    assert isinstance(r, LyapunovResult) and r.exponents.shape == (32, 2) and r.space == "map"
    assert int(r.count) == 32 and r.num_flagged == 0
    mean = np.asarray(r.mean)
    assert abs(mean[0] - HENON_L1) < 1e-3
    assert abs(mean[1] - (np.log(0.3) - HENON_L1)) < 1e-3
    # The sum is the log-determinant per step, exact to rounding for every trajectory.
    np.testing.assert_allclose(np.sum(r.exponents, axis=-1), np.log(0.3), atol=1e-10)
    # Descending order, and running estimates that end at the final value.
    assert np.all(np.diff(np.asarray(r.exponents), axis=-1) <= 0)
    np.testing.assert_allclose(np.asarray(r.running_mean)[-1], mean, atol=1e-12)
    assert np.asarray(r.depths)[-1] == 20000.0
    lg = rankdyn.lyapunov_spectrum_map(
        logistic, jax.random.uniform(getkey(), (16, 1), minval=0.1, maxval=0.9), 20000, key=jax.random.key(0)
    )
    assert abs(np.asarray(lg.mean)[0] - np.log(2.0)) < 1e-3
    # The oracle fails on a plausible bug: forgetting the log (summing |R_ii|) or not
    # re-orthonormalising (qr_every too large makes both columns collapse onto the top one).
    lazy = rankdyn.lyapunov_spectrum_map(
        henon, x0[:4], 20000, discard=500, qr_every=50, key=jax.random.key(0)
    )
    assert abs(np.asarray(lazy.mean)[1] - (np.log(0.3) - HENON_L1)) > 0.1 or lazy.num_flagged > 0


def _stable_layer():
    # Complete mask, skip connection, post sphere-LN: X* = all tokens at e_1 is a fixed point
    # (A X* W_V = 1.5 X*), linearly stable with distinct multiplier moduli 0.8, 0.64, 0.4.
    n, d = 4, 3
    wq = 0.3 * jax.random.normal(jax.random.PRNGKey(1), (d, d))
    wk = 0.3 * jax.random.normal(jax.random.PRNGKey(2), (d, d))
    layer = rankdyn.SelfAttentionLayer(np.ones((n, n), bool), wq, wk, np.diag([1.5, 1.0, 0.6]), skip=True)
    return layer, np.tile([1.0, 0.0, 0.0], (n, 1))  # NumPy: the same numbers, no eager programs


@pytest.mark.slow
def test_stable_equilibrium_exponents_are_log_moduli_of_the_multipliers():
    layer, x = _stable_layer()
    rep = rankdyn.stability(layer, x)
    assert rep.classification == "stable" and rep.residual < 1e-12
    r = rankdyn.lyapunov_spectrum(layer, x, 600, discard=100, key=jax.random.key(0))
    assert r.space == "tangent" and r.dim == spectrum_dim(layer) == 8 and r.exponents.shape == (8,)
    want = np.sort(np.log(rep.moduli))[::-1]
    np.testing.assert_allclose(r.exponents, want, atol=1e-4)
    # Without the tangent projection the 4 radial directions would appear (as -inf, clamped);
    # the full space of the same layer placed "pre" is a different map: here the spectrum
    # must have exactly n (d - 1) finite entries above the clamp.
    assert np.all(np.asarray(r.exponents) > -50)


@pytest.mark.slow
def test_batched_equals_single_and_full_space(getkey):
    layer, _ = _stable_layer()
    x0 = jax.random.normal(getkey(), (3, 4, 3))
    batch = rankdyn.lyapunov_spectrum(layer, x0, 40, k=3, chunk=2, key=jax.random.key(0))
    one = rankdyn.lyapunov_spectrum(layer, x0[1], 40, k=3, key=jax.random.key(0))
    assert batch.exponents.shape == (3, 3)
    np.testing.assert_allclose(batch.mean, np.mean(np.asarray(batch.exponents), axis=0), atol=1e-12)
    assert one.exponents.shape == (3,)
    pre = rankdyn.SelfAttentionLayer(
        layer.mask, layer.weights.w_q, layer.weights.w_k, layer.weights.w_v, placement="pre"
    )
    full = rankdyn.lyapunov_spectrum(pre, x0[:1], 20, key=jax.random.key(0))
    assert spectrum_dim(pre) == 12 and full.space == "full" and full.exponents.shape == (1, 12)


@pytest.mark.slow
def test_flow_single_cluster_gives_the_jacobian_eigenvalues():
    n, d = 4, 3
    field = FlowField(np.ones((n, n), bool), d)
    x = np.tile([0.6, 0.8, 0.0], (n, 1))
    r = lyapunov_spectrum_flow(
        field, x, 30.0, beta=1.0, intervals=60, discard=20, rtol=1e-10, atol=1e-12, key=jax.random.key(0)
    )
    want = np.array([0.0] * (d - 1) + [-1.0] * ((n - 1) * (d - 1)))
    np.testing.assert_allclose(r.exponents, want, atol=1e-5)
    assert r.unit == "per unit time" and r.space == "tangent"


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(k=0), "k=0: expected 1 <= k <= 8 \\(the number of exponents"),
        (dict(k=9), "k=9: expected 1 <= k <= 8"),
        (dict(discard=40), "discard=40: expected 0 <= discard < num_layers=40, or nothing is left"),
        (dict(qr_every=0), "qr_every=0: expected an integer >= 1 or auto"),
        (dict(qr_every=3), "multiples of qr_every=3"),
        (dict(qr_every="fast"), "qr_every='fast': expected an integer >= 1 or auto"),
    ],
)
def test_bad_input_is_a_usage_error(kwargs, message):
    layer, x = _stable_layer()
    with pytest.raises(rankdyn._lyapunov._qr.UsageError, match=message):
        rankdyn.lyapunov_spectrum(layer, x, 40, **kwargs, key=jax.random.key(0))


@pytest.mark.slow
def test_bad_map_input():
    with pytest.raises(ValueError, match="must map an"):
        rankdyn.lyapunov_spectrum_map(lambda x: x[:1], jnp.zeros(2), 10, key=jax.random.key(0))
    with pytest.raises(ValueError, match="k=3: expected 1 <= k <= 2 \\(the number"):
        rankdyn.lyapunov_spectrum_map(henon, jnp.zeros(2), 10, k=3, key=jax.random.key(0))
    with pytest.raises(ValueError, match="NaN"):
        rankdyn.lyapunov_spectrum_map(henon, jnp.array([jnp.nan, 0.0]), 10, key=jax.random.key(0))
    # 200000 tangent vectors of dimension 200000 (~1.3 TB): refused before anything is allocated.
    with pytest.raises(ValueError, match="Lyapunov spectrum of k=200000"):
        rankdyn.lyapunov_spectrum_map(lambda x: 0.5 * x, jnp.zeros(200000), 10, key=jax.random.key(0))
    # The key of the tangent vectors is named by the caller: none is a usage error naming key=,
    # and a new-style key draws the same vectors as the legacy PRNGKey of the same seed.
    with pytest.raises(TypeError, match="key"):
        rankdyn.lyapunov_spectrum_map(henon, jnp.full(2, 0.1), 10)
    with pytest.raises(rankdyn.UsageError, match="needs key="):
        rankdyn.lyapunov_spectrum_map(henon, jnp.full(2, 0.1), 10, key=None)
    with pytest.raises(rankdyn.UsageError, match="must be a jax.random.key"):
        rankdyn.lyapunov_spectrum_map(henon, jnp.full(2, 0.1), 10, key=0)
    x0 = jnp.array([[0.1, 0.2], [0.3, -0.1]])
    new = rankdyn.lyapunov_spectrum_map(henon, x0, 40, qr_every=1, key=jax.random.key(3))
    old = rankdyn.lyapunov_spectrum_map(henon, x0, 40, qr_every=1, key=jax.random.PRNGKey(3))
    other = rankdyn.lyapunov_spectrum_map(henon, x0, 40, qr_every=1, key=jax.random.key(4))
    np.testing.assert_array_equal(new.running_mean, old.running_mean)
    assert not np.array_equal(new.running_mean, other.running_mean)


@pytest.mark.slow
def test_orthonormalise_against_householder_and_numpy():
    inverse, orthonormal = jax.jit(_lower_inverse), jax.jit(orthonormalise)
    # NumPy draws (the statements hold for any Gaussian matrices; jax.random compiled a program
    # per shape), passed to the jitted functions as they are.
    rng = np.random.default_rng(0)
    for k in (3, 64):  # 3: padded to a power of two
        a = rng.normal(size=(2, 4 * k + 5, k))
        low = np.linalg.cholesky(np.einsum("cmi,cmj->cij", a, a))
        np.testing.assert_allclose(inverse(low), np.linalg.inv(low), rtol=1e-10, atol=1e-13)
        q, diag, fell_back = orthonormal(a)
        r = np.linalg.qr(a)[1]
        assert not bool(fell_back)
        np.testing.assert_allclose(diag, np.abs(np.diagonal(r, axis1=1, axis2=2)), rtol=1e-12)
        np.testing.assert_allclose(
            np.einsum("cmi,cmj->cij", q, q), np.broadcast_to(np.eye(k), (2, k, k)), atol=1e-14
        )
    # kappa = 1e12 > u^(-1/2): CholeskyQR2 fails, the chunk falls back to Householder.
    u, v = (np.linalg.qr(rng.normal(size=(s, 6)))[0] for s in (40, 6))
    bad = ((u * np.logspace(0, -12, 6)) @ v.T)[None]
    q, diag, fell_back = orthonormal(bad)
    assert bool(fell_back)
    q = np.asarray(q)
    np.testing.assert_allclose(q[0].T @ q[0], np.eye(6), atol=1e-14)
    # |det R| = the product of the singular values (to ~u kappa = 1e-4; CholeskyQR2's failed
    # factors would be NaN or off by orders of magnitude).
    np.testing.assert_allclose(np.prod(diag), np.prod(np.logspace(0, -12, 6)), rtol=1e-3)


def test_adaptive_interval():
    plan = make_plan(64, 8, "auto")
    assert (
        plan.qr_every == 0 and plan.records[-1] == 64 and all((r - 8) % MAX_EVERY == 0 for r in plan.records)
    )
    ok, no = np.ones(2, bool), np.asarray(False)

    def every(logs, steps=1, fell_back=no, valid=ok):
        return int(_next_every(plan, np.asarray(logs, float), np.int32(steps), valid, fell_back, 1))

    assert every([[0.0, -0.7], [0.0, -0.6]]) == 4  # 4 * 0.7 <= LOG_COND = 4 < 8 * 0.7
    assert every([[0.0, -2.8], [0.0, -2.4]], steps=4) == 4  # the same spread per step
    assert every([[0.3, 0.3], [0.3, 0.3]]) == MAX_EVERY  # no spread, small growth
    assert every([[0.0, -5.0], [0.0, 0.0]]) == 1
    assert every([[-30.0], [-30.0]]) == 1  # one column decays by e^-30 per step: LOG_RANGE = 20
    assert every([[0.0, -0.7], [0.0, -0.7]], fell_back=np.asarray(True)) == 1
    # A flagged trajectory (ok False) does not shorten the interval of the others.
    assert every([[0.0, -0.7], [0.0, -80.0]], valid=np.asarray([True, False])) == 4
    fixed = make_plan(64, 8, 4)
    assert int(_next_every(fixed, np.zeros((1, 2)), np.int32(4), ok[:1], no, 4)) == 4


@pytest.mark.slow  # two whole spectra, auto and every layer
def test_auto_interval_equals_every_layer(getkey):
    # In exact arithmetic the QR method does not depend on the interval; in float64 the adaptive
    # one (here q = 4 or 8: the exponents spread by < 1 per layer) agrees with q = 1 to rounding.
    layer, _ = _stable_layer()
    x0 = jax.random.normal(getkey(), (2, 4, 3))
    auto = rankdyn.lyapunov_spectrum(layer, x0, 96, k=3, discard=16, key=jax.random.key(0))
    every = rankdyn.lyapunov_spectrum(layer, x0, 96, k=3, discard=16, qr_every=1, key=jax.random.key(0))
    assert auto.qr_every == "auto" and every.qr_every == 1
    np.testing.assert_allclose(auto.exponents, every.exponents, atol=1e-12)
    # x -> 1e-200 x: a column decays by e^-460 per step, so "auto" keeps q = 1 and never underflows.
    tiny = rankdyn.lyapunov_spectrum_map(lambda x: 1e-200 * x, jnp.ones((2, 1)), 8, key=jax.random.key(0))
    assert int(tiny.count) == 2 and tiny.num_flagged == 0
    np.testing.assert_allclose(tiny.mean, [np.log(1e-200)], rtol=1e-13)


@pytest.mark.slow
def test_underflow_and_nonfinite_are_flagged_not_averaged():
    # x -> 1e-200 x contracts by e^-460 per step: with qr_every = 4 the tangent vector passes
    # below the smallest normal double between two QR steps. x -> x^2 from 2 overflows.
    tiny = rankdyn.lyapunov_spectrum_map(
        lambda x: 1e-200 * x, jnp.ones((2, 1)), 8, qr_every=4, key=jax.random.key(0)
    )
    assert np.all(np.asarray(tiny.flags) & FLAG_UNDERFLOW) and int(tiny.count) == 0
    assert np.all(np.isnan(np.asarray(tiny.mean)))
    x0 = jnp.array([[1.0], [2.0]])  # 1 is a fixed point with multiplier 2; from 2 it overflows
    blow = rankdyn.lyapunov_spectrum_map(lambda x: x * x, x0, 40, key=jax.random.key(0))
    np.testing.assert_allclose(blow.mean, [np.log(2.0)], rtol=1e-12)
    assert np.asarray(blow.flags).tolist()[1] & FLAG_NONFINITE and flag_names(int(blow.flags[1])) != []
    assert int(blow.count) == 1  # only the clean trajectory enters the statistics
