"""The documentation site builds with ``mkdocs build --strict``: a broken link, a missing page in
the nav, an unknown API name in a ``::: rankdyn.x`` block or a docstring griffe cannot parse fails."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_mkdocs_build_strict(tmp_path):
    pytest.importorskip("mkdocs", reason="install the docs extra: pip install -e '.[docs]'")
    pytest.importorskip("mkdocstrings_handlers.python")
    pytest.importorskip("mkdocs_jupyter")
    site = tmp_path / "site"
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
    # The pages the nav promises exist, with the README as home page and the docstrings' math kept
    # for MathJax (arithmatex), and the README's repository links rewritten to site pages.
    index = (site / "index.html").read_text()
    assert "rankdyn" in index and 'href="sweep/"' in index and 'href="docs/' not in index
    assert 'class="arithmatex"' in (site / "api" / "metrics" / "index.html").read_text()
    for page in ("sweep", "benchmarks", "api/plotting", "notebooks/04_sweeping_thousands"):
        assert (site / page / "index.html").is_file(), page
    shutil.rmtree(site)
