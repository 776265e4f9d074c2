"""MkDocs hook over `steps/article_notebooks.py`: each article as a Jupyter notebook, with a download button."""

from __future__ import annotations

import functools
import posixpath
from pathlib import Path

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File, Files
from mkdocs.structure.pages import Page
from steps.article_notebooks import (
    POSTS,
    article_notebook,
    notebook_json,
    site_link,
    with_download_button,
)


def on_page_content(html: str, page: Page, config: MkDocsConfig, files: Files) -> str:
    """Write the post's notebook next to its page and put a download button at the top of the page."""
    if not page.file.src_uri.startswith(POSTS) or not page.file.src_uri.endswith(".md"):
        return html
    urls = {file.src_uri: config.site_url + file.url for file in files}
    try:
        notebook = article_notebook(
            page.file.content_string,
            snippets=config.mdx_configs["pymdownx.snippets"],
            link=functools.partial(site_link, page=page.file.src_uri, urls=urls),
            url=config.site_url + page.url,
            wheel_url=config.extra["qkv_wheel"],
        )
    except ValueError as error:
        raise PluginError(str(error)) from error
    name = f"{page.meta.get('slug', page.file.name)}.ipynb"
    folder = posixpath.dirname(page.file.dest_uri)  # where the page's index.html goes
    files.append(
        File.generated(config, posixpath.join(folder, name), content=notebook_json(notebook))
    )
    return with_download_button(html, name, _icon(config, "material/download"))


def _icon(config: MkDocsConfig, name: str) -> str:
    """An SVG icon shipped with the theme, as Material's templates include it."""
    for folder in config.theme.dirs:
        svg = Path(folder, ".icons", f"{name}.svg")
        if svg.is_file():
            return svg.read_text(encoding="utf-8").strip()
    raise PluginError(f"the theme has no icon {name}")
