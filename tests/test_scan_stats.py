"""The depth-scan core and streaming batch statistics: NumPy oracles, memory shapes, --metrics.

Oracles: NumPy mean/std/min/max of the per-trajectory values of the same run (with the
per-layer exclusion of non-finite trajectories), a naive-but-exact float64 reference for the
Chan merge, jaxprs for "no (batch, layers) array" and "no SVD when no spectral metric is asked".
"""

import json

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import rankdyn as rd
from rankdyn._model._tokens import TokenSampler
from rankdyn._observe._metric_observer import ALL_METRICS, MetricObserver, parse_metrics
from rankdyn._observe._stats import chunk_stats, merge_stats
from rankdyn._run import _scan
from rankdyn.cli import main as cli_main


def _numpy_stats(v, ok):
    """Per layer over the trajectories with ok: v, ok (batch, layers)."""
    out = {k: [] for k in ("mean", "std", "min", "max")}
    for j in range(v.shape[1]):
        col = v[ok[:, j], j]
        for k, f in (("mean", np.mean), ("std", np.std), ("min", np.min), ("max", np.max)):
            out[k].append(f(col) if col.size else np.nan)
    return {k: np.asarray(x) for k, x in out.items()}


@pytest.mark.slow  # one program per chunking
def test_streamed_stats_equal_numpy_over_per_trajectory_values_for_any_chunking(getkey):
    # No normalisation and W_V = 1e10 x orthogonal: norms grow ~1e10 per layer until the state
    # overflows near 1e308 (the metrics rescale by a power of two first, so they do not overflow
    # earlier): the trajectories started 1e100 times larger become non-finite within the run, the
    # others stay finite; both kinds meet in every chunking.
    n, d, T, B = 4, 3, 12, 11
    layer = rd.make_layer(
        getkey(), n=n, d=d, mask="causal", placement="none", value="orthogonal", qk="gaussian"
    )
    layer = eqx.tree_at(lambda l: l.weights.w_v, layer, 1e10 * layer.weights.w_v)
    scale = jnp.where(jnp.arange(B) % 3 == 1, 1e100, 1.0)[:, None, None]
    x0 = scale * rd.initial_tokens(getkey(), "sphere", n, d, batch=B)
    ref = rd.simulate(layer, x0, T, save_every=2, per_trajectory=True, chunk=B)
    vals = {k: np.asarray(v) for k, v in ref.metrics.items()}
    ok = np.all([np.isfinite(v) for v in vals.values()], axis=0)
    assert ok[:, 0].all() and ok[:, -1].sum() == 7  # the case does exercise the exclusion
    np.testing.assert_array_equal(np.asarray(ref.nonfinite), ~ok[:, -1])
    for chunk in (B, 3):  # one chunk; four chunks, the last one ragged (2 of 3)
        # The oracle is the same chunking's per-trajectory values: chunkings agree to a few ulps
        # only, which these argmax-like (huge-score) dynamics amplify to O(1) within 12 layers.
        per = rd.simulate(layer, x0, T, save_every=2, per_trajectory=True, chunk=chunk)
        vals = {k: np.asarray(v) for k, v in per.metrics.items()}
        ok = np.all([np.isfinite(v) for v in vals.values()], axis=0)
        tr = rd.simulate(layer, x0, T, save_every=2, chunk=chunk)
        assert tr.metrics is None  # only statistics were kept, and each trajectory's status
        np.testing.assert_array_equal(np.asarray(tr.nonfinite), np.asarray(per.nonfinite))
        np.testing.assert_array_equal(np.asarray(tr.summary.count), ok.sum(0))
        assert int(tr.summary.nonfinite) == int((~ok[:, -1]).sum())
        for name in ALL_METRICS:
            want = _numpy_stats(vals[name], ok)
            # Summation order differs: errors are rounding of the values' scale per layer.
            scale = np.max(np.where(ok, np.abs(vals[name]), 0.0), axis=0)
            for stat in ("mean", "std", "min", "max"):
                got, ref_ = np.asarray(getattr(tr.summary, stat)[name]), want[stat]
                np.testing.assert_array_equal(np.isnan(got), np.isnan(ref_))
                err = np.abs(np.nan_to_num(got) - np.nan_to_num(ref_))
                assert np.all(err <= 1e-10 * np.abs(np.nan_to_num(ref_)) + 1e-14 * scale), (chunk, name, stat)


def test_chan_merge_is_exact_where_naive_sums_of_squares_fail():
    rng = np.random.default_rng(0)
    v = 1e9 + 1e-3 * rng.standard_normal(1000)  # std 1e-3 on a mean of 1e9: sum(v^2) - n m^2 cancels
    ok = np.ones(1000, bool)
    parts = [(0, 7), (7, 400), (400, 401), (401, 1000)]
    # Jitted, as the scan runs them: eager, each operation compiled a program per part's length.
    chunk, merge = jax.jit(chunk_stats), jax.jit(merge_stats)
    acc = None
    for a, b in parts:
        s = chunk({"v": jnp.asarray(v[a:b])}, jnp.asarray(ok[a:b]))
        acc = s if acc is None else merge(acc, s)
    np.testing.assert_allclose(float(acc.mean["v"]), v.mean(), rtol=1e-15)
    np.testing.assert_allclose(np.sqrt(float(acc.m2["v"]) / 1000), v.std(), rtol=1e-6)
    naive = np.sqrt(max(np.mean(v**2) - v.mean() ** 2, 0.0))
    assert abs(naive - v.std()) > 0.1 * v.std()  # the oracle can tell a naive merge from Chan's
    empty = chunk({"v": jnp.asarray(v[:3])}, np.zeros(3, bool))
    same = merge(empty, acc)
    assert float(same.mean["v"]) == float(acc.mean["v"]) and float(same.count) == 1000


def _shapes(jaxpr):
    """Shapes of every value computed in ``jaxpr`` and its sub-jaxprs (scan, cond, pjit bodies)."""
    for eqn in jaxpr.eqns:
        for var in eqn.outvars:
            yield tuple(getattr(var.aval, "shape", ()))
        for p in eqn.params.values():
            for q in p if isinstance(p, (list, tuple)) else [p]:
                inner = q.jaxpr if hasattr(q, "jaxpr") and hasattr(q.jaxpr, "eqns") else q
                if hasattr(inner, "eqns"):
                    yield from _shapes(inner)


def test_streamed_program_holds_no_batch_by_layers_array(getkey, monkeypatch):
    """The compiled chunk program (from a TokenSampler) has no array with the full batch axis,
    and, streaming, none with the chunk and the saved layers: the statistics are folded in batch
    order inside the scan, a group of records at a time (here 2, by a small budget), so memory
    is flat in depth. It used to return one chunk's values at every saved layer, folded
    afterwards: 12x the memory at 10,000 layers. Control: with per-trajectory values the walk
    into the program's sub-jaxprs does find that ``chunk x layers`` array."""
    from rankdyn._run import _fold

    # 12 blocks: groups of 2 divide them (`even_piece` takes groups of one length where it can).
    n, d, chunk, blocks, batch = 3, 2, 7, 12, 37
    # Room for two records of the chunk's values (3 metrics with eps_min, float64, and ok).
    monkeypatch.setitem(_fold.FOLD_BYTES, jax.default_backend(), 2 * chunk * (3 * 8 + 1))
    layer = rd.make_layer(getkey(), n=n, d=d, mask="causal")
    sampler = TokenSampler(getkey(), "sphere", n, d, batch)
    obs = MetricObserver(("mu", "sigma_min"))
    plan = lambda per: _scan.DepthPlan(blocks, 1, True, per, False, True)  # noqa: E731
    acc = _scan.empty_acc(obs, layer, sampler, True, blocks + 1)

    def shapes(per_trajectory):
        jaxpr = jax.make_jaxpr(
            lambda s, l, a: _scan._first(
                l, obs, s, None, jnp.asarray(0), jnp.asarray(batch), chunk, plan(per_trajectory), None, a
            )
        )(sampler, layer, acc)
        return set(_shapes(jaxpr.jaxpr))

    streamed, kept = shapes(False), shapes(True)
    assert not any(batch in s for s in streamed | kept)
    assert not any(chunk in s and (blocks in s or blocks + 1 in s) for s in streamed), sorted(streamed)
    assert any(s[:2] == (chunk, blocks + 1) for s in kept)
    assert any(s[:2] == (2, chunk) for s in streamed)  # one group's values


@pytest.mark.slow
def test_metric_subset_skips_svd_and_equals_full_run(getkey):
    x = jnp.ones((4, 3))
    prims = lambda names: str(jax.make_jaxpr(lambda x: MetricObserver(names)(0, x, None))(x))  # noqa: E731
    assert "svd" not in prims(("mu", "min_cos")) and "svd" in prims(("mu", "sigma_min"))
    layer = rd.make_layer(getkey(), n=5, d=4, mask="window", window=1)
    x0 = TokenSampler(getkey(), "gaussian", 5, 4, 6)
    full = rd.simulate(layer, x0, 4)
    part = rd.simulate(layer, x0, 4, metrics="mu,eps_min,num_rank")
    assert set(part.summary.mean) == {"mu", "eps_min", "num_rank"}
    for k in part.summary.mean:
        np.testing.assert_allclose(
            np.asarray(part.summary.mean[k]), np.asarray(full.summary.mean[k]), rtol=1e-12
        )
        np.testing.assert_allclose(
            np.asarray(part.summary.std[k]), np.asarray(full.summary.std[k]), rtol=1e-10
        )
    # A sampler draws exactly the tokens of initial_tokens, chunk by chunk.
    arr = rd.initial_tokens(x0.key, "gaussian", 5, 4, batch=6)
    np.testing.assert_array_equal(np.asarray(x0.sample(jnp.arange(2, 5))), np.asarray(arr[2:5]))
    with pytest.raises(ValueError, match="unknown metric 'rank'; valid names: all, mu, "):
        parse_metrics("mu,rank")
    with pytest.raises(ValueError, match="named twice"):
        parse_metrics("mu,mu")


@pytest.mark.slow  # end to end: `rankdyn simulate --per-trajectory`
def test_cli_metrics_per_trajectory_and_memory_refusal(tmp_path, capsys):
    out = tmp_path / "a"
    base = ["simulate", "--n", "4", "--d", "3", "--num-layers", "4", "--batch", "5", "--no-progress", "--x64"]
    assert (
        cli_main(base + ["--metrics", "mu,min_cos", "--per-trajectory", "--chunk", "2", "--out", str(out)])
        == 0
    )
    data = json.loads((out / "metrics.json").read_text())
    assert set(data["metrics"]) == {"mu", "min_cos"}
    per = np.load(out / "per_trajectory.npz")
    assert per["mu"].shape == (5, 5)
    np.testing.assert_allclose(data["metrics"]["mu"]["mean"], per["mu"].mean(0), rtol=1e-12)
    np.testing.assert_allclose(data["metrics"]["mu"]["max"], per["mu"].max(0), rtol=1e-12)
    capsys.readouterr()
    assert cli_main(base + ["--metrics", "mu,sigma", "--out", str(tmp_path / "b")]) == 2
    err = capsys.readouterr().err
    assert "error: --metrics mu,sigma: unknown metric 'sigma'; valid names: all, mu" in err
    # 10^9 trajectories' metrics at 5 layers: ~300 GB, refused before any compute.
    huge = [a if a != "5" else str(10**9) for a in base]
    assert cli_main(huge + ["--per-trajectory", "--out", str(tmp_path / "c")]) == 2
    err = capsys.readouterr().err
    assert "needs about" in err and "--per-trajectory" in err and "Traceback" not in err
    assert not (tmp_path / "b").exists() and not (tmp_path / "c").exists()


def test_a_cut_depth_compiles_as_many_programs_as_a_whole_one(monkeypatch):
    """Every depth piece runs in one program (`_advance`), the first too: the start record
    (`_first`) is a program without layers. So a depth cut into 4 pieces of one length compiles
    no more programs than the whole depth (the first piece was a second copy of the scan)."""
    import jax.random as jr

    from rankdyn._run import _sizing
    from rankdyn._run._io import CompileTimer

    def compiles(n: int, cut: bool) -> int:
        # Nothing cached: an earlier test in this process may have compiled these shapes.
        jax.clear_caches()
        layer = rd.make_layer(jr.key(0), n=n, d=4, mask="causal", qk="gaussian")
        x0 = rd.initial_tokens(jr.key(1), "sphere", n, 4, batch=4)
        with monkeypatch.context() as m:
            if cut:  # every layer "takes" hours: pieces of one block (even_piece of 4 blocks)
                m.setattr(_sizing, "CPU_FLOPS", 1.0)
                m.setattr(_sizing, "even_piece", lambda blocks, longest: 1)
            with CompileTimer() as timer:
                rd.simulate(layer, x0, 4, metrics="mu", progress=False)
        return timer.compiles

    assert compiles(3, cut=False) == compiles(5, cut=True) > 0
