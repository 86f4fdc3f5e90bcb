"""Oracles for the linearisation on the product of spheres.

(docs/theory.md#constructions, docs/theory.md#stability.)
"""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import rankdyn as rd

#: `tangent_basis` as one compiled program (called op by op, each operation compiled its own).
_tangent_basis = jax.jit(rd.equilibria.tangent_basis)


def _sphere(key, n, d):
    return rd.initial_tokens(key, "sphere", n, d)


def _bert_layer(key, n, d, mask):
    return rd.make_layer(key, n=n, d=d, mask=mask, value="gaussian", qk="bert", dqk=1.0)


def test_2d_multipliers_analytic():
    r"""Multipliers of the 2-D example at {(0,1), B} and {(0,1), A} (docs/theory.md#constructions).

    Derivation. With uniform causal attention and post-LN the map is
    $x_1 \mapsto x_1W/\|x_1W\|$, $x_2 \mapsto (x_1 + x_2)W/\|(x_1+x_2)W\|$, so its Jacobian is
    block lower triangular and the multipliers are those of the two diagonal (1 x 1) tangent blocks.

    Token 1 at $e = (0, 1)$: $eW = e$. For the tangent step $x_1 = e + \epsilon(-1, 0)$,
    $x_1 W = (-\epsilon, 1 - w\epsilon)$, whose direction is $e + \epsilon(-1, 0) + O(\epsilon^2)$
    (the second component only changes the norm to first order): multiplier $1$.

    Token 2 at $P = (a, b)$ with $a = -1/w$, $b = \mp s$, $s = \sqrt{1-1/w^2}$ (B: $-$, A: $+$):
    $eW + PW = (a, 1 + wa + b) = (a, b) = P$, a unit vector, so the normaliser is 1 and the
    derivative of LN at a unit vector is the projection $I - PP^\top$. The unit tangent at $P$ is
    $\tau = (-b, a)$, and $\tau W = (\tau_1, w\tau_1 + \tau_2) = (-b, -wb + a)$. The multiplier is
    $\langle \tau W, \tau\rangle = b^2 + (-wb + a)a = (a^2 + b^2) - wab = 1 + b$
    (using $a = -1/w$, so $-wab = b$): at B ($b = -s$) it is $1 - \sqrt{1 - 1/w^2}$ (0.134 for
    $w = 2$, attracting), at A ($b = s$) it is $1 + \sqrt{1 - 1/w^2}$ (1.866, repelling).
    """
    for w in (1.5, 2.0, 3.0):
        _check_2d(w)


def _check_2d(w):
    ex = rd.theory.example_2d(w)
    s = math.sqrt(1 - 1 / w**2)
    layer = rd.theory.uniform_causal_layer(2, 2, ex["W_V"])
    rep_b = rd.stability(layer, ex["X_B"])
    rep_a = rd.stability(layer, ex["X_A"])
    np.testing.assert_allclose(np.sort(rep_b.eigenvalues.real), np.sort([1.0, 1 - s]), atol=1e-13)
    np.testing.assert_allclose(np.sort(rep_a.eigenvalues.real), np.sort([1.0, 1 + s]), atol=1e-13)
    np.testing.assert_allclose(rep_b.eigenvalues.imag, 0.0, atol=1e-14)
    np.testing.assert_allclose(sorted(ex["multipliers_B"]), np.sort(rep_b.eigenvalues.real), atol=1e-13)
    assert rep_b.classification == "marginal" and rep_b.unstable_dims == 0 and rep_b.neutral_dims == 1
    assert rep_a.classification == "unstable" and rep_a.unstable_dims == 1 and rep_a.neutral_dims == 1
    assert rep_a.residual < 1e-15 and rep_b.residual < 1e-15
    if w == 2.0:
        assert abs(rep_b.moduli[-1] - 0.1340) < 1e-4 and abs(rep_a.spectral_radius - 1.8660) < 1e-4


def test_tangent_basis_orthonormal(getkey):
    x = np.array(_sphere(getkey(), 5, 4))
    x[0], x[1] = [0.0, 0.0, 0.0, 1.0], [0.0, -0.6, 0.0, 0.8]
    x[2] *= 3.0  # a non-unit token: basis of its direction
    b = np.asarray(_tangent_basis(x))
    assert b.shape == (20, 15)
    np.testing.assert_allclose(b.T @ b, np.eye(15), atol=1e-14)
    radial = np.zeros((5, 20))
    for i in range(5):
        radial[i, 4 * i : 4 * i + 4] = np.asarray(x[i])
    np.testing.assert_allclose(radial @ b, 0.0, atol=1e-14)
    # One basis for the layer map and the flow: field_jacobian's B is this function (the flow's
    # former SVD basis of I - x x^T took the radial direction of a token of norm > sqrt(2)).
    from rankdyn._flow import _equilibria as flow_equilibria

    assert flow_equilibria.tangent_basis is rd.equilibria.tangent_basis


@pytest.mark.slow
def test_tangent_jacobian_matches_finite_differences(getkey):
    n, d = 4, 3
    layer = _bert_layer(getkey(), n, d, "complete")
    x = _sphere(getkey(), n, d)
    jt = np.asarray(rd.equilibria.tangent_jacobian(layer, x))
    b = np.asarray(_tangent_basis(x))
    f = jax.jit(jax.vmap(lambda y: layer(y.reshape(n, d))[0].reshape(-1)))
    h = 1e-5
    x0 = np.asarray(x).reshape(-1)
    steps = h * b.T  # one tangent direction per row, all evaluated in one vmapped call
    fd = ((np.asarray(f(x0[None] + steps)) - np.asarray(f(x0[None] - steps))) / (2 * h)).T
    np.testing.assert_allclose(jt, b.T @ fd, atol=1e-8)
    assert np.abs(jt).max() > 0.1  # not trivially zero


def test_causal_jacobian_block_lower_triangular(getkey):
    n, d = 5, 4
    layer = _bert_layer(getkey(), n, d, "causal")
    x = _sphere(getkey(), n, d)
    for jac, m in [
        (rd.equilibria.tangent_jacobian(layer, x), d - 1),
        (rd.equilibria.layer_jacobian(layer, x), d),
    ]:
        blocks = np.abs(np.asarray(jac)).reshape(n, m, n, m).max(axis=(1, 3))
        assert np.all(blocks[np.triu_indices(n, 1)] == 0.0)
        assert np.all(blocks[np.tril_indices(n)] > 1e-6)


def test_unnormalised_map_full_space():
    r"""placement="none": F(X) = A X W is linear, so DF = kron(A, W^T) (row-major vec) and the
    multipliers are products of eigenvalues of A (1/i) and W (all 1): {1/i}, each d times."""
    n, d, w = 4, 3, 2.0
    wv = rd.weights.bidiagonal(d, w)
    layer = rd.theory.uniform_causal_layer(n, d, wv, placement="none")
    x = jnp.asarray(np.random.default_rng(1).normal(size=(n, d)))
    jac = np.asarray(rd.equilibria.tangent_jacobian(layer, x))
    a = np.tril(np.ones((n, n))) / np.arange(1, n + 1)[:, None]
    np.testing.assert_allclose(jac, np.kron(a, np.asarray(wv).T), atol=1e-15)
    rep = rd.stability(layer, x)
    assert rep.space == "full"
    np.testing.assert_allclose(
        np.sort(rep.moduli), np.sort(np.repeat(1 / np.arange(1, n + 1), d)), atol=1e-10
    )


def test_paper_equilibria_stability_n4():
    r"""docs/theory.md#stability (N = d = 4): rank 1 marginal; rank 3 and full rank unstable (saddles); rank 2
    has the multiplier $1 + c\,s_p\sqrt{1 - c^2/w^2}$ ($c = 3$, derived as in the 2-D test with
    $e W$ replaced by $c\,e_d$ and $a = -c/w$: $\langle\tau W,\tau\rangle = 1 - wab = 1 + cb$),
    so it is marginal for $s_p = -1$ at $w = 4$ (|.| = 0.984) and unstable at $w = 8$ (1.781).
    Multipliers are invariant under $W_V \to cW_V$ (LN removes the scale)."""
    n = d = 4
    c = 3
    for w in (4.0, 8.0):
        layer = rd.theory.uniform_causal_layer(n, d, rd.weights.bidiagonal(d, w))
        scaled = rd.theory.uniform_causal_layer(n, d, 0.3 * rd.weights.bidiagonal(d, w))
        for k, x in rd.theory.all_closed_form_equilibria(n, d, w):
            rep = rd.stability(layer, x)
            assert rep.residual < 1e-14
            assert rep.spectral_radius >= 1.0 - 1e-9  # token 1 at e_d is non-hyperbolic
            if k == 2:
                s_p = float(np.sign(x[c, -1]) * np.sign(x[0, -1]))  # relative to the block sign
                mult = 1 + c * s_p * math.sqrt(1 - c**2 / w**2)
                assert np.min(np.abs(rep.eigenvalues - mult)) < 1e-10
                want = "unstable" if abs(mult) > 1 else "marginal"
            else:
                want = "marginal" if k == 1 else "unstable"
            assert rep.classification == want, (w, k, rep.moduli)
            np.testing.assert_allclose(rd.stability(scaled, x).moduli, rep.moduli, atol=1e-10)
    rep = rd.stability(layer, rd.theory.rank_k_equilibrium(n, d, 2, 8.0))
    assert abs(rep.spectral_radius - 1.7811) < 1e-4 and rep.unstable_dims == 1


def test_defective_multipliers_counted_as_neutral():
    """At n = d = 6 the multiplier 1 is defective (Jordan blocks up to size 5); block + cluster
    handling must still count it as neutral, not as a spurious expanding direction."""
    n = d = 6
    layer = rd.theory.uniform_causal_layer(n, d, rd.weights.bidiagonal(d, 7.0))
    rep1 = rd.stability(layer, rd.theory.rank_k_equilibrium(n, d, 1, 7.0))
    assert rep1.classification == "marginal" and rep1.neutral_dims == d - 1 and rep1.unstable_dims == 0
    # Rank 3: raw dense moduli show spurious 1 + O(1e-5) values; the expanding directions are
    # exactly those with modulus clearly above 1 (3.397 and 2.283 for these signs).
    rep3 = rd.stability(layer, rd.theory.rank_k_equilibrium(n, d, 3, 7.0))
    assert rep3.unstable_dims == int(np.sum(rep3.moduli > 1.01)) == 2
    np.testing.assert_allclose(rep3.moduli[:2], [3.3969286, 2.2826072], atol=1e-6)
    assert rep3.neutral_dims > 0 and rep3.classification == "unstable"


@pytest.mark.slow
def test_leading_eigenvalues_matrix_free(getkey):
    """Arnoldi on JVPs reproduces the dense leading multipliers (closed form, n = d = 4, and a
    generic complete-mask layer at a random point)."""
    n = d = 4
    w = 4.0
    layer = rd.theory.uniform_causal_layer(n, d, rd.weights.bidiagonal(d, w))
    x = rd.theory.rank_k_equilibrium(n, d, 3, w)
    dense = rd.stability(layer, x).moduli
    lead = np.abs(rd.equilibria.leading_eigenvalues(layer, x, k=1, iters=12))  # 1 is defective: only the top
    np.testing.assert_allclose(lead, dense[:1], rtol=1e-8)
    gen = _bert_layer(getkey(), 5, 4, "complete")
    xr = _sphere(getkey(), 5, 4)
    dense = np.sort(np.abs(np.linalg.eigvals(np.asarray(rd.equilibria.tangent_jacobian(gen, xr)))))[::-1]
    full = np.abs(rd.equilibria.leading_eigenvalues(gen, xr, k=3, iters=15))  # iters = dimension: exact
    np.testing.assert_allclose(full, dense[:3], rtol=1e-8)


@pytest.mark.slow  # stability of every closed form, a run and three figures
def test_stability_plots():
    """The plots draw one marker per multiplier and one path per token (Agg backend)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    import rankdyn.plotting as rp

    n = d = 3
    layer = rd.theory.uniform_causal_layer(n, d, rd.weights.bidiagonal(d, 3.0))
    reports = {}
    for k, x in rd.theory.all_closed_form_equilibria(n, d, 3.0):
        reports.setdefault(k, []).append(rd.stability(layer, x))
    ax = rp.plot_eigen_moduli(reports)
    drawn = sum(len(c.get_offsets()) for c in ax.collections)
    assert drawn == sum(len(r.moduli) for reps in reports.values() for r in reps)
    ex = rd.theory.example_2d(2.0)
    # Only the states are drawn: one cheap metric (every metric's SVDs made a large program).
    states = rd.simulate(
        rd.theory.uniform_causal_layer(2, 2, ex["W_V"]), ex["X_B"] + 0.1, 10, save_states=True, metrics="mu"
    ).states
    ax2 = rp.plot_circle_trajectories(states, points={"B": tuple(np.asarray(ex["B"]))})
    assert len(ax2.lines) == 1 + 2 * 3 + 1  # circle, (path, start, end) per token, one point
    res = {"fractions": {"1": 0.9, "2": 0.1}, "ci95": {"1": [0.85, 0.94], "2": [0.06, 0.15]}}
    ax3 = rp.plot_basin_fractions(res)
    assert len(ax3.patches) == 2
    plt.close("all")


@pytest.mark.slow
def test_multipliers_jit_vmap_equal_the_numpy_reference():
    """`multipliers` (jit + vmap over points) equals the dense NumPy path point by point."""
    import jax

    from rankdyn._equilibria._stability import token_blocks
    from rankdyn.equilibria import multipliers

    n = d = 4
    w = 5.0
    layer = rd.theory.uniform_causal_layer(n, d, rd.weights.bidiagonal(d, w))
    xs = jnp.stack([x for _, x in rd.theory.all_closed_form_equilibria(n, d, w)])
    blocks = token_blocks(layer)
    assert blocks == tuple((i,) for i in range(n))  # causal: one strongly connected block per token
    mp = jax.jit(jax.vmap(lambda x: multipliers(layer, x, blocks=blocks)))(xs)
    for j in range(xs.shape[0]):
        jac = np.asarray(rd.equilibria.tangent_jacobian(layer, xs[j]))
        ref = np.sort_complex(np.linalg.eigvals(jac))
        got = np.sort_complex(np.asarray(mp.eigenvalues[j]))
        # Defective multipliers 1 (Jordan blocks) are spread by ~eps^(1/m) in both; compare moduli
        # after the cluster averaging the classification uses.
        eff_ref = np.abs(rd.equilibria.cluster_means(ref, 1e-3))
        cls, unstable, neutral = rd.equilibria.classify_moduli(eff_ref, 1e-6)
        assert ("stable", "marginal", "unstable")[int(mp.code[j])] == cls
        assert int(mp.unstable_dims[j]) == unstable and int(mp.neutral_dims[j]) == neutral
        assert abs(float(mp.spectral_radius[j]) - eff_ref.max()) < 1e-6
        assert np.allclose(np.sort(np.abs(got)), np.sort(np.abs(ref)), atol=2e-3)
    # The batched public call gives the same reports as one-by-one calls.
    reps = rd.stability(layer, xs)
    assert reps.batch_shape == (xs.shape[0],)
    for i, x in enumerate(xs[:3]):
        r, one = reps[i], rd.stability(layer, x)
        assert r.classification == one.classification and abs(r.spectral_radius - one.spectral_radius) < 1e-12
