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
