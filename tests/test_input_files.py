"""Files a user hands in, validated before use: certificates, safetensors headers, checkpoint zips,
tokenizers, configs, dtypes and size limits.
"""

import os

import pytest

from rankdyn.cli import main


class _FakeResources:
    """Stands in for ``importlib.resources`` so that `load` reads a given certificates text."""

    def __init__(self, text):
        self.text = text

    def files(self, package):
        return self

    def joinpath(self, name):
        return self

    def read_text(self, *a, **k):
        return self.text

    def __str__(self):
        return "undirected_certificates.json"


def _certificate_variants():
    import copy
    import json
    from importlib import resources

    from rankdyn._reproduce.theory import _undirected_known as K

    shipped = json.loads(
        resources.files(K.__package__).joinpath("data/undirected_certificates.json").read_text()
    )
    empty = {**shipped, "certificates": []}
    relabelled = copy.deepcopy(shipped)
    relabelled["certificates"][0]["setting"] = "N=3/window/generic"  # its W_Q = W_K: symmetric
    remasked = copy.deepcopy(shipped)
    remasked["certificates"][0]["setting"] = "N=3/complete/symmetric"  # its mask is a window
    duplicated = {**shipped, "certificates": shipped["certificates"] + shipped["certificates"][:1]}
    return K, [
        (empty, "no certificates"),
        (relabelled, "labelled attention 'generic'"),
        (remasked, "labelled mask 'complete'"),
        (duplicated, "duplicates certificate 0"),
        ("{not json", "not valid JSON"),
    ]


def _safetensors_bytes(header_text: str, body: bytes) -> bytes:
    import struct

    raw = header_text.encode()
    return struct.pack("<Q", len(raw)) + raw + body


def _safetensors_variants():
    """A valid file (two float32 tensors of 2 elements) and the header faults of the audit."""
    body = bytes(16)
    a = '"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}'
    b = '"b": {"dtype": "F32", "shape": [2], "data_offsets": [8, 16]}'
    return _safetensors_bytes("{" + a + ", " + b + "}", body), [
        ("overlap", "{" + a + ', "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}}', body),
        ("duplicated name", "{" + a + ", " + a.replace("[0, 8]", "[8, 16]") + "}", body),
        ("float offsets", "{" + a.replace("[0, 8]", "[0.0, 8.0]") + ", " + b + "}", body),
        ("float shape", "{" + a.replace("[2]", "[2.0]") + ", " + b + "}", body),
        ("trailing bytes", "{" + a + ", " + b + "}", body + bytes(8)),
        ("gap", "{" + a + ", " + b.replace("[8, 16]", "[12, 20]") + "}", bytes(20)),
    ]


def _checkpoint_files(folder, tokenizer=None):
    """A minimal folder read_checkpoint accepts: a config and one valid safetensors tensor."""
    import json

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps({"model_type": "bert"}))
    (folder / "model.safetensors").write_bytes(_safetensors_variants()[0])
    if tokenizer is not None:
        (folder / "tokenizer.json").write_bytes(tokenizer)
    return folder


def test_certificates_file_is_validated(monkeypatch):
    """An empty list (the old code: verdict "no evidence against", exit 0), a relabelled
    attention or mask (a finding under the wrong setting), a duplicate (counted twice) and broken
    JSON are each refused, naming the entry; the shipped file loads."""
    import json

    K, variants = _certificate_variants()
    assert len(K.load()) >= 1
    for data, words in variants:
        text = data if isinstance(data, str) else json.dumps(data)
        monkeypatch.setattr(K, "resources", _FakeResources(text))
        with pytest.raises(ValueError, match=words):
            K.load()


def test_safetensors_header_is_validated_like_the_reference_library():
    """Each header fault is refused by the ``safetensors`` package itself (the oracle) and, now,
    by rankdyn, naming the file; the valid file is read the same by both. The old reader
    accepted all six."""
    import numpy as np
    from safetensors.numpy import load as reference_load

    from rankdyn._errors import UsageError
    from rankdyn._trained._read import parse_safetensors

    good, variants = _safetensors_variants()
    ours, ref = parse_safetensors(good, "w.safetensors"), reference_load(good)
    assert set(ours) == set(ref) and all(np.array_equal(ours[k], ref[k]) for k in ref)
    for what, header, body in variants:
        data = _safetensors_bytes(header, body)
        with pytest.raises(Exception):  # the reference refuses it ...
            reference_load(data)
        with pytest.raises(UsageError, match="w.safetensors: not a valid safetensors file"):  # ... so do we
            parse_safetensors(data, "w.safetensors")


def test_ambiguous_corrupt_and_oversized_zips_are_refused(tmp_path):
    """Two checkpoints in one zip (the old reader mixed one's config with the other's
    weights), an unknown compression method and a member over the cap: each one error naming
    the zip; the refusal of the two-checkpoint zip lists what it holds. A sentence-transformers
    layout (a second config.json in 1_Pooling/) is not ambiguous."""
    import zipfile

    from rankdyn._errors import UsageError
    from rankdyn._trained import _zip_members
    from rankdyn._trained._read import read_checkpoint

    a, b = _checkpoint_files(tmp_path / "a"), _checkpoint_files(tmp_path / "b")
    two = tmp_path / "two.zip"
    with zipfile.ZipFile(two, "w") as z:
        for folder in (a, b):
            for f in folder.iterdir():
                z.write(f, f"{folder.name}/{f.name}")
    with pytest.raises(
        UsageError, match=r"more than one checkpoint .*a/model.safetensors, b/model.safetensors"
    ):
        read_checkpoint(two)
    pooled = tmp_path / "pooled.zip"
    with zipfile.ZipFile(pooled, "w") as z:
        for f in a.iterdir():
            z.write(f, f.name)
        z.writestr("1_Pooling/config.json", '{"pooling_mode_mean_tokens": true}')
    assert read_checkpoint(pooled).config == {"model_type": "bert"}
    odd = tmp_path / "odd.zip"
    with zipfile.ZipFile(odd, "w") as z:
        for f in a.iterdir():
            z.write(f, f.name)
    raw = bytearray(odd.read_bytes())
    for sig in (b"PK\x03\x04", b"PK\x01\x02"):  # set the method of every entry to 99 (unknown)
        at = raw.find(sig)
        while at >= 0:
            off = at + (8 if sig == b"PK\x03\x04" else 10)
            raw[off : off + 2] = (99).to_bytes(2, "little")
            at = raw.find(sig, at + 4)
    odd.write_bytes(bytes(raw))
    with pytest.raises(UsageError, match="odd.zip"):
        read_checkpoint(odd)
    with pytest.raises(UsageError, match="over the"):
        _zip_members.zip_members(pooled, ("config.json", "model.safetensors"), "fix", max_bytes=8)
    assert _zip_members.MAX_MEMBER_BYTES >= 440 * 10**6  # admits MPNet-base's model.safetensors


def test_broken_tokenizer_and_non_utf8_files_are_refused(tmp_path):
    """A ``tokenizer.json`` that is not UTF-8 (the old reader decoded it with replacement
    characters) or that tokenizers cannot load (a traceback later): refused when read, naming
    the file and, for bad bytes, the offset."""
    from rankdyn._errors import UsageError
    from rankdyn._trained._read import read_checkpoint

    with pytest.raises(UsageError, match=r"tokenizer.json: not UTF-8 text \(byte 3"):
        read_checkpoint(_checkpoint_files(tmp_path / "latin", tokenizer=b'{"a\xe9": 1}'))
    with pytest.raises(UsageError, match="tokenizer.json: not a tokenizer.json"):
        read_checkpoint(_checkpoint_files(tmp_path / "broken", tokenizer=b'{"version": "1.0"}'))


def test_load_checkpoint_takes_floating_dtypes_only(tmp_path):
    """``dtype=int32`` zeroed every weight and ``complex64`` was accepted: both refused now,
    before the file is read."""
    import jax.numpy as jnp

    from rankdyn._errors import UsageError
    from rankdyn.checkpoints import load_checkpoint

    for dtype in (jnp.int32, jnp.complex64, bool):
        with pytest.raises(UsageError, match="real floating dtype"):
            load_checkpoint(tmp_path / "nope", dtype=dtype)


def test_pooling_config_is_not_taken_for_the_model_config(tmp_path):
    """Weights next to a sentence-transformers ``1_Pooling/config.json`` and no model config:
    the old reader took the pooling config ("model_type None is not supported"); the refusal
    now names the missing file."""
    import zipfile

    from rankdyn._errors import UsageError
    from rankdyn.checkpoints import load_checkpoint

    path = tmp_path / "pooled.zip"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("model.safetensors", _safetensors_variants()[0])
        z.writestr("1_Pooling/config.json", '{"pooling_mode_mean_tokens": true}')
    with pytest.raises(UsageError, match="has no config.json"):
        load_checkpoint(path)


def test_file_size_limit_is_a_user_error(tmp_path):
    """EFBIG (``ulimit -f``) is one error line naming the file, as ENOSPC is; it was a raw
    OSError (a traceback)."""
    import errno

    from rankdyn._errors import UsageError
    from rankdyn._run import _io

    def too_big(f):
        raise OSError(errno.EFBIG, os.strerror(errno.EFBIG))

    with pytest.raises(UsageError, match="ulimit -f"):
        _io.atomic_write(tmp_path / "big.json", too_big, binary=False)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_seed_reaches_the_random_mask_of_a_checkpoint_run(tmp_path, monkeypatch):
    """``--mask random --seed s`` with ``--checkpoint``: the old code built the mask with seed 0
    whatever ``--seed`` said (two seeds, one mu). The layers handed to simulate now differ, and
    equal the random path's mask for that seed."""
    pytest.importorskip("transformers")
    import numpy as np
    from checkpoint_models import WORDS, bert

    import rankdyn._run._simulate
    from rankdyn.masks import make_mask

    (tmp_path / "bert").mkdir()
    bert(tmp_path / "bert")
    text = tmp_path / "t.txt"
    text.write_text(" ".join(WORDS[i % len(WORDS)] for i in range(60)))
    masks = []

    def capture(layer, *a, **k):
        masks.append(np.asarray(layer.mask))
        raise KeyboardInterrupt  # stop before compute (exit 130)

    monkeypatch.setattr(rankdyn._run._simulate, "simulate", capture)
    for seed in (1, 2):
        argv = ["simulate", "--checkpoint", str(tmp_path / "bert"), "--text", str(text), "--n", "12"]
        argv += ["--batch", "1", "--mask", "random", "--seed", str(seed), "--out", str(tmp_path / f"o{seed}")]
        assert main(argv) == 130
    assert not np.array_equal(masks[0], masks[1])
    assert np.array_equal(masks[1], make_mask("random", 12, seed=2))


def test_a_folder_with_safetensors_and_a_gguf_is_refused(tmp_path):
    """A folder holding both ``model.safetensors`` and a ``.gguf`` file is two checkpoints: refused
    by name, not run as the safetensors one."""
    from rankdyn._errors import UsageError
    from rankdyn.checkpoints import load_checkpoint

    (tmp_path / "config.json").write_text('{"model_type": "bert"}')
    (tmp_path / "model.safetensors").write_bytes(_safetensors_variants()[0])
    (tmp_path / "model.Q4_1.gguf").write_bytes(b"GGUF")
    with pytest.raises(UsageError, match="holds both model.safetensors and model.Q4_1.gguf"):
        load_checkpoint(tmp_path)
