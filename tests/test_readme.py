"""The README: short, its two set-up commands the ones CI runs, every command line one the CLI
accepts, and every Python example runs as written."""

import pathlib
import re
import shlex

import pytest

from rankdyn.cli import build_parser

ROOT = pathlib.Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
SETUP = "python3 -m pip install -e . && rankdyn checkpoints --get minilm smollm2 && rankdyn reproduce --quick"
#: The suite, then its own step for the notebooks and the documentation site (tests/site).
TESTS = " && ".join(
    [
        'python3 -m pip install -e ".[test]"',
        "python3 -m pytest",
        "python3 -m pytest --nbmake notebooks tests/site",
    ]
)


def _blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", README, re.S)


def test_readme_is_short_and_its_setup_commands_are_the_ones_ci_runs():
    assert len(README.splitlines()) <= 110
    bash = [line for block in _blocks("bash") for line in block.splitlines()]
    assert SETUP in bash and TESTS in bash
    # .ci/run runs the README's test command verbatim (its last line).
    assert (ROOT / ".ci" / "run").read_text().rstrip().splitlines()[-1] == TESTS


def test_every_command_line_in_the_readme_parses():
    """Each ``rankdyn ...`` line is accepted by the CLI's parser (flags and choices; no compute)."""
    lines = [line for block in _blocks("bash") for line in block.splitlines() if line.startswith("rankdyn ")]
    assert len(lines) >= 4
    parser = build_parser()
    for line in lines:
        for cmd in line.split(" && "):
            if cmd.startswith("rankdyn "):
                args = parser.parse_args(shlex.split(cmd)[1:])
                assert args.command == shlex.split(cmd)[1], line
    # The check can fail: a misspelt flag is refused.
    with pytest.raises(SystemExit):
        parser.parse_args(["simulate", "--no-such-flag", "1"])


@pytest.mark.slow
def test_python_examples_run_in_order(tmp_path, monkeypatch):
    """The Python blocks, in one namespace, as a reader pastes them (sizes as written)."""
    blocks = _blocks("python")
    assert blocks, "the README has Python examples"
    monkeypatch.chdir(tmp_path)
    scope: dict = {}
    for block in blocks:
        exec(compile(block, "README.md", "exec"), scope)
    assert float(scope["traj"].summary.mean["mu"][-1]) < float(scope["traj"].summary.mean["mu"][0])
    # The exact census of the paper's n = d = 6, w = 7 system: 475 classes of equilibria modulo
    # sign (950 equilibria; benchmarks/README.md, "Equilibria").
    assert sum(scope["census"].by_rank.values()) == 475
