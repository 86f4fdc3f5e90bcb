"""The O(n d) observables of the noisy flow against NumPy's n x n formulas, and the random-weight
depth's diffusive scaling."""

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest

from rankdyn._errors import UsageError
from rankdyn.flow import (
    DensityObserver,
    circle_cluster_count,
    circle_wasserstein1,
    cluster_count,
    harmonics,
    order_parameter,
    random_depth_layer,
    random_depth_values,
)

# The tests' library calls, each under one compiled program per shape (eager, every op of every
# new shape compiles its own program); module-level, so the tests that share a shape share it.
_harmonics_and_r = eqx.filter_jit(lambda x: (harmonics(x, 3), order_parameter(x)))
_both_counts = jax.jit(lambda x, c: (circle_cluster_count(x, c), cluster_count(x, c)))
_default_count = jax.jit(lambda x: circle_cluster_count(x))
_observe_batch = eqx.filter_jit(lambda obs, xs: jax.vmap(obs, in_axes=(None, 0, None))(0.0, xs, 1.0))
_layer_steps = eqx.filter_jit(lambda layer, x, ts: jax.vmap(lambda t: layer(x, t)[0])(ts))


def _sphere(rng, n, d):
    x = rng.normal(size=(n, d))
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def test_harmonics_and_order_parameter_against_the_pair_sums():
    """a_l^2 = mean_ij Z_l(<x_i, x_j>) with Z_l Chebyshev (S^1) or Legendre (S^2), by NumPy's n x n
    Gram matrix; on S^1 also |mean e^{i l theta}|; |mean x_i| by NumPy."""
    rng = np.random.default_rng(0)
    for d, poly in ((2, np.polynomial.chebyshev.Chebyshev), (3, np.polynomial.legendre.Legendre)):
        # A clustered and a spread configuration.
        for x in (_sphere(rng, 200, d), _sphere(rng, 1, d) + 0.3 * rng.normal(size=(200, d))):
            x = x / np.linalg.norm(x, axis=1, keepdims=True)
            g = np.clip(x @ x.T, -1, 1)
            want = [np.sqrt(max(np.mean(poly.basis(ell)(g)), 0)) for ell in (1, 2, 3)]
            got, r = _harmonics_and_r(jnp.asarray(x))
            got = np.asarray(got)
            np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)
            assert abs(float(r) - np.linalg.norm(x.mean(0))) < 1e-14
            if d == 2:
                th = np.arctan2(x[:, 1], x[:, 0])
                four = [abs(np.mean(np.exp(1j * ell * th))) for ell in (1, 2, 3)]
                np.testing.assert_allclose(got, four, rtol=1e-10, atol=1e-12)
    with pytest.raises(UsageError, match="S\\^1 \\(d = 2\\) and S\\^2"):
        harmonics(jnp.ones((3, 4)))
    with pytest.raises(UsageError, match="degree"):
        harmonics(jnp.ones((3, 2)), 4)


def test_circle_cluster_count_is_cluster_count_on_the_circle():
    """Clusters on S^1 from sorted angles equal the graph components of `cluster_count`, for
    clusters that straddle the angle -pi = pi cut, and for one chain around the circle."""
    rng = np.random.default_rng(1)
    centres = np.array([np.pi - 0.01, 1.0, -2.0, 2.5])
    th = np.concatenate([c + 0.02 * rng.normal(size=30) for c in centres])
    cases = [th, np.linspace(-np.pi, np.pi, 400, endpoint=False), rng.uniform(-np.pi, np.pi, 50)]
    for t in cases:
        x = jnp.asarray(np.stack([np.cos(t), np.sin(t)], axis=1))
        for c in (0.99, 0.9):
            circle, graph = _both_counts(x, jnp.asarray(c))
            assert float(circle) == float(graph), (len(t), c)
    assert float(_default_count(jnp.asarray(np.stack([np.cos(th), np.sin(th)], 1)))) == 4


def _w1_grid(theta, p, grid=400_000):
    """NumPy oracle: min_alpha int |F_mu - F_nu - alpha| on a fine grid (alpha the grid median)."""
    t = (np.arange(grid) + 0.5) * 2 * np.pi / grid
    f_mu = np.searchsorted(np.sort(np.mod(theta, 2 * np.pi)), t, side="right") / len(theta)
    m = len(p)
    k = np.minimum((t / (2 * np.pi / m)).astype(int), m - 1)
    cum = np.concatenate([[0], np.cumsum(p / p.sum())])
    f_nu = cum[k] + (p / p.sum())[k] * (t - k * 2 * np.pi / m) / (2 * np.pi / m)
    dd = f_mu - f_nu
    return np.mean(np.abs(dd - np.median(dd))) * 2 * np.pi


def test_circle_wasserstein1_against_a_grid_and_the_equispaced_closed_form():
    """W1 on S^1: n equispaced atoms against the uniform density are pi / (2n) apart (each atom
    spreads its mass 1/n over an arc of length 2 pi / n, mean distance pi / (2n)); random tokens
    against a bumpy density agree with a 400000-point NumPy quadrature; a cluster against its own
    rotated copy's density is the rotation angle."""
    n = 64
    th = np.pi / n + 2 * np.pi * np.arange(n) / n
    x = jnp.asarray(np.stack([np.cos(th), np.sin(th)], 1))
    assert abs(float(circle_wasserstein1(x, jnp.ones(128))) - np.pi / (2 * n)) < 1e-12
    rng = np.random.default_rng(4)
    th = rng.vonmises(1.0, 2.0, size=300)
    p = 1 + 0.8 * np.cos(2 * np.pi * (np.arange(50) + 0.5) / 50 - 2.0)
    got = float(circle_wasserstein1(jnp.asarray(np.stack([np.cos(th), np.sin(th)], 1)), jnp.asarray(p)))
    assert abs(got - _w1_grid(th, p)) < 1e-4, (got, _w1_grid(th, p))
    # All mass on one cell [0, 2 pi / m) against atoms at angle pi / m + 0.3 (inside another cell).
    m, shift = 100, 0.3
    p = np.zeros(m)
    p[0] = 1.0
    xa = jnp.asarray(np.tile([[np.cos(np.pi / m + shift), np.sin(np.pi / m + shift)]], (5, 1)))
    w = float(circle_wasserstein1(xa, jnp.asarray(p)))
    assert abs(w - shift) < 1e-10, w  # the distance is linear across the cell: its mean is at the centre
    with pytest.raises(UsageError, match="S\\^1"):
        circle_wasserstein1(jnp.ones((3, 3)), jnp.ones(4))


def test_density_observer_records_o_nd_metrics():
    """`DensityObserver` on S^1: order parameter, harmonics, clusters; ``clustered`` 1 for a
    tight cluster (diameter < eps) and 0 for a spread one."""
    obs = DensityObserver()
    t = np.linspace(0.3, 0.3 + 1e-3, 16)
    tight = jnp.asarray(np.stack([np.cos(t), np.sin(t)], 1))
    spread = jnp.asarray(_sphere(np.random.default_rng(2), 16, 2))
    out = _observe_batch(obs, jnp.stack([tight, spread]))
    assert set(out) == {"order_parameter", "harmonic_1", "harmonic_2", "harmonic_3", "clusters", "clustered"}
    assert list(np.asarray(out["clustered"])) == [1.0, 0.0]
    assert float(out["clusters"][0]) == 1.0


def test_random_depth_increment_variance_scales_as_h():
    """W_V = I + sigma h^(-1/2) G (step h folded in): the one-layer increment's variance over the
    draws of G is sigma^2 h |P a|^2 (d - 1) / d + O(h^2), so Var / h is the same at h = 1e-2 and 1e-3
    (a scaling without the h^(-1/2) would change it tenfold); its value is checked too."""
    n, d, sigma, beta, draws = 4, 3, 0.7, 1.0, 4000
    rng = np.random.default_rng(3)
    x = jnp.asarray(_sphere(rng, n, d))
    mask = np.ones((n, n), bool)
    ratios = []
    for h in (1e-2, 1e-3):
        layer = random_depth_layer(
            mask, d, draws, key=jr.PRNGKey(0), sigma=sigma, beta=beta, horizon=h * draws
        )
        steps = _layer_steps(layer, x, jnp.arange(draws))
        inc = np.asarray(steps - x[None])
        var = np.mean(np.sum((inc - inc.mean(0)) ** 2, axis=-1), axis=0)  # per token
        # Leading order: a_i = sum_j softmax_j(beta <x_i, x_j>) x_j; G a has covariance |a|^2 / d I
        # and LN keeps its tangent part, d - 1 of the d directions.
        w = np.exp(beta * np.asarray(x @ x.T))
        a = (w / w.sum(1, keepdims=True)) @ np.asarray(x)
        want = sigma**2 * h * np.sum(a * a, 1) * (d - 1) / d
        ratios.append(var / h)
        np.testing.assert_allclose(var, want, rtol=0.15)
    np.testing.assert_allclose(ratios[0], ratios[1], rtol=0.15)
    with pytest.raises(UsageError, match="sigma"):
        random_depth_values(jr.PRNGKey(0), 3, 2, sigma=-1.0)
    with pytest.raises(UsageError, match="num_layers"):
        random_depth_values(jr.PRNGKey(0), 0, 2, sigma=1.0)


def test_circle_wasserstein1_against_scipy_on_an_arc_and_under_rotation():
    """Inside an arc shorter than pi no mass goes round the circle (wrapping costs more than it
    saves), so W1 on S^1 is SciPy's W1 on the line; rotating the tokens and the density by whole
    cells leaves W1 unchanged (also across angle 0, where the CDFs restart)."""
    from scipy.stats import wasserstein_distance

    rng = np.random.default_rng(7)
    m = 400
    cells = (np.arange(m) + 0.5) * 2 * np.pi / m
    p = np.where((cells > 0.3) & (cells < 1.2), 1 + np.sin(3 * cells) ** 2, 0.0)
    th = rng.uniform(0.2, 1.5, size=50)
    x = jnp.asarray(np.stack([np.cos(th), np.sin(th)], 1))
    # The piecewise-constant density on the line: 2000 equispaced points per cell, weighted.
    sub = (np.arange(2000) + 0.5) / 2000 * 2 * np.pi / m
    pts = (cells[:, None] - np.pi / m + sub[None, :]).ravel()
    w = np.repeat(p, sub.size)
    want = wasserstein_distance(th, pts[w > 0], v_weights=w[w > 0])
    assert abs(float(circle_wasserstein1(x, jnp.asarray(p))) - want) < 1e-6, want
    # Rotation by k whole cells, k chosen so that the support crosses angle 0.
    th2 = rng.vonmises(0.5, 1.0, size=80)
    q = 1 + 0.7 * np.cos(cells - 1.0)
    base = float(circle_wasserstein1(jnp.asarray(np.stack([np.cos(th2), np.sin(th2)], 1)), jnp.asarray(q)))
    for k in (37, 250):
        a = 2 * np.pi * k / m
        xr = jnp.asarray(np.stack([np.cos(th2 + a), np.sin(th2 + a)], 1))
        assert abs(float(circle_wasserstein1(xr, jnp.asarray(np.roll(q, k)))) - base) < 1e-12, k
    assert base > 0.05  # the case is not a trivial zero
