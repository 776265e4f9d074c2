"""Build step: keep notebook pages free of third-party requests.

nbconvert's template, which mkdocs-jupyter extends, puts two loaders in every notebook page: MathJax 2 from
cdnjs (with a MathJax 2 configuration script) and a module script that imports mermaid from cdnjs when a cell
outputs a diagram. The site typesets math when it is built (`mathjax.py`) and has no mermaid output, so both
are removed (that no page fetches from another host is checked in the browser:
tests/browser/test_pages.py).

nbconvert gives every image output the alt text "No description has been provided for this image". A code cell
that draws a figure states what it shows in its metadata, `"alt": "..."`, which replaces that placeholder; a
figure without one fails the build.
"""

from __future__ import annotations

import html as markup
import json
import re

MATHJAX_LOADER = re.compile(
    r"<!-- Load mathjax -->.*?<!-- End of mathjax configuration -->", re.DOTALL
)
MODULE_SCRIPT = re.compile(r'<script type="module">.*?</script>', re.DOTALL)
NO_ALT = 'alt="No description has been provided for this image"'
CELL_ID = re.compile(r'id="cell-id=([^"]+)"')


def notebook_page(html: str, notebook: str, where: str) -> str:
    """A notebook page's HTML without nbconvert's CDN loaders, its images with their cells' alt texts.

    Args:
        html: the page's content, as mkdocs-jupyter renders it.
        notebook: the notebook's JSON, whose code cells hold the alt texts in their metadata.
        where: the notebook's path, for the error message.

    Raises:
        ValueError: a cell outputs an image and has no `alt` in its metadata.
    """
    html = MATHJAX_LOADER.sub("", html)
    html = MODULE_SCRIPT.sub(lambda script: "" if "mermaid" in script[0] else script[0], html)
    return _alt_texts(html, notebook, where)


def _alt_texts(html: str, notebook: str, where: str) -> str:
    """Put each code cell's `alt` metadata on the images it outputs, in place of nbconvert's placeholder."""
    if NO_ALT not in html:
        return html
    alts = {cell.get("id"): cell["metadata"].get("alt") for cell in json.loads(notebook)["cells"]}
    pieces = CELL_ID.split(html)  # [before the first cell, id, cell html, id, cell html, ...]
    for index in range(1, len(pieces), 2):
        cell_id, body = pieces[index], pieces[index + 1]
        if NO_ALT in body:
            if not alts.get(cell_id):
                raise ValueError(
                    f"{where}: cell {cell_id} outputs an image; say what it shows in its "
                    'metadata, "alt": "..."'
                )
            pieces[index + 1] = body.replace(NO_ALT, f'alt="{markup.escape(alts[cell_id])}"')
        pieces[index] = f'id="cell-id={cell_id}"'
    return "".join(pieces)
