"""The package's import graph: no loop, and every import points down the floors of the house.

The graph is read from the source with `ast` (every ``import`` / ``from ... import``, at module
level or inside a function, since a lazy import is still a dependency). `FLOORS` is the contract
that docs/architecture.md describes: a module may import its own room or any room on a lower
floor; rooms that share an *independent* floor do not import each other, and neither do the
experiment families.
"""

import ast
import pathlib

import rankdyn

PKG = pathlib.Path(rankdyn.__file__).parent

#: Floors from the bottom up: (rooms, independent). A room is a module or a package prefix.
FLOORS = (
    (
        ("rankdyn._errors", "rankdyn._arguments", "rankdyn._version", "rankdyn._lazy", "rankdyn._results"),
        False,
    ),
    (("rankdyn._observe",), False),
    (("rankdyn._model",), False),
    (("rankdyn._run",), False),
    (("rankdyn._theory", "rankdyn._equilibria", "rankdyn._flow"), True),
    # The Lyapunov spectra build on the flow and the run; the mean-field densities continue their
    # stationary states with the equilibria's continuation.
    (("rankdyn._trained", "rankdyn._sweep", "rankdyn._lyapunov", "rankdyn._meanfield"), True),
    (
        (
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
        ),
        False,
    ),
    (("rankdyn._plotting", "rankdyn.plotting"), False),
    (("rankdyn._reproduce",), False),
    (("rankdyn._commands",), False),
    (("rankdyn.cli", "rankdyn.__main__"), False),
    (("rankdyn",), False),
)
#: The reproduce families: each imports the shared modules of rankdyn/_reproduce/, never another;
#: only the runner (`RUNNERS`) imports into the families.
FAMILIES = ("sim", "theory", "pretrained", "flow")
RUNNERS = ("rankdyn._reproduce", "rankdyn._reproduce._registry")


def _name(path: pathlib.Path) -> str:
    parts = list(path.relative_to(PKG.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_edges() -> set[tuple[str, str]]:
    """Every (importer, imported) pair of rankdyn modules, resolved to module names."""
    modules = {_name(p): p for p in PKG.rglob("*.py")}
    edges = set()
    for name, path in modules.items():
        package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = package[: len(package) - node.level + 1] if node.level else []
                mod = ".".join(base + (node.module.split(".") if node.module else []))
                # ``from pkg import sub`` depends on the submodule when there is one.
                targets = [f"{mod}.{a.name}" if f"{mod}.{a.name}" in modules else mod for a in node.names]
            else:
                continue
            edges |= {(name, t) for t in targets if t in modules and t != name}
    return edges


def _room(module: str) -> tuple[int, str]:
    """The floor index and room of a module (the longest room prefix that holds it)."""
    best = None
    for floor, (rooms, _) in enumerate(FLOORS):
        for room in rooms:
            holds = module == room if room == "rankdyn" else module == room or module.startswith(room + ".")
            if holds and (best is None or len(room) > len(best[1])):
                best = (floor, room)
    assert best is not None, f"{module} is on no floor of FLOORS: add it"
    return best


def _family(module: str) -> str | None:
    parts = module.split(".")
    return parts[2] if len(parts) > 3 and parts[1] == "_reproduce" and parts[2] in FAMILIES else None


def violations(edges) -> list[str]:
    """Upward imports, imports between independent rooms or families, and loops."""
    bad = []
    for a, b in sorted(edges):
        (fa, ra), (fb, rb) = _room(a), _room(b)
        if fb > fa:
            bad.append(f"upward: {a} (floor {fa}) imports {b} (floor {fb})")
        elif fa == fb and ra != rb and FLOORS[fa][1]:
            bad.append(f"sideways: {a} imports {b} (independent rooms {ra}, {rb})")
        if ra == rb == "rankdyn._reproduce" and _family(b) and _family(a) != _family(b) and a not in RUNNERS:
            bad.append(f"family: {a} imports {b}")
    # Loops: a depth-first search for a back edge.
    graph: dict[str, set[str]] = {}
    for a, b in edges:
        graph.setdefault(a, set()).add(b)
    state: dict[str, int] = {}

    def visit(m, stack):
        state[m] = 1
        for n in sorted(graph.get(m, ())):
            if state.get(n) == 1:
                bad.append("loop: " + " -> ".join(stack[stack.index(n) :] + [m, n]))
            elif n not in state:
                visit(n, stack + [m])
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m, [])
    return bad


def test_import_graph_has_no_loop_and_no_upward_import():
    bad = violations(import_edges())
    assert not bad, "\n".join(bad)


def test_the_checker_catches_each_kind_of_violation():
    """The oracle can fail: an injected upward import, sideways import, family import and loop."""
    edges = import_edges()
    assert ("rankdyn._run._simulate", "rankdyn._model._layer") in edges  # the graph is really read
    injected = {
        ("rankdyn._model._layer", "rankdyn._run._scan"): "upward",
        ("rankdyn._flow._solve", "rankdyn._equilibria._solve"): "sideways",
        ("rankdyn._reproduce.sim.ablation", "rankdyn._reproduce.flow._flow_runs"): "family",
        ("rankdyn._reproduce._runs", "rankdyn._reproduce.sim.ablation"): "family",
        ("rankdyn._model._masks", "rankdyn._model._layer"): "loop",
    }
    for edge, kind in injected.items():
        found = violations(edges | {edge})
        assert any(v.startswith(kind + ":") for v in found), (edge, found)
