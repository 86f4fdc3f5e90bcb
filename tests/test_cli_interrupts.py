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


@pytest.mark.slow
def test_simulate_stops_within_a_piece_of_work_without_a_terminal(tmp_path, capsys, monkeypatch):
    """Without a progress bar a chunk's depth was one compiled call, so a SIGTERM waited for all of
    it (80 s at n = 128, d = 768, 128 layers). On the CPU the depth now runs in pieces of a few
    seconds of estimated work (`depth_piece`); here the estimate's FLOP rate is set low, so that a
    tiny run is cut into pieces, and the signal "arrives" during the first one: exit 143 before
    the second piece, one line, no metrics.json."""
    from rankdyn._run import _interrupt, _scan, _sizing

    monkeypatch.setattr(_sizing, "CPU_FLOPS", 1.0)  # every layer "takes" hours: one layer a piece
    real_first, real_advance, pieces = _scan._first, _scan._advance, []

    def first(*args):
        pieces.append("first")
        out = real_first(*args)
        _interrupt._state["signum"] = signal.SIGTERM  # "arrived" during this piece
        return out

    def advance(*args):
        pieces.append("advance")
        return real_advance(*args)

    monkeypatch.setattr(_scan, "_first", first)
    monkeypatch.setattr(_scan, "_advance", advance)
    argv = ["simulate", "--n", "4", "--d", "4", "--num-layers", "8", "--batch", "4", "--no-progress"]
    try:
        code = main([*argv, "--out", str(tmp_path / "o")])
    finally:
        _interrupt._state["signum"] = None
    err = capsys.readouterr().err
    assert code == 143 and pieces == ["first"], (code, pieces, err[-500:])
    assert "rankdyn simulate: interrupted" in err and "Traceback" not in err
    assert not (tmp_path / "o" / "metrics.json").exists()


def test_depth_pieces_follow_the_estimated_time():
    """On the CPU a chunk's depth is cut so that each piece is at most about PIECE_SECONDS of work
    at CPU_FLOPS; with a progress bar into at least PROGRESS_PIECES pieces; on an accelerator
    (cpu=False) only the progress bar cuts it."""
    import math
    import types

    from rankdyn._run._sizing import CPU_FLOPS, PIECE_SECONDS, PROGRESS_PIECES, depth_piece, layer_flops

    mask = types.SimpleNamespace(block_pairs=None)
    weights = types.SimpleNamespace(
        w_q=types.SimpleNamespace(shape=(768, 64)), w_v=types.SimpleNamespace(shape=(768, 768))
    )
    layer = types.SimpleNamespace(
        weights=weights, num_tokens=128, dim=768, num_heads=1, attention_path="dense", mask=mask
    )
    seconds_per_layer = layer_flops(layer) * 8 / CPU_FLOPS
    piece = depth_piece(layer, 8, 128, 1, progress=False, cpu=True)
    assert piece * seconds_per_layer <= PIECE_SECONDS * 1.01 and piece < 128
    assert depth_piece(layer, 8, 128, 1, progress=False, cpu=False) == 128
    # With a progress bar: about PROGRESS_PIECES pieces, all of one length (one compiled program
    # for the pieces after the first, not a third one for a shorter last piece).
    longest = math.ceil(128 / PROGRESS_PIECES)
    bar = depth_piece(layer, 8, 128, 1, progress=True, cpu=False)
    assert 128 % bar == 0 and longest / 2 <= bar <= longest, bar
    prime = depth_piece(layer, 8, 127, 1, progress=True, cpu=False)
    assert prime == math.ceil(127 / PROGRESS_PIECES)  # no divisor: a shorter last piece
    small = types.SimpleNamespace(**{**vars(layer), "num_tokens": 4, "dim": 4})
    small.weights = types.SimpleNamespace(
        w_q=types.SimpleNamespace(shape=(4, 4)), w_v=types.SimpleNamespace(shape=(4, 4))
    )
    assert depth_piece(small, 8, 128, 1, progress=False, cpu=True) == 128  # a short run stays whole
