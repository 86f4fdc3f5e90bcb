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


def test_no_parser_takes_a_prefix_for_a_flag():
    """argparse's prefix matching is off on the top parser and on every subcommand's (it does not
    pass down): ``--per-traj`` is not ``--per-trajectory``, ``--attention`` not ``--attention-sinks``."""
    import pytest

    from rankdyn.cli import build_parser

    parser = build_parser()
    for argv in (
        ["simulate", "--per-traj"],
        ["simulate", "--attention-sink"],
        ["lyapunov", "--per-traj"],
        ["reproduce", "--no-prog"],
        ["--vers"],
    ):
        with pytest.raises(SystemExit):
            parser.parse_args(argv)
    assert parser.parse_args(["simulate", "--per-trajectory"]).per_trajectory  # the whole flag works
