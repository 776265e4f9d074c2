"""MkDocs hook over `steps/mathjax.py`: every formula typeset when the site is built.

Its stylesheet, `assets/mathjax/chtml.css`, is linked by `extra_css` in mkdocs.yml.
"""

from __future__ import annotations

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.exceptions import PluginError
from mkdocs.structure.files import Files
from mkdocs.structure.pages import Page
from steps import mathjax
from steps.mathjax import typeset_arithmatex, typeset_dollars


def on_pre_build(config: MkDocsConfig) -> None:
    try:
        mathjax.start()
    except RuntimeError as error:
        raise PluginError(str(error)) from error


def on_page_content(content: str, page: Page, config: MkDocsConfig, files: Files) -> str:
    """Typeset a page's own content (what the search index is made from)."""
    where = page.file.src_uri
    try:
        content = typeset_arithmatex(content, where)
        return typeset_dollars(content, where) if where.endswith(".ipynb") else content
    except ValueError as error:  # a TeX error
        raise PluginError(str(error)) from error


def on_post_page(output: str, page: Page, config: MkDocsConfig) -> str:
    """Typeset what the page shows beyond its content: the blog's excerpts of posts, on its index views."""
    try:
        return typeset_arithmatex(output, page.file.src_uri)
    except ValueError as error:  # a TeX error
        raise PluginError(str(error)) from error


def on_post_build(config: MkDocsConfig) -> None:
    """Write the stylesheet of every formula typeset and the fonts cut to what it draws; stop the Node process."""
    mathjax.write_assets(config.site_dir)


def on_build_error(error: Exception) -> None:
    if mathjax.running():
        mathjax.stop()
