"""Equilibrium search: residuals, closed forms, status codes, deflation, dedup, one trace.

Oracles: the paper's closed-form equilibria (App. F.1), the exact symmetry X -> -X of the
map, and the structural fact that the causal bidiagonal dynamics has rank-k equilibria only
through "chain" steps (so every rank-n equilibrium is a closed form), the 2-D example's points
A and B (App. E) for user-supplied Optimistix solvers.
"""

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import lineax as lx
import numpy as np
import optimistix as optx
import pytest

import rankdyn as rd
from rankdyn._equilibria._symmetry import group_distance as _distance

N = D = 4
W = 5.0


def _layer(w=W, n=N, d=D, placement="post"):
    return rd.theory.uniform_causal_layer(n, d, rd.weights.bidiagonal(d, w), placement=placement)


@eqx.filter_jit
def _starts(key, batch, n=N, d=D):
    """Random starts on the spheres, one compiled program per shape (drawn op by op, the
    normalisation compiled a program per operation; jitted, the tokens differ by an ulp)."""
    return rd.initial_tokens(key, "sphere", n, d, batch=batch)


#: The residual and the rank as one compiled program each (op by op, every operation of the
#: layer compiled a program of its own).
_residual = eqx.filter_jit(rd.equilibria.equilibrium_residual)
_rank = eqx.filter_jit(rd.equilibria.equilibrium_rank)


@pytest.fixture(scope="module")
def found():
    """One batched solve shared by several tests (one compile). Start 0 is NaN."""
    layer = _layer()
    x0 = np.array(_starts(jr.PRNGKey(3), 128))  # edited in NumPy (eager .at compiled a scatter)
    x0[0] = np.nan
    return layer, x0, rd.find_equilibria(layer, x0, throw=False)


def test_residuals_and_statuses(found):
    layer, x0, sol = found
    assert sol.x.shape == x0.shape and sol.residual.shape == (128,) and sol.steps.shape == (128,)
    # The NaN start is reported as non-finite and did not poison the batch.
    assert sol.status[0] == "nonfinite" and np.isnan(np.asarray(sol.residual)[0])
    ok = np.asarray(sol.successful)
    assert ok[1:].mean() > 0.9
    res = np.asarray(sol.residual)[ok]
    assert res.max() < 1e-10
    # The reported residual is the true one, recomputed independently.
    for x, r in zip(np.asarray(sol.x)[ok][:5], res[:5]):
        assert abs(float(_residual(layer, x)) - r) < 1e-13
    # Post-LN equilibria lie on the spheres.
    assert np.allclose(np.linalg.norm(np.asarray(sol.x)[ok], axis=-1), 1.0, atol=1e-12)
    counts = sol.status_counts()
    assert sum(counts.values()) == 128 and counts["successful"] == ok.sum() and counts["nonfinite"] == 1


def test_found_equilibria_match_closed_forms(found):
    layer, _, sol = found
    ok = np.asarray(sol.successful)
    group = rd.equilibria.symmetry_group(layer)
    assert group.sign and not group.all_permutations and len(group.permutations) == 1
    classes = rd.equilibria.deduplicate(np.asarray(sol.x)[ok], np.asarray(sol.residual)[ok], symmetries=group)
    closed = [(k, np.asarray(x)) for k, x in rd.theory.all_closed_form_equilibria(N, D, W)]
    matched_ranks = set()
    for c in classes:
        dist = min(_distance(cx, c.x, group) for _, cx in closed)
        rank = int(_rank(c.x))
        if dist < 2e-2:
            k = [k for k, cx in closed if _distance(cx, c.x, group) < 2e-2][0]
            assert rank == k  # the numerical rank agrees with the closed form's rank
            matched_ranks.add(k)
        # Structure (rankdyn._equilibria._exact): rank-n equilibria are all closed forms.
        if rank == N:
            assert dist < 2e-2
    assert 1 in matched_ranks  # the attractor all-tokens-at-(+-e_d) is always found
    # Every class is a distinct equilibrium: representatives are far apart modulo symmetry.
    for i, a in enumerate(classes):
        for b in classes[i + 1 :]:
            assert _distance(a.x, b.x, group) > 2e-2


@pytest.mark.slow
def test_rank_biased_search_reaches_full_rank_closed_form():
    """target_rank=n: Adam with the rank penalty, then Newton; finds the rank-n closed forms."""
    layer = _layer()
    sol = rd.find_equilibria(
        layer, _starts(jr.PRNGKey(11), 64), minimise_steps=200, target_rank=N, throw=False
    )
    ok = np.asarray(sol.successful)
    ranks = np.asarray(sol.rank)[ok]
    assert (ranks == N).any()
    group = rd.equilibria.symmetry_group(layer)
    closed_full = [np.asarray(x) for k, x in rd.theory.all_closed_form_equilibria(N, D, W) if k == N]
    for x in np.asarray(sol.x)[ok][ranks == N]:
        assert min(_distance(cx, x, group) for cx in closed_full) < 2e-2
    assert np.asarray(sol.residual)[ok].max() < 1e-10


@pytest.mark.slow
def test_status_codes_and_bad_members():
    layer = _layer()
    x0 = np.array(_starts(jr.PRNGKey(5), 4))
    x0[1] = np.nan
    # Token 2 = -token 1: A X W_V has a zero row, so the LN is undefined (reported, never NaN).
    x0[2, 1] = -x0[2, 0]
    sol = rd.find_equilibria(layer, x0, max_steps=0, throw=False)
    assert list(sol.status[1:3]) == ["nonfinite", "degenerate"]
    sol = rd.find_equilibria(layer, x0, max_steps=2, throw=False)
    # Two Gauss-Newton steps cannot reach 1e-10 from a random start (Optimistix's own status).
    assert sol.status[0] == "nonlinear_max_steps_reached" and sol.status[1] == "nonfinite"
    assert np.all(np.isfinite(np.asarray(sol.x)[[0, 2, 3]]))
    # throw=True is the default at the public boundary: one rankdyn.SolveError, with the count.
    with pytest.raises(rd.SolveError, match="4 start.s. did not reach residual_tol"):
        rd.find_equilibria(layer, x0, max_steps=2)
    # Inside a caller's jit the check runs with the program (Equinox's runtime error).
    with pytest.raises(Exception, match="some start.s. did not reach residual_tol"):
        jax.block_until_ready(jax.jit(lambda x: rd.find_equilibria(layer, x, max_steps=2).x)(x0))
    counts = sol.status_counts()
    assert sum(counts.values()) == 4 and counts["nonfinite"] == 1


def test_results_extend_optimistix():
    assert issubclass(rd.RESULTS, optx.RESULTS)
    assert rd.RESULTS.promote(optx.RESULTS.max_steps_reached) == rd.RESULTS.max_steps_reached
    assert rd.RESULTS.promote(optx.RESULTS.successful) == rd.RESULTS.successful
    from rankdyn._equilibria._solve import status_names

    assert set(status_names()) >= {
        "successful",
        "residual_above_tolerance",
        "degenerate",
        "singular",
    }


@pytest.mark.slow
def test_user_supplied_solvers_find_the_2d_example_points():
    """Any optimistix least-squares solver or root finder; oracle: A, B = (-1/w, +-sqrt(1 - 1/w^2))."""
    w = 2.0
    layer = rd.theory.uniform_causal_layer(2, 2, rd.weights.bidiagonal(2, w))
    c = np.sqrt(1 - 1 / w**2)
    a, b = np.array([[0, 1], [-1 / w, c]]), np.array([[0, 1], [-1 / w, -c]])
    x0 = jnp.asarray(np.stack([a, b]) + 1e-3 * np.array([[[0.3, 1], [0.5, -0.2]], [[-0.2, 1], [0.4, 0.3]]]))
    for solver in (
        optx.Newton(rtol=1e-13, atol=1e-13, linear_solver=lx.SVD()),
        optx.Dogleg(rtol=1e-13, atol=1e-13, linear_solver=lx.SVD()),
    ):
        sol = rd.find_equilibria(layer, x0, solver=solver, max_steps=200, throw=False)
        assert np.asarray(sol.successful).all(), (type(solver).__name__, sol.status)
        # Token 2 converges quadratically (simple root); token 1 (a double root) to ~1e-8.
        np.testing.assert_allclose(np.asarray(sol.x)[:, 1], np.stack([a[1], b[1]]), atol=1e-6)
    # A ValueError naming optimistix (a TypeCheckError first when jaxtyping checks types in tests).
    with pytest.raises(Exception, match="optimistix"):
        rd.find_equilibria(layer, x0, solver="newton")


def test_deflation_finds_a_different_equilibrium(found):
    layer, x0, first = found
    ok = np.asarray(first.successful)
    group = rd.equilibria.symmetry_group(layer)
    classes = rd.equilibria.deduplicate(
        np.asarray(first.x)[ok], np.asarray(first.residual)[ok], symmetries=group
    )
    known = np.concatenate([rd.equilibria.symmetric_images(c.x, group) for c in classes])
    # The 16 starts that, undeflated, went to already known equilibria (all of them did).
    second = rd.find_equilibria(layer, x0[1:17], deflation=known, max_steps=200, throw=False)
    ok2 = np.asarray(second.successful)
    assert ok2.sum() >= 1
    assert np.asarray(second.residual)[ok2].max() < 1e-10
    # Every deflated solve that converged found an equilibrium that is none of the known ones.
    for x in np.asarray(second.x)[ok2]:
        assert min(_distance(c.x, x, group) for c in classes) > 2e-2


def test_dedup_merges_sign_and_permutation_copies(getkey):
    x = np.asarray(_starts(getkey(), 3, n=5, d=3))
    perm = np.array([2, 0, 4, 1, 3])
    xs = np.stack([x[0], -x[0], x[0][perm], -x[0][perm] + 1e-4, x[1], x[2]])
    res = np.array([1e-12, 2e-12, 3e-12, 1e-13, 1e-12, 1e-12])
    complete = {"sign": True, "all_permutations": True, "permutations": []}
    classes = rd.equilibria.deduplicate(xs, res, symmetries=complete, tol=1e-3)
    assert sorted(c.count for c in classes) == [1, 1, 4]
    big = [c for c in classes if c.count == 4][0]
    assert sorted(big.members.tolist()) == [0, 1, 2, 3] and big.residual == 1e-13
    # Without symmetries (e.g. the causal mask without the sign) nothing merges.
    none = {"sign": False, "all_permutations": False, "permutations": []}
    assert len(rd.equilibria.deduplicate(xs, res, symmetries=none, tol=1e-3)) == 6
    # The complete-mask layer really is permutation- and sign-equivariant, and the group says so.
    layer = rd.make_layer(getkey(), n=5, d=3, mask="complete", value="gaussian", qk="gaussian")
    g = rd.equilibria.symmetry_group(layer)
    assert g.sign and g.all_permutations
    assert not rd.equilibria.symmetry_group(_layer()).all_permutations


@pytest.mark.slow
def test_unnormalised_map():
    """placement='none': F(X) = A X W_V; with W_V = I every consensus X = 1 v^T is a fixed point."""
    layer = rd.theory.uniform_causal_layer(3, 3, jnp.eye(3), placement="none")
    sol = rd.find_equilibria(layer, _starts(jr.PRNGKey(2), 8, n=3, d=3), throw=False)
    ok = np.asarray(sol.successful)
    assert ok.all()
    x = np.asarray(sol.x)
    assert np.allclose(x, x[:, :1, :], atol=1e-8)  # all tokens equal (rank-one consensus)
    assert (np.asarray(sol.rank) == 1).all()
    # A contraction W_V = I / 2 has only the zero equilibrium, which has rank 0 (not "full").
    half = rd.theory.uniform_causal_layer(3, 3, 0.5 * jnp.eye(3), placement="none")
    zero = rd.find_equilibria(half, _starts(jr.PRNGKey(2), 8, n=3, d=3), throw=False)
    assert np.asarray(zero.successful).all() and np.abs(np.asarray(zero.x)).max() < 1e-10
    assert (np.asarray(zero.rank) == 0).all()


def test_one_trace_for_several_value_matrices():
    @eqx.filter_jit
    @eqx.debug.assert_max_traces(max_traces=1)
    def solve(layer, x0):
        return rd.find_equilibria(layer, x0, max_steps=20, throw=False)

    x0 = _starts(jr.PRNGKey(0), 4, n=3, d=3)
    for w in (3.0, 4.0, 6.0):
        sol = solve(_layer(w, 3, 3), x0)
        assert np.isfinite(np.asarray(sol.residual)).all()


def test_bad_arguments():
    layer = _layer()
    with pytest.raises(ValueError, match="shape"):
        rd.find_equilibria(layer, jnp.ones((2, 3, 3)))

    with pytest.raises(ValueError, match="target_rank"):
        rd.find_equilibria(layer, jnp.ones((2, N, D)), target_rank=N + 1, minimise_steps=5)
    with pytest.raises(ValueError, match="minimise_steps"):
        rd.find_equilibria(layer, jnp.ones((2, N, D)), target_rank=2)
    with pytest.raises(ValueError, match="method"):
        rd.find_equilibria(layer, jnp.ones((2, N, D)), method="newton")


@pytest.mark.slow
def test_levenberg_marquardt_matches_scipy_lm():
    """``method="lm"`` against scipy's MINPACK LM on a NumPy residual of the 2-D example.

    Token 1 sits on a double root, which LM only approaches (~1e-4, and token 2 moves with it),
    so the reference solves token 2's equation (a simple root near A or B) given the token 1
    that LM returned: both solvers must then agree on token 2."""
    from scipy.optimize import least_squares

    w = 2.0
    wv = np.array([[1.0, w], [0.0, 1.0]])
    layer = rd.theory.uniform_causal_layer(2, 2, rd.weights.bidiagonal(2, w))

    def residual_token2(x2, x1):
        y = (x1 + x2) / 2 @ wv  # uniform causal attention: token 2 averages tokens 1 and 2
        return y / np.linalg.norm(y) - x2

    starts = np.array([[[0.01, 1.0], [-0.45, 0.8]], [[-0.01, 1.0], [-0.55, -0.9]]])
    sol = rd.find_equilibria(layer, jnp.asarray(starts), method="lm", max_steps=300, throw=False)
    got = np.asarray(sol.x)
    for i, s in enumerate(starts):
        ref = least_squares(
            residual_token2,
            s[1] / np.linalg.norm(s[1]),
            args=(got[i, 0],),
            method="lm",
            xtol=1e-15,
            ftol=1e-15,
        )
        assert np.linalg.norm(residual_token2(ref.x, got[i, 0])) < 1e-12
        np.testing.assert_allclose(got[i, 1], ref.x, atol=1e-9)
        np.testing.assert_allclose(got[i, 0], [0.0, 1.0], atol=1e-3)
