"""Build step: the articles in the navigation, in the reading order of the home page.

The blog plugin keeps posts out of the navigation and links them to each other by date. The site is read in
an order, and the home page states it once: the numbered list under its `## Reading order` heading, whose
links to `blog/posts/*.md` are the articles in order. The hook puts an "Articles" section with those posts
into the navigation (after "Get started"), moves the blog's own dated views to the end, and links previous
and next through the whole navigation in that order: Home, Get started, article 1 ... article N, and so on.
Every post must appear in the list exactly once, or the build fails.
"""

from __future__ import annotations

import re
from collections.abc import Collection

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
