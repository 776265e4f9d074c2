"""Build step after the generator: over the built site, what the MkDocs hooks do to the pages as they render.

`finish()` reads every page of a site that a generator built from the staged docs (`prepare.py`) and
rewrites it with the functions the hooks call, in the order the hooks run:

1. every line of every code block in a span of its own (`code_blocks.hanging_lines`);
2. each figure's `<img>` as its light and dark variants (`figures.with_variants`);
3. every formula typeset (`mathjax.typeset_arithmatex`; `typeset_dollars` in a notebook page's Markdown
   cells), then the stylesheet and the cut fonts written (`mathjax.write_assets`);
4. a notebook page without nbconvert's CDN loaders, with its images' alt texts (`notebooks.notebook_page`)
   and only the CSS rules that can match it (`notebook_styles.without_unused_css`), its notebook beside it
   with a download button;
5. an article's notebook beside its page (`article_notebooks.article_notebook`), with a download button;
6. a link to each of the blog's feeds in its head (`feeds.with_feed_links`: Zensical's template links none);
7. every relative `href` and `src` made absolute (`absolute_urls.absolute_urls`), last.

The RSS feeds lose their empty image (`feeds.without_empty_image`). The package index's own pages
(`simple/`) are files, not pages, and are left as they are. A page's address is its path under the site
(`blog/x/index.html` is `<site_url>blog/x/`); a post's is `blog/<slug>/` (the blog's `post_url_format`).
"""

from __future__ import annotations

import functools
import re
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from steps import mathjax
from steps.absolute_urls import absolute_urls
from steps.article_notebooks import (
    POSTS,
    article_notebook,
    notebook_json,
    site_link,
    with_download_button,
)
from steps.code_blocks import hanging_lines
from steps.feeds import FEEDS, with_feed_links, without_empty_image
from steps.figures import with_variants
from steps.notebook_styles import without_unused_css
from steps.notebooks import notebook_page
from steps.prepare import NOTEBOOKS, Prepared
from steps.staged_config import post_slug

NOT_PAGES = ("simple/", "assets/")  # the package index's HTML files, and the theme's
CONTENT = re.compile(r'<article class="md-content__inner md-typeset">')
NOTEBOOK_BUTTON = (
    '<a href="{name}" download title="Download this notebook" class="md-content__button md-icon">'
    "{icon}</a>"
)


def finish(
    site: Path,
    docs: Path,
    staged: Path,
    prepared: Prepared,
    *,
    snippets: Mapping[str, Any],
    icon: str,
) -> None:
    """Rewrite the site built at `site` from the staged docs of `docs` (the repository's docs/ folder).

    Args:
        site: the built site, rewritten in place.
        docs: the docs/ folder the staged copy was made from (the posts' and notebooks' sources).
        staged: the staged copy (`prepare()`), whose files the articles' notebooks link to.
        prepared: what `prepare()` returned: the placeholders' values (`site_url`, `qkv_wheel`) and the
            figures' sizes.
        snippets: the configuration of pymdownx.snippets, for the articles' notebooks.
        icon: the SVG of the download buttons' icon.

    Raises:
        ValueError: a TeX error, a figure of a notebook without alt text, an article's link to no file of
            the site, a page without Material's content element where a button goes, or without a head.
    """
    site_url = prepared.values["site_url"]
    notebooks = {f"{NOTEBOOKS}/{path.stem}/index.html": path for path in _notebooks(docs)}
    posts = {f"blog/{_slug(path)}/index.html": path for path in sorted(docs.glob(f"{POSTS}*.md"))}
    urls = _addresses(staged, site_url)
    mathjax.start()
    try:
        for page in sorted(site.rglob("*.html")):
            path = page.relative_to(site).as_posix()
            if path.startswith(NOT_PAGES):
                continue
            html = page.read_text(encoding="utf-8")
            html = with_variants(hanging_lines(html), prepared.sizes)
            html = mathjax.typeset_arithmatex(html, path)
            if path in notebooks:
                html = _notebook_page(html, notebooks[path], page.parent, icon)
            if path in posts:
                html = _article_page(html, posts[path], page.parent, urls, prepared, snippets, icon)
            html = with_feed_links(html, site_url, path)
            base = site_url + (path.removesuffix("index.html") if path != "404.html" else "")
            page.write_text(absolute_urls(html, base), encoding="utf-8")
    except BaseException:
        mathjax.stop()
        raise
    mathjax.write_assets(site)
    for feed in site.glob(FEEDS):
        feed.write_text(without_empty_image(feed.read_text(encoding="utf-8")), encoding="utf-8")


def _notebook_page(html: str, notebook: Path, folder: Path, icon: str) -> str:
    """A notebook's page with its Markdown cells' math typeset, without CDN loaders and unused CSS, and its
    notebook beside it behind a download button."""
    where = f"{NOTEBOOKS}/{notebook.name}"
    html = mathjax.typeset_dollars(html, where)
    html = without_unused_css(notebook_page(html, notebook.read_text(encoding="utf-8"), where))
    shutil.copyfile(notebook, folder / notebook.name)
    return _with_button(html, NOTEBOOK_BUTTON.format(name=notebook.name, icon=icon), where)


def _article_page(
    html: str,
    post: Path,
    folder: Path,
    urls: Mapping[str, str],
    prepared: Prepared,
    snippets: Mapping[str, Any],
    icon: str,
) -> str:
    """An article's page with its notebook beside it (`<slug>.ipynb`) behind a download button."""
    src_uri = f"{POSTS}{post.name}"
    notebook = article_notebook(
        post.read_text(encoding="utf-8"),
        snippets=snippets,
        link=functools.partial(site_link, page=src_uri, urls=urls),
        url=urls[src_uri],
        wheel_url=prepared.values["qkv_wheel"],
    )
    name = f"{_slug(post)}.ipynb"
    (folder / name).write_text(notebook_json(notebook), encoding="utf-8")
    button = with_download_button("", name, icon)
    return _with_button(html, button, src_uri)


def _with_button(html: str, button: str, where: str) -> str:
    """`button` first in the page's content (Material's `md-content__inner`), as the hooks put it.

    Raises:
        ValueError: the page has no such element.
    """
    found = CONTENT.search(html)
    if found is None:
        raise ValueError(
            f'{where}: no <article class="md-content__inner md-typeset"> for its button'
        )
    return html[: found.end()] + button + html[found.end() :]


def _notebooks(docs: Path) -> list[Path]:
    return sorted((docs / NOTEBOOKS).glob("*.ipynb"))


def _slug(post: Path) -> str:
    return post_slug(post.read_text(encoding="utf-8"), post.name)


def _addresses(staged: Path, site_url: str) -> dict[str, str]:
    """The address on the site of each file of the staged docs by its docs path: a post at `blog/<slug>/`,
    a page `x.md` at `x/` (`x/index.md` at `x/`), a notebook at `notebooks/<name>/`, any other file at its
    own path."""
    urls = {}
    for file in sorted(staged.rglob("*")):
        path = file.relative_to(staged).as_posix()
        stem = path.rsplit(".", 1)[0]
        if not file.is_file():
            continue
        if path.startswith(POSTS) and file.suffix == ".md":
            address = f"blog/{_slug(file)}/"
        elif stem == "index":
            address = ""
        elif stem.endswith("/index") and file.suffix == ".md":
            address = stem.removesuffix("index")
        elif file.suffix == ".md" or (path.startswith(f"{NOTEBOOKS}/") and file.suffix == ".ipynb"):
            address = f"{stem}/"
        else:
            address = path
        urls[path] = site_url + address
    return urls
