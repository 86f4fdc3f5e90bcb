"""simulate: reference implementations, theorems' rates, compile-once, bad input (issue 'rankdyn core')."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import PAPER_MASKS, jit_call, python_loop, small_layer, sphere_tokens

import rankdyn as rd
from rankdyn._run._io import CompileTimer

# One compiled program per shape for the metrics the tests read outside `simulate` (called
# eagerly, each of their operations compiled a program of its own: about 40 for collapse_metrics).
_mu, _mu_normalized, _collapse_metrics = (jax.jit(f) for f in (rd.mu, rd.mu_normalized, rd.collapse_metrics))
#: A library function as one compiled program (Python ints, strings and tuples among ``args`` static).


@pytest.mark.slow
def test_scan_equals_python_loop_and_vmap_equals_per_sample(getkey):
    layer = small_layer(getkey(), n=5, d=4, mask="window", value="gaussian", num_layers=7)
    x0 = sphere_tokens(getkey(), 5, 4, batch=3)
    # mu only: the oracle compares states and mu, and the spectral metrics triple the compiles.
    traj = rd.simulate(layer, x0, 7, save_states=True, metrics="mu")
    refs = []
    for b in range(3):
        xb = jnp.asarray(np.asarray(x0)[b])  # sliced on the host: exact, no slicing program
        refs.append(python_loop(layer, xb, 7))
        np.testing.assert_allclose(np.asarray(traj.states[b]), refs[b], atol=1e-13)
        single = rd.simulate(layer, xb, 7, per_trajectory=True, metrics="mu")
        np.testing.assert_allclose(
            np.asarray(traj.metrics["mu"][b]), np.asarray(single.metrics["mu"]), atol=1e-13
        )
    mu_ref = [float(_mu(jnp.asarray(x))) for x in refs[1]]
    np.testing.assert_allclose(np.asarray(traj.metrics["mu"][1]), mu_ref, rtol=1e-12)


@pytest.mark.slow
def test_save_every_and_eps_min_schedule(getkey):
    layer = small_layer(getkey(), n=4, d=4, mask="causal", qk="gaussian", qk_std=2.0)
    x0 = sphere_tokens(getkey(), 4, 4, batch=(2, 3))  # two batch axes
    kw = dict(save_states=True, metrics=("mu", "eps_min"))  # the two it checks
    full = rd.simulate(layer, x0, 12, **kw)
    sparse = rd.simulate(layer, x0, 12, save_every=4, **kw)
    assert sparse.metrics["mu"].shape == (2, 3, 4) and sparse.states.shape == (2, 3, 4, 4, 4)
    np.testing.assert_allclose(np.asarray(sparse.states), np.asarray(full.states)[:, :, ::4], atol=1e-13)
    # eps_min at a saved layer t > 0 is the minimum over the layers since the previous save.
    a = jax.jit(jax.vmap(jax.vmap(jax.vmap(lambda x: layer.attention(x)))))(full.states[:, :, :-1])
    eps = np.where(np.asarray(layer.mask), np.asarray(a)[..., 0, :, :], np.inf).min(axis=(-1, -2))
    np.testing.assert_allclose(np.asarray(full.metrics["eps_min"])[..., 1:], eps, rtol=1e-12)
    np.testing.assert_allclose(
        np.asarray(sparse.metrics["eps_min"])[..., 1], eps[..., :4].min(-1), rtol=1e-12
    )
    assert np.all(np.asarray(sparse.metrics["eps_min"])[..., 0] == eps[..., 0])


def test_metrics_pairwise_identity_and_spectra(getkey):
    x = rd.initial_tokens(getkey(), "gaussian", 7, 5)
    xn = np.asarray(x)
    pair = sum(np.sum((xn[i] - xn[j]) ** 2) for i in range(7) for j in range(7))
    np.testing.assert_allclose(float(_mu(x)) ** 2, pair / (2 * 7), rtol=1e-12)  # docs/theory.md#metrics
    s = np.linalg.svd(xn, compute_uv=False)
    m = _collapse_metrics(x)
    np.testing.assert_allclose(float(m["sigma_min"]), s[-1], rtol=1e-12)
    np.testing.assert_allclose(float(m["stable_rank"]), np.sum(s**2) / s[0] ** 2, rtol=1e-12)
    p = s / s.sum()
    np.testing.assert_allclose(float(m["eff_rank"]), np.exp(-np.sum(p * np.log(p))), rtol=1e-12)
    cos = xn @ xn.T / np.outer(np.linalg.norm(xn, axis=1), np.linalg.norm(xn, axis=1))
    np.testing.assert_allclose(float(m["min_cos"]), cos.min(), rtol=1e-12)
    np.testing.assert_allclose(float(m["mean_abs_cos"]), (np.abs(cos).sum() - 7) / 42, rtol=1e-12)
    # Rank-2 matrix: numerical rank 2, two equal tokens give mu of the rest only.
    low = jnp.asarray(np.outer(np.arange(1.0, 8.0), [1, 0, 0, 0, 0]) + np.outer(np.ones(7), [0, 1, 0, 0, 0]))
    assert float(_collapse_metrics(low)["num_rank"]) == 2.0
    same = jnp.asarray(np.ones((4, 3)))
    assert float(_mu(same)) == 0.0 and float(_mu_normalized(same)) == 0.0


def _mu_directions_and_norms(t, x, args):
    """One function for the four masks below: the mask is an array of the layer, so the four runs
    share one compiled program (a lambda written inside the loop is a new function each time, and
    each run compiled its own)."""
    return {
        "mu": rd.mu(x),
        "mu_normalized": rd.mu_normalized(x),
        "row_norm_mean": jnp.mean(rd.metrics.row_norms(x)),
    }


def _above_floor(mu, rel=1e-12):
    """Mask of the points of a mean mu curve above the round-off floor (relative to mu_0)."""
    return mu > rel * mu[0]


@pytest.mark.slow
def test_theorem1_collapse_at_least_as_fast_as_bound(getkey):
    """Theorem 1: no LN, ||W_V||_2 <= 1 (A3), quasi-strongly connected mask => mu <= C (1-eps^r)^{t/r}.

    Orthogonal W_V has norm exactly 1, so token norms cannot shrink: the decay, checked in the
    direction-only metric too, is genuine consensus and not norm shrinkage. The fitted
    per-layer rate (above the round-off floor) must not exceed the bound's factor computed
    from the measured epsilon and the computed radius.
    """
    n, d, T = 8, 8, 60
    x0 = sphere_tokens(getkey(), n, d, batch=16)
    rates = {}
    key = getkey()
    for mask in PAPER_MASKS:
        layer = small_layer(key, n=n, d=d, mask=mask, placement="none", value="orthogonal", qk="gaussian")
        traj = rd.simulate(layer, x0, T, observe=_mu_directions_and_norms, per_trajectory=True)
        info = rd.graph_info(np.asarray(layer.mask))
        s = traj.summary.to_dict()
        eps = float(np.min(np.asarray(traj.metrics["eps_min"])))
        bound = rd.theory.theorem1_rate(eps, info.radius)
        for name in ("mu", "mu_normalized"):
            m = s[name]["mean"]
            keep = _above_floor(m)
            assert keep.sum() >= 2 and m[-1] < 0.1 * m[0], (mask, name)
            fitted = rd.theory.fit_rate(np.asarray(traj.layers)[keep], m[keep])  # host masks: no program
            assert fitted <= bound, (mask, name, fitted, bound)
        # Norms shrink by averaging but settle at O(1): the collapse is not norm shrinkage.
        assert s["row_norm_mean"]["mean"][-1] > 1e-3
        rates[mask] = rd.theory.fit_rate(
            np.asarray(traj.layers)[_above_floor(s["mu"]["mean"])],
            s["mu"]["mean"][_above_floor(s["mu"]["mean"])],
        )
    # Radius-1 masks collapse faster than the windows (radius 4 and 7 at n = 8).
    assert max(rates["complete"], rates["causal"]) < min(rates["window"], rates["window-uni"])


@pytest.mark.slow
def test_theorem2_ln_orthogonal_complete_collapses_exponentially(getkey):
    """Theorem 2: post-LN, orthogonal W_V, complete mask, n <= d, full-rank x0 => mu -> 0 exponentially.

    Checked as "at least exponential": mu_t <= mu_0 q^t for all t with one q < 1 (the bound's
    form; convergence may be even faster, since attention becomes uniform as tokens align).
    """
    n, d, T = 4, 6, 40
    layer = small_layer(
        getkey(), n=n, d=d, mask="complete", placement="post", value="orthogonal", qk="gaussian", qk_std=2.0
    )
    x0 = sphere_tokens(getkey(), n, d, batch=8)
    assert np.all(
        np.asarray(jax.jit(jax.vmap(lambda x: rd.collapse_metrics(x)["num_rank"]))(x0)) == n
    )  # condition (*)
    traj = rd.simulate(
        layer,
        x0,
        T,
        observe=lambda t, x, args: {"mu": rd.mu(x), "min_cos": rd.metrics.min_cosine(x)},
        per_trajectory=True,
    )
    mu = np.asarray(traj.metrics["mu"])
    t = np.asarray(traj.layers)
    assert np.all(mu[:, -1] < 1e-12 * mu[:, 0])
    for b in range(mu.shape[0]):
        keep = (t > 0) & _above_floor(mu[b])
        q = np.max((mu[b, keep] / mu[b, 0]) ** (1.0 / t[keep]))
        assert q < 0.99, q
    assert np.all(np.asarray(traj.metrics["min_cos"])[:, -1] > 1 - 1e-12)  # phi -> 1


@pytest.mark.slow
def test_temperature_and_values_sweep_compiles_once(getkey):
    """Array-valued parameters (d_QK, W_V, inputs) never trigger a new compilation."""
    layer = small_layer(getkey(), n=4, d=4, mask="causal")
    x0 = sphere_tokens(getkey(), 4, 4, batch=2)
    rd.simulate(layer, x0, 6, metrics="mu")
    # The new values are drawn before the timer starts: it times `simulate` alone (drawing them
    # compiles small eager programs of their own the first time in a process).
    others = [
        (
            eqx.tree_at(
                lambda l: l.weights.w_v,
                eqx.tree_at(lambda l: l.dqk, layer, jnp.asarray(dqk)),
                rd.weights.orthogonal(getkey(), 4)[None],
            ),
            sphere_tokens(getkey(), 4, 4, batch=2),
        )
        for dqk in (0.5, 3.0, 40.0)
    ]
    with CompileTimer() as timer:
        for other, x in others:
            rd.simulate(other, x, 6, metrics="mu")
    assert timer.compile_s == 0.0
    # And a vmap over temperatures is one program whose members differ.
    dqks = jnp.array([0.01, 1.0, 100.0])
    stack = eqx.filter_vmap(lambda q: eqx.tree_at(lambda l: l.dqk, layer, q))(dqks)
    traj = eqx.filter_vmap(lambda l: rd.simulate(l, x0, 6, per_trajectory=True, metrics="mu"))(stack)
    assert traj.metrics["mu"].shape == (3, 2, 7)
    assert len({round(float(v), 8) for v in np.asarray(traj.metrics["mu"])[:, 0, -1]}) == 3


def test_simulate_bad_input_errors(getkey):
    layer = small_layer(getkey(), n=4, d=4)
    with pytest.raises(ValueError, match=r"x0 must have shape \(\.\.\., n, d\) = \(\.\.\., 4, 4\)"):
        rd.simulate(layer, jnp.ones((4, 5)), 3)
    with pytest.raises(ValueError, match="NaN or infinite"):
        rd.simulate(layer, jnp.full((4, 4), jnp.nan), 3)
    with pytest.raises(ValueError, match="multiple of save_every"):
        rd.simulate(layer, jnp.ones((4, 4)), 10, save_every=3)
    per = rd.make_layer(getkey(), n=4, d=4, num_layers=5)
    with pytest.raises(ValueError, match="per-layer weights for 5 layers"):
        rd.simulate(per, jnp.ones((4, 4)), 6)
    drop = rd.make_layer(getkey(), n=4, d=4, dropout=0.2)
    with pytest.raises(ValueError, match="key"):
        rd.simulate(drop, jnp.ones((4, 4)), 2)


def test_weight_families_and_inputs(getkey):
    q = np.asarray(jit_call(rd.weights.orthogonal, getkey(), 6))
    np.testing.assert_allclose(q @ q.T, np.eye(6), atol=1e-13)
    np.testing.assert_allclose(
        np.linalg.norm(np.asarray(jit_call(rd.weights.value_matrix, getkey(), "scaled", 6)), 2),
        1.0,
        rtol=1e-12,
    )
    j = np.asarray(rd.weights.jordan_block(5, 3, 2.5))
    want = np.eye(5)
    want[2, 3] = want[3, 4] = 2.5
    np.testing.assert_array_equal(j, want)
    np.testing.assert_array_equal(
        np.asarray(rd.weights.bidiagonal(3, 4.0)), [[1, 4, 0], [0, 1, 4], [0, 0, 1]]
    )
    b = np.asarray(jit_call(rd.weights.bert_uniform, getkey(), (64, 8)))
    assert np.abs(b).max() <= 1 / 8 and np.abs(b).max() > 0.9 / 8
    nn = np.asarray(jit_call(rd.initial_tokens, getkey(), "nonneg", 10, 5, 4))  # batch=4
    assert np.all(np.einsum("bnd,bmd->bnm", nn, nn) >= 0)
    bert = np.asarray(jit_call(rd.initial_tokens, getkey(), "bert", 10, 16))
    np.testing.assert_allclose(np.linalg.norm(bert, axis=1), 4.0, rtol=1e-12)
    np.testing.assert_allclose(bert.mean(1), 0.0, atol=1e-12)
    with pytest.raises(ValueError, match="unknown initial condition"):
        rd.initial_tokens(getkey(), "uniform", 3, 3)


def test_fit_rate_recovers_geometric_decay():
    t = np.arange(50)
    assert abs(rd.theory.fit_rate(t, 3.0 * 0.8**t) - 0.8) < 1e-12
    assert np.isnan(rd.theory.fit_rate(t[:1], [1.0]))
    assert rd.theory.theorem1_rate(0.5, 1) == 0.5
    assert abs(rd.theory.theorem1_rate(0.5, 2) - 0.75**0.5) < 1e-15


def test_logit_bound_norms_against_numpy_in_float64():
    """The logit check's norms (`max_norm`, `spectral_norm`) against NumPy in float64.

    float32 entries of 1e30 overflow a float32 sum of squares: the bound must fall back to
    float64, not report inf (which would refuse a run whose logits fit).
    """
    from rankdyn._run._input_checks import max_norm, spectral_norm

    rng = np.random.default_rng(0)
    x = rng.standard_normal((5, 7, 9)).astype(np.float32)
    rows = np.linalg.norm(x.astype(np.float64), axis=-1).max()
    mats = np.linalg.norm(x.astype(np.float64), axis=(-2, -1)).max()
    assert max_norm(x, 1) == pytest.approx(rows, rel=1e-6)
    assert max_norm(x, 2) == pytest.approx(mats, rel=1e-6)
    big = 1e30 * x
    assert max_norm(big, 1) == pytest.approx(1e30 * rows, rel=1e-6)  # float32 squares overflow
    w = rng.standard_normal((3, 40, 6)) * np.array([1.0, 1e-3, 50.0])[:, None, None]
    for a in (w, np.swapaxes(w, -1, -2)):  # both sides: the Gram of the smaller one
        assert spectral_norm(a) == pytest.approx(np.linalg.svd(a, compute_uv=False).max(), rel=1e-12)
