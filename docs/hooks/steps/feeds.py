"""Build step: the blog's feeds, clean and announced on every page.

mkdocs-rss-plugin (1.19) writes an `<image>` element whenever the feed has a logo attribute, and that
attribute always exists: without the plugin's `image` option (RSS wants a GIF, JPEG or PNG; the site's logo is
an SVG) the feeds carry `<image><url>None</url>...</image>`. `without_empty_image` removes that element from
the feeds once they are written.

Both generators write the same four feeds at the site's root (mkdocs-rss-plugin for MkDocs, Zensical by
itself), but announce them unevenly: Material's template links the two RSS feeds from each page, Zensical's
none, and neither the JSON feeds. `with_feed_links` gives each page's `<head>` an alternate link to every
feed it does not link yet, so that a feed reader pointed at any page finds them all.
"""

from __future__ import annotations

import re
from typing import NamedTuple

FEEDS = "feed_rss_*.xml"  # the plugin's two feeds, by creation and by update date
EMPTY_IMAGE = re.compile(r"<image>\s*<url>None</url>.*?</image>", re.DOTALL)


class Feed(NamedTuple):
    """A feed of the site: its file at the root, its media type, the title its link gives it."""

    name: str
    type: str
    title: str


# The titles of the RSS feeds are Material's (its template links them); JSON Feed 1.1 names its media type.
SITE_FEEDS = (
    Feed("feed_rss_created.xml", "application/rss+xml", "RSS feed"),
    Feed("feed_rss_updated.xml", "application/rss+xml", "RSS feed of updated content"),
    Feed("feed_json_created.json", "application/feed+json", "JSON feed"),
    Feed("feed_json_updated.json", "application/feed+json", "JSON feed of updated content"),
)
ALTERNATE = re.compile(r'<link rel="alternate"[^>]*?\shref="(?:[^"]*/)?(?P<name>[^"/]*)"')


def without_empty_image(feed: str) -> str:
    """An RSS feed's XML without the `<image>` element whose URL is `None`."""
    return EMPTY_IMAGE.sub("", feed)


def with_feed_links(html: str, site_url: str, where: str) -> str:
    """A page whose `<head>` links every feed of `SITE_FEEDS` (by its address under `site_url`), at its end.

    A feed that the head links already, by any address that ends in its file's name, is not linked again.

    Raises:
        ValueError: the page (at `where`) has no `</head>`.
    """
    end = html.find("</head>")
    if end < 0:
        raise ValueError(f"{where}: no </head> to put the feeds' links in")
    linked = {found["name"] for found in ALTERNATE.finditer(html, 0, end)}
    links = "".join(
        f'<link rel="alternate" type="{feed.type}" title="{feed.title}" href="{site_url}{feed.name}">'
        for feed in SITE_FEEDS
        if feed.name not in linked
    )
    return html[:end] + links + html[end:]
