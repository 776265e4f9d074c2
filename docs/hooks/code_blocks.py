"""MkDocs hook over `steps/code_blocks.py`: block titles, the checked-with note, lines that hang; and the
snippets' base paths taken from mkdocs.yml's folder, so that `mkdocs build -f` works from any folder."""

from __future__ import annotations

from pathlib import Path

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import Files
from mkdocs.structure.pages import Page
from steps.article_notebooks import rooted
from steps.code_blocks import POSTS, hanging_lines, titled, with_checked_note


def on_config(config: MkDocsConfig) -> MkDocsConfig:
    """pymdownx.snippets' relative base paths from mkdocs.yml's folder (the articles' notebooks too)."""
    snippets = config.mdx_configs["pymdownx.snippets"]
    snippets["base_path"] = rooted(snippets["base_path"], Path(config.config_file_path).parent)
    return config


def on_page_markdown(markdown: str, page: Page, config: MkDocsConfig, files: Files) -> str:
    """Title the marked blocks; put the Get started link and the versions under an article's title."""
    markdown = titled(markdown)
    if not page.file.src_uri.startswith(POSTS):
        return markdown
    return with_checked_note(markdown, config.extra["qkv_version"])


def on_page_content(html: str, page: Page, config: MkDocsConfig, files: Files) -> str:
    """Every line of every code block in a span of its own, for the hanging indent of wrapped rows."""
    return hanging_lines(html)
