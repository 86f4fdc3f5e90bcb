"""The report says what happened: every verdict word, the checks column as its header says, the
model a target ran on, numbers to 3 significant digits (synthetic results, no simulation)."""

import re

from rankdyn._reproduce import CLAIM_VERDICTS, OPEN_QUESTION_VERDICTS, VERDICTS, _verdict as V
from rankdyn._reproduce._report import CHECKS_HEADER, format_number, format_table, summary_row, write_report

P, F = V.check("p", True), V.check("f", False)
U = V.untestable("u", "cannot fail here")


def test_verdict_functions_return_every_defined_word():
    claims = {V.verdict(c) for c in ([P], [P, U], [F], [U], [])}
    assert claims == set(CLAIM_VERDICTS)
    assert V.verdict([U, U]) == "not testable here"
    table = {(f, c): V.open_question_verdict(f, c) for f in (True, False) for c in (True, False)}
    assert table == {
        (True, True): "counterexample found",
        (True, False): "counterexample found",
        (False, True): "no evidence against",
        (False, False): "inconclusive",
    }
    assert set(table.values()) == set(OPEN_QUESTION_VERDICTS)


def _result(name, verdict, checks, **extra):
    return {
        "name": name,
        "claim": "c",
        "verdict": verdict,
        "checks": V.checks_json(checks),
        "runtime_s": 1.0,
        "figures": [],
        **extra,
    }


def test_summary_table_cells_follow_their_header(tmp_path):
    results = {
        "a": _result("a", "partially", [P, F, P, U, U]),
        "geometry": _result("geometry", "not reproduced", [F], model="random-init stand-in"),
        **{f"w{i}": _result(f"w{i}", w, [P]) for i, w in enumerate(VERDICTS)},
    }
    text = write_report(tmp_path, results, runtime_s=1.0, quick=True, seed=0).read_text()
    header = next(ln for ln in text.splitlines() if ln.startswith("| target |"))
    assert [c.strip() for c in header.strip("|").split("|")] == [
        "target",
        "verdict",
        CHECKS_HEADER,
        "wall (s)",
    ]
    assert CHECKS_HEADER == "checks: passed / testable / all"
    # 2 passes among the 3 checks that can fail, of 5 in all.
    # A "partially" says why on its line: here one failed check and two that could not fail.
    assert (
        "| [a](#a) | partially: 1 check failed; 2 could not fail here (not testable) | 2 / 3 / 5 | 1.0 |"
        in text
    )
    assert "| not reproduced (model: random-init stand-in) | 0 / 1 / 1 |" in text
    assert "## geometry: not reproduced (model: random-init stand-in)" in text
    for w in VERDICTS:  # every word is rendered as it is, in the row and the section title
        assert summary_row("x", _result("x", w, [P])).split(" | ")[1] == w
        assert f": {w}\n" in text
    assert "**Model.** random-init stand-in" in (tmp_path / "report" / "geometry.md").read_text()


def test_number_formatting_has_three_significant_digits():
    assert format_number(0.123456789012345) == "0.123"
    assert format_number(12345.678) == "1.23e+04"
    assert format_number(7) == "7" and format_number(True) == "true" and format_number("x") == "x"
    flat = format_table({"complete": 0.9876543210123, "causal": 0.5}, key="mask")
    assert flat.splitlines() == ["| mask | value |", "|---|---|", "| complete | 0.988 |", "| causal | 0.5 |"]
    nested = format_table({"causal": {"first 10 layers": 0.91234567, "all layers": 1 / 3}}, key="mask")
    assert nested.splitlines()[0] == "| mask | first 10 layers | all layers |"
    assert nested.splitlines()[2] == "| causal | 0.912 | 0.333 |"
    assert not re.search(r"\d{5,}", flat + nested)


def test_report_of_every_target_fits_the_line_limit(tmp_path):
    """`rankdyn reproduce --quick` writes one section per target: with all of them (each with key
    numbers, checks and a figure) the short report must stay within MAX_LINES (it did not with
    16 targets at 14 lines each)."""
    from rankdyn._reproduce import TARGETS
    from rankdyn._reproduce._report import MAX_LINES

    (tmp_path / "f.png").write_bytes(b"")
    results = {
        name: _result(name, "partially", [P, F, U], key_numbers={"a": 1.0, "b": 2.0}, figures=["f.png"])
        for name in TARGETS
    }
    text = write_report(tmp_path, results, runtime_s=1.0, quick=True, seed=0).read_text()
    assert len(text.splitlines()) <= MAX_LINES
    assert all(f"## {name}: partially" in text for name in TARGETS)
