"""No shims: no module of rankdyn warns that something is deprecated, and the spellings that the
shims of 0.4 kept are refused or gone (CHANGELOG.md lists each with its replacement)."""

import ast
import importlib
import pathlib
import warnings

import pytest

import rankdyn

PKG = pathlib.Path(rankdyn.__file__).parent


def _modules() -> list[str]:
    names = []
    for path in sorted(PKG.rglob("*.py")):
        parts = list(path.relative_to(PKG.parent).with_suffix("").parts)
        names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


def test_no_module_warns_of_a_deprecation():
    """Read from the source: no rankdyn module names DeprecationWarning (or its kin) in its code.
    A check that reads the code cannot miss a warning raised only on some path."""
    kinds = {"DeprecationWarning", "PendingDeprecationWarning", "FutureWarning"}
    found = []
    for path in sorted(PKG.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Name) and node.id in kinds:
                found.append(f"{path.relative_to(PKG.parent)}:{node.lineno} {node.id}")
    assert not found, found
    # The check can fail: a module that names the class is found.
    tree = ast.parse("import warnings\nwarnings.warn('x', DeprecationWarning)")
    assert any(isinstance(n, ast.Name) and n.id == "DeprecationWarning" for n in ast.walk(tree))


def test_importing_every_module_warns_nothing_of_rankdyn():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for name in _modules():
            if name != "rankdyn.__main__":  # it runs the command line
                importlib.import_module(name)
    ours = [w for w in caught if "rankdyn" in str(w.filename) and issubclass(w.category, DeprecationWarning)]
    assert not ours, [str(w.message) for w in ours]


def test_the_old_spellings_are_gone():
    import jax.random as jr

    import rankdyn as rd
    import rankdyn.flow
    from rankdyn.cli import build_parser

    with pytest.raises(SystemExit):  # --norm was --placement's deprecated alias
        build_parser().parse_args(["simulate", "--norm", "post"])
    for name in ("find_equilibria", "tangent_jacobian", "lyapunov_spectrum_flow"):
        assert not hasattr(rankdyn.flow, name), name  # one home each: rankdyn.equilibria, rankdyn.lyapunov
    assert not hasattr(rd.equilibria, "continue_equilibria")
    layer = rd.make_layer(jr.PRNGKey(0), n=2, d=2, mask="causal", value="orthogonal", qk="zero")
    with pytest.raises(TypeError, match="x0s"):
        rd.find_equilibria(layer, x0s=rd.initial_tokens(jr.PRNGKey(1), "sphere", 2, 2, batch=2))
    report = rd.stability(layer, rd.initial_tokens(jr.PRNGKey(1), "sphere", 2, 2, batch=3))
    with pytest.raises(TypeError, match="not a sequence"):
        list(report)
    assert report[0].residual == report.residual[0]  # one point by index, as before
