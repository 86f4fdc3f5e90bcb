"""`causal_pair_phases`: every equilibrium of the causal n = d = 2 post-LN layer on a grid.

Oracles: each equilibrium found is a fixed point of the layer map (residual at round-off) whose
multipliers are those `rankdyn.stability` computes from the layer's Jacobian; with uniform
attention the rank-2 equilibria exist exactly beyond the closed-form folds w_A = sqrt(2p - p^2)
(token 1 on the eigenvector of 1) and w_B = sqrt(2p - 1) (docs/theory.md, "Continuation and
bifurcations"), two of each per sign of token 1, one of family A stable.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rankdyn import SelfAttentionLayer, SphereNorm, stability
from rankdyn._errors import UsageError
from rankdyn.masks import causal_mask
from rankdyn.theory import causal_pair_equilibria, causal_pair_phases

P = 0.75


@pytest.mark.slow
def test_equilibria_are_fixed_points_with_the_layers_multipliers():
    g = np.random.default_rng(0).standard_normal((2, 2, 2))
    w_v, w_q, w_k = np.array([[P, 1.3], [0.0, 1.0]]), g[0], g[1]
    eqs = causal_pair_equilibria(w_v, w_q, w_k)
    assert len(eqs) == 8 and {e["relation"] for e in eqs} == {"same", "opposite", "rank2"}
    layer = SelfAttentionLayer(causal_mask(2), w_q, w_k, w_v, norm=SphereNorm(1.0), placement="post")
    xs = jnp.asarray(np.stack([e["x"] for e in eqs]))
    res = np.max(np.abs(np.asarray(jax.vmap(lambda x: layer(x)[0])(xs)) - np.asarray(xs)))
    assert res <= 1e-12
    reports = stability(layer, xs)
    for e, eig in zip(eqs, np.asarray(reports.eigenvalues), strict=True):
        np.testing.assert_allclose(np.sort(np.abs(eig)), np.sort(e["multipliers"]), rtol=1e-6)
    assert [e["stable"] for e in eqs] == list(np.asarray(reports.classification) == "stable")


def test_uniform_attention_matches_the_closed_form_folds():
    ws = np.linspace(0.4, 1.3, 91)
    w_v = np.zeros((91, 2, 2))
    w_v[:, 0, 0], w_v[:, 0, 1], w_v[:, 1, 1] = P, ws, 1.0
    ph = causal_pair_phases(w_v, np.zeros((2, 2)), np.zeros((2, 2)))
    np.testing.assert_allclose(ph["eigenvalues"], np.broadcast_to([1.0, P], (91, 2)))
    a, b = ph["count"][:, 0, 2], ph["count"][:, 1, 2]
    w_a, w_b = np.sqrt(2 * P - P * P), np.sqrt(2 * P - 1)
    assert np.array_equal(a, np.where(ws > w_a, 2, 0)) and np.array_equal(b, np.where(ws > w_b, 2, 0))
    assert np.array_equal(ph["stable"][:, 0, 2], np.where(ws > w_a, 1, 0)) and not ph["stable"][:, 1].any()
    assert np.all(ph["count"][:, :, 0] == 1) and np.all(ph["stable"][:, 0, 0] == 1)  # x2 = x1, A stable
    with pytest.raises(UsageError, match=r"\(\.\.\., 2, 2\)"):
        causal_pair_phases(np.eye(3), np.eye(3), np.eye(3))
    with pytest.raises(UsageError, match="finite"):
        causal_pair_phases(np.full((2, 2), np.nan), np.eye(2), np.eye(2))
