"""mkdocs hook: the README is the home page; its repository-relative links become site links.

``docs/index.md`` holds only a marker line; the README's text replaces it at build time, so the
two never drift apart. Links written for the repository page (``docs/sweep.md``,
``benchmarks/README.md``) are rewritten to the pages of the site, so ``mkdocs build --strict``
checks them like any other link.
"""

from __future__ import annotations

from pathlib import Path

MARKER = "<!-- README.md -->"
_LINKS = {
    "](docs/": "](",
    "](benchmarks/README.md": "](benchmarks.md",
}


def on_page_markdown(markdown: str, page, config, files) -> str:
    if MARKER not in markdown:
        return markdown
    readme = (Path(config["config_file_path"]).parent / "README.md").read_text(encoding="utf-8")
    for old, new in _LINKS.items():
        readme = readme.replace(old, new)
    return markdown.replace(MARKER, readme)
