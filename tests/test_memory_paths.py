"""Memory on the long-context and search paths: no hidden (n, n) array, estimates before the work.

Oracles: float64 LAPACK (NumPy) for the singular values of the QR route; the StableHLO text and
XLA's own ``memory_analysis`` of the compiled metrics for what they allocate.
"""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rankdyn._observe._metrics import collapse_metrics
from rankdyn._observe._spectral import singular_values
from rankdyn._run._sizing import estimate_parts, metric_entries

RNG = np.random.default_rng(54)


def _orthonormal(m, k):
    q, _ = np.linalg.qr(RNG.standard_normal((m, k)))
    return q


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_qr_route_keeps_the_accuracy_contract(dtype):
    """Tall (4096 x 8) and wide (8 x 4096) matrices take the QR route: |s - s_ref| <= 8 k eps s_max.

    Random Gaussian matrices, and nearly rank-deficient ones (U diag(s) V^T with s graded from 1
    to 1e-6 and two values at 1e-12, below float32's resolution), against float64 LAPACK on the
    same rounded input.
    """
    m, k = 4096, 8
    s = np.r_[np.logspace(0, -6, k - 2), 1e-12, 1e-12]
    deficient = (_orthonormal(m, k) * s) @ _orthonormal(k, k).T
    batch = np.stack([RNG.standard_normal((m, k)), 3.0 * deficient])
    for x in (batch, np.swapaxes(batch, 1, 2)):
        x = x.astype(dtype)
        ref = np.linalg.svd(x.astype(np.float64), compute_uv=False)
        got = np.asarray(jax.jit(jax.vmap(singular_values))(jnp.asarray(x)))
        assert got.dtype == dtype
        err = np.max(np.abs(got - ref) / ref[:, :1]) / (k * np.finfo(dtype).eps)
        assert err <= 8.0, err
        assert np.all(np.diff(got, axis=-1) <= 0)


def test_metrics_at_65536_tokens_hold_no_n_by_n_array():
    """The spectral and cosine metrics of one (65536, 8) matrix: no array with two axes of 65536.

    JAX's CPU gesdd wrapper allocates an m x m U even without vectors (17 GB here); the QR route
    never does. XLA's own count of the temporaries lies within the estimate's metric term.
    """
    n, d = 65536, 8
    lowered = jax.jit(collapse_metrics).lower(jax.ShapeDtypeStruct((n, d), jnp.float32))
    text = lowered.as_text()
    assert not re.search(rf"\b{n}x{n}x", text), "an (n, n) array in the metrics"
    temp = lowered.compile().memory_analysis().temp_size_in_bytes
    budget = (7 * n * d + metric_entries(n)) * 4  # one trajectory of the working-set term
    assert 0 < temp <= budget, (temp, budget)
    # The blocked path's estimate is the metric term there, not the (n, n) scores.
    parts = estimate_parts(
        num=1, chunk=1, n=n, d=d, heads=1, itemsize=4, num_saved=2, num_metrics=13,
        per_trajectory=False, save_states=False, score_entries=1000,
    )  # fmt: skip
    assert parts["working set of one chunk"] == budget
    assert metric_entries(n, ("mu", "stable_rank")) == 0


def test_random_mask_by_row_blocks_is_the_same_mask(monkeypatch):
    """The draw by row blocks (no n^2 float64 numbers) gives the mask of one n x n draw, bit for bit."""
    from rankdyn._model import _masks

    monkeypatch.setattr(_masks, "_DRAW_BLOCK", 1000)  # blocks of 3 and 1 rows, a short last one
    for n, p, seed in [(301, 0.1, 3), (7, 0.5, 0)]:
        ref = np.random.default_rng(seed).random((n, n)) < p
        np.fill_diagonal(ref, True)
        np.testing.assert_array_equal(_masks.random_mask(n, p, seed), ref)


def test_random_mask_estimate_matches_its_peak():
    """`random_mask_bytes` lies within 0.7x-1.5x of tracemalloc's peak of the mask and its CSR."""
    import tracemalloc

    from rankdyn._model._mask_structure import make_mask_structure
    from rankdyn._model._masks import random_mask_bytes

    n, p = 4096, 0.1
    tracemalloc.start()
    try:
        make_mask_structure("random", n, p=p, seed=0)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert 0.7 <= random_mask_bytes(n, p) / peak <= 1.5, (random_mask_bytes(n, p), peak)


def test_cli_refuses_a_random_mask_that_cannot_fit_before_drawing(monkeypatch, tmp_path, capsys):
    """At 65536 tokens the edge-probability mask needs ~28 GiB (once a 32 GiB draw with no check):
    refused with --mask-degree named, before the draw (which would take minutes here)."""
    from rankdyn._model import _mask_structure, _masks
    from rankdyn._run import _memory
    from rankdyn.cli import main

    monkeypatch.setattr(_memory, "host_available", lambda: 8 * 2**30)
    for module in (_masks, _mask_structure):
        monkeypatch.setattr(module, "random_mask", lambda *a, **k: pytest.fail("the mask was drawn"))
    argv = ["simulate", "--mask", "random", "--n", "65536", "--d", "8", "--num-layers", "1"]
    assert main([*argv, "--batch", "1", "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert "error:" in err and "--mask-degree" in err and "random mask" in err and "Traceback" not in err
    assert not (tmp_path / "r").exists()


def test_tree_budget_refuses_a_growing_tree_and_passes_a_small_one():
    """The growth seen in `rankdyn continue --param qk_std --qk gaussian` (n = d = 6: 1, 2, 96
    partials at tokens 1-3) is refused at token 3; a tree that stays at 2 partials is not."""
    from rankdyn._equilibria._census_cost import SearchTooLong, tree_budget, tree_seconds

    lines = []
    check = tree_budget(6, 6, 256, 300.0, lines.append)
    check(0, 1)
    check(1, 2)
    with pytest.raises(SearchTooLong, match=r"96 partial equilibria at token 3 of 6, growing 48x"):
        check(2, 96)
    assert len(lines) == 3 and "token 3 of 6" in lines[-1]
    flat = tree_budget(6, 6, 256, 300.0)
    for i in range(6):
        flat(i, 2)
    # The unit: 24576 starts x 60 steps at token 3 (i = 2) cost 75.2 s, two rounds counted.
    assert tree_seconds(6, 256, [96], first=2) == pytest.approx(2 * 75.2)


@pytest.mark.slow  # 11 s on a loaded 2-core machine: the CLI builds the layer and its symmetries
def test_continue_refuses_a_census_that_cannot_finish(monkeypatch, tmp_path, capsys):
    """`continue --start census` says the search's estimate on stderr and refuses it, naming
    --start FILE and --n/--d; tree_search is replaced by its partial counts (no census run)."""
    from rankdyn._equilibria import _census
    from rankdyn.cli import main

    def fake_tree(layer, key, *, before_token, **kw):
        for i, p in enumerate([1, 2, 96, 4608]):
            before_token(i, p)
        pytest.fail("not refused")

    monkeypatch.setattr(_census, "tree_search", fake_tree)
    argv = ["continue", "--param", "qk_std", "--qk", "gaussian", "--from", "0.5", "--to", "1"]
    rc = main([*argv, "--max-steps", "2", "--no-progress", "--out", str(tmp_path / "c")])
    err = capsys.readouterr().err
    assert rc == 2, err
    assert "start search: tree search, token 1 of 6" in err
    assert "error: --start census" in err and "--start FILE" in err and "--n/--d" in err
    assert "Traceback" not in err
