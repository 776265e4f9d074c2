"""MkDocs hook: the articles in the navigation, in the reading order of the home page.

The blog plugin keeps posts out of the navigation and links them to each other by date. The site is read in
an order, and the home page states it once: the numbered list under its `## Reading order` heading, whose
links to `blog/posts/*.md` are the articles in order. This hook puts an "Articles" section with those posts
into the navigation (after "Get started"), moves the blog's own dated views to the end, and links previous
and next through the whole navigation in that order: Home, Get started, article 1 ... article N, and so on.
Every post must appear in the list exactly once, or the build fails.

It runs after the blog plugin's own `on_nav` (priority -50), which attaches the blog's views.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterator
from pathlib import Path

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.exceptions import PluginError
from mkdocs.plugins import event_priority
from mkdocs.structure.files import Files
from mkdocs.structure.nav import Navigation, Section
from mkdocs.structure.pages import Page

HOME = "index.md"
GET_STARTED = "get-started.md"
POSTS = "blog/posts/"
BLOG_SECTION = "Blog"
SECTION_TITLE = "Articles"
READING_ORDER = re.compile(r"^## Reading order\n(?P<list>.*?)(?=^## |\Z)", re.MULTILINE | re.DOTALL)
ITEM_LINK = re.compile(r"^\d+\.\s+\[[^\]]*\]\((?P<target>blog/posts/[^)#]+\.md)\)", re.MULTILINE)


def reading_order(home_markdown: str) -> list[str]:
    """The posts' source paths (`blog/posts/x.md`) in the order of the home page's reading-order list.

    Raises:
        ValueError: the home page has no `## Reading order` section, or it names a post twice.
    """
    found = READING_ORDER.search(home_markdown)
    if found is None:
        raise ValueError("the home page has no '## Reading order' section")
    order = [match["target"] for match in ITEM_LINK.finditer(found["list"])]
    repeated = sorted({path for path in order if order.count(path) > 1})
    if repeated:
        raise ValueError(f"the reading order names these posts twice: {repeated}")
    return order


def articles(home_markdown: str, posts: Collection[str]) -> list[str]:
    """`posts` (source paths, `blog/posts/x.md`) in the reading order of the home page.

    Raises:
        ValueError: the reading order (`reading_order`) does not list every one of `posts` exactly once, or
            names a post that is not one of them.
    """
    order = reading_order(home_markdown)
    missing, unknown = sorted(set(posts) - set(order)), sorted(set(order) - set(posts))
    if missing or unknown:
        raise ValueError(
            f"the reading order must list every post once; missing {missing}, unknown {unknown}"
        )
    return order


# --- the MkDocs hook ------------------------------------------------------------------------------------------


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
