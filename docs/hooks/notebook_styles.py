"""MkDocs hook over `steps/notebook_styles.py`: a notebook page keeps only the CSS rules that can match it."""

from __future__ import annotations

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import Files
from mkdocs.structure.pages import Page
from steps.notebook_styles import without_unused_css


def on_page_content(html: str, page: Page, config: MkDocsConfig, files: Files) -> str:
    """Drop the rules of a notebook page's inline stylesheets that no element of the page can match."""
    return without_unused_css(html) if page.file.src_uri.endswith(".ipynb") else html
