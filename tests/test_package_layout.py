"""The architecture's rules, checked: a small public namespace, no module importing the package
itself (its top-level names), no library module over 450 formatted lines."""

import ast
import pathlib

import rankdyn

PKG = pathlib.Path(rankdyn.__file__).parent
MODULES = sorted(PKG.rglob("*.py"))


def _package_of(path: pathlib.Path) -> list[str]:
    rel = path.relative_to(PKG.parent).with_suffix("")
    parts = list(rel.parts)
    return parts if path.name == "__init__.py" and parts.pop() else parts[:-1]


def test_top_level_namespace_is_small():
    # The names rankdyn/__init__.py binds (importing a submodule elsewhere, e.g. rankdyn.cli,
    # also sets an attribute on the package, so dir() depends on what ran before).
    tree = ast.parse((PKG / "__init__.py").read_text())
    bound = {
        a.asname or a.name
        for node in ast.walk(tree)
        if isinstance(node, (ast.Import, ast.ImportFrom))
        for a in node.names
    }
    bound |= {
        t.id
        for node in ast.walk(tree)
        if isinstance(node, ast.Assign)
        for t in node.targets
        if isinstance(t, ast.Name)
    }
    names = sorted(n for n in bound if not n.startswith("_"))
    assert len(names) <= 40, names
    assert all(hasattr(rankdyn, n) for n in names)


def test_no_module_imports_the_package_top_level():
    """``from .. import simulate`` in rankdyn/_reproduce/x.py reaches through rankdyn/__init__.py:
    a cycle, and a break whenever the namespace changes. Submodules (``from .. import plotting``)
    are fine."""
    bad = []
    for path in MODULES:
        if path == PKG / "__init__.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                bad += [f"{path}: import {a.name}" for a in node.names if a.name == "rankdyn"]
            if not isinstance(node, ast.ImportFrom):
                continue
            if node.level == 0:
                target = (node.module or "").split(".")
            else:
                pkg = _package_of(path)
                target = pkg[: len(pkg) - node.level + 1] + (
                    (node.module or "").split(".") if node.module else []
                )
            if target == ["rankdyn"]:
                for alias in node.names:
                    is_module = (PKG / alias.name).is_dir() or (PKG / f"{alias.name}.py").exists()
                    if not is_module:
                        bad.append(
                            f"{path.relative_to(PKG.parent)}:{node.lineno}: from rankdyn import {alias.name}"
                        )
    assert not bad, "\n".join(bad)


def test_no_library_module_over_450_lines():
    long = {
        str(p.relative_to(PKG.parent)): n for p in MODULES if (n := len(p.read_text().splitlines())) > 450
    }
    assert not long, long


def _ruff(*args):
    import shutil
    import subprocess

    exe = shutil.which("ruff")
    assert exe, "ruff is in the test extra (pip install -e '.[test]')"
    return subprocess.run([exe, *args], cwd=PKG.parent, capture_output=True, text=True)


def test_ruff_check_and_format_are_clean():
    """The formatting rule of pyproject.toml ([tool.ruff], line length <= 110) holds everywhere."""
    lint = _ruff("check", ".")
    assert lint.returncode == 0, lint.stdout + lint.stderr
    fmt = _ruff("format", "--check", ".")
    assert fmt.returncode == 0, fmt.stdout + fmt.stderr


def test_architecture_page_lists_every_module():
    """docs/architecture.md (modules grouped by concept) names every module, so it stays true.

    A top-level module and a subpackage appear by path (``rankdyn/_run/_scan.py``, ``rankdyn/_sweep/``);
    a subpackage's module at least by file name. ``_reproduce/`` is indexed by its ``TARGETS``.
    """
    page = (PKG.parent / "docs" / "architecture.md").read_text()
    missing = [f"rankdyn/{p.name}" for p in PKG.glob("*.py") if f"rankdyn/{p.name}" not in page]
    for sub in sorted(p for p in PKG.iterdir() if (p / "__init__.py").exists()):
        if f"rankdyn/{sub.name}/" not in page:
            missing.append(f"rankdyn/{sub.name}/")
        if sub.name != "_reproduce":
            names = [p.name for p in sub.glob("*.py") if p.name != "__init__.py"]
            missing += [
                f"rankdyn/{sub.name}/{n}" for n in names if f"`{n}`" not in page and f"/{n}`" not in page
            ]
    assert not missing, f"add to docs/architecture.md: {missing}"


def test_bad_input_is_a_usage_error_in_every_folder():
    # One error type for the user's mistakes (rankdyn.UsageError, a ValueError): the CLI prints it
    # as one `error:` line, and any other exception is an internal error with a traceback. A plain
    # `raise ValueError` would turn a user's mistake into a bug report.
    plain = []
    for path in MODULES:
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call):
                name = getattr(node.exc.func, "id", None)
                if name in ("ValueError", "TypeError") and not _caught_locally(tree, node):
                    plain.append(f"{path.relative_to(PKG.parent)}:{node.lineno}")
    assert not plain, f"raise UsageError (rankdyn._errors) for bad input, not a plain error: {plain}"


def _caught_locally(tree: ast.Module, raise_node: ast.Raise) -> bool:
    """A raise inside a ``try`` (its handler turns it into a UsageError or a message), or a Python
    protocol's TypeError (indexing or iterating a report)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Try) and any(raise_node is n for b in node.body for n in ast.walk(b)):
            return True
        if isinstance(node, ast.FunctionDef) and node.name in ("__getitem__", "__iter__"):
            if any(raise_node is n for n in ast.walk(node)):
                return True
    return False


def test_notebooks_and_examples_name_public_modules_only():
    """Notebooks and examples are what users copy: they name `rankdyn` and its root modules only,
    never an implementation folder (``rankdyn._run``, ``from rankdyn._model import ...``)."""
    import json
    import re

    private = re.compile(r"\brankdyn\._[a-z]")
    root = PKG.parent
    found = []
    for nb in sorted((root / "notebooks").glob("*.ipynb")):
        for i, cell in enumerate(json.loads(nb.read_text())["cells"]):
            found += [f"{nb.name} cell {i}: {m}" for m in private.findall("".join(cell["source"]))]
    for ex in sorted((root / "examples").glob("*.py")):
        found += [f"{ex.name}: {m}" for m in private.findall(ex.read_text())]
    assert not found, found


def test_notebook_step_order_names_every_file_of_the_step():
    """The notebook step hands out its files in notebooks/conftest.py's ``ORDER``: every notebook
    and the site's test file, once each (a file left out would go last, unplanned)."""
    root = PKG.parent
    tree = ast.parse((root / "notebooks" / "conftest.py").read_text())  # read, not run: it sets env vars
    (order,) = [
        ast.literal_eval(n.value)
        for n in tree.body
        if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", None) == "ORDER"
    ]
    files = [p.name for p in (root / "notebooks").glob("*.ipynb")]
    files += [p.name for p in (root / "tests" / "site").glob("test_*.py")]
    assert sorted(order) == sorted(files)
