"""Feeds, metadata and downloads of the built site: RSS and JSON feeds of the articles, the sitemap, page
descriptions, the author page, `site_url` in absolute links, and each article's notebook. These read the built
files or fetch them from the local server; no browser needed."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import re
from email.utils import parsedate_to_datetime
from html import unescape
from pathlib import Path
from urllib.request import urlopen
from xml.etree import ElementTree

import nbformat

from tests.browser.conftest import Site, posts

FEEDS = ("feed_rss_created.xml", "feed_rss_updated.xml")
SITEMAP = "{http://www.sitemaps.org/schemas/sitemap/0.9}"


def _rss_items(site: Site, name: str) -> dict[str, ElementTree.Element]:
    channel = ElementTree.parse(site.folder / name).getroot().find("channel")
    assert channel.findtext("link") == site.url
    return {item.findtext("link"): item for item in channel.iter("item")}


def _day(published: dt.date) -> dt.date:
    """The day of a front matter's `date`: a date, or a date and time (which orders posts of one day)."""
    return published.date() if isinstance(published, dt.datetime) else published


def test_rss_feeds_list_every_article(site: Site) -> None:
    for name in FEEDS:
        items = _rss_items(site, name)
        assert set(items) == {site.url + post.path for post in posts()}, name
        for post in posts():
            item = items[site.url + post.path]
            assert item.findtext("title") == post.title
            assert item.findtext("description").strip() == post.meta["description"].strip()
            published = parsedate_to_datetime(item.findtext("pubDate")).date()
            assert published == _day(post.meta["date"]), f"{name}: {post.slug}"


def test_json_feed_lists_every_article(site: Site) -> None:
    feed = json.loads((site.folder / "feed_json_created.json").read_text(encoding="utf-8"))
    assert feed["home_page_url"] == site.url
    items = {item["url"]: item for item in feed["items"]}
    assert set(items) == {site.url + post.path for post in posts()}
    for post in posts():
        published = dt.datetime.fromisoformat(items[site.url + post.path]["date_published"])
        assert items[site.url + post.path]["title"] == post.title
        assert published.date() == _day(post.meta["date"])


def test_pages_announce_the_feeds(site: Site) -> None:
    home = (site.folder / "index.html").read_text(encoding="utf-8")
    announced = re.findall(
        r'<link rel="alternate" type="application/rss\+xml"[^>]*href="([^"]+)"', home
    )
    assert {href.rsplit("/", 1)[-1] for href in announced} == set(FEEDS)


def test_sitemap_lists_every_page(site: Site) -> None:
    root = ElementTree.parse(site.folder / "sitemap.xml").getroot()
    listed = {loc.text for loc in root.iter(f"{SITEMAP}loc")}
    pages = {site.url + page for page in site.pages if not page.endswith("404.html")}
    assert listed == pages


def test_every_article_has_its_own_description(site: Site) -> None:
    descriptions = []
    for post in posts():
        description = post.meta.get("description", "").strip()
        assert description, f"{post.slug} has no description in its front matter"
        page = (site.folder / post.path / "index.html").read_text(encoding="utf-8")
        meta = re.search(r'<meta name="description" content="([^"]*)"', page)
        assert meta is not None, post.slug
        assert unescape(meta[1]) == description
        descriptions.append(description)
    assert len(set(descriptions)) == len(descriptions)


def test_author_page_lists_the_articles(site: Site) -> None:
    authors = {author for post in posts() for author in post.meta["authors"]}
    for author in authors:
        page = (site.folder / "blog" / "author" / author / "index.html").read_text(encoding="utf-8")
        written = [post for post in posts() if author in post.meta["authors"]]
        missing = [post.slug for post in written if f'href="{site.url}{post.path}"' not in page]
        assert not missing, f"author page of {author} does not link {missing}"


def test_every_article_offers_its_notebook(site: Site) -> None:
    for post in posts():
        page = (site.folder / post.path / "index.html").read_text(encoding="utf-8")
        name = f"{post.slug}.ipynb"
        assert f'<a href="{site.url}{post.path}{name}" download' in page, (
            f"{post.slug}: no download button"
        )
        with urlopen(site.url + post.path + name) as response:
            notebook = nbformat.reads(response.read().decode("utf-8"), as_version=4)
        nbformat.validate(notebook)
        assert notebook.cells[0].source.startswith(f"*Generated from the article at <{site.url}")
        install = notebook.cells[1].source
        wheel = rf"{re.escape(site.url)}packages/qkv-[^\"#]+\.whl#sha256=[0-9a-f]{{64}}"
        assert re.search(rf'"qkv(\[[a-z,]+\])? @ {wheel}"', install), install  # installs from here
        assert any(cell.cell_type == "code" for cell in notebook.cells)
        assert notebook.metadata.kernelspec.name == "python3"


def test_feeds_are_english_and_hold_no_none(site: Site) -> None:
    for name in FEEDS:
        text = (site.folder / name).read_text(encoding="utf-8")
        assert ElementTree.fromstring(text).find("channel").findtext("language") == "en"
        assert ">None<" not in text, name
    json_feed = (site.folder / "feed_json_created.json").read_text(encoding="utf-8")
    assert "None" not in json_feed


def test_every_page_names_the_configured_site_url_as_canonical(site: Site) -> None:
    for page in site.pages:
        if page.endswith("404.html"):
            continue
        html = (site.folder / page / "index.html").read_text(encoding="utf-8")
        canonical = re.search(r'<link rel="canonical" href="([^"]+)"', html)
        assert canonical is not None, page
        assert canonical[1] == site.url + page


def test_package_index_links_the_wheel_and_sdist_by_hash(site: Site) -> None:
    with urlopen(site.url + "simple/qkv/") as response:
        page = response.read().decode("utf-8")
    links = re.findall(r'href="([^"#]+)#sha256=([0-9a-f]{64})"', page)
    assert sorted(Path(link).suffix for link, _ in links) == [".gz", ".whl"]
    for link, digest in links:
        with urlopen(site.url + "simple/qkv/" + link) as response:
            assert hashlib.sha256(response.read()).hexdigest() == digest, link
