"""docs/glossary.md defines every term a report or a check uses: the column headers of
``report.md``, every metric name, and the symbols and placements in the check names that
``rankdyn reproduce`` prints (stored in tests/reproduce_check_names.json from a
``reproduce --quick --extended`` run; ``python tests/test_glossary.py OUT_DIR`` adds or updates
the targets of a reproduce folder).

A term is covered when it appears, as whole words, in a **bold** span of the glossary, matched
case-insensitively with underscores read as spaces (``stable_rank`` = **stable rank**).
"""

import json
import pathlib
import re
import sys

from rankdyn._observe._names import ALL_METRICS
from rankdyn._reproduce import _report

ROOT = pathlib.Path(__file__).resolve().parents[1]
GLOSSARY = (ROOT / "docs" / "glossary.md").read_text()
CHECK_NAMES = ROOT / "tests" / "reproduce_check_names.json"

#: The placements, as check names spell them ("post/causal/nonneg", "flow, lns", "none LN").
PLACEMENTS = ("none", "post", "pre", "peri", "mix", "ngpt", "lns")
#: Terms that figures and ``--help`` use beyond the checks' (issue 55 found them undefined).
FIGURE_AND_HELP_TERMS = ("spectral gap", "vacuous", "QK-norm", "blocked attention", "excerpt", "placement")
#: Words of check names that are not terms of rankdyn's: names with their usual meaning.
EXEMPT = {
    "numpy",  # the library ("NumPy map": the map re-implemented in NumPy)
    "df",  # the Jacobian DF of the map F, written as in the paper's notation
    "e d",  # the d-th unit vector e_d
    "e i",  # the i-th unit vector e_i
}


def _norm(text: str) -> str:
    return " ".join(text.replace("_", " ").lower().split())


def defined_spans(text: str = GLOSSARY) -> list[str]:
    return [_norm(s) for s in re.findall(r"\*\*(.+?)\*\*", text, re.S)]


def covered(term: str, spans: list[str]) -> bool:
    t = re.escape(_norm(term))
    return any(re.search(rf"(?<!\w){t}(?!\w)", s) for s in spans)


def report_headers() -> list[str]:
    """The column headers of the tables `_report` writes (a header row is followed by ``|---``)."""
    source = pathlib.Path(_report.__file__).read_text().replace("{CHECKS_HEADER}", _report.CHECKS_HEADER)
    rows = re.findall(r'f?"(\|[^"\n]*\|)",?\s*\n?\s*"\|-', source)
    assert rows, "no table header found in rankdyn/_reproduce/_report.py"
    return [cell.strip() for row in rows for cell in row.strip("|").split(" | ")]


def check_terms(names) -> set[str]:
    """The terms of check names: subscripted symbols (``lambda_trans``, ``mu_T`` -> ``mu``),
    abbreviations (``LN``, ``SAN``, ``SRank``), ``rho``, ``Var`` and the placements."""
    terms = set()
    for name in names:
        for sym in re.findall(r"\b[A-Za-z]+_[A-Za-z]\w*\b", name):
            terms.add(re.sub(r"_(T|t|0)$", "", sym))
        terms.update(re.findall(r"\b[A-Z][A-Za-z]*[A-Z]\w*\b|\b(?:rho|Var)\b", name))
        terms.update(w for w in re.split(r"[\s/:,()]+", name) if w in PLACEMENTS)
    return terms


def _stored_check_names() -> list[str]:
    stored = json.loads(CHECK_NAMES.read_text())["checks"]
    return [n for names in stored.values() for n in names]


def test_every_report_header_metric_and_check_term_is_in_the_glossary():
    spans = defined_spans()
    terms = set(report_headers()) | set(ALL_METRICS) | check_terms(_stored_check_names())
    terms |= set(FIGURE_AND_HELP_TERMS)
    missing = sorted(t for t in terms if _norm(t) not in EXEMPT and not covered(t, spans))
    assert not missing, f"docs/glossary.md does not define {missing}"


def entries(text: str = GLOSSARY) -> list[str]:
    """The terms that open a glossary entry (``- **term**: ...``), normalised."""
    return [_norm(t) for t in re.findall(r"^- \*\*([^*]+)\*\*", text, re.M)]


def test_each_term_is_defined_once():
    """One definition per concept: a term that opens two entries would drift apart."""
    seen = entries()
    twice = sorted({t for t in seen if seen.count(t) > 1})
    assert not twice, f"docs/glossary.md defines {twice} more than once"
    assert entries("- **a**: x\n- **b**: y\n- **A**: z") == ["a", "b", "a"]  # the check can fail


def test_the_stored_check_names_cover_every_target():
    from rankdyn._reproduce._registry import REGISTRY

    stored = json.loads(CHECK_NAMES.read_text())["checks"]
    missing = [t.name for t in REGISTRY if t.name not in stored]
    assert not missing, (
        f"no stored check names for {missing}: run `rankdyn reproduce NAME --quick --out DIR`, then "
        "`python tests/test_glossary.py DIR` (it adds DIR's targets to the stored names)"
    )


def test_the_coverage_check_can_fail():
    """Terms the glossary lacked before issue 55 (eps_min, rho, Var, lns) are caught."""
    spans = defined_spans("- **mu**: the distance.\n- **stable / unstable**: multipliers.")
    assert covered("mu", spans) and covered("stable", spans)
    assert not covered("mu_rel", spans) and not covered("eps_min", spans)
    assert check_terms(["flow, lns: rho <= 1", "Var ordered", "none LN: mu_T < x"]) == {
        "lns",
        "rho",
        "Var",
        "none",
        "LN",
        "mu",
    }
    assert "wall (s)" in report_headers() and "check" in report_headers()


if __name__ == "__main__":  # store the check names of the targets in a `reproduce --quick` folder
    out = pathlib.Path(sys.argv[1])
    checks = json.loads(CHECK_NAMES.read_text())["checks"]  # other targets' names are kept
    for f in sorted(out.glob("*.json")):
        result = json.loads(f.read_text())
        if isinstance(result, dict) and "checks" in result:
            checks[f.stem] = sorted({c["name"] for c in result["checks"]})
    about = json.loads(CHECK_NAMES.read_text())["about"]
    checks = dict(sorted(checks.items()))
    CHECK_NAMES.write_text(json.dumps({"about": about, "checks": checks}, indent=1) + "\n")
