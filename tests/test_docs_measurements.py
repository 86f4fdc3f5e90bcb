"""Measurements live in benchmarks/, not in the docs, the CHANGELOG or the package's docstrings.

A timing is true of one machine, one load and one day; quoted in a doc or a docstring it goes
stale unseen. So the latest figures are the one table of ``benchmarks/README.md`` (with the
command, the CPU and the load of each), dated history is ``benchmarks/HISTORY.md`` (off the
site), and docs and docstrings link there ("measured: benchmarks/README.md").

This test fails on a line of ``README.md``, ``CHANGELOG.md``, ``docs/*.md`` or
``rankdyn/**/*.py`` that carries a lab note, recognised by any of:

- a load average (``load 9``, ``load average 2-8``, ``at load about 1``);
- a date (``2026-12-03``);
- a duration after a measuring verb (``took 75.2 s``, ``runs in 3 min``, ``measured: 0.16 ms``);
- a duration next to a machine or its state (``AMD EPYC``, ``Xeon``, ``dev box``, ``quiet``,
  ``busy cores``, ``loaded 2-core``), or given as wall or CPU time (``21 min wall``, ``876 CPU s``);
- a speed ratio or share measured against a peer or the peak (``2.18x PyTorch``,
  ``56% of the matmul peak``).

Allowed, on purpose: durations that are options or defaults (``--timeout 300``, "20 s, its
default"), budgets stated as a standard ("within 150 s cold and 60 s warm on a 2-core CPU", "over
~3 s" for the slow marker), rough costs that justify a constant without a machine, a load, a
date or a measuring verb ("0.3-0.4 s of a CLI call"), memory figures behind a memory model, and
throughput constants (GFLOP/s) that calibrate an estimate. The code that *prints* a time (a
format string) has no digits before its unit and is not matched.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

_DUR = r"\d+(?:\.\d+)?\s?(?:s|ms|us|min|h|seconds?|minutes?|hours?)\b"
_MACHINE = r"(?:AMD EPYC|Xeon|busy cores|loaded cores|loaded 2-core|dev box|\bquiet\b)"
PATTERNS = {
    "load average": re.compile(r"\bload(?: average)?(?: of| about| at)?\s*~?\s*\d", re.I),
    "date": re.compile(r"\b20\d\d-[01]\d-[0-3]\d\b"),
    "measured duration": re.compile(
        r"\b(?:took|takes|ran in|runs in|ran for|finished in|finishes in|finish in|measured)\b[^.;]{0,60}?"
        + _DUR,
        re.I,
    ),
    "duration on a machine": re.compile(
        f"{_MACHINE}[^.;]{{0,80}}?{_DUR}|{_DUR}[^.;]{{0,80}}?{_MACHINE}", re.I
    ),
    "wall or CPU time": re.compile(
        _DUR + r"\s+(?:of\s+)?(?:wall|CPU|user CPU)\b|\d+(?:\.\d+)?\s+CPU s\b", re.I
    ),
    "ratio to a peer or the peak": re.compile(
        r"\d(?:\.\d+)?x\s+(?:eager\s+)?(?:PyTorch|HF|the loop)"
        r"|\d+%\s+of\s+the\s+(?:float32\s+)?(?:matmul\s+)?peak",
        re.I,
    ),
}


def _files() -> list[Path]:
    files = [ROOT / "README.md", ROOT / "CHANGELOG.md", *sorted((ROOT / "docs").glob("*.md"))]
    return files + sorted((ROOT / "rankdyn").rglob("*.py"))


def lab_notes(text: str) -> list[tuple[int, str, str]]:
    """(line number, rule, line) of every line of ``text`` that one of `PATTERNS` matches."""
    hits = []
    for i, line in enumerate(text.splitlines(), 1):
        for rule, pattern in PATTERNS.items():
            if pattern.search(line):
                hits.append((i, rule, line.strip()))
                break
    return hits


def test_no_measurements_outside_benchmarks():
    found = []
    for path in _files():
        for i, rule, line in lab_notes(path.read_text(encoding="utf-8")):
            found.append(f"{path.relative_to(ROOT)}:{i} ({rule}): {line[:120]}")
    assert not found, (
        "measurements belong in benchmarks/README.md (latest) or benchmarks/HISTORY.md:\n" + "\n".join(found)
    )


def test_the_rules_catch_lab_notes_and_spare_standards():
    """The rules on lines from the docs before the move, and on lines that must stay."""
    notes = [
        "Measured on the 2-core AMD EPYC of the issue, under load (load average 2-8, other jobs running):",
        "8e-8 relative). Quiet (load 0.3-1.0), 2026-12-03, the second `simulate` call of each (compile",
        "#: to 3 tokens): 24576 starts x 60 steps took 75.2 s on the 2-core AMD EPYC at a load average of",
        "machine, 876 CPU s): 16 stable rank-2 attractors",
        "| causal n = 4096 | 2.57 s: 4.96x eager PyTorch SDPA, 56% of the float32 matmul peak |",
        "# 8 samples per mask and mode: the modes x masks finish in about 10 minutes on 2 busy cores.",
    ]
    keep = [
        "(``reproduce --quick`` within 150 s cold and 60 s warm on a 2-core CPU): ``all`` leaves",
        "``rendezvous.cc ... may be stuck`` when a device thread has waited there 20 s (its default for",
        "print(f\"{name:24s} {r['verdict']:{width}s} {t:9.1f}\")",
        "import scipy.sparse as sp  # SciPy on demand: named masks need none (0.3-0.4 s of a CLI call)",
        "the layer's products run at about 23 GFLOP/s; measured: benchmarks/README.md",
        "the main job within 150 s cold and 60 s warm (measured: benchmarks/README.md)",
    ]
    assert [len(lab_notes(line)) for line in notes] == [1] * len(notes)
    assert [lab_notes(line) for line in keep] == [[]] * len(keep)
