"""MkDocs hook over `steps/reading_order.py`: the articles in the navigation, in the home page's order.

It runs after the blog plugin's own `on_nav` (priority -50), which attaches the blog's views.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.exceptions import PluginError
from mkdocs.plugins import event_priority
from mkdocs.structure.files import Files
from mkdocs.structure.nav import Navigation, Section
from mkdocs.structure.pages import Page
from steps.reading_order import (
    BLOG_SECTION,
    GET_STARTED,
    HOME,
    POSTS,
    SECTION_TITLE,
    articles,
)


@event_priority(-100)
def on_nav(nav: Navigation, config: MkDocsConfig, files: Files) -> Navigation:
    """Insert the articles in reading order, and link previous/next along the navigation."""
    posts = {
        file.src_uri: file.page
        for file in files.documentation_pages()
        if file.src_uri.startswith(POSTS) and file.page is not None
    }
    try:
        order = articles(Path(config.docs_dir, HOME).read_text(encoding="utf-8"), posts)
    except ValueError as error:
        raise PluginError(f"{HOME}: {error}") from error
    blog = next(
        (item for item in nav.items if item.is_section and item.title == BLOG_SECTION), None
    )
    if blog is None:
        raise PluginError(f"mkdocs.yml: the nav needs a '{BLOG_SECTION}' section for the blog")
    nav.items.remove(blog)
    nav.items.insert(
        _after_get_started(nav), Section(SECTION_TITLE, [posts[path] for path in order])
    )
    nav.items.append(blog)
    nav.pages = list(_pages(nav.items))
    bookended = [None, *nav.pages, None]
    for previous, page, following in zip(bookended[:-2], nav.pages, bookended[2:], strict=True):
        page.previous_page, page.next_page = previous, following
    return nav


def _after_get_started(nav: Navigation) -> int:
    """Where the articles go: right after the Get started page."""
    for index, item in enumerate(nav.items):
        if isinstance(item, Page) and item.file.src_uri == GET_STARTED:
            return index + 1
    raise PluginError(f"mkdocs.yml: the nav needs {GET_STARTED} at its top level")


def _pages(items: list) -> Iterator[Page]:
    """The pages of a navigation tree, depth first, in order."""
    for item in items:
        if item.is_section:
            yield from _pages(item.children)
        elif isinstance(item, Page):
            yield item
