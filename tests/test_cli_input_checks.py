"""Issue 54 (faults round 5): refusals that came after JAX or the weights loaded, and the causes
that last round left (items 5 and 6)."""

import json

import numpy as np
from helpers import refusals_in_one_process


def test_reproduce_and_checkpoint_input_refusals_come_before_jax(tmp_path):
    other = tmp_path / "other"
    other.mkdir()
    (other / ".reproduce-flags").write_text(
        json.dumps({"quick": True, "seed": 3, "x64": False, "checkpoint": None})
    )
    empty = tmp_path / "empty"
    empty.mkdir()
    bad = tmp_path / "latin1.txt"
    bad.write_bytes("caf\xe9".encode("latin1"))
    ck = ["simulate", "--checkpoint", str(tmp_path)]
    cases = {
        # reproduce --extended: formerly after the compilation cache imported JAX.
        "holds no record of an earlier reproduce run": [
            "reproduce",
            "--extended",
            "--resume",
            "--out",
            str(empty),
        ],
        "was written with other flags": ["reproduce", "--extended", "--resume", "--out", str(other)],
        "would ignore it": ["reproduce", "--extended", "--checkpoint", str(tmp_path / "nope")],
        "does not exist": ["reproduce", "geometry", "--checkpoint", str(tmp_path / "nope")],
        # checkpoint inputs: formerly after JAX and the weights loaded.
        "exactly one of --text FILE or --input-ids": ck,
        "--text": ck + ["--text", str(tmp_path / "missing.txt")],
        "cannot read it (Is a directory)": ck + ["--text", str(empty)],
        "not UTF-8": ck + ["--text", str(bad)],
        "cannot read a .npy array": ck + ["--input-ids", str(tmp_path / "missing.npy")],
    }
    errors, jax = refusals_in_one_process(cases)
    assert not jax, errors
    assert "cannot read it (No such file" in errors[5]
    np.testing.assert_equal(len(errors), len(cases))


def test_a_checkpoint_folder_without_config_json_is_refused_before_jax(tmp_path):
    """A folder lacking config.json (or model.safetensors) was refused by the loader, after JAX and
    the weights loaded: now from its file names, naming --checkpoint and the fix, for every
    command that reads a checkpoint."""
    text = tmp_path / "t.txt"
    text.write_text("a few words " * 50)
    weights_only, config_only = tmp_path / "weights_only", tmp_path / "config_only"
    weights_only.mkdir()
    (weights_only / "model.safetensors").write_bytes(b"\0" * 64)
    config_only.mkdir()
    (config_only / "config.json").write_text("{}")
    both = tmp_path / "both"
    both.mkdir()
    (both / "model.safetensors").write_bytes(b"\0" * 64)
    (both / "m.gguf").write_bytes(b"\0" * 64)
    fix = "give a folder or .zip holding config.json and model.safetensors"
    cases = {
        f"--checkpoint {weights_only} has no config.json; {fix}": [
            "simulate", "--checkpoint", str(weights_only), "--text", str(text),
        ],
        f"--checkpoint {config_only} has no model.safetensors; {fix}": [
            "lyapunov", "--checkpoint", str(config_only), "--text", str(text),
        ],
        "holds both model.safetensors and m.gguf": [
            "simulate", "--checkpoint", str(both), "--text", str(text),
        ],
        f"--checkpoint {weights_only} has no config.json": [
            "reproduce", "geometry", "--checkpoint", str(weights_only), "--out", str(tmp_path / "o"),
        ],
    }  # fmt: skip
    errors, jax = refusals_in_one_process(cases)
    assert not jax, errors


def test_round4_leftover_causes(tmp_path):
    afile = tmp_path / "afile"
    afile.write_text("x")
    zero, nan = tmp_path / "zero", tmp_path / "nan"
    for folder, mean in ((zero, []), (nan, [None, None])):
        folder.mkdir()
        run = {"layers": list(range(len(mean))), "metrics": {"mu": {"mean": mean}}, "config": {}}
        (folder / "metrics.json").write_text(json.dumps(run))
    png = str(tmp_path / "o.png")
    start = tmp_path / "start.npy"
    np.save(start, np.zeros((4, 6)))
    cases = {
        # argparse took -1/2 for a flag: "--task: expected one argument".
        "--task -1/2: the task index must be in 0..1": ["sweep", "--task", "-1/2"],
        "--task 2/2: the task index must be in 0..1": ["sweep", "--task=2/2"],
        # --assemble FILE was reported as "--out FILE is an existing file".
        f"--assemble {afile} is a file, not a sweep folder": ["sweep", "--assemble", str(afile)],
        # plot wrote an empty figure and exited 0.
        "has zero rows": ["plot", str(zero), "--metric", "mu", "--out", png],
        "no finite value in its 2 rows": ["plot", str(nan), "--metric", "mu", "--out", png],
        # the file's (4, 6) was reported as the batch made of it, (1, 4, 6).
        "or (m, 6, 6), got (4, 6).": [
            "continue",
            "--param",
            "w",
            "--from",
            "0.5",
            "--to",
            "1",
            "--start",
            str(start),
        ],
    }
    errors, jax = refusals_in_one_process(cases)
    assert not jax and "--out FILE" not in errors[2] and f"--out {afile}" not in errors[2]
    assert not (tmp_path / "o.png").exists()
