"""Trained-checkpoint targets and the trained-weight analysis.

Oracles: NumPy for the orthogonality distance and the head products, the layer map itself for the
closed-form collapsed equilibria, the dense `stability` for the matrix-free multipliers; the
targets' checks on synthetic results that must fail; the quick targets end to end on a tiny random
BERT (with a word-level tokenizer) created here with transformers.
"""

import collections
import json

import jax.numpy as jnp
import numpy as np
import pytest

from rankdyn._reproduce import _verdict as V, run_target
from rankdyn._reproduce._masktable import PAPER_MASKS
from rankdyn._reproduce.pretrained import (
    geometry as G,
    pretrained_ablation as PA,
    pretrained_temperature as PT,
)
from rankdyn._trained import _analysis as TA


# ----------------------------------------------------------------------------- analysis
def test_orthogonality_distance_against_numpy():
    rng = np.random.default_rng(0)
    q, _ = np.linalg.qr(rng.normal(size=(7, 5)))
    delta, c = TA.orthogonality_distance(2.5 * q)
    assert delta < 1e-14 and c == pytest.approx(6.25, rel=1e-12)
    w = rng.normal(size=(7, 5))
    g = w.T @ w
    # Independent: the best c by least squares over the 25 entries, then the relative residual.
    c_ls = np.linalg.lstsq(np.eye(5).reshape(-1, 1), g.reshape(-1), rcond=None)[0][0]
    delta_w, c_w = TA.orthogonality_distance(w)
    assert c_w == pytest.approx(c_ls, rel=1e-12)
    assert delta_w == pytest.approx(np.linalg.norm(g - c_ls * np.eye(5)) / np.linalg.norm(g), rel=1e-12)
    assert delta_w > 0.1
    # Any other c is worse.
    assert all(
        np.linalg.norm(g - (c_ls + e) * np.eye(5)) > np.linalg.norm(g - c_ls * np.eye(5)) for e in (-0.1, 0.1)
    )


def test_value_output_report_heads_sum_to_the_full_map():
    rng = np.random.default_rng(1)
    heads, d, dv = 3, 6, 2
    w_v, w_o = rng.normal(size=(heads, d, dv)), rng.normal(size=(heads * dv, d))
    rep = TA.value_output_report(w_v, w_o)
    full = np.concatenate(list(w_v), axis=1) @ w_o
    np.testing.assert_allclose(rep["w_vo_sum_matrix"], full, rtol=1e-12, atol=1e-12)
    s = np.linalg.svd(w_v[1] @ w_o[2:4], compute_uv=False)
    np.testing.assert_allclose(rep["heads"][1]["w_vo"]["singular_values"], s, rtol=1e-12, atol=1e-13)
    assert rep["w_vo_sum"]["norm2_le_1"] == (np.linalg.norm(full, 2) <= 1)


def _small_theory_layer(n=3, d=6, heads=2, mask="complete"):
    rng = np.random.default_rng(2)
    dk = d // heads
    w_q, w_k = rng.normal(size=(2, heads, d, dk)) * 0.5
    w_v = rng.normal(size=(heads, d, dk))
    w_o = rng.normal(size=(heads * dk, d))
    # Make the summed value map's dominant eigenvalue real and positive: W_VO + s I, s > 0 large.
    total = np.concatenate(list(w_v), axis=1) @ w_o
    shift = 2 * np.max(np.abs(np.linalg.eigvals(total)))
    w_o = w_o + np.linalg.pinv(np.concatenate(list(w_v), axis=1)) @ (shift * np.eye(d))
    return TA.theory_layer(w_q, w_k, w_v, w_o, n, mask=mask), TA.value_output_report(w_v, w_o)


@pytest.mark.slow
def test_collapsed_equilibria_are_fixed_and_the_census_finds_the_stable_one(getkey):
    from rankdyn.equilibria import stability

    layer, rep = _small_theory_layer()
    col = TA.collapsed_equilibria(rep["w_vo_sum_matrix"])
    assert col and col[0]["dominant"]
    for e in col:  # each closed form is a fixed point of the map itself
        x = jnp.asarray(np.tile(e["x"], (3, 1)))
        assert float(jnp.linalg.norm(layer(x)[0] - x)) < 1e-12
    census = TA.attractor_census(layer, getkey(), starts=8, steps=400)
    assert census["counts"].get("fixed rank 1", 0) >= 1
    i = int(np.argmax(census["fixed"]))
    # The attractor is the dominant collapsed point (up to the sign of the eigenvector).
    assert np.max(np.abs(np.abs(census["x"][i]) - np.abs(np.tile(col[0]["x"], (3, 1))))) < 1e-6
    lead = TA.leading_multipliers(layer, census["x"][i], iters=60)
    dense = stability(layer, census["x"][i])
    assert lead["spectral_radius"] == pytest.approx(dense.spectral_radius, rel=1e-6)
    assert lead["classification"] == dense.classification == "stable"


# ----------------------------------------------------------------------------- checks must fail
def _ablation(san_ratio, full_ratio, skip_range=(1.0, 50.0), depth=PA.DEEP):
    rows = {}
    for label in PA.VARIANTS.values():
        for m in PAPER_MASKS:
            r = {"SAN": san_ratio[m], "SAN+LN": 0.5, "SAN+skip": skip_range[1]}.get(label, full_ratio)
            lo, hi = skip_range if label == "SAN+skip" else (min(r, 1.0), max(r, 1.0))
            rows[f"{label}|{m}"] = PA.AblationRow(label, m, ratio_T=r, ratio_min=lo, ratio_max=hi)
    return PA.PretrainedAblationMeasured(rows, np.arange(depth + 1), depth=depth, own=6)


def test_pretrained_ablation_checks_fail_on_wrong_results():
    good_san = {"complete": 1e-6, "causal": 1e-3, "window": 0.3, "window-uni": 0.5}
    good = PA.checks(_ablation(good_san, 0.8))
    assert V.verdict(good) == "reproduced"
    # SAN that does not collapse, global masks slower than local, the full model collapsing.
    bad_san = {"complete": 2.0, "causal": 0.9, "window": 1e-3, "window-uni": 1e-4}
    bad = PA.checks(_ablation(bad_san, 1e-3, skip_range=(0.5, 2.0)))
    assert [c.passed for c in bad] == [False] * 5
    assert V.verdict(bad) == "not reproduced"
    # Quick (own depth): the 128-layer checks are not testable, which caps the verdict.
    assert V.verdict(PA.checks(_ablation(good_san, 0.8, depth=6))) == "partially"
    assert set(_ablation(good_san, 0.8).to_dict()) == {"summary", "layers"}


def _temperature(ratios):
    ratio = {f"{m}|{PT._fmt(f)}": v for (m, f), v in ratios.items()}
    return PT.PretrainedTemperatureMeasured(ratio, np.arange(7))


def test_pretrained_temperature_checks_fail_on_reversed_temperatures():
    t = np.arange(7)
    rate = {1 / 64: 0.9, 1.0: 0.7, 64.0: 0.5}
    good = {
        (m, f): rate[f] ** (t * (1 if m in ("complete", "causal") else 0.3))
        for m in PAPER_MASKS
        for f in rate
    }
    # An effect that saturates: larger early than late.
    good.update({("complete", f): np.maximum(rate[f] ** t, rate[f] ** 3) for f in rate})
    assert [c.passed for c in PT.checks(_temperature(good))] == [True, True, True]
    swap = {1 / 64: 64.0, 64.0: 1 / 64, 1.0: 1.0}
    bad = PT.checks(_temperature({(m, swap[f]): v for (m, f), v in good.items()}))
    assert [c.passed for c in bad] == [False, False, False] and V.verdict(bad) == "not reproduced"
    assert set(_temperature(good).to_dict()) == {"ratio", "layers"}


def _geometry(**kw):
    layers = 4
    base = dict(
        num_rank_min=8.0,
        num_rank=np.full(layers, 8.0),
        sigma_min=np.array([1.0, 0.8, 0.6, 0.5]),
        sigma_max=np.full(layers, 3.0),
        mean_abs_cos=np.array([0.1, 0.2, 0.3, 0.4]),
        stable_rank=np.full(layers, 1.5),
        spectra_excerpts=np.array([0, 1, 2]),
        spectra=np.tile(np.array([3.0, 1.0, 0.5]), (3, layers, 1)),
        initial_min_cos=np.array([0.1, 0.05]),
        initial_fraction_nonneg=1.0,
        full_rank=8,
    )
    return G.GeometryMeasured(**{**base, **kw})


def test_geometry_checks_fail_on_rank_loss_and_negative_cosines():
    assert V.verdict(G.checks(_geometry())) == "reproduced"
    bad = _geometry(
        num_rank_min=5.0,
        sigma_min=np.array([1.0, 1e-2, 1e-5, 1e-6]),
        mean_abs_cos=np.array([0.4, 0.3, 0.2, 0.1]),
        spectra=np.tile(np.array([1.0, 1.0, 0.5]), (3, 4, 1)),
        initial_min_cos=np.array([-0.2, 0.05]),
        initial_fraction_nonneg=0.5,
    )
    assert [c.passed for c in G.checks(bad)] == [False] * 5
    assert "initial_cosines" not in _geometry().to_dict() and "full_rank" not in _geometry().to_dict()


# ----------------------------------------------------------------------------- end to end
@pytest.fixture(scope="module")
def tiny_bert(tmp_path_factory):
    """A random 2-layer BERT (d=16, 2 heads) with a word-level tokenizer over the default corpus."""
    transformers = pytest.importorskip("transformers")
    from tokenizers import Tokenizer, models, pre_tokenizers

    from rankdyn.checkpoints import default_corpus

    words = collections.Counter(default_corpus().text.split()).most_common(300)
    vocab = {t: i for i, t in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]"] + [w for w, _ in words])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    cfg = transformers.BertConfig(
        vocab_size=len(vocab),
        hidden_size=16,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=32,
        initializer_range=0.5,
    )
    path = tmp_path_factory.mktemp("tiny_bert")
    transformers.BertModel(cfg).eval().save_pretrained(path, safe_serialization=True)
    tok.save(str(path / "tokenizer.json"))
    return path


@pytest.mark.slow
def test_quick_targets_end_to_end_on_a_tiny_bert(tiny_bert, tmp_path):
    from rankdyn._reproduce import run_targets

    res = run_targets(
        ["geometry", "pretrained-ablation", "pretrained-temperature"],
        tmp_path,
        quick=True,
        progress=False,
        checkpoint=tiny_bert,
    )
    assert not res["failed"], {k: r.get("traceback") for k, r in res["results"].items()}
    from rankdyn.checkpoints import load_checkpoint

    sha = load_checkpoint(tiny_bert).sha256
    for name, r in res["results"].items():
        saved = json.loads((tmp_path / f"{name}.json").read_text())
        assert saved["setting"]["model"]["sha256"] == sha
        assert saved["setting"]["corpus"]["sha256"] and saved["setting"]["corpus"]["python"]
        assert r["verdict"] in ("reproduced", "partially", "not reproduced")
        for fig in r["figures"]:
            assert (tmp_path / fig).is_file()
    geo = res["results"]["geometry"]["measured"]
    # Rank never exceeds min(n, d); the stable rank never exceeds the rank.
    assert geo["num_rank_min"] <= 16
    assert np.all(np.asarray(geo["stable_rank"]) <= np.asarray(geo["num_rank"]) + 1e-9)


def test_targets_without_a_checkpoint_are_not_testable(monkeypatch, tmp_path):
    import rankdyn.checkpoints

    monkeypatch.setattr(rankdyn.checkpoints, "minilm_path", lambda: None)
    for T in (G, PA, PT):
        r = run_target(T.NAME, tmp_path, quick=True, seed=0, cache={})
        assert r["verdict"] == "not testable here"
        assert "pip install" in r["notes"]
        assert all(c["status"] == "not testable here" for c in r["checks"])


def test_reproduce_checkpoint_flag_refused_for_other_targets_and_bad_paths(tmp_path, capsys):
    from rankdyn.cli import main

    assert (
        main(["reproduce", "masks-collapse", "--checkpoint", str(tmp_path), "--out", str(tmp_path / "o")])
        == 2
    )
    err = capsys.readouterr().err
    assert err.count("error:") == 1 and "masks-collapse" in err and "--checkpoint" in err
    missing = tmp_path / "nope"
    assert main(["reproduce", "geometry", "--checkpoint", str(missing), "--out", str(tmp_path / "o")]) == 2
    assert capsys.readouterr().err.count("error:") == 1


# ----------------------------------------------------------------------------- full-mode chunks
@pytest.mark.slow
def test_the_chunks_of_a_full_run_share_one_compiled_program(getkey):
    """`run_chunked` walks a full run (1000 excerpts) in chunks through `simulate_many`: every chunk
    must reuse the program the first one compiled (each used to compile its own, since a new jitted
    closure is a new cache), and chunking must not change the numbers."""
    import jax
    import jax.random as jr

    import rankdyn as rd
    from rankdyn._reproduce._layer_observers import cheap_observe
    from rankdyn._reproduce._masktable import masks_for
    from rankdyn._reproduce._runs import with_masks
    from rankdyn._reproduce.pretrained.pretrained_common import run_chunked

    stacks = [with_masks(rd.make_layer(getkey(), n=6, d=4), masks_for(PAPER_MASKS, 6))]
    x0 = np.asarray(jr.normal(getkey(), (6, 6, 4)))
    compiles, counting = [], [False]

    def listen(event, secs, **kw):
        if counting[0] and event == "/jax/core/compile/backend_compile_duration":
            compiles.append(secs)

    jax.monitoring.register_event_duration_secs_listener(listen)
    ((_, whole, _),) = run_chunked(stacks, x0, 3, observe=cheap_observe, chunk=6)  # the same sizes
    ((_, first, _),) = run_chunked(stacks, x0[:2], 3, observe=cheap_observe, chunk=2)  # compiles
    counting[0] = True
    try:
        ((_, chunked, _),) = run_chunked(stacks, x0, 3, observe=cheap_observe, chunk=2)  # 3 chunks
    finally:
        counting[0] = False
    assert compiles == [], f"{len(compiles)} programs compiled again for the chunks"
    np.testing.assert_allclose(chunked["mu"][:, :2], first["mu"], rtol=0, atol=0)
    np.testing.assert_allclose(chunked["mu"], whole["mu"], rtol=1e-12)
