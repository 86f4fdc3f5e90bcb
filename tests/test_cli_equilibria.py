"""``rankdyn equilibria`` end to end at n = d = 3: the JSON schema and its invariants."""

import json

import numpy as np
import pytest

import rankdyn as rd
from rankdyn.cli import main


@pytest.mark.slow  # ~17 s CPU: three compiled batches plus stability of every equilibrium
def test_cli_equilibria_schema(tmp_path):
    out = tmp_path / "eq"
    rc = main(["equilibria", "--n", "3", "--d", "3", "--w", "4", "--starts", "64", "--chunk", "64",
               "--deflation-rounds", "1", "--deflation-starts", "32", "--max-steps", "60", "--seed", "1",
               "--out", str(out), "--no-progress"])
    assert rc == 0
    data = json.loads((out / "equilibria.json").read_text())
    assert (out / "eigen_moduli.png").stat().st_size > 0
    assert {"config", "equilibria", "by_rank", "status_counts", "rounds", "closed_forms", "timing"} <= set(data)
    assert data["config"]["n"] == 3 and data["config"]["value"] == "bidiagonal"
    assert sum(data["status_counts"].values()) == 64 + 32
    assert set(data["status_counts"]) == {"successful", "max_steps_reached", "nonfinite", "singular"}
    eqs = data["equilibria"]
    assert eqs
    keys = {"rank", "residual", "spectral_radius", "classification", "unstable_dims", "count", "tokens",
            "closed_form_match"}
    layer = rd.uniform_causal_layer(3, 3, rd.bidiagonal(3, 4.0))
    for e in eqs:
        assert keys <= set(e)
        x = np.asarray(e["tokens"])
        assert x.shape == (3, 3)
        assert e["residual"] < 1e-10
        # Independent recomputation of the residual and rank from the written tokens.
        assert float(rd.equilibrium_residual(layer, x)) < 1e-10
        assert int(rd.equilibrium_rank(x)) == e["rank"]
        assert e["classification"] in ("stable", "marginal", "unstable")
        assert (e["unstable_dims"] > 0) == (e["classification"] == "unstable")
        assert e["count"] >= 1 and isinstance(e["closed_form_match"], bool)
    assert sum(data["by_rank"].values()) == len(eqs)
    assert data["by_rank"] == {str(k): sum(e["rank"] == k for e in eqs) for k in (1, 2, 3)}
    # The all-(+-e_d) rank-1 equilibrium is found and is a closed form (SPEC §5.2, k = 1).
    assert any(e["rank"] == 1 and e["closed_form_match"] for e in eqs)
    cf = data["closed_forms"]
    assert cf["total"] == len(rd.all_closed_form_equilibria(3, 3, 4.0)) and 1 <= cf["found"] <= cf["total"]
