"""``rankdyn --help`` and the refusals that need no JAX never import it; the checkpoint run's token
count is checked before the weights load.

Speed itself is measured in benchmarks/cli_latency.py; here only what makes it fast is checked:
which modules a process imported (``sys.modules`` in a fresh subprocess).
"""

import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.checkpoint_models import write_tokenizer

ROOT = Path(__file__).resolve().parents[1]

#: Run the CLI in a fresh process; print its exit code and whether JAX / the weights reader loaded.
_PROBE = """
import sys
from rankdyn.cli import main
try:
    rc = main(sys.argv[1:])
except SystemExit as e:
    rc = e.code
print("RESULT", rc, "jax" in sys.modules, "rankdyn._trained._read" in sys.modules)
"""


def _probe(*argv: str) -> tuple[int, bool, bool, str]:
    res = subprocess.run(
        [sys.executable, "-c", _PROBE, *argv], capture_output=True, text=True, cwd=ROOT, timeout=120
    )
    line = next(x for x in res.stdout.splitlines() if x.startswith("RESULT"))
    _, rc, jax, reader = line.split()
    return int(rc), jax == "True", reader == "True", res.stdout + res.stderr  # stderr last


def _sweep_folder_without_chunks(folder, config) -> None:
    """A sweep folder's config and manifest (no chunks): enough for --assemble's flag checks."""
    import json
    import shutil

    from rankdyn.sweep import load_sweep_config

    folder.mkdir()
    shutil.copy(config, folder / "config.toml")
    cfg = load_sweep_config(folder / "config.toml")
    (folder / "manifest.json").write_text(json.dumps({"num_cells": cfg.num_cells, "config_hash": cfg.hash}))


@pytest.mark.parametrize(
    "argv",
    [
        ("--help",),
        ("simulate", "--help"),
        ("simulate", "--num-layers", "-1"),
        ("simulate", "--n", "0"),
        ("equilibria", "--n", "0"),
        ("reproduce", "no-such-target"),
        # --x64 is applied through JAX_ENABLE_X64 while JAX is not loaded yet (rankdyn.cli).
        ("simulate", "--x64", "--n", "0"),
        ("reproduce", "--x64", "no-such-target"),
        ("flow", "--x64", "--n", "0"),
        ("equilibria", "--x64", "--n", "0"),
        ("lyapunov", "--x64", "--n", "0"),
        ("lyapunov", "--num-layers", "4", "--qr-every", "0"),
        # rankdyn.sweep loads its modules on first use: the flag and config checks load no JAX.
        ("sweep",),
        ("sweep", "--x64", "--max-cells", "0", "{good}", "--out", "{tmp}/a"),
        ("sweep", "{bad}", "--out", "{tmp}/b"),
        ("sweep", "{tmp}/no-such.toml", "--out", "{tmp}/c"),
        ("sweep", "{good}", "--out", "{tmp}/d", "--task", "5/2"),
        ("sweep", "{good}", "--out", "{tmp}/e", "--task", "0/2", "--resume"),
        ("sweep", "--assemble", "{tmp}", "--x64"),
        ("sweep", "--assemble", "{tmp}/not-a-sweep"),
        ("sweep", "--assemble", "{tmp}/folder", "--plot-axes", "mask", "dqk"),
        ("sweep", "{good}", "--out", "{tmp}/f", "--plot-axes", "mask", "dqk"),
    ],
)
def test_help_and_refusals_do_not_import_jax(argv, tmp_path):
    good, bad = tmp_path / "good.toml", tmp_path / "bad.toml"
    good.write_text(
        '[axes]\nmask = ["complete", "causal"]\n[fixed]\nn = 4\nd = 4\nnum_layers = 2\nbatch = 2\n'
    )
    bad.write_text('[axes]\nmask = ["complete", "no-such-mask"]\n[fixed]\nn = 4\n')
    (tmp_path / "not-a-sweep").mkdir()
    _sweep_folder_without_chunks(tmp_path / "folder", good)
    argv = tuple(a.format(good=good, bad=bad, tmp=tmp_path) for a in argv)
    rc, jax, _, err = _probe(*argv)
    assert rc == (0 if "--help" in argv else 2), err
    assert "error:" in err or "--help" in argv, err
    assert not jax, f"rankdyn {' '.join(argv)} imported JAX"


@pytest.mark.slow  # end to end: a fresh `rankdyn simulate` process
def test_x64_without_jax_loaded_still_computes_in_float64(tmp_path):
    # The flag goes through JAX_ENABLE_X64 when JAX is not loaded yet: the run is float64 all the same.
    rc, jax, _, err = _probe("simulate", "--x64", "--n", "4", "--d", "4", "--num-layers", "1", "--batch", "2",
                             "--no-progress", "--out", str(tmp_path / "o"))  # fmt: skip
    # The probe can see JAX: a valid one-layer simulate imports it (the refusals above do not).
    assert rc == 0 and jax, err
    assert f"wrote in {tmp_path / 'o'}: metrics.json, mu.png" in err  # simulate says what it wrote
    saved = json.loads((tmp_path / "o" / "metrics.json").read_text())
    assert saved["provenance"]["x64"] is True


def _checkpoint_without_weights(folder: Path) -> Path:
    """config.json and tokenizer.json of a BERT, and a model.safetensors that is not one: a run
    that loads the weights is refused for them, so a refusal about the text proves it came first."""
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "bert", "max_position_embeddings": 24}))
    (folder / "model.safetensors").write_bytes(b"not weights")
    write_tokenizer(folder)
    return folder


@pytest.mark.slow  # fresh `rankdyn` processes, four of them
def test_a_short_text_is_refused_before_the_weights_load(tmp_path):
    from rankdyn._trained._text import excerpts

    folder = _checkpoint_without_weights(tmp_path / "ckpt")
    text = tmp_path / "short.txt"
    text.write_text(" ".join(f"w{i}" for i in range(30)))  # 30 tokens: 2 excerpts of 14 at n=16
    zipped = tmp_path / "ckpt.zip"
    with zipfile.ZipFile(zipped, "w") as z:
        for f in folder.iterdir():
            z.write(f, f"inner/{f.name}")
    for path in (folder, zipped):
        argv = ("simulate", "--checkpoint", str(path), "--text", str(text), "--n", "16")
        rc, jax, reader, err = _probe(*argv, "--batch", "64")
        assert rc == 2 and not jax and not reader, err
        # The message of the full check (rankdyn._trained._text.excerpts), word for word.
        with pytest.raises(Exception) as full:
            excerpts(
                (folder / "tokenizer.json").read_text(), text.read_text(), 16, 64, (1, 2), f"--text {text}"
            )
        assert err.strip().endswith(str(full.value)), (err, str(full.value))
        assert "30 tokens: only 2 excerpts of 14" in err
        # Two excerpts fit: the pre-check lets it through, and the weights are refused when read.
        rc, _, reader, err = _probe(*argv, "--batch", "2")
        assert rc == 2 and reader and "safetensors" in err, err


@pytest.mark.slow  # a fresh `rankdyn` process per case
@pytest.mark.parametrize(
    "extra, says",
    [
        (("--batch", "64"), "30 tokens: only 2 excerpts of 14"),
        (("--batch", "2", "--qr-every", "0"), "--qr-every 0: expected an integer >= 1 or auto"),
        (("--batch", "2", "--chunk", "0"), "--chunk must be a positive number"),
        (("--batch", "2", "--num-layers", "4", "--discard", "4"), "--discard 4: expected 0 <= discard <"),
    ],
)
def test_lyapunov_checkpoint_refusals_come_before_the_weights_and_jax(tmp_path, extra, says):
    folder = _checkpoint_without_weights(tmp_path / "ckpt")
    text = tmp_path / "short.txt"
    text.write_text(" ".join(f"w{i}" for i in range(30)))
    argv = ("lyapunov", "--checkpoint", str(folder), "--text", str(text), "--n", "16", *extra)
    rc, jax, reader, err = _probe(*argv)
    assert rc == 2 and not jax and not reader and says in err, err
