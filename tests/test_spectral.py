"""Accuracy contract of `rankdyn._observe._spectral.singular_values` and the spectral collapse metrics.

Oracle: float64 LAPACK (NumPy) on matrices U diag(s) V^T with random orthogonal U, V and a
chosen graded spectrum s, so the true singular values are known by construction. Each case is
a vmapped batch (one compile per shape and method).
"""

import functools

import jax
import jax.numpy as jnp
import jaxtyping
import numpy as np
import pytest

import rankdyn as rd
from rankdyn._observe._metrics import collapse_metrics, direction_metrics
from rankdyn._observe._spectral import singular_values

# The vectorised bisection compiles slowly on XLA:CPU (about 10 s per shape): slow marker.
SVD_METHODS = ("lapack", pytest.param("bisection", marks=pytest.mark.slow))
RNG = np.random.default_rng(20241130)


def _orthogonal(m):
    q, r = np.linalg.qr(RNG.standard_normal((m, m)))
    return q * np.sign(np.diag(r))


def graded(n, d, s):
    """A batch of ``(n, d)`` matrices with singular values exactly ``s`` (up to float64 rounding)."""
    k = min(n, d)
    return np.stack([(_orthogonal(n)[:, :k] * s) @ _orthogonal(d)[:, :k].T for _ in range(6)])


#: One jitted function per method, made once: a jit of a new lambda per call compiled again for
#: every call, even at a shape and dtype an earlier call had compiled.
_SVALS = {m: jax.jit(jax.vmap(functools.partial(singular_values, method=m))) for m in ("lapack", "bisection")}


def _svals(x, method):
    return np.asarray(_SVALS[method](jnp.asarray(x)))


def _contract_error(got, ref, dtype):
    """max |s_hat - s| / (k eps sigma_max), the quantity the contract bounds by 8."""
    k = ref.shape[-1]
    return np.max(np.abs(got - ref) / ref[:, :1]) / (k * np.finfo(dtype).eps)


# Spectra: log-graded from 1 to the floor of the dtype's contract (1e-12 in float64, 1e-6 in
# float32), plus exact zeros (rank-deficient).
@pytest.mark.parametrize("method", SVD_METHODS)
@pytest.mark.parametrize("dtype,floor", [(np.float64, 1e-12), (np.float32, 1e-6)])
@pytest.mark.parametrize("n,d", [(12, 20), (20, 12), (9, 9)])
def test_accuracy_contract_graded(method, dtype, floor, n, d):
    k = min(n, d)
    s = np.logspace(0, np.log10(floor), k)
    x = graded(n, d, s)
    ref = np.linalg.svd(x.astype(dtype).astype(np.float64), compute_uv=False)  # rounded input
    got = _svals(x.astype(dtype), method)
    assert got.dtype == dtype
    assert np.all(np.diff(got, axis=-1) <= 0), "not descending"
    assert _contract_error(got, ref, dtype) <= 8.0
    # Against the constructed spectrum too (input rounding adds at most ~eps * sigma_max).
    assert np.max(np.abs(got - s)) <= 8 * k * np.finfo(dtype).eps


@pytest.mark.parametrize("method", SVD_METHODS)
def test_rank_and_sigma_min_exact_on_gapped_spectra(method):
    # Gaps straddle the tolerance by orders of magnitude: 1e-6 relative tolerance in float32
    # separates 1e-4 (counted) from 1e-9 noise-free zeros (not counted); float64 likewise at 1e-10.
    for dtype, tol, kept, dropped in ((np.float32, 1e-6, 1e-4, 0.0), (np.float64, 1e-10, 1e-8, 1e-13)):
        s = np.array([1.0, 0.5, 0.1, kept, kept, dropped, dropped, dropped])
        x = graded(8, 14, s).astype(dtype)
        got = _svals(x, method)
        assert np.all(np.sum(got > tol * got[:, :1], axis=-1) == 5)
        sigma_min = got[:, -1]
        assert np.all(np.abs(sigma_min - dropped) <= 8 * 8 * np.finfo(dtype).eps)


@pytest.mark.parametrize("method", SVD_METHODS)
def test_zero_rank_one_and_shapes(method):
    zero = np.zeros((2, 5, 3))
    assert np.all(_svals(zero, method) == 0.0)
    u, v = RNG.standard_normal((4, 7, 1)), RNG.standard_normal((4, 1, 3))
    got = _svals(u * v, method)  # rank one: sigma_1 = |u| |v|, the rest zero
    exact = np.linalg.norm(u[..., 0], axis=-1) * np.linalg.norm(v[:, 0], axis=-1)
    np.testing.assert_allclose(got[:, 0], exact, rtol=1e-13)
    assert np.max(got[:, 1:]) <= 8 * 3 * np.finfo(np.float64).eps * np.max(exact)
    # Single row / single column: sigma = the Euclidean norm.
    row = RNG.standard_normal((3, 1, 6))
    np.testing.assert_allclose(_svals(row, method)[:, 0], np.linalg.norm(row[:, 0], axis=-1), rtol=1e-14)
    np.testing.assert_allclose(
        _svals(np.swapaxes(row, 1, 2), method)[:, 0], np.linalg.norm(row[:, 0], axis=-1), rtol=1e-14
    )


@pytest.mark.slow
def test_tiny_and_huge_entries_float32():
    # Squares of 1e-20 underflow in float32 and squares of 1e20 overflow; the exact power-of-two
    # rescaling keeps every singular value at the contract's accuracy relative to sigma_max.
    s = np.logspace(0, -6, 8)
    x = graded(8, 16, s)
    for c in (1e-20, 1e20):
        for method in ("lapack", "bisection"):
            got = _svals((c * x).astype(np.float32), method)
            ref = np.linalg.svd((c * x).astype(np.float32).astype(np.float64), compute_uv=False)
            assert np.all(np.isfinite(got))
            assert _contract_error(got, ref, np.float32) <= 8.0


def test_bad_input():
    # Under the test suite's jaxtyping hook the annotation refuses these first; without it the
    # function's own ValueError does.
    with pytest.raises((ValueError, jaxtyping.TypeCheckError)):
        singular_values(jnp.ones((2, 3, 4)))
    with pytest.raises((ValueError, jaxtyping.TypeCheckError)):
        singular_values(jnp.ones((3, 4), jnp.int32))
    with pytest.raises(ValueError, match="method must be one of"):
        singular_values(jnp.ones((3, 4)), method="jacobi")


def test_collapse_metrics_against_numpy_and_under_jit_vmap():
    s = np.array([2.0, 1.0, 0.5, 1e-3, 1e-9, 0.0])
    x = graded(6, 10, s)
    m = jax.jit(jax.vmap(lambda a: collapse_metrics(a, 1e-6)))(jnp.asarray(x))
    assert set(m) == set(rd.metrics.METRIC_NAMES)
    p = s / s.sum()
    nz = p > 0
    expect = {
        "sigma_max": 2.0,
        "sigma_min": 0.0,
        "sigma_ratio": 0.5,
        "num_rank": 4.0,
        "stable_rank": np.sum(s**2) / 4.0,
        "eff_rank": np.exp(-np.sum(p[nz] * np.log(p[nz]))),
    }
    for name, value in expect.items():
        np.testing.assert_allclose(np.asarray(m[name]), value, rtol=1e-12, atol=1e-13, err_msg=name)
    # The direction metrics are unchanged by the rescaling (up to rounding) on ordinary inputs.
    xc = x - x.mean(axis=1, keepdims=True)
    np.testing.assert_allclose(np.asarray(m["mu"]), np.linalg.norm(xc, axis=(1, 2)), rtol=1e-13)


def test_ratios_defined_when_token_norms_underflow():
    # float32 tokens of norm ~1e-20 (e.g. norm="none" with a tiny value scale): squares
    # underflow, which used to make stable_rank 0/0 = NaN. Scale-free metrics must equal those
    # of the unscaled tokens and absolute ones must scale by exactly c.
    x = jnp.asarray(RNG.standard_normal((3, 6, 10)), jnp.float32)
    f = jax.jit(jax.vmap(lambda a: collapse_metrics(a, 1e-4)))
    ref, tiny = f(x), f(x * jnp.float32(1e-20))
    for name in rd.metrics.METRIC_NAMES:
        assert np.all(np.isfinite(np.asarray(tiny[name]))), name
        scale = 1e-20 if name in ("mu", "row_norm_mean", "row_norm_min", "sigma_max", "sigma_min") else 1.0
        np.testing.assert_allclose(
            np.asarray(tiny[name]) / scale, np.asarray(ref[name]), rtol=2e-5, atol=1e-6, err_msg=name
        )
    d = jax.jit(jax.vmap(direction_metrics))(x * jnp.float32(1e-20))
    np.testing.assert_allclose(np.asarray(d["min_cos"]), np.asarray(ref["min_cos"]), rtol=1e-5)


def test_zero_matrix_metrics_are_defined():
    m = jax.jit(collapse_metrics)(jnp.zeros((4, 5)), 1e-6)
    for name in (
        "sigma_max",
        "sigma_min",
        "sigma_ratio",
        "stable_rank",
        "num_rank",
        "eff_rank",
        "mu",
        "mu_rel",
    ):
        assert float(m[name]) == 0.0, name
