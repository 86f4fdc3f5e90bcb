"""`rankdyn reproduce --jobs N` and `--resume`: the same files and numbers as one process.

The oracle is ``--jobs 1`` (today's runner, in one process): the workers' folder must hold the
same files, the report the same targets in the same order, and every target's ``measured``,
``checks`` and ``verdict`` must be identical.
"""

import argparse
import json
import os
import signal
import subprocess
import sys
import time

import jax
import pytest
from helpers import SIGINT_DEFAULT

from rankdyn._commands.reproduce import _jobs_flag
from rankdyn._reproduce._jobs import QUICK_SECONDS, split_cores, work_items
from rankdyn.cli import main as cli_main


def test_work_items_and_core_split():
    items = work_items(["masks-collapse", "ablation", "geometry", "pretrained-temperature", "flow-limit"])
    # The checkpoint's targets together, everything else alone; the longest first.
    assert sorted(items) == [
        ["ablation"],
        ["flow-limit"],
        ["geometry", "pretrained-temperature"],
        ["masks-collapse"],
    ]
    cost = [sum(QUICK_SECONDS[n] for n in item) for item in items]
    assert cost == sorted(cost, reverse=True)
    assert split_cores(2, [0, 1, 2, 3, 4]) == [[0, 1, 2], [3, 4]]  # disjoint, near-equal
    assert split_cores(1, [3, 7]) == [[3, 7]]
    with pytest.raises(RuntimeError):
        split_cores(3, [0, 1])  # never more workers than cores (the caller's invariant)


def test_bad_jobs_and_resume_refused_before_compute(tmp_path, capsys):
    out = tmp_path / "o"
    cores = len(os.sched_getaffinity(0))
    for flags, message in [
        (["--jobs", "0"], "--jobs 0: the number of worker processes must be in 1.."),
        (["--jobs=-2"], "--jobs -2: the number of worker processes must be in 1.."),
        (["--jobs", str(cores + 1)], f"must be in 1..{cores}"),
        (["--resume"], "holds no record of an earlier reproduce run"),
    ]:
        argv = ["reproduce", "temperature", "flow-limit", "--quick", "--out", str(out), *flags]
        assert cli_main(argv) == 2, flags
        err = capsys.readouterr().err
        assert message in err and err.count("error:") == 1 and "Traceback" not in err, err
        assert not out.exists()  # refused before anything was written


def test_jobs_with_devices():
    # Checked on the flags alone: an in-process --devices would reconfigure this test process's JAX.
    ns = lambda jobs, devices: argparse.Namespace(jobs=jobs, devices=devices)  # noqa: E731
    assert _jobs_flag(ns(None, "1")) == 1  # --devices alone: this process, as before
    assert _jobs_flag(ns(None, None)) == len(os.sched_getaffinity(0))  # default: one worker per core
    if len(os.sched_getaffinity(0)) >= 2:
        with pytest.raises(ValueError, match="--devices 1 with --jobs 2: every worker has one device"):
            _jobs_flag(ns(2, "1"))


def _reproduce(out, *flags, env=None):
    cmd = [sys.executable, "-m", "rankdyn", "reproduce", "temperature", "flow-limit", "--quick"]
    res = subprocess.run(
        [*cmd, "--no-progress", "--out", str(out), *flags],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    return res


def _reproduce_here(out, capsys, *flags):
    """``rankdyn reproduce`` in this process (no interpreter, JAX import or second compile of a
    program this process already compiled), under JAX's defaults as a fresh process has them:
    float32 (``run_flags`` records x64), standard dtype and rank promotion."""
    argv = ["reproduce", "temperature", "flow-limit", "--quick", "--no-progress", "--out", str(out), *flags]
    # JAX started first: the CLI then keeps this process's devices (one) and leaves NPROC and the
    # device count alone, which it would set for a fresh process (and for every later test here).
    jax.devices()
    environ = dict(os.environ)
    with jax.enable_x64(False), jax.numpy_dtype_promotion("standard"), jax.numpy_rank_promotion("allow"):
        rc = cli_main(argv)
    res = capsys.readouterr()
    assert rc == 0, res.err[-3000:]
    assert dict(os.environ) == environ
    return res


def _results(out):
    return {n: json.loads((out / f"{n}.json").read_text()) for n in ("temperature", "flow-limit")}


def _files(out):
    return sorted(
        str(p.relative_to(out)) for p in out.rglob("*") if p.is_file() and not p.name.startswith(".")
    )


@pytest.mark.slow
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="--jobs 2 needs two cores")
def test_jobs_two_equals_jobs_one_and_resume_keeps_complete_targets(tmp_path, capsys):
    # The oracle (--jobs 1) and the resume run in this process; --jobs 2 is a fresh process
    # whose workers are fresh processes too.
    one, two = tmp_path / "one", tmp_path / "two"
    _reproduce_here(one, capsys, "--jobs", "1")
    res = _reproduce(two, "--jobs", "2")
    assert "2 target(s) in 2 worker processes" in res.stdout
    assert _files(one) == _files(two)  # the same JSON, figures and report listings
    a, b = _results(one), _results(two)
    for name in a:
        for key in ("measured", "checks", "verdict"):
            assert json.dumps(a[name][key], sort_keys=True) == json.dumps(b[name][key], sort_keys=True), (
                name,
                key,
            )
    assert b["temperature"]["provenance"]["devices"] == ["cpu:0"]  # a worker has one device
    order = lambda out: [
        ln for ln in (out / "report.md").read_text().splitlines() if "flow-limit" in ln or "temperature" in ln
    ]  # noqa: E731
    assert [ln.split("|")[1] for ln in order(one) if ln.startswith("|")] == [
        ln.split("|")[1] for ln in order(two) if ln.startswith("|")
    ]

    # --resume: the complete target is kept, the missing one is run, the report covers both.
    (two / "flow-limit.json").unlink()
    kept_at = (two / "temperature.json").stat().st_mtime_ns
    res = _reproduce_here(two, capsys, "--jobs", "2", "--resume")  # one item left: runs in this process
    assert "kept 1 complete target(s)" in res.out and "temperature" in res.out
    assert (two / "temperature.json").stat().st_mtime_ns == kept_at
    assert json.loads((two / "flow-limit.json").read_text())["measured"] == a["flow-limit"]["measured"]
    report = (two / "report.md").read_text()
    assert "temperature" in report and "flow-limit" in report


@pytest.mark.slow
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="--jobs 2 needs two cores")
def test_ctrl_c_ends_every_worker_and_says_how_to_resume(tmp_path):
    out = tmp_path / "o"
    # `python -m rankdyn` with SIGINT at Python's default (set in the child's Python, not with
    # preexec_fn: that forks this process, whose JAX is running threads after the test above).
    start = SIGINT_DEFAULT + (
        "import runpy, sys; sys.argv[0] = 'rankdyn'; "
        "runpy.run_module('rankdyn', run_name='__main__', alter_sys=True)"
    )
    cmd = [
        sys.executable,
        "-c",
        start,
        "reproduce",
        "temperature",
        "flow-limit",
        "--quick",
        "--jobs",
        "2",
    ]
    proc = subprocess.Popen(
        [*cmd, "--no-progress", "--out", str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    # Events, not fixed times: the signal goes once both workers exist; the timeouts below are
    # only upper bounds, generous for a load of 10 on two cores (they were 60 s, passed at load 9).
    deadline = time.monotonic() + 300
    workers = []
    while len(workers) < 2 and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.2)
        workers = _children(proc.pid)
    assert len(workers) >= 2, "the workers never started"
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 130, err
    assert "rankdyn reproduce: interrupted" in err and "--resume" in err, err
    # The parent stopped the workers instead of waiting for their targets (it used to check the
    # signal only once they were done, which took longer than the test's wait under load).
    assert "0 target(s) finished" in err and not list(out.glob("*.json")), err
    # A worker still starting (importing JAX) when the parent died leaves as soon as it can run.
    deadline = time.monotonic() + 300
    alive = workers
    while alive and time.monotonic() < deadline:
        time.sleep(0.5)
        alive = [p for p in workers if _state(p) == "running"]
    assert not alive, f"workers {alive} outlived the interrupted parent"


def _children(pid: int) -> list[int]:
    """PIDs of the processes whose parent is ``pid`` that run rankdyn's worker (spawned Python)."""
    kids = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                stat = open(f"/proc/{d}/stat").read().rsplit(")", 1)[1].split()
                if int(stat[1]) == pid and "spawn_main" in open(f"/proc/{d}/cmdline").read():
                    kids.append(int(d))
            except OSError:
                continue
    return kids


def _state(pid: int) -> str:
    try:
        return "zombie" if open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] == "Z" else "running"
    except OSError:
        return "gone"
