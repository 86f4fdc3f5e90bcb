"""Faults, round 3 (issue 33): the newer surfaces held to the standard of the simulate path.

One test (or a few) per class of the audit: interrupts (SIGINT / SIGTERM at several delays), an
empty ``--out``, data loss (atomic writes, the result manifest, reused folders), silently wrong
inputs (certificates, safetensors headers, zips, text, dtypes, solve_flow arguments, a large
beta), silently ignored flags, tracebacks, refusals naming the wrong cause, and a zero row under
a LayerNorm with eps. Most stop before any compile.
"""

import os
import signal
import subprocess
import sys
import time

import pytest

from rankdyn.cli import main

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# --- Interrupts -------------------------------------------------------------------------------


@pytest.mark.slow
def test_sigint_and_sigterm_at_several_delays(tmp_path):
    """SIGINT right after start, SIGINT later, SIGTERM later: exit 130 / 130 / 143, one line
    saying what was saved, no traceback, no swallowed ``KeyboardInterrupt`` in a GC callback, no
    result. The old handler raised wherever the signal landed: it was swallowed there and the run
    finished with exit 0. Three processes run at once (one import each, under load)."""
    start = (
        "import sys; from rankdyn.cli import main; print('ready', flush=True); sys.exit(main(sys.argv[1:]))"
    )
    cases = [(0.0, signal.SIGINT, 130), (1.0, signal.SIGINT, 130), (2.5, signal.SIGTERM, 143)]
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    procs = []
    for i, case in enumerate(cases):
        args = ["simulate", "--n", "32", "--d", "32", "--layers", "64", "--batch", "64"]
        cmd = [sys.executable, "-c", start, *args, "--out", str(tmp_path / f"o{i}")]
        procs.append(
            subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        )
    for p in procs:
        assert p.stdout.readline().strip() == "ready"
    t0 = time.monotonic()
    for p, (delay, sig, _) in zip(procs, cases):
        time.sleep(max(0.0, t0 + delay - time.monotonic()))
        p.send_signal(sig)
    for i, (p, (delay, sig, code)) in enumerate(zip(procs, cases)):
        _, err = p.communicate(timeout=300)
        assert p.returncode == code, (delay, p.returncode, err[-2000:])
        assert "Traceback" not in err and "Exception ignored" not in err, err[-2000:]
        assert err.count("rankdyn simulate: interrupted;") == 1, err[-2000:]
        assert not (tmp_path / f"o{i}" / "metrics.json").exists()


def test_empty_out_is_refused(tmp_path, monkeypatch, capsys):
    """``--out ""`` wrote into the current folder with exit 0; it is a usage error now."""
    monkeypatch.chdir(tmp_path)
    assert main(["simulate", "--n", "3", "--d", "3", "--layers", "2", "--batch", "2", "--out", ""]) == 2
    err = capsys.readouterr().err
    assert err.count("error:") == 1 and "--out is empty" in err
    assert list(tmp_path.iterdir()) == []
