"""The docs name what exists: no private ``rankdyn._name`` in README.md and docs/*.md (except
docs/architecture.md, the map of the private rooms), and every dotted ``rankdyn.x.y`` they name
resolves (its longest importable module prefix, then attributes). No mkdocs: the files are read
as text, so this runs in the unit loop.
"""

import importlib
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[1]
#: A dotted name: ``rankdyn`` and at least one ``.part`` (a trailing sentence dot is not a part).
DOTTED = re.compile(r"(?<![\w/.-])rankdyn(?:\.[A-Za-z_]\w*)+")


def _pages() -> list[pathlib.Path]:
    docs = sorted((ROOT / "docs").glob("*.md")) + sorted((ROOT / "docs" / "api").glob("*.md"))
    return [ROOT / "README.md"] + [p for p in docs if p.name != "architecture.md"]


def _names(text: str) -> set[str]:
    return set(DOTTED.findall(text))


def _private(name: str) -> bool:
    return any(part.startswith("_") and not part.startswith("__") for part in name.split(".")[1:])


def _resolves(name: str) -> bool:
    """Import the longest module prefix of ``name``, then look the rest up as attributes."""
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attr in parts[cut:]:
            if not hasattr(obj, attr):
                return False
            obj = getattr(obj, attr)
        return True
    return False


def test_docs_name_no_private_path_and_every_name_resolves():
    private, missing = [], []
    for page in _pages():
        for name in sorted(_names(page.read_text())):
            where = f"{page.relative_to(ROOT)}: {name}"
            if _private(name):
                private.append(where)
            elif not _resolves(name):
                missing.append(where)
    assert not private, f"private names in the docs (name the public one, or the file path): {private}"
    assert not missing, f"names in the docs that do not exist: {missing}"


def test_the_checks_can_fail():
    text = "see `rankdyn._equilibria.continue_branch`, `rankdyn.equilibria.no_such` and rankdyn.cli."
    names = _names(text)
    assert names == {"rankdyn._equilibria.continue_branch", "rankdyn.equilibria.no_such", "rankdyn.cli"}
    assert _private("rankdyn._equilibria.continue_branch") and not _private("rankdyn.RESULTS.successful")
    assert not _resolves("rankdyn.equilibria.no_such") and not _resolves("rankdyn._stats")
    assert _resolves("rankdyn.equilibria.continue_branch") and _resolves("rankdyn.RESULTS.successful")
    # File paths (rankdyn/_run/_scan.py) and other packages' names are not dotted rankdyn names.
    assert not _names("rankdyn/_run/_scan.py and optimistix.RESULTS, my_rankdyn.x")
