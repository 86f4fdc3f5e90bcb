"""The README: short, its two set-up commands the ones CI runs, every command line one the CLI
accepts, and every Python example runs as written."""

import importlib
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
    assert len(README.splitlines()) < 130
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


def test_the_questions_table_commands_parse_and_their_models_validate():
    """Each command of the "Questions -> commands" table is accepted by the CLI's parser; the
    simulate ones without a checkpoint also pass the model checks (no JAX, no compute); the
    Python names it gives are public."""
    table = README.split("## Questions -> commands", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in table.splitlines() if line.startswith("| ") and "---" not in line][1:]
    assert len(rows) >= 6
    commands = [c for row in rows for c in re.findall(r"`(rankdyn[ .][^`]*)`", row)]
    assert {shlex.split(c)[1] for c in commands if c.startswith("rankdyn ")} >= {
        "simulate",
        "basins",
        "reproduce",
    }
    parser = build_parser()
    from rankdyn._commands.simulate import check_model_args

    for cmd in commands:
        if cmd.startswith("rankdyn."):  # a Python name: public and callable
            module, name = cmd.split("(")[0].rsplit(".", 1)
            assert callable(getattr(importlib.import_module(module), name)), cmd
            continue
        args = parser.parse_args(shlex.split(cmd)[1:])
        if args.command == "simulate" and args.checkpoint is None:
            check_model_args(args)
    assert any(c.startswith("rankdyn.equilibria.continue_branch(") for c in commands)


@pytest.mark.slow
def test_python_examples_run_in_order(tmp_path, monkeypatch, capsys):
    """The Python blocks, in one namespace, as a reader pastes them (sizes as written)."""
    blocks = _blocks("python")
    assert blocks, "the README has Python examples"
    monkeypatch.chdir(tmp_path)
    scope: dict = {}
    for block in blocks:
        exec(compile(block, "README.md", "exec"), scope)
    # The census line prints what its comment says: the stability classes of each rank.
    printed = capsys.readouterr().out
    assert "'stable'" in printed and "'marginal'" in printed and "'unstable'" in printed
    assert float(scope["traj"].summary.mean["mu"][-1]) < float(scope["traj"].summary.mean["mu"][0])
    # The exact census of the paper's n = d = 6, w = 7 system: 475 classes of equilibria modulo
    # sign (950 equilibria; benchmarks/README.md, "Equilibria").
    assert sum(scope["census"].by_rank.values()) == 475
