"""Result folders and files: an empty or reused ``--out``, atomic writes, the result manifest that
`rankdyn plot` trusts, and the reproduce report and ``--resume`` over a folder.
"""

import os

import pytest

from rankdyn.cli import main

FLOW = ["flow", "--n", "4", "--d", "3", "--batch", "2", "--time", "1", "--saves", "3", "--no-progress"]


SIM = [
    "simulate",
    "--n",
    "3",
    "--d",
    "3",
    "--num-layers",
    "2",
    "--batch",
    "2",
    "--no-progress",
    "--plot",
    "mu",
]


def _fake_run(folder, metrics, manifest=None):
    import json

    folder.mkdir(parents=True)
    (folder / "metrics.json").write_text(json.dumps(metrics))
    if manifest is not None:
        (folder / "rankdyn-result.json").write_text(json.dumps({"command": "simulate", "files": manifest}))


GOOD = {
    "config": {"mask": "causal"},
    "layers": [0, 1],
    "metrics": {"mu": {"mean": [1.0, 0.5], "std": [0, 0]}},
}


def test_empty_out_is_refused(tmp_path, monkeypatch, capsys):
    """``--out ""`` wrote into the current folder with exit 0; it is a usage error now."""
    monkeypatch.chdir(tmp_path)
    assert main(["simulate", "--n", "3", "--d", "3", "--num-layers", "2", "--batch", "2", "--out", ""]) == 2
    err = capsys.readouterr().err
    assert err.count("error:") == 1 and "--out is empty" in err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_flow_states_are_written_atomically(tmp_path, monkeypatch, capsys):
    """A full disk halfway through ``states.npy``: the old code wrote it in place and left a
    truncated file; now the temp file is removed, the error names the file, no states.npy."""
    import errno

    import numpy as np

    real_save = np.save

    def full_disk(file, arr, *a, **k):
        target = open(file, "wb") if isinstance(file, (str, os.PathLike)) else file
        target.write(b"\x93NUMPY half")  # a few bytes land, then the disk is full
        target.flush()
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(np, "save", full_disk)
    out = tmp_path / "o"
    rc = main([*FLOW, "--save-states", "--out", str(out)])
    monkeypatch.setattr(np, "save", real_save)
    err = capsys.readouterr().err
    assert rc == 2 and "states.npy" in err and "No space left" in err, err
    assert not (out / "states.npy").exists()
    assert [p.name for p in out.iterdir() if p.name.endswith(".tmp")] == []


@pytest.mark.slow
def test_reused_out_is_cleared_of_the_previous_result(tmp_path, capsys):
    """A second run into the same folder without --per-trajectory and one figure fewer: the
    previous run's ``per_trajectory.npz`` and ``min_cos.png`` (listed by its manifest) go; a
    file rankdyn did not write stays; the manifest lists exactly the new result with its
    hashes. The old code kept the stale files."""
    import hashlib
    import json

    out = tmp_path / "o"
    assert main([*SIM, "--per-trajectory", "--plot", "mu,min_cos", "--out", str(out)]) == 0
    assert (out / "per_trajectory.npz").is_file() and (out / "min_cos.png").is_file()
    (out / "notes.txt").write_text("mine")
    assert main([*SIM, "--out", str(out)]) == 0
    capsys.readouterr()
    assert not (out / "per_trajectory.npz").exists() and not (out / "min_cos.png").exists()
    assert (out / "mu.png").is_file() and (out / "notes.txt").read_text() == "mine"
    files = json.loads((out / "rankdyn-result.json").read_text())["files"]
    assert "metrics.json" in files and "notes.txt" not in files and "per_trajectory.npz" not in files
    for name, digest in files.items():
        assert hashlib.sha256((out / name).read_bytes()).hexdigest() == digest


def test_plot_trusts_only_the_result_manifest(tmp_path, capsys):
    """``metrics.json`` that does not match the folder's manifest (a run interrupted while it
    replaced the result) is refused, naming the folder; the old reader plotted it."""
    _fake_run(tmp_path / "a", GOOD, manifest={"metrics.json": "0" * 64})
    rc = main(["plot", str(tmp_path / "a"), "--out", str(tmp_path / "f.png")])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("error:") == 1 and "does not match rankdyn-result.json" in err
    assert not (tmp_path / "f.png").exists()


@pytest.mark.parametrize(
    "metrics, words",
    [
        ([1, 2], "no per-layer metrics"),  # not a dict: was an AttributeError traceback
        ({**GOOD, "metrics": {"mu": 3.0}}, "no per-layer mean"),  # a scalar metric
        ({**GOOD, "metrics": {"mu": {"std": [0, 0]}}}, "no per-layer mean"),  # no "mean"
    ],
)
def test_plot_refuses_odd_result_files(tmp_path, capsys, metrics, words):
    _fake_run(tmp_path / "a", metrics)
    rc = main(["plot", str(tmp_path / "a"), "--out", str(tmp_path / "f.png")])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("error:") == 1 and words in err and "Traceback" not in err, err


def test_plot_out_folder_or_under_a_file_is_refused(tmp_path, capsys):
    _fake_run(tmp_path / "a", GOOD)
    (tmp_path / "dir.png").mkdir()
    (tmp_path / "file").write_text("x")
    for out, words in [(tmp_path / "dir.png", "is a folder"), (tmp_path / "file" / "f.png", "is a file")]:
        assert main(["plot", str(tmp_path / "a"), "--out", str(out)]) == 2
        err = capsys.readouterr().err
        assert err.count("error:") == 1 and words in err and "Traceback" not in err, err


def test_plot_says_when_log_axis_drops_values(tmp_path, capsys):
    _fake_run(tmp_path / "a", {**GOOD, "metrics": {"mu": {"mean": [1.0, 0.0], "std": [0, 0]}}})
    assert main(["plot", str(tmp_path / "a"), "--out", str(tmp_path / "f.png")]) == 0
    assert "1 non-positive value(s) of mu are not drawn on the log axis" in capsys.readouterr().err


def test_reproduce_report_covers_every_result_in_the_folder(tmp_path):
    """``reproduce T --out DIR`` over an earlier run: the report lists the earlier target's
    result too (and says it is from an earlier run), and names an unreadable leftover. The old
    writer reported T alone next to the other targets' files."""
    import json

    from rankdyn._reproduce._report import write_report

    def result(name, verdict):
        return {"name": name, "claim": "c", "verdict": verdict, "checks": [], "runtime_s": 1.0, "figures": []}

    (tmp_path / "temperature.json").write_text(json.dumps(result("temperature", "reproduced")))
    (tmp_path / "ablation.json").write_text("{broken")
    text = write_report(
        tmp_path, {"masks-collapse": result("masks-collapse", "partially")}, runtime_s=1.0, quick=True, seed=0
    ).read_text()
    rows = [ln for ln in text.splitlines() if ln.startswith("| [")]
    assert [r.split("]")[0][3:] for r in rows] == ["masks-collapse", "temperature"]
    assert "from an earlier run" in text and "unreadable, not reported: ablation.json" in text


def test_reproduce_resume_recomputes_a_target_computed_with_other_flags(tmp_path, capsys, monkeypatch):
    """``temperature --x64`` and then a float32 ``depth-table`` into one folder: ``--resume``
    kept the float64 temperature.json in a float32 report (every run rewrites the folder's
    record of its flags). Each target now records its own flags (``run_flags``) and a target
    computed with other ones is recomputed, named with the flag. The targets are stand-ins
    (`run_target` patched): this is about what is kept, not about the physics."""
    import jax

    import rankdyn._reproduce as rp
    from rankdyn.cli import main

    ran = []

    def fake(spec, out, quick, seed, cache, checkpoint):
        ran.append(spec.name)
        return {
            "name": spec.name,
            "claim": "c",
            "setting": {"quick": quick, "seed": seed},
            "measured": {},
            "verdict": "reproduced",
            "criterion": "x",
            "figures": [],
            "notes": "",
        }

    monkeypatch.setattr(rp, "run_target", fake)
    out = tmp_path / "o"
    base = ["reproduce", "--quick", "--jobs", "1", "--no-progress", "--out", str(out)]
    assert main([*base, "temperature", "depth-table"]) == 0  # the tests run with x64 on
    assert rp.run_flags(True, 0)["x64"] and '"x64": true' in (out / "temperature.json").read_text()
    jax.config.update("jax_enable_x64", False)  # as a run without --x64
    try:
        assert main([*base, "depth-table"]) == 0  # float32 now: the folder's record says so
        capsys.readouterr()
        ran.clear()
        assert main([*base, "temperature", "depth-table", "--resume"]) == 0
    finally:
        jax.config.update("jax_enable_x64", True)
    stdout = capsys.readouterr().out
    assert ran == ["temperature"], stdout
    assert "recomputing temperature: it was computed with other flags (--x64 True there, False now)" in stdout
