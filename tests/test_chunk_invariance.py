"""Results must not depend on how a batch was split.

The statistics of `rankdyn.simulate` and `solve_flow` are folded one trajectory at a time in
batch order (`rankdyn._run._fold`), so a chunk size (a tuned chunk, a device count) cannot move
their last bits, and the chunk tuner keeps only candidates that compute the rule's numbers.
The device-count comparison is in
``tests/test_sharding.py``; the sweep's in ``tests/test_sweep.py`` and ``tests/test_sweep_tasks.py``.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import rankdyn as rd
from rankdyn._observe._metric_observer import MetricObserver
from rankdyn._run import _autotune


def _bits(stats):
    return [np.asarray(a).tobytes() for a in jax.tree.leaves(stats)]


@pytest.mark.slow
def test_fold_is_the_same_bits_for_any_chunking_and_follows_welford():
    """The fold over chunks of 1, 7, GROUP + 3 and all values gives the same bits; the values
    span 1e-8..1e8 with NaN members masked out, where two-pass sums per chunk differ in the last
    bits. The oracle is Welford's recurrence in NumPy, to rounding."""
    from rankdyn._run._fold import GROUP, fold_in_order

    rng = np.random.default_rng(0)
    c, records = 2 * GROUP + 5, 3
    v = 10.0 ** rng.uniform(-8, 8, size=(c, records))
    ok = rng.random((c, records)) > 0.2
    v[~ok] = np.nan  # an excluded member must not leak into the statistics
    runs = []
    for size in (1, 7, GROUP + 3, c):
        acc = None
        for start in range(0, c, size):
            part = slice(start, start + size)
            # Sliced on the host (exact): eagerly, every chunk shape compiled a slicing program.
            acc = fold_in_order(acc, {"mu": jnp.asarray(v[part])}, jnp.asarray(ok[part]))
        runs.append(acc)
    assert all(_bits(r) == _bits(runs[0]) for r in runs)
    # Welford in NumPy, member by member.
    n, mean, m2 = np.zeros(records), np.zeros(records), np.zeros(records)
    for i in range(c):
        x = np.where(ok[i], v[i], 0.0)
        n1 = n + ok[i]
        delta = x - mean
        mean = np.where(ok[i], mean + delta / np.maximum(n1, 1), mean)
        m2 = np.where(ok[i], m2 + delta * (x - mean), m2)
        n = n1
    got = runs[0]
    np.testing.assert_array_equal(np.asarray(got.count), n)
    np.testing.assert_allclose(np.asarray(got.mean["mu"]), mean, rtol=1e-13)
    np.testing.assert_allclose(np.asarray(got.m2["mu"]), m2, rtol=1e-10)
    np.testing.assert_array_equal(np.asarray(got.min["mu"]), np.nanmin(v, axis=0))
    np.testing.assert_array_equal(np.asarray(got.max["mu"]), np.nanmax(v, axis=0))


@pytest.mark.slow
def test_simulate_statistics_do_not_depend_on_the_chunk(getkey):
    """Chunks of 4, 8 and the whole batch: the statistics are the same bits wherever the
    per-trajectory values are (on the Intel development machine widths 4, 8 and 20 compute
    every trajectory alike, width 3
    does not, which is why the tuner compares candidates before it may choose one)."""
    import pytest

    layer = rd.make_layer(getkey(), n=4, d=3, mask="causal", qk="gaussian")
    x0 = rd.initial_tokens(getkey(), "sphere", 4, 3, batch=20)
    runs = [rd.simulate(layer, x0, 6, chunk=c, metrics="mu,min_cos", per_trajectory=True) for c in (4, 8, 20)]
    compared = 0
    for r in runs[1:]:
        same_values = all(
            np.asarray(r.metrics[k]).tobytes() == np.asarray(runs[0].metrics[k]).tobytes() for k in r.metrics
        )
        if not same_values:  # this CPU computes the widths differently: nothing to compare here
            continue
        compared += 1
        for stat in ("mean", "std", "min", "max"):
            for k in runs[0].summary.mean:
                got, want = getattr(r.summary, stat)[k], getattr(runs[0].summary, stat)[k]
                assert np.asarray(got).tobytes() == np.asarray(want).tobytes(), (stat, k)
    if not compared:
        pytest.skip("this CPU computes widths 4, 8 and 20 differently: no statistics to compare")


@pytest.mark.slow
def test_tuner_keeps_only_candidates_with_the_rules_numbers(getkey, tmp_path, monkeypatch):
    """A candidate whose program rounds otherwise (here: its first trajectory's state is nudged
    by one ulp, as another vectorisation would) is never chosen, however fast; the others may be."""
    monkeypatch.setenv("RANKDYN_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(_autotune, "_memory", {})
    layer = rd.make_layer(getkey(), n=4, d=3, mask="causal")
    x0 = rd.initial_tokens(getkey(), "sphere", 4, 3, batch=40)
    obs = MetricObserver(("mu",))
    real = _autotune._chunk_run

    def nudged(*args):
        run, units, out = real(*args)
        if args[4] == 10:  # the chunk size argument: make candidate 10 differ by one ulp
            state = out[0]._replace(x=out[0].x.at[0, 0, 0].set(jnp.nextafter(out[0].x[0, 0, 0], 9.0)))
            out = (state,) + out[1:]
        return run, units, out

    def timed(runs, rounds=3):  # candidate 10 "is" the fastest
        return {c: (0.0 if c == 10 else 1.0 + c) for c in runs}

    monkeypatch.setattr(_autotune, "_chunk_run", nudged)
    monkeypatch.setattr(_autotune, "_time_chunks", timed)
    best = _autotune.tuned_chunk(layer, obs, x0, 40, 12, save_every=1, eps=True, force=True)
    assert best != 10 and best in _autotune.candidates(40, 40)
    assert best == 2  # the fastest of the candidates left (2, 20, 40)


@pytest.mark.slow
def test_flow_statistics_do_not_depend_on_the_chunk(getkey):
    """`solve_flow` folds each chunk's values into the statistics one trajectory at a time, in
    batch order: chunks of 3, 4 and the whole
    batch give the same bits wherever the per-trajectory values are the same bits, and the
    statistics are those of the values (NumPy, to rounding)."""
    import pytest

    from rankdyn._model._masks import causal_mask
    from rankdyn.flow import FlowField, solve_flow

    n, d = 4, 3
    field = FlowField(causal_mask(n), d, "sa")
    g = np.asarray(jax.random.normal(getkey(), (10, n, d)))
    x0 = g / np.linalg.norm(g, axis=-1, keepdims=True)
    runs = [
        solve_flow(
            field,
            x0,
            1.0,
            beta=np.array([0.5, 2.0]),
            saves=3,
            solver="rk4",
            dt=0.05,
            chunk=c,
            per_trajectory=True,
        )
        for c in (3, 4, 10)
    ]
    compared = 0
    for r in runs[1:]:
        if any(
            np.asarray(r.metrics[k]).tobytes() != np.asarray(runs[0].metrics[k]).tobytes() for k in r.metrics
        ):
            continue  # this CPU computes these widths differently: nothing to compare here
        compared += 1
        for stat in ("mean", "std", "min", "max"):
            for k in runs[0].metrics:
                assert r.stat(k, stat).tobytes() == runs[0].stat(k, stat).tobytes(), (stat, k)
    v = np.asarray(runs[0].metrics["mu"])  # (beta, batch, saves)
    np.testing.assert_allclose(runs[0].stat("mu"), v.mean(axis=1), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(runs[0].stat("mu", "max"), v.max(axis=1), rtol=0, atol=0)
    if not compared:
        pytest.skip("this CPU computes widths 3, 4 and 10 differently: no statistics to compare")
