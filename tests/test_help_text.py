"""Every command's ``--help`` reads as printed: no doubled percent sign (argparse formats only
``help=`` strings, not descriptions) and no default stated twice (the formatter appends one)."""

import argparse
import re

from rankdyn.cli import build_parser


def _helps() -> dict[str, str]:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return {"rankdyn": parser.format_help()} | {name: p.format_help() for name, p in sub.choices.items()}


def help_faults(text: str) -> list[str]:
    flat = " ".join(text.split())
    faults = re.findall(r"\S*%%\S*", flat)
    faults += re.findall(r"[^.;]*\bdefault\)? \(default: [^)]*\)", flat)
    return faults


def test_no_help_text_doubles_a_percent_sign_or_a_default():
    faults = {name: f for name, text in _helps().items() if (f := help_faults(text))}
    assert not faults, faults


def test_the_help_check_can_fail():
    """The two faults issue 55 found in `basins --help` and `lyapunov --help`."""
    assert help_faults("fraction with a Wilson 95%% interval")
    assert help_faults("auto (1 to 8, from the spread of the exponents; default) (default: auto)")
    assert not help_faults("a Wilson 95% interval; auto (1 to 8) (default: auto)")
