"""Build step: no `None` in the RSS feeds.

mkdocs-rss-plugin (1.19) writes an `<image>` element whenever the feed has a logo attribute, and that
attribute always exists: without the plugin's `image` option (RSS wants a GIF, JPEG or PNG; the site's logo is
an SVG) the feeds carry `<image><url>None</url>...</image>`. This step removes that element from the feeds
once they are written.
"""

from __future__ import annotations

import re

FEEDS = "feed_rss_*.xml"  # the plugin's two feeds, by creation and by update date
EMPTY_IMAGE = re.compile(r"<image>\s*<url>None</url>.*?</image>", re.DOTALL)


def without_empty_image(feed: str) -> str:
    """An RSS feed's XML without the `<image>` element whose URL is `None`."""
    return EMPTY_IMAGE.sub("", feed)
