"""The documentation site builds with ``mkdocs build --strict`` and renders its maths offline.

One build per test session (the ``site`` fixture) serves both tests: the strict build (a broken
link, a missing page in the nav, an unknown API name in a ``::: rankdyn.x`` block or a docstring
griffe cannot parse fails), and a headless-Chromium check that KaTeX, shipped with the site,
typesets the home, theory, one API and one notebook page with no network.

A step of its own, after the suite (``python3 -m pytest --nbmake notebooks tests/site``, the last
step of the README's test command): plain ``python3 -m pytest`` does not collect this folder
(``norecursedirs`` in pyproject.toml).
"""

import os
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# One page of each kind whose maths reaches the browser by a different road: the README (hook),
# a Markdown page (arithmatex), docstrings (mkdocstrings + arithmatex), a notebook ($...$ left raw
# by mkdocs-jupyter, headings with $...$ in the navigation).
RENDERED_PAGES = ("index.html", "theory.html", "api/metrics.html", "notebooks/01_masks_and_collapse.html")
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--virtual-time-budget=10000",  # let the page's scripts run to completion before the dump
)


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    pytest.importorskip("mkdocs", reason="install the docs extra: pip install -e '.[docs]'")
    pytest.importorskip("mkdocstrings_handlers.python")
    pytest.importorskip("mkdocs_jupyter")
    site = tmp_path_factory.mktemp("docs") / "site"
    # The build reads the package from this checkout (mkdocstrings paths: ["."]), never the network.
    env = os.environ | {"PYTHONPATH": str(ROOT), "NO_MKDOCS_2_WARNING": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    yield site
    shutil.rmtree(site)


@pytest.mark.slow
def test_mkdocs_build_strict(site):
    # The pages the nav promises exist as files (use_directory_urls: false, so index.html opened
    # from disk follows its links), with the README as home page and its repository links
    # rewritten to site pages, and the docstrings' maths kept for KaTeX (arithmatex).
    index = (site / "index.html").read_text()
    assert "rankdyn" in index and 'href="sweep.html"' in index and 'href="docs/' not in index
    assert 'class="arithmatex"' in (site / "api" / "metrics.html").read_text()
    for page in ("sweep", "benchmarks", "api/plotting", "notebooks/04_sweeping_thousands"):
        assert (site / f"{page}.html").is_file(), page
    # Nothing is fetched from a CDN or a font service: the maths engine ships with the site.
    for page in RENDERED_PAGES:
        html = (site / page).read_text()
        for remote in ("cdn.jsdelivr.net", "mathjax@", "fonts.googleapis.com"):
            assert remote not in html, (page, remote)
    assert (site / "_static" / "katex" / "katex.min.js").is_file()
    assert list((site / "_static" / "katex" / "fonts").glob("*.woff2"))


class _VisibleText(HTMLParser):
    """The text a reader sees, without code, scripts and KaTeX's hidden MathML copy of the TeX."""

    _VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "wbr"}
    _HIDDEN_TAGS = {"script", "style", "pre", "code", "textarea", "noscript", "annotation"}

    def __init__(self):
        super().__init__()
        self._stack: list[bool] = []
        self._hidden = 0
        self.text: list[str] = []
        self.rendered = 0  # elements KaTeX produced (class="katex")
        self.errors = 0  # formulas KaTeX could not parse (class="katex-error")

    def handle_starttag(self, tag, attrs):
        if tag in self._VOID:
            return
        classes = (dict(attrs).get("class") or "").split()
        self.rendered += "katex" in classes
        self.errors += "katex-error" in classes
        hidden = tag in self._HIDDEN_TAGS or "katex-mathml" in classes
        self._stack.append(hidden)
        self._hidden += hidden

    def handle_endtag(self, tag):
        if tag not in self._VOID and self._stack:
            self._hidden -= self._stack.pop()

    def handle_data(self, data):
        if not self._hidden:
            self.text.append(data)


def _chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "chrome"):
        if path := shutil.which(name):
            return path
    return None


@pytest.mark.slow
def test_maths_renders_offline_in_headless_chromium(site, tmp_path):
    browser = _chromium()
    if browser is None:
        if os.environ.get("CI") == "true":
            pytest.fail("CI=true but no chromium on PATH: .ci/run installs it with apt-get install chromium")
        pytest.skip("chromium not installed (apt-get install -y chromium); CI runs this check")
    # file:// URLs: no server and no network, as a reader opening the built site from disk.
    procs = {
        page: subprocess.Popen(
            [browser, *CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / str(i)}", "--dump-dom"]
            + [(site / page).as_uri()],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        for i, page in enumerate(RENDERED_PAGES)
    }
    rendered = {}
    for page, proc in procs.items():
        dom, _ = proc.communicate(timeout=120)
        assert proc.returncode == 0 and dom, page
        seen = _VisibleText()
        seen.feed(dom)
        text = " ".join(seen.text)
        rendered[page] = seen.rendered
        assert seen.errors == 0, f"{page}: {seen.errors} formulas KaTeX could not parse"
        for raw in ("\\(", "\\[", "$"):
            at = text.find(raw)
            assert at < 0, f"{page}: raw {raw!r} left in the text: ...{text[max(0, at - 80) : at + 80]}..."
    # Every page shows typeset maths; the theory page is mostly maths, so a KaTeX that stopped
    # part way would show far fewer there.
    assert all(rendered.values()), rendered
    assert rendered["theory.html"] >= 100, rendered
