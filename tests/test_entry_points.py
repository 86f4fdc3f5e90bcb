"""``python -m rankdyn`` is the same command line as the ``rankdyn`` script."""

import subprocess
import sys

import rankdyn


def test_python_dash_m_runs_the_cli():
    run = subprocess.run([sys.executable, "-m", "rankdyn", "--version"], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert rankdyn.__version__ in run.stdout
    bad = subprocess.run([sys.executable, "-m", "rankdyn", "no-such-command"], capture_output=True, text=True)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
