// Typeset the site's maths with the KaTeX shipped in _static/katex: no CDN, so the built site
// renders offline. pymdownx.arithmatex (generic) writes \( \) and \[ \] in Markdown pages and
// docstrings; mkdocs-jupyter leaves the notebooks' $...$ and $$...$$ as they are, and their
// headings carry $...$ into the navigation, so the whole body is typeset, code excepted.
function renderSiteMaths() {
  renderMathInElement(document.body, {
    delimiters: [
      { left: "$$", right: "$$", display: true },
      { left: "\\[", right: "\\]", display: true },
      { left: "\\(", right: "\\)", display: false },
      { left: "$", right: "$", display: false },
    ],
    ignoredTags: ["script", "noscript", "style", "textarea", "pre", "code", "option"],
    ignoredClasses: ["md-search"],
    // A formula KaTeX cannot parse shows in red (class katex-error) instead of stopping the page;
    // tests/test_docs_render.py fails on any.
    throwOnError: false,
  });
}
if (typeof document$ !== "undefined") {
  document$.subscribe(renderSiteMaths); // mkdocs-material: once per page, instant loading too
} else {
  document.addEventListener("DOMContentLoaded", renderSiteMaths);
}
