"""The top-level names, imported on first use (PEP 562): ``import rankdyn`` loads no JAX.

Only rankdyn/__init__.py loads lazily; the root modules (`rankdyn.layer`, `rankdyn.sweep`, ...)
import their names eagerly (``from ._x import Y as Y``), so importing one loads what it needs.

``rankdyn --help`` and every refusal that needs no JAX answer in a fraction of a second because
nothing imports JAX until a name that needs it is used. rankdyn/__init__.py keeps its table of
contents as ordinary imports under ``if TYPE_CHECKING:`` (read by type checkers, the docs and the
import-graph test); `lazy_attributes` reads that block with `ast` instead of repeating it.
"""

from __future__ import annotations

import ast
import importlib
from collections.abc import Callable
from pathlib import Path

__all__ = ["lazy_attributes"]


def _table(package: str, init_file: str) -> dict[str, tuple[str, str | None]]:
    """Name -> (module, attribute; None for a submodule), from the ``if TYPE_CHECKING:`` block."""
    tree = ast.parse(Path(init_file).read_text())
    # ``from .x import`` is relative to the package (the module itself: this is its __init__.py).
    base = package
    block = next(node for node in tree.body if isinstance(node, ast.If))
    table = {}
    for node in block.body:
        if not isinstance(node, ast.ImportFrom) or node.level != 1:
            raise RuntimeError(f"{init_file}: the lazy block holds only `from .x import y as y` lines")
        for alias in node.names:
            if node.module is None:  # ``from . import masks as masks``
                table[alias.asname or alias.name] = (f"{base}.{alias.name}", None)
            else:
                table[alias.asname or alias.name] = (f"{base}.{node.module}", alias.name)
    return table


def lazy_attributes(package: str, init_file: str, namespace: dict) -> tuple[Callable, Callable]:
    """The module-level ``__getattr__`` and ``__dir__`` of a package whose names load on first use.

    Arguments:
        package: the package's ``__name__``.
        init_file: its ``__file__`` (the ``__init__.py`` holding the ``if TYPE_CHECKING:`` block).
        namespace: its ``globals()``; a name, once imported, is stored there (no second look-up).

    Returns:
        ``(__getattr__, __dir__)``.
    """
    table: dict[str, tuple[str, str | None]] = {}

    def names() -> dict[str, tuple[str, str | None]]:
        if not table:
            table.update(_table(package, init_file))
        return table

    def getattr_(name: str):
        if name not in names():
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module, attr = table[name]
        value = importlib.import_module(module)
        value = value if attr is None else getattr(value, attr)
        namespace[name] = value
        return value

    def dir_() -> list[str]:
        return sorted(set(namespace) | set(names()))

    return getattr_, dir_
