"""Tiny random BERT and GPT-2 checkpoints written by HF transformers, for the checkpoint tests.

``initializer_range=1.0``: at the default 0.02 the exact and the tanh GELU differ by ~3e-8,
below float32 rounding, so a wrong activation would pass unseen; at 1.0 pre-activations are O(1-10).
"""

import json
import warnings
import zipfile
from pathlib import Path

import numpy as np

VOCAB = 40
WORDS = [f"w{i}" for i in range(VOCAB - 3)]


def write_tokenizer(folder: Path) -> None:
    """A word-level tokenizer.json: [UNK]=0, [CLS]=1, [SEP]=2, then the words w0, w1, ..."""
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import Whitespace

    vocab = {"[UNK]": 0, "[CLS]": 1, "[SEP]": 2} | {w: i + 3 for i, w in enumerate(WORDS)}
    tok = Tokenizer(WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = Whitespace()
    tok.enable_truncation(8)  # the loader must switch it off, as for MiniLM's 128
    tok.save(str(folder / "tokenizer.json"))


def bert(folder: Path, dtype=None):
    """A 2-layer BertModel (d=16, 2 heads) saved to ``folder``; returns the float64 HF model."""
    import torch
    import transformers

    cfg = transformers.BertConfig(
        hidden_size=16,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=24,
        vocab_size=VOCAB,
        max_position_embeddings=24,
        initializer_range=1.0,
        hidden_act="gelu",
    )
    torch.manual_seed(0)
    model = transformers.BertModel(cfg).eval()
    if dtype is not None:  # saved in fp16/bf16; the oracle runs those rounded weights in float64
        model = model.to(dtype)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.save_pretrained(folder, safe_serialization=True)
    write_tokenizer(folder)
    return model.double().eval()


def gpt2_zip(folder: Path) -> tuple[Path, object]:
    """A 2-layer GPT2LMHeadModel (keys under ``transformer.``) zipped inside a sub-folder; returns
    the zip and the float64 HF ``GPT2Model``."""
    import torch
    import transformers

    cfg = transformers.GPT2Config(
        n_embd=12,
        n_layer=2,
        n_head=3,
        n_positions=24,
        vocab_size=VOCAB,
        initializer_range=1.0,
        bos_token_id=0,
        eos_token_id=0,
    )
    torch.manual_seed(1)
    model = transformers.GPT2LMHeadModel(cfg).eval()
    saved = folder / "saved"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.save_pretrained(saved, safe_serialization=True)
    write_tokenizer(saved)
    path = folder / "gpt2.zip"
    with zipfile.ZipFile(path, "w") as z:
        for f in saved.iterdir():
            z.write(f, f"tiny-gpt2/{f.name}")
    return path, model.transformer.double().eval()


def hf_hidden_states(model, ids) -> np.ndarray:
    """``output_hidden_states`` of an HF model as ``(batch, layers + 1, n, d)``."""
    import torch

    with torch.no_grad():
        out = model(torch.as_tensor(np.asarray(ids), dtype=torch.long), output_hidden_states=True)
    return np.stack([h.numpy() for h in out.hidden_states], axis=1)


def rel_err(ours, ref) -> float:
    """The largest error over every hidden state, relative to that state's largest entry."""
    ours, ref = np.asarray(ours, float), np.asarray(ref, float)
    scale = np.max(np.abs(ref), axis=(0, 2, 3), keepdims=True)
    return float(np.max(np.abs(ours - ref) / scale))


def edit_config(folder: Path, **changes) -> None:
    path = folder / "config.json"
    path.write_text(json.dumps(json.loads(path.read_text()) | changes))


def llama(folder: Path, *, hidden=32, heads=4, kv_heads=2, intermediate=64, layers=2, theta=50.0, tied=False):
    """A 2-layer LlamaModel (GQA: 4 query heads on 2 K/V heads, head width 8, RoPE base 50) saved to
    ``folder`` (keys under ``model.``: LlamaForCausalLM); returns the float64 HF ``LlamaModel``.

    ``initializer_range=1.0`` and a small ``rope_theta``: rotations of several radians within a few
    positions, so a wrong rotary convention or head grouping moves the states by O(1)."""
    import torch
    import transformers

    cfg = transformers.LlamaConfig(
        hidden_size=hidden,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        num_hidden_layers=layers,
        intermediate_size=intermediate,
        vocab_size=VOCAB,
        max_position_embeddings=32,
        rope_theta=theta,
        initializer_range=1.0,
        rms_norm_eps=1e-6,
        tie_word_embeddings=tied,
        bos_token_id=0,
        eos_token_id=0,
        pad_token_id=0,
    )
    torch.manual_seed(2)
    model = transformers.LlamaForCausalLM(cfg).eval()
    with torch.no_grad():  # RMSNorm gains are 1 at init: random gains make a misread norm visible
        for name, p in model.named_parameters():
            if "norm" in name:
                p.copy_(1.0 + 0.5 * torch.randn_like(p))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.save_pretrained(folder, safe_serialization=True)
    return model.model.double().eval()


def mpnet(folder: Path):
    """A 2-layer MPNetModel (d=16, 4 heads, 32 buckets) saved to ``folder``; returns the float64 model.

    The relative-position table is drawn with std 3, so leaving it out moves the states by O(1)."""
    import torch
    import transformers

    cfg = transformers.MPNetConfig(
        hidden_size=16,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=24,
        vocab_size=VOCAB,
        max_position_embeddings=34,
        initializer_range=1.0,
    )
    torch.manual_seed(3)
    model = transformers.MPNetModel(cfg).eval()
    with torch.no_grad():
        model.encoder.relative_attention_bias.weight.normal_(0.0, 3.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.save_pretrained(folder, safe_serialization=True)
    return model.double().eval()


def llama_gguf(path: Path, hf_model, *, arch="llama", quant="Q8_0", heads_kv=None, rms_eps=None) -> Path:
    """The weights of an HF ``LlamaModel`` written as a GGUF file the way llama.cpp's converter
    writes them (Q and K rows permuted to interleaved pairs; 2-D weights quantised to ``quant``,
    norms F32). ``arch``/``quant``/``heads_kv`` let a test write a file rankdyn must refuse."""
    import gguf

    cfg = hf_model.config
    heads, kv = cfg.num_attention_heads, cfg.num_key_value_heads
    sd = {k: v.float().numpy() for k, v in hf_model.state_dict().items()}
    w = gguf.GGUFWriter(str(path), arch)
    w.add_block_count(cfg.num_hidden_layers)
    w.add_context_length(cfg.max_position_embeddings)
    w.add_embedding_length(cfg.hidden_size)
    w.add_feed_forward_length(cfg.intermediate_size)
    w.add_head_count(heads)
    w.add_head_count_kv(kv if heads_kv is None else heads_kv)
    w.add_rope_freq_base(float(cfg.rope_parameters["rope_theta"]))
    w.add_layer_norm_rms_eps(cfg.rms_norm_eps if rms_eps is None else rms_eps)
    w.add_rope_dimension_count(cfg.head_dim)
    w.add_vocab_size(cfg.vocab_size)

    def permute(x, n):  # llama.cpp convert_hf_to_gguf: halves -> interleaved pairs
        return x.reshape(n, 2, x.shape[0] // n // 2, *x.shape[1:]).swapaxes(1, 2).reshape(x.shape)

    def put(name, x):
        if x.ndim == 2:
            q = gguf.GGMLQuantizationType[quant]
            w.add_tensor(name, gguf.quants.quantize(np.ascontiguousarray(x, np.float32), q), raw_dtype=q)
        else:
            w.add_tensor(name, np.ascontiguousarray(x, np.float32))

    put("token_embd.weight", sd["embed_tokens.weight"])
    put("output_norm.weight", sd["norm.weight"])
    names = {
        "input_layernorm": "attn_norm",
        "self_attn.q_proj": "attn_q",
        "self_attn.k_proj": "attn_k",
        "self_attn.v_proj": "attn_v",
        "self_attn.o_proj": "attn_output",
        "post_attention_layernorm": "ffn_norm",
        "mlp.gate_proj": "ffn_gate",
        "mlp.up_proj": "ffn_up",
        "mlp.down_proj": "ffn_down",
    }
    for i in range(cfg.num_hidden_layers):
        for hf, g in names.items():
            x = sd[f"layers.{i}.{hf}.weight"]
            x = permute(x, heads) if g == "attn_q" else permute(x, kv) if g == "attn_k" else x
            put(f"blk.{i}.{g}.weight", x)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def dequantised(hf_model, quant="Q8_0"):
    """A float64 copy of an HF model whose 2-D weights went through ``quant`` and back (the GGUF oracle)."""
    import copy

    import gguf
    import torch

    q = gguf.GGMLQuantizationType[quant]
    out = copy.deepcopy(hf_model).float()
    with torch.no_grad():
        for _, p in out.named_parameters():
            if p.ndim == 2:
                x = p.numpy().astype(np.float32)
                p.copy_(torch.as_tensor(gguf.quants.dequantize(gguf.quants.quantize(x, q), q)))
    return out.double().eval()
