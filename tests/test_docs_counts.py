"""docs/reproduce.md names every reproduce target, and any count of targets it states is one the
registry gives (computed from `REGISTRY`, so that adding a target cannot leave a stale number)."""

import pathlib
import re

from rankdyn._reproduce._registry import REGISTRY

ROOT = pathlib.Path(__file__).resolve().parents[1]
DOC = (ROOT / "docs" / "reproduce.md").read_text()

_WORDS = "one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen".split()
_WORDS += "sixteen seventeen eighteen nineteen twenty".split()
_NUMBER = {w: i + 1 for i, w in enumerate(_WORDS)}
_NUM = r"(?P<num>\d+|" + "|".join(_WORDS) + r")"
# "19 quick targets", "the four flow targets", "the twelve targets", "the eleven beyond the paper".
_COUNT = re.compile(rf"\b{_NUM}\s+(?:(?P<word>[a-z][a-z'-]*)\s+)?(?P<what>targets\b|beyond the paper)", re.I)


def _tiers() -> dict[str, int]:
    extended = sum(t.extended for t in REGISTRY)
    return {"all": len(REGISTRY), "paper": len(REGISTRY) - extended, "extended": extended}


def stated_counts(text: str) -> list[tuple[str, int, set[int]]]:
    """Each count of targets in ``text``: (the phrase, the number, the numbers it may be)."""
    tiers = _tiers()
    out = []
    for m in _COUNT.finditer(text):
        num = m["num"].lower()
        n = int(num) if num.isdigit() else _NUMBER[num]
        word = (m["word"] or "").lower()
        if m["what"].lower() == "beyond the paper" or word == "extended":
            allowed = {tiers["extended"]}
        elif word in ("", "quick", "reproduce", "paper's", "main"):
            allowed = set(tiers.values())
        else:  # a family named by its prefix: "the four flow targets"
            allowed = {sum(t.name.startswith(word + "-") for t in REGISTRY)}
        out.append((m[0], n, allowed))
    return out


def test_every_registered_target_is_named_in_docs_reproduce():
    missing = [t.name for t in REGISTRY if f"`{t.name}`" not in DOC]
    assert not missing, f"docs/reproduce.md does not name {missing}"


def test_every_count_of_targets_in_docs_reproduce_matches_the_registry():
    wrong = [(phrase, n, allowed) for phrase, n, allowed in stated_counts(DOC) if n not in allowed]
    assert not wrong, f"docs/reproduce.md states counts the registry does not give: {wrong}"


def test_the_count_check_can_fail():
    """The phrases of the stale text (issue 55) are caught; a right count is not."""
    tiers = _tiers()
    stale = "all 19 quick targets; the seven beyond the paper; the four flow targets"
    phrases = [p for p, n, allowed in stated_counts(stale) if n not in allowed]
    assert phrases[:2] == ["19 quick targets", "seven beyond the paper"]
    right = f"the {tiers['all']} targets and the {tiers['extended']} beyond the paper"
    assert all(n in allowed for _, n, allowed in stated_counts(right))
