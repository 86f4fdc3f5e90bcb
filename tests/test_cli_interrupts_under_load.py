"""Ctrl-C at any moment of ``rankdyn simulate``, under CPU load.

A SIGINT during the imports, JAX's start, the compile or the first chunks ends the command with
exit 130 and one line, with no traceback and no ``Exception ignored in: <function
_xla_gc_callback ...>`` (a KeyboardInterrupt raised in a garbage-collection callback, which Python
swallows): the handler only sets a flag, checked after each compile and between chunks, and is
installed before the command imports JAX.
"""

import os
import signal
import subprocess
import sys
import time

import pytest
from helpers import SIGINT_DEFAULT, own_compiles

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: Seconds after ``rankdyn.cli`` is imported, just before ``main()`` runs: 0 s lands in the
#: command's own imports (argument parsing, the command modules), 1 s in JAX's start, 4 s and
#: 8 s in the compile or the first chunks. Before ``main()`` a signal meets
#: Python's own start (no program can catch it there) or the import of ``rankdyn.cli``, which
#: ``python -m rankdyn`` turns into the same one line.
DELAYS = (0.0, 1.0, 4.0, 8.0)
#: ``rankdyn`` as its console script runs it, after a line that says ``main`` is next.
_START = SIGINT_DEFAULT + (
    "import sys; from rankdyn.cli import main; print('ready', flush=True); "
    "sys.argv[0] = 'rankdyn'; sys.exit(main(sys.argv[1:]))"
)
_LOAD = "import time\nt = time.monotonic()\nwhile time.monotonic() - t < 60: pass\n"


@pytest.mark.slow  # four runs at once next to a busy loop: ~20 s quiet, minutes loaded
def test_sigint_at_several_delays_under_load_is_one_line_and_exit_130(tmp_path):
    # Every process compiles (no shared cache): the later delays land in the compile or the chunks.
    env = own_compiles(dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")))
    load = subprocess.Popen([sys.executable, "-c", _LOAD])  # a second process keeps a core busy
    try:
        procs = []
        for i in range(len(DELAYS)):
            args = ["simulate", "--n", "64", "--d", "64", "--num-layers", "64", "--batch", "256"]
            cmd = [sys.executable, "-c", _START, *args, "--no-progress", "--out", str(tmp_path / f"o{i}")]
            pipes = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, "text": True}
            procs.append(subprocess.Popen(cmd, env=env, **pipes))
        ready = []
        for p in procs:
            assert p.stdout.readline().strip() == "ready"
            ready.append((time.monotonic(), p))
        for delay, (t0, p) in sorted(zip(DELAYS, ready), key=lambda c: c[0]):
            time.sleep(max(0.0, t0 + delay - time.monotonic()))
            p.send_signal(signal.SIGINT)
        # Every signal has landed under load; the load is not needed for the exits (it only
        # burned a core, and CI's other test worker's time, until the slowest one finished).
        load.kill()
        for delay, p in zip(DELAYS, procs):
            _, err = p.communicate(timeout=300)
            # The one line before the first compile is not the interrupt's (`say_compiling`).
            lines = [x for x in err.strip().splitlines() if x.strip() and ": compiling " not in x]
            assert p.returncode == 130, (delay, p.returncode, err[-3000:])
            assert "Traceback" not in err and "Exception ignored" not in err, (delay, err[-3000:])
            assert len(lines) == 1 and "interrupted" in lines[0], (delay, err[-3000:])
        for i in range(len(DELAYS)):
            assert not (tmp_path / f"o{i}" / "metrics.json").exists()
    finally:
        load.kill()
        load.wait()
