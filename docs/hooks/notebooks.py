"""MkDocs hook: keep notebook pages free of third-party requests.

nbconvert's template, which mkdocs-jupyter extends, puts two loaders in every notebook page: MathJax 2 from
cdnjs (with a MathJax 2 configuration script) and a module script that imports mermaid from cdnjs when a cell
outputs a diagram. The site typesets math with its own MathJax 3 (`javascripts/mathjax.js`) and has no mermaid
output, so both are removed; a notebook page that still loads a script from another host fails the build.
"""

from __future__ import annotations

import re

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.exceptions import PluginError
from mkdocs.structure.files import Files
from mkdocs.structure.pages import Page

MATHJAX_LOADER = re.compile(
    r"<!-- Load mathjax -->.*?<!-- End of mathjax configuration -->", re.DOTALL
)
MODULE_SCRIPT = re.compile(r'<script type="module">.*?</script>', re.DOTALL)
REMOTE_SCRIPT = re.compile(r"""<script[^>]*\ssrc=["']?(?:https?:)?//|import\(["'](?:https?:)?//""")


def on_page_content(html: str, page: Page, config: MkDocsConfig, files: Files) -> str:
    """Strip nbconvert's CDN loaders from a notebook page."""
    if not page.file.src_uri.endswith(".ipynb"):
        return html
    html = MATHJAX_LOADER.sub("", html)
    html = MODULE_SCRIPT.sub(lambda script: "" if "mermaid" in script[0] else script[0], html)
    if REMOTE_SCRIPT.search(html):
        raise PluginError(
            f"{page.file.src_uri}: the rendered notebook still loads a script from another host"
        )
    return html
