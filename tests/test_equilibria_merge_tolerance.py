"""The float32 merge tolerance of equilibria: from the dtype's eps and each point's error estimate.

The 2-D example near its bifurcation (w -> 1+) has two distinct equilibria A and B whose token 2
are 2 sqrt(1 - 1/w^2) apart: 0.02 at w = 1.00005, below the scaled 1e-6 that float32 used
(2.3e-2), which merged them. B computed twice in float32 must still merge.
"""

import jax.numpy as jnp
import numpy as np
import pytest

import rankdyn as rd
from rankdyn._equilibria._dedupe import deduplicate
from rankdyn._equilibria._symmetry import symmetry_group
from rankdyn._observe._tolerances import MERGE_ERRORS, merge_tol, scaled_tol


def test_float32_dedup_keeps_close_distinct_equilibria_and_merges_copies():
    w = 1.00005
    ex = rd.theory.example_2d(w)
    layer = rd.theory.uniform_causal_layer(2, 2, jnp.asarray(ex["W_V"], jnp.float32))
    a, b = (np.asarray(ex[k], np.float32) for k in ("X_A", "X_B"))
    b_again = np.asarray(layer(jnp.asarray(b))[0])  # B once more, moved by float32 rounding
    xs = np.stack([a, b, b_again])
    res = np.array([np.linalg.norm(np.asarray(layer(jnp.asarray(x))[0]) - x) for x in xs])
    # A simple root with multiplier lambda is pinned to residual / |1 - lambda| (token 2's
    # multipliers at A and B are 1 -+ sqrt(1 - 1/w^2), independent of this test's code).
    gap = np.sqrt(1 - 1 / w**2)
    errors = np.maximum(res, np.finfo(np.float32).eps) / gap
    group = symmetry_group(layer)
    new = deduplicate(xs, res, tol=merge_tol(np.float32), errors=MERGE_ERRORS * errors, symmetries=group)
    assert sorted(c.count for c in new) == [1, 2]  # {A}, {B, B again}
    assert any(set(c.members) == {1, 2} for c in new)
    old = deduplicate(xs, res, tol=scaled_tol(1e-6, np.float32), symmetries=group)
    assert len(old) == 1  # the old float32 rule (2.3e-2) merged A into B: this test can fail
    assert merge_tol(np.float32) < 2e-4 and merge_tol(np.float64) < 1e-12


@pytest.mark.slow
def test_float32_polish_refines_and_does_not_jump_to_another_equilibrium():
    # Float64 points through a float32 layer once gave Newton steps of O(1): A and B of the 2-D
    # example (w = 1.001, token 2 0.09 apart) were "polished" onto the collapsed point.
    from rankdyn._equilibria._tree import polish_tokens

    ex = rd.theory.example_2d(1.001)
    layer = rd.theory.uniform_causal_layer(2, 2, jnp.asarray(ex["W_V"], jnp.float32))
    xs = np.stack([np.asarray(ex[k], np.float32) for k in ("X_A", "X_B")])
    xs = np.concatenate([xs, -xs])  # the sign images too
    out, res, err = polish_tokens(layer, xs)
    assert np.abs(out - xs).max() < 1e-4 and res.max() < 1e-5 and err.max() < 1e-4
