"""equilibrium_census: the search pipeline as one call finds every rank of the paper's construction."""

import jax.random as jr
import numpy as np
import pytest

import rankdyn as rd


@pytest.mark.slow
def test_census_finds_every_rank_and_matches_closed_forms():
    n = d = 3
    w = 3.0
    layer = rd.uniform_causal_layer(n, d, rd.bidiagonal(d, w))
    closed = rd.all_closed_form_equilibria(n, d, w)
    census = rd.equilibrium_census(layer, jr.PRNGKey(0), starts=256, chunk=256, deflation_rounds=1,
                                   closed_forms=closed, progress=False)
    eqs = census["equilibria"]
    assert census["by_rank"] == {k: sum(e["rank"] == int(k) for e in eqs) for k in ("1", "2", "3")}
    assert all(census["by_rank"][k] >= 1 for k in ("1", "2", "3"))
    assert max(e["residual"] for e in eqs) < 1e-10
    # Every equilibrium really is one (recomputed here), and the full-rank ones are closed forms.
    for e in eqs:
        assert float(rd.equilibrium_residual(layer, np.asarray(e["tokens"]))) < 1e-10
    assert all(e["closed_form_match"] for e in eqs if e["rank"] == 3)
    rank1 = census["closed_forms"]["by_rank"]["1"]
    assert rank1["found"] == rank1["total"] == 2  # +e_d and -e_d (one class modulo sign)
    assert sum(census["status_counts"].values()) == 256 + 64
    # Rank 1 (all tokens at +-e_d) is marginal; saddles exist among the full-rank ones (SPEC §5.6).
    # (Not all of them at w = 3: one full-rank class here has moduli 1, 1, 1, 0.97, 0.97, 0.06.)
    assert {e["classification"] for e in eqs if e["rank"] == 1} == {"marginal"}
    assert any(e["classification"] == "unstable" for e in eqs if e["rank"] == 3)
