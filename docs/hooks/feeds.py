"""MkDocs hook over `steps/feeds.py`: no `None` in the RSS feeds that mkdocs-rss-plugin writes."""

from __future__ import annotations

from pathlib import Path

from mkdocs.config.defaults import MkDocsConfig
from steps.feeds import FEEDS, without_empty_image


def on_post_build(config: MkDocsConfig) -> None:
    """Drop the empty image element from every RSS feed of the site."""
    for feed in Path(config.site_dir).glob(FEEDS):
        feed.write_text(without_empty_image(feed.read_text(encoding="utf-8")), encoding="utf-8")
