"""MkDocs hook over `steps/feeds.py`: no `None` in the RSS feeds that mkdocs-rss-plugin writes, and every
page links every feed."""

from __future__ import annotations

from pathlib import Path

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.exceptions import PluginError
from mkdocs.structure.pages import Page
from steps.feeds import FEEDS, with_feed_links, without_empty_image


def on_post_page(output: str, page: Page, config: MkDocsConfig) -> str:
    """Link the feeds that Material's template leaves out (the JSON feeds) from the page's head."""
    return _with_feed_links(output, config.site_url, page.file.src_uri)


def on_post_template(output_content: str, template_name: str, config: MkDocsConfig) -> str:
    """The same for the 404 page, a theme template that is not a page."""
    if not template_name.endswith(".html"):
        return output_content
    return _with_feed_links(output_content, config.site_url, template_name)


def on_post_build(config: MkDocsConfig) -> None:
    """Drop the empty image element from every RSS feed of the site."""
    for feed in Path(config.site_dir).glob(FEEDS):
        feed.write_text(without_empty_image(feed.read_text(encoding="utf-8")), encoding="utf-8")


def _with_feed_links(html: str, site_url: str, where: str) -> str:
    try:
        return with_feed_links(html, site_url, where)
    except ValueError as error:
        raise PluginError(str(error)) from error
