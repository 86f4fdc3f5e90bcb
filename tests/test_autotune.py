"""The measured chunk choice of `simulate` (rankdyn._run._autotune): it picks one of its candidates,
remembers it per machine, and the choice never changes a result (the bitwise contract)."""

import jax.random as jr
import numpy as np
import pytest
from helpers import ulp_distance

import rankdyn as rd
from rankdyn._observe._metric_observer import MetricObserver, parse_metrics
from rankdyn._run import _autotune
from rankdyn._run._sizing import auto_chunk


@pytest.mark.slow  # ~12 s: 4 timed candidates + 4 simulate programs
def test_tuned_chunk_is_a_candidate_cached_and_bitwise_the_rules(getkey, tmp_path, monkeypatch):
    monkeypatch.setenv("RANKDYN_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(_autotune, "_memory", {})
    n, d, num, depth = 4, 3, 40, 12
    layer = rd.make_layer(getkey(), n=n, d=d, mask="causal")
    x0 = rd.initial_tokens(getkey(), "sphere", n, d, batch=num)
    names = "mu,eps_min,min_cos,row_norm_min"
    obs = MetricObserver(parse_metrics(names))
    cands = _autotune.candidates(auto_chunk(num, n, d, 8, "cpu"), num)
    assert cands == [2, 10, 20, 40]
    # A small run keeps the rule without timing anything.
    assert _autotune.tuned_chunk(layer, obs, x0, num, depth, save_every=1, eps=True) == 40
    assert not (tmp_path / "chunks.json").exists()
    best = _autotune.tuned_chunk(layer, obs, x0, num, depth, save_every=1, eps=True, force=True)
    assert best in cands and (tmp_path / "chunks.json").exists()

    # Remembered: a fresh process (empty memory) reads the file and times nothing.
    def no_timing(*a, **k):
        raise AssertionError("re-measured a cached shape")

    monkeypatch.setattr(_autotune, "_memory", {})
    monkeypatch.setattr(_autotune, "_chunk_run", no_timing)
    monkeypatch.setattr(_autotune, "TUNE_MIN_FLOPS", 0.0)
    assert _autotune.tuned_chunk(layer, obs, x0, num, depth, save_every=1, eps=True) == best

    # Whatever the machine picks, the results are the rule's to the last bit: only candidates
    # with the rule's numbers are eligible, and the statistics are folded in batch order.
    sim = lambda x, c: rd.simulate(layer, x, depth, chunk=c, metrics=names, per_trajectory=True)  # noqa: E731
    rule, tuned = sim(x0, cands[-1]), sim(x0, None)  # the rule's chunk is 40 here; None: the tuned one
    for k in rule.metrics:
        assert np.asarray(tuned.metrics[k]).tobytes() == np.asarray(rule.metrics[k]).tobytes(), k
        for stat in ("mean", "std", "min", "max"):
            got, want = getattr(tuned.summary, stat)[k], getattr(rule.summary, stat)[k]
            assert np.asarray(got).tobytes() == np.asarray(want).tobytes(), (k, stat)
    # Control: a different trajectory is far from it, so the check can fail.
    other = sim(jr.permutation(getkey(), x0), cands[0])
    assert ulp_distance(other.metrics["mu"], rule.metrics["mu"]) > 4


def test_tuning_off_by_environment(getkey, tmp_path, monkeypatch):
    monkeypatch.setenv("RANKDYN_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("RANKDYN_CHUNK_TUNING", "0")
    layer = rd.make_layer(getkey(), n=4, d=3, mask="causal")
    x0 = rd.initial_tokens(getkey(), "sphere", 4, 3, batch=40)
    got = _autotune.tuned_chunk(layer, None, x0, 40, 5, save_every=1, eps=True, force=True)
    assert got == auto_chunk(40, 4, 3, 8, "cpu") and not (tmp_path / "chunks.json").exists()


def test_candidates_are_timed_in_turn_and_scored_per_trajectory_layer():
    """Round-robin timing (a machine whose speed drifts during tuning must not favour the
    candidates timed first), best of three rounds, divided by each run's trajectory-layers."""
    order = []
    runs = {c: ((lambda c=c: order.append(c)), units) for c, units in ((16, 1.0), (64, 4.0), (256, 16.0))}
    cost = _autotune._time_chunks(runs)
    assert order == [16, 64, 256] * 3
    assert set(cost) == {16, 64, 256} and all(v >= 0 for v in cost.values())
