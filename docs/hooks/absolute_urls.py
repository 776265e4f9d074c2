"""MkDocs hook over `steps/absolute_urls.py`: each page names its links and assets by their full address."""

from __future__ import annotations

from urllib.parse import urljoin

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.pages import Page
from steps.absolute_urls import absolute_urls


def on_post_page(output: str, page: Page, config: MkDocsConfig) -> str:
    """Rewrite the relative `href` and `src` of every element of a page into absolute URLs."""
    return absolute_urls(output, urljoin(config.site_url, page.url))


def on_post_template(output_content: str, template_name: str, config: MkDocsConfig) -> str:
    """The same for the 404 page, a theme template that is not a page (the sitemap holds full URLs already)."""
    return (
        absolute_urls(output_content, config.site_url)
        if template_name.endswith(".html")
        else output_content
    )
