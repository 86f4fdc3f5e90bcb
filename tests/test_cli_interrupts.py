"""Ctrl-C and SIGTERM on the command line: one line, the exit code, nothing lost, and a stop at the
next chunk.
"""

import os
import signal
import subprocess
import sys
import time

import pytest
from helpers import SIGINT_DEFAULT, own_compiles

from rankdyn.cli import main

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.slow
def test_sigint_and_sigterm_at_several_delays(tmp_path):
    """SIGINT right after start, SIGINT later, SIGTERM later: exit 130 / 130 / 143, one line
    saying what was saved, no traceback, no swallowed ``KeyboardInterrupt`` in a GC callback, no
    result. Three processes run at once (one import each, under load)."""
    start = SIGINT_DEFAULT + (
        "import sys; from rankdyn.cli import main; print('ready', flush=True); sys.exit(main(sys.argv[1:]))"
    )
    cases = [(0.0, signal.SIGINT, 130), (1.0, signal.SIGINT, 130), (2.5, signal.SIGTERM, 143)]
    # Every process compiles (no shared cache), so the later signals land before the result.
    env = own_compiles(dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")))
    procs = []
    for i, case in enumerate(cases):
        args = ["simulate", "--n", "32", "--d", "32", "--num-layers", "64", "--batch", "64"]
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
        # At 0 s the signal may land before the command line is parsed (under load): then nothing
        # started and the line cannot name the command yet; later it names it and what was saved.
        said = "rankdyn: interrupted; nothing was saved." if delay == 0.0 and "rankdyn: " in err else None
        assert err.count(said or "rankdyn simulate: interrupted;") == 1, err[-2000:]
        assert not (tmp_path / f"o{i}" / "metrics.json").exists()


@pytest.mark.slow
def test_lyapunov_stops_at_the_next_chunk_after_a_signal(tmp_path, capsys, monkeypatch):
    """A SIGTERM that arrives during the first chunk (set as the handler sets it, so no timing is
    involved) stops the run before the second chunk: exit 143, one line, nothing written."""
    import signal

    from rankdyn._lyapunov import _qr
    from rankdyn._run import _interrupt

    real, calls = _qr._advance, []

    def advance(*args):
        calls.append(1)
        out = real(*args)
        _interrupt._state["signum"] = signal.SIGTERM  # "arrived" during this piece
        return out

    monkeypatch.setattr(_qr, "_advance", advance)
    argv = ["lyapunov", "--n", "3", "--d", "2", "--num-layers", "4", "--batch", "6", "--chunk", "2"]
    try:
        code = main([*argv, "--k", "2", "--no-progress", "--out", str(tmp_path / "o")])
    finally:
        _interrupt._state["signum"] = None
    err = capsys.readouterr().err
    assert code == 143 and len(calls) == 1, (code, calls, err)
    assert "rankdyn lyapunov: interrupted; nothing was saved" in err and "Traceback" not in err
    assert not (tmp_path / "o" / "lyapunov.json").exists()
