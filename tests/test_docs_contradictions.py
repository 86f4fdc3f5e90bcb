"""Docs that contradicted the code (issue 55): the sweep's placement key, the release named in
docs, and docs/sweep.md's list of sweep keys."""

import pathlib
import re
import tomllib

import pytest

from rankdyn import UsageError
from rankdyn._sweep._params import SWEEP_PARAMS
from rankdyn._sweep._schema import parse_sweep_config
from rankdyn._version import __version__

ROOT = pathlib.Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
_RELEASE = re.compile(r"\b(?:gone|new|added|removed|changed|deprecated) (?:in|since) (\d+\.\d+)")


def test_docs_cli_names_the_sweep_dimension_the_dataset_has():
    """The dataset's dimensions are the ``[axes]`` keys (`_assemble`: ``dims = cfg.axes``); the
    placement's key is ``placement``, and ``norm`` is refused, so docs/cli.md must say ``placement``."""
    text = (ROOT / "examples" / "sweep_normalisation_schemes.toml").read_text()
    cfg = parse_sweep_config(tomllib.loads(text), text)
    assert tuple(cfg.axes) == ("placement",)
    with pytest.raises(UsageError, match="norm"):
        parse_sweep_config({"axes": {"norm": ["post", "pre"]}})
    cli = " ".join((DOCS / "cli.md").read_text().split())
    assert "dimension `placement`" in cli
    assert not re.search(r"(key|dimension)s? (and dimension )?name `norm`", cli)


def test_docs_name_no_release_but_the_installed_one():
    """``gone in 0.5`` while ``0.4.0`` installs: a release named as this one must be `__version__`'s."""
    major_minor = ".".join(__version__.split(".")[:2])
    claims = []
    for path in sorted(DOCS.rglob("*.md")):
        text = " ".join(path.read_text().split())
        for m in _RELEASE.finditer(text):
            claims.append((path.name, m[0], m[1]))
    wrong = [c for c in claims if c[2] != major_minor]
    assert not wrong, f"docs name a release other than {__version__}: {wrong}"


def _sweep_doc_keys() -> set[str]:
    text = (DOCS / "sweep.md").read_text()
    m = re.search(r"Every parameter can be an axis or fixed.*?coordinate\):\s*`([^`]*)`", text, re.S)
    assert m, "docs/sweep.md lists the sweep keys after 'Every parameter can be an axis or fixed'"
    return set(m[1].split())


def test_docs_sweep_lists_every_sweep_key():
    missing = sorted(set(SWEEP_PARAMS) - _sweep_doc_keys())
    assert not missing, f"docs/sweep.md's key list omits {missing}"
    unknown = sorted(_sweep_doc_keys() - set(SWEEP_PARAMS))
    assert not unknown, f"docs/sweep.md lists keys that are not sweep keys: {unknown}"


def test_one_variable_moves_every_cache_and_the_docs_say_so(monkeypatch, tmp_path):
    """`RANKDYN_CACHE_DIR` moves the checkpoints with the compile cache and chunks.json (the two
    variables shared a default and moved separately); `RANKDYN_CHECKPOINTS` moves the checkpoints
    alone. The code does that, and `rankdyn checkpoints --help` and docs/cli.md say so."""
    from rankdyn._commands.reproduce import default_compile_cache
    from rankdyn._trained._fetch import cache_folder
    from rankdyn.cli import build_parser

    monkeypatch.delenv("RANKDYN_CHECKPOINTS", raising=False)
    monkeypatch.setenv("RANKDYN_CACHE_DIR", str(tmp_path))
    assert default_compile_cache().parent == tmp_path and cache_folder("minilm").parent == tmp_path
    monkeypatch.setenv("RANKDYN_CHECKPOINTS", str(tmp_path / "elsewhere"))
    assert (
        cache_folder("minilm").parent == tmp_path / "elsewhere" and default_compile_cache().parent == tmp_path
    )

    sub = next(a for a in build_parser()._actions if a.dest == "command")
    for text in (sub.choices["checkpoints"].format_help(), (DOCS / "cli.md").read_text()):
        flat = " ".join(text.split())
        found = re.search(
            r"\$RANKDYN_CACHE_DIR.{0,300}\$RANKDYN_CHECKPOINTS.{0,40}moves the checkpoints alone", flat
        )
        assert found, "one variable moves every cache; the other the checkpoints alone"


def test_docs_show_the_public_name_where_one_exists():
    """A private path (``rankdyn._sweep.assemble_folder``) shown to users where the same object is
    public (``rankdyn.sweep.assemble_folder``) sends them to an unstable name."""
    import importlib

    shown = []
    for path in [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]:
        if path.name == "architecture.md":  # the layout page names private modules on purpose
            continue
        for m in re.finditer(r"`rankdyn\._([a-z]+)\.(?:_[a-z_]+\.)?([A-Za-z]\w*)", path.read_text()):
            try:
                public = importlib.import_module(f"rankdyn.{m[1]}")
            except ImportError:
                continue
            if hasattr(public, m[2]):
                shown.append((path.name, m[0], f"rankdyn.{m[1]}.{m[2]}"))
    assert not shown, f"docs show a private name where a public one exists: {shown}"
