"""One facade style, read from the source (docs/architecture.md, "The layout rule"):

- a public root module re-exports eagerly, each name as ``from ._room._module import Name as Name``,
  with no ``__all__`` and no loader of its own;
- only rankdyn/__init__.py loads its names on first use (a module-level ``__getattr__``);
- no module imports a private (``_name``) function, class or constant of another room: what two
  rooms share lives in one module of the lower room under a name without a leading underscore.
"""

import ast
import pathlib

import rankdyn

PKG = pathlib.Path(rankdyn.__file__).parent
#: Root modules that are not facades: the entry points.
ENTRY = {"__init__.py", "__main__.py", "cli.py"}


def _root_facades() -> list[pathlib.Path]:
    return [p for p in sorted(PKG.glob("*.py")) if not p.name.startswith("_") and p.name not in ENTRY]


def _room(path: pathlib.Path) -> str:
    """The top folder under rankdyn/ holding ``path`` ("" for a root module)."""
    parts = path.relative_to(PKG).parts
    return parts[0] if len(parts) > 1 else ""


def _target(path: pathlib.Path, node: ast.ImportFrom) -> pathlib.Path:
    """The package or module a relative ``from`` import reads from."""
    base = path.parent
    for _ in range(node.level - 1):
        base = base.parent
    for part in (node.module or "").split(".") if node.module else []:
        base = base / part
    return base


def _is_module(base: pathlib.Path, name: str) -> bool:
    return (base / f"{name}.py").exists() or (base / name / "__init__.py").exists()


def test_root_facades_import_eagerly_one_name_per_alias():
    bad = []
    for path in _root_facades():
        tree = ast.parse(path.read_text())
        for node in tree.body:
            if isinstance(node, ast.ImportFrom) and node.level == 1:
                bad += [f"{path.name}: {a.name}" for a in node.names if a.asname != a.name]
            if isinstance(node, (ast.If, ast.FunctionDef)) or (
                isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "__all__" for t in node.targets)
            ):
                bad.append(f"{path.name}:{node.lineno} {type(node).__name__}")
    assert not bad, f"root modules must only re-export as `from ._x import Y as Y`: {bad}"


def _binds_getattr(node) -> bool:
    """A module-level ``def __getattr__`` or an assignment to ``__getattr__`` (also in a tuple)."""
    if isinstance(node, ast.FunctionDef):
        return node.name == "__getattr__"
    if isinstance(node, ast.Assign):
        names = [n for t in node.targets for n in ast.walk(t) if isinstance(n, ast.Name)]
        return any(n.id == "__getattr__" for n in names)
    return False


def test_only_the_top_level_loads_lazily():
    lazy = [
        str(p.relative_to(PKG.parent))
        for p in sorted(PKG.rglob("*.py"))
        if any(_binds_getattr(node) for node in ast.parse(p.read_text()).body)
    ]
    assert lazy == ["rankdyn/__init__.py"], lazy


def test_no_room_imports_another_rooms_private_names():
    bad = []
    for path in sorted(PKG.rglob("*.py")):
        room = _room(path)
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.ImportFrom) and node.level >= 1):
                continue
            base = _target(path, node)
            other = base.relative_to(PKG).parts[:1] if base != PKG else ()
            if not other or other[0].removesuffix(".py") == room or not room:
                continue  # the same room, the package itself, or an entry point / facade
            for a in node.names:
                private = a.name.startswith("_") and not a.name.startswith("__")
                if private and not _is_module(base, a.name):
                    bad.append(f"{path.relative_to(PKG.parent)}:{node.lineno} {node.module}.{a.name}")
    assert not bad, f"private names imported from another room: {bad}"


def test_the_private_name_check_can_fail(tmp_path):
    """The import `_lyapunov/_layer.py` had (four private helpers of `_run/_simulate.py`) is found."""
    node = ast.parse("from .._run._simulate import _validate, simulate").body[0]
    path = PKG / "_lyapunov" / "_layer.py"
    base = _target(path, node)
    assert base == PKG / "_run" / "_simulate" and _room(path) == "_lyapunov"
    assert not _is_module(base, "_validate") and _is_module(PKG / "_run", "_simulate")
