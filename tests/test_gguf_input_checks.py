"""GGUF files that are broken in their structure or their tokenizer: each refusal names the GGUF
file, its metadata key or its own tensor name (never config.json, model.safetensors or
save_pretrained, which a GGUF file has not), and a tokenizer that cannot be built stops only text.
"""

import numpy as np
import pytest
from helpers import refusals_in_one_process

from rankdyn._errors import UsageError
from rankdyn.checkpoints import load_checkpoint

gguf = pytest.importorskip("gguf")

#: Words of the safetensors layout that must not appear in a message about a GGUF file.
HF_WORDS = ("config.json", "model.safetensors", "save_pretrained")


def tiny_gguf(path, *, merges=("a b",), drop=(), layers=1, block_count=None, d=8, heads=2, f=16):
    """A Llama GGUF with random F32 weights, vocabulary ``a b ab c`` and ``merges``; ``drop`` leaves
    tensors out, ``block_count`` claims another depth than the ``layers`` written."""
    rng = np.random.default_rng(0)
    tokens = ["a", "b", "ab", "c", "Ġ"]
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_block_count(layers if block_count is None else block_count)
    w.add_context_length(32)
    w.add_embedding_length(d)
    w.add_feed_forward_length(f)
    w.add_head_count(heads)
    w.add_head_count_kv(heads)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_dimension_count(d // heads)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_merges(list(merges))
    shapes = {"token_embd.weight": (len(tokens), d), "output_norm.weight": (d,)}
    for i in range(layers):
        shapes |= {f"blk.{i}.{k}.weight": (d,) for k in ("attn_norm", "ffn_norm")}
        shapes |= {f"blk.{i}.{k}.weight": (d, d) for k in ("attn_q", "attn_k", "attn_v", "attn_output")}
        shapes |= {f"blk.{i}.ffn_gate.weight": (f, d), f"blk.{i}.ffn_up.weight": (f, d)}
        shapes |= {f"blk.{i}.ffn_down.weight": (d, f)}
    for name, shape in shapes.items():
        if name not in drop:
            w.add_tensor(name, rng.standard_normal(shape).astype(np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


@pytest.mark.parametrize(
    "kw, says",
    [
        ({"drop": ("blk.0.attn_q.weight",)}, "the GGUF file has no tensor 'blk.0.attn_q.weight'"),
        ({"drop": ("output_norm.weight",)}, "the GGUF file has no tensor 'output_norm.weight'"),
        ({"drop": ("token_embd.weight",)}, "the GGUF file has no tensor 'token_embd.weight'"),
        (
            {"layers": 2, "block_count": 1},
            "the GGUF metadata has llama.block_count=1 but the GGUF file holds 2",
        ),
    ],
)
def test_structure_errors_name_the_gguf_file_and_its_keys(tmp_path, kw, says):
    path = tiny_gguf(tmp_path / "m.gguf", **kw)
    with pytest.raises(UsageError) as err:
        load_checkpoint(path)
    msg = str(err.value)
    assert says in msg and "convert_hf_to_gguf" in msg, msg
    assert not any(w in msg for w in HF_WORDS), msg


@pytest.mark.parametrize(
    "merges, says",
    [
        (("a",), "tokenizer.ggml.merges[0] is 'a', not two tokens"),  # was a TypeError at load
        (("x y",), "Token `x` out of vocabulary"),  # was a bare Exception at load
    ],
)
def test_a_tokenizer_that_cannot_be_built_stops_only_text(tmp_path, merges, says):
    """The weights load and token ids run (--input-ids needs no tokenizer); text is refused with the
    reason the metadata gave no tokenizer."""
    ckpt = load_checkpoint(tiny_gguf(tmp_path / "m.gguf", merges=merges))
    assert ckpt.tokenizer_json is None and ckpt.num_layers == 1
    ckpt.check_ids(np.zeros((2, 4), dtype=np.int64), where="--input-ids ids.npy")
    with pytest.raises(UsageError) as err:
        ckpt.tokenize_text("a b ab c", 2, 1)
    msg = str(err.value)
    assert says in msg and "--input-ids" in msg and "\n" not in msg, msg
    # Positive control: well-formed merges give a tokenizer that splits the text.
    good = load_checkpoint(tiny_gguf(tmp_path / "good.gguf"))
    assert good.tokenizer_json is not None and good.tokenize_text("ab ab", 1, 1).shape == (1, 1)


def test_refusals_before_jax_name_their_cause(tmp_path):
    """Before JAX loads: a text too short for --batch with a GGUF checkpoint, ``lyapunov --d 1``,
    and the checkpoint refusal, whose list of the flags it reads is the parser's (--variant,
    --num-layers, --batch and --text among them)."""
    path = tiny_gguf(tmp_path / "m.gguf")
    text = tmp_path / "short.txt"
    text.write_text("ab ab ab")
    out = ["--out", str(tmp_path / "out")]
    cases = {
        "the text has 5 tokens: not even one excerpt of 16": ["simulate", "--checkpoint", str(path), "--text",
                                                              str(text), "--n", "16", "--batch", "4", *out],
        "--d 1: the tokens live on the spheres S^0": ["lyapunov", "--n", "4", "--d", "1", "--num-layers", "4",
                                                      *out],
        "--value does not apply with --checkpoint": ["simulate", "--checkpoint", str(path), "--text",
                                                     str(text), "--value", "orthogonal", *out],
    }  # fmt: skip
    errors, jax = refusals_in_one_process(cases)
    assert not jax, "a refusal imported JAX"
    read = errors[2].split("(only ", 1)[1]
    for flag in ("--variant", "--num-layers", "--batch", "--text", "--input-ids", "--n", "--mask",
                 "--attention", "--placement", "--ln"):  # fmt: skip
        assert f"{flag}," in read or f"{flag} " in read or f"{flag})" in read, (flag, read)
