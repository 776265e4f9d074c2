"""MkDocs hook over `steps/notebooks.py`: notebook pages without third-party requests, images with alt texts."""

from __future__ import annotations

from pathlib import Path

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.exceptions import PluginError
from mkdocs.structure.files import Files
from mkdocs.structure.pages import Page
from steps.notebooks import notebook_page


def on_page_content(html: str, page: Page, config: MkDocsConfig, files: Files) -> str:
    """Strip nbconvert's CDN loaders from a notebook page; give its images their alt texts."""
    if not page.file.src_uri.endswith(".ipynb"):
        return html
    notebook = Path(page.file.abs_src_path).read_text(encoding="utf-8")
    try:
        return notebook_page(html, notebook, page.file.src_uri)
    except ValueError as error:
        raise PluginError(str(error)) from error
