"""`rankdyn sweep --task I/N` and `--assemble DIR`: a grid split into independent processes.

The oracle is the one-process sweep: three task processes sharing one folder, one of them killed
with -9 and started again, must give a dataset bitwise equal to it (every chunk is computed by
the same compiled program with the same per-program batch shape, whichever process runs it).
"""

import signal
import subprocess
import sys
import time

import pytest
import xarray as xr
from helpers import assert_bitwise_datasets
from test_sweep import TINY

import rankdyn as rd
from rankdyn._sweep._tasks import task_from_env
from rankdyn.cli import main as cli_main
from rankdyn.sweep import NETCDF_ENGINE, parse_task


def test_round_robin_shares_partition_the_chunks():
    for count in (1, 2, 3, 7):
        shares = [parse_task(f"{i}/{count}") for i in range(count)]
        owners = [[s.index for s in shares if s.owns(c)] for c in range(23)]
        assert all(len(o) == 1 for o in owners)  # every chunk has exactly one task
        sizes = [sum(s.owns(c) for c in range(23)) for s in shares]
        assert max(sizes) - min(sizes) <= 1  # and the tasks are balanced


def test_slurm_array_variables_give_the_task():
    env = {"SLURM_ARRAY_TASK_ID": "5", "SLURM_ARRAY_TASK_MIN": "3", "SLURM_ARRAY_TASK_COUNT": "4"}
    share, said = task_from_env(env)
    assert (share.index, share.count) == (2, 4) and "task 2/4 from the SLURM job array" in said
    assert task_from_env({"SLURM_JOB_ID": "7"}) == (None, "")  # a job that is not an array
    with pytest.raises(ValueError, match=r"must be in 0\.\.3.*an array with a step"):
        task_from_env(env | {"SLURM_ARRAY_TASK_ID": "9"})  # --array=3-12:3 has 4 tasks, ids 3..12
    with pytest.raises(ValueError, match="SLURM_ARRAY_TASK_COUNT='x' is not an integer"):
        task_from_env(env | {"SLURM_ARRAY_TASK_COUNT": "x"})


def test_bad_task_and_assemble_flags_refused_before_compute(tmp_path, capsys, monkeypatch):
    config = tmp_path / "tiny.toml"
    config.write_text(TINY)
    out = tmp_path / "out"
    cases = [
        (["--task", "3/3"], "--task 3/3: the task index must be in 0..2"),
        (["--task=-1/3"], "--task -1/3: the task index must be in 0..2"),
        (["--task", "0/0"], "--task 0/0: the number of tasks N must be at least 1"),
        (["--task", "1of3"], "--task '1of3': expected I/N"),
        (["--task", "1/3", "--resume"], "--resume with task 1/3: a task always joins"),
    ]
    for flags, message in cases:
        assert cli_main(["sweep", str(config), "--out", str(out), *flags]) == 2, flags
        err = capsys.readouterr().err
        assert message in err and err.count("error:") == 1 and "Traceback" not in err, err
    monkeypatch.setenv("SLURM_ARRAY_TASK_ID", "4")
    monkeypatch.setenv("SLURM_ARRAY_TASK_COUNT", "3")
    assert cli_main(["sweep", str(config), "--out", str(out)]) == 2
    assert "the task index must be in 0..2" in capsys.readouterr().err
    assert not out.exists()  # nothing created, let alone computed

    folder = tmp_path / "not_a_sweep"
    folder.mkdir()
    for argv, message in [
        (["--assemble", str(folder)], "not a sweep folder (no manifest.json and config.toml"),
        ([str(config), "--assemble", str(folder)], "computes nothing: drop CONFIG"),
        (["--assemble", str(folder), "--x64"], "computes nothing: drop --x64"),
        (["--out", str(out)], "give the sweep's CONFIG.toml and --out DIR"),
    ]:
        assert cli_main(["sweep", *argv]) == 2, argv
        err = capsys.readouterr().err
        assert message in err and err.count("error:") == 1, err
    assert list(folder.iterdir()) == [] and not out.exists()


def _chunks(folder):
    return sorted(p.name for p in (folder / "chunks").glob("chunk_*.npz"))


@pytest.mark.slow
def test_three_tasks_one_killed_equal_one_process(tmp_path, capsys):
    config = tmp_path / "tiny.toml"
    config.write_text(TINY.replace("chunk = 8", "chunk = 4"))  # 10 chunks
    cfg = rd.load_sweep_config(config)
    assert len(rd.sweep.sweep_plan(cfg).chunks) == 10
    out = tmp_path / "shared"
    cmd = [sys.executable, "-m", "rankdyn.cli", "sweep", str(config), "--out", str(out), "--x64"]
    cmd += ["--no-progress", "--no-plots", "--devices", "1"]
    # Task 1 (chunks 1, 4, 7) stops after its first chunk (the store's hook, patched in the child)
    # and waits to be killed; tasks 0 and 2 start at the same moment on the same empty folder.
    stalled = [
        sys.executable,
        "-c",
        "import sys, time; from rankdyn._sweep import _store; "
        "_store._chunk_written = lambda i: time.sleep(600); from rankdyn.cli import main; "
        "sys.exit(main(sys.argv[1:]))",
    ] + cmd[3:]
    pipes = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, "text": True}
    one = subprocess.Popen(stalled + ["--task", "1/3"], **pipes)
    others = [subprocess.Popen(cmd + ["--task", f"{i}/3"], **pipes) for i in (0, 2)]
    deadline = time.monotonic() + 120
    while "chunk_00001.npz" not in _chunks(out) and one.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert one.poll() is None, one.communicate()
    # A second process for the same task is refused at start (exit 2), and touches nothing.
    twin = subprocess.run(cmd + ["--task", "1/3"], capture_output=True, text=True, timeout=120)
    assert twin.returncode == 2, twin.stderr
    assert "task 1/3 of the sweep" in twin.stderr and "already running in another process" in twin.stderr
    one.send_signal(signal.SIGKILL)
    one.wait()
    for p in others:
        stdout, stderr = p.communicate(timeout=180)
        assert p.returncode == 0, stderr
        assert "other tasks' chunks are still missing" in stdout or "wrote" in stdout
    assert _chunks(out) == [f"chunk_{i:05d}.npz" for i in (0, 1, 2, 3, 5, 6, 8, 9)]
    assert not (out / "sweep.nc").exists()

    # The folder is incomplete: --assemble names the chunks and the task that owns them.
    capsys.readouterr()
    assert cli_main(["sweep", "--assemble", str(out), "--no-plots"]) == 2
    err = capsys.readouterr().err
    assert "2 of 10 chunk(s) missing" in err and "chunk 4 (task 1/3), 7 (task 1/3)" in err, err

    # Task 1 again, from a SLURM array's variables (id 2 of an array starting at 1): the dead
    # process's lock is gone, it resumes its own two chunks, and being last it writes sweep.nc.
    first = (out / "chunks" / "chunk_00001.npz").stat().st_mtime_ns
    env = {"SLURM_ARRAY_TASK_ID": "2", "SLURM_ARRAY_TASK_MIN": "1", "SLURM_ARRAY_TASK_COUNT": "3"}
    again = subprocess.run(cmd, capture_output=True, text=True, timeout=180, env=_environ() | env)
    assert again.returncode == 0, again.stderr
    assert "task 1/3 from the SLURM job array" in again.stdout
    assert "computed 2 chunk(s)" in again.stdout and "wrote" in again.stdout
    assert (out / "chunks" / "chunk_00001.npz").stat().st_mtime_ns == first  # not recomputed

    ref = rd.run_sweep(cfg, tmp_path / "one", progress=False)  # one process, float64 as the tasks
    split = xr.open_dataset(out / "sweep.nc", engine=NETCDF_ENGINE).load()
    assert_bitwise_datasets(split, ref)
    # Assembling again is harmless: the same dataset.
    assert cli_main(["sweep", "--assemble", str(out), "--no-plots"]) == 0
    assert_bitwise_datasets(xr.open_dataset(out / "sweep.nc", engine=NETCDF_ENGINE).load(), ref)


def _environ():
    import os

    return dict(os.environ)


def test_a_manifest_written_during_the_foreign_check_is_not_foreign(tmp_path, monkeypatch):
    """Another task writes its manifest between the check for it and the listing of the folder
    (the check runs before the folder lock): the folder is this sweep's, not a foreign one."""
    from pathlib import Path

    from rankdyn._sweep import _store

    out = tmp_path / "o"
    out.mkdir()
    (out / "manifest.json").write_text("{}")
    (out / "config.toml").write_text("")
    real, seen = Path.exists, []

    def exists(self):  # the first look at the manifest comes before the other task wrote it
        if self.name == "manifest.json" and not seen:
            seen.append(self)
            return False
        return real(self)

    monkeypatch.setattr(Path, "exists", exists)
    _store._refuse_foreign(out)  # refused the folder as "holds no sweep manifest" before
    assert seen
