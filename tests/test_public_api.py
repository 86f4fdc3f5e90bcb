"""The public API: every public name of every public namespace, with its signature.

`tests/public_api.json` lists them. A change to a public name or signature fails here until the
list is updated on purpose (and, for a rename, the old name kept for one version with a
DeprecationWarning: tests/test_deprecations.py). Regenerate with
``python3 tests/test_public_api.py > tests/public_api.json``.
"""

import ast
import importlib
import inspect
import json
import pathlib

NAMESPACES = (
    "rankdyn",
    "rankdyn.masks",
    "rankdyn.weights",
    "rankdyn.metrics",
    "rankdyn.theory",
    "rankdyn.flow",
    "rankdyn.checkpoints",
    "rankdyn.layer",
    "rankdyn.equilibria",
    "rankdyn.lyapunov",
    "rankdyn.sweep",
    "rankdyn.meanfield",
    "rankdyn.plans",
    "rankdyn.plotting",
)
STORED = pathlib.Path(__file__).with_name("public_api.json")


def _bound_names(module) -> list[str]:
    """The public names the namespace's own file binds (not what other imports left on it)."""
    tree = ast.parse(pathlib.Path(module.__file__).read_text())
    # rankdyn/__init__.py lists its names under ``if TYPE_CHECKING:`` (loaded on first use: rankdyn/_lazy.py).
    body = tree.body + [n for top in tree.body if isinstance(top, ast.If) for n in top.body]
    names = {a.asname or a.name for n in body if isinstance(n, (ast.Import, ast.ImportFrom)) for a in n.names}
    names |= {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    names |= {
        t.id for n in tree.body if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)
    }
    names |= {
        n.target.id for n in tree.body if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)
    }
    return sorted(n for n in names if not n.startswith("_") and n != "annotations")


def public_api() -> dict[str, dict[str, str]]:
    out = {}
    for ns in NAMESPACES:
        module = importlib.import_module(ns)
        entry = {}
        for name in _bound_names(module):
            value = getattr(module, name)
            if inspect.ismodule(value):
                entry[name] = "module"
            elif callable(value):
                try:
                    entry[name] = str(inspect.signature(value))
                except (TypeError, ValueError):
                    entry[name] = "callable"
            else:
                entry[name] = type(value).__name__
        out[ns] = entry
    return out


def test_public_names_and_signatures_are_the_listed_ones():
    stored, now = json.loads(STORED.read_text()), public_api()
    diff = [
        f"{ns}.{name}: {stored.get(ns, {}).get(name, '<absent>')} -> {now.get(ns, {}).get(name, '<absent>')}"
        for ns in sorted(set(stored) | set(now))
        for name in sorted(set(stored.get(ns, {})) | set(now.get(ns, {})))
        if stored.get(ns, {}).get(name) != now.get(ns, {}).get(name)
    ]
    assert not diff, "public API changed (update tests/public_api.json on purpose):\n" + "\n".join(diff)


if __name__ == "__main__":
    print(json.dumps(public_api(), indent=1, sort_keys=True))
