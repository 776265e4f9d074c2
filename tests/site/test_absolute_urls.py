"""docs/hooks/steps/absolute_urls.py on small pages, without a build. (That the built pages leave Material no URL to
rewrite is checked in Chromium: tests/browser/test_pages.py.)"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from tests.site.build import load_hook, load_step

step, hook = load_step("absolute_urls"), load_hook("absolute_urls")
SITE = "https://qkv.example.org/"
CONFIG = SimpleNamespace(site_url=SITE)
ARTICLE = SimpleNamespace(url="blog/masking/")


def _page(html: str) -> str:
    return step.absolute_urls(html, f"{SITE}blog/masking/")


@pytest.mark.parametrize(
    ("before", "after"),
    [
        (
            '<link rel="stylesheet" href="../../assets/a.css">',
            f'<link rel="stylesheet" href="{SITE}assets/a.css">',
        ),
        ('<script src="../../b.js"></script>', f'<script src="{SITE}b.js"></script>'),
        (
            '<img alt="A line" src="../../figures/a.svg" />',
            f'<img alt="A line" src="{SITE}figures/a.svg" />',
        ),
        ('<a href="../scaling/">next</a>', f'<a href="{SITE}blog/scaling/">next</a>'),
        (
            '<a href="masking.ipynb" download>',
            f'<a href="{SITE}blog/masking/masking.ipynb" download>',
        ),
        ('<a href="#keep">x</a>', f'<a href="{SITE}blog/masking/#keep">x</a>'),
        ('<a href="/assets/">x</a>', f'<a href="{SITE}assets/">x</a>'),
        ("<a href='../x/'>x</a>", f"<a href='{SITE}blog/x/'>x</a>"),
        ("<a href=../x/>x</a>", f"<a href={SITE}blog/x/>x</a>"),
        ('<a  HREF = "../x/" >x</a>', f'<a  HREF = "{SITE}blog/x/" >x</a>'),
        ('<a href="../x/?a=1&amp;b=2">x</a>', f'<a href="{SITE}blog/x/?a=1&amp;b=2">x</a>'),
        ('<a title="a > b" href="../x/">x</a>', f'<a title="a > b" href="{SITE}blog/x/">x</a>'),
    ],
)
def test_relative_urls_become_absolute(before: str, after: str) -> None:
    assert _page(before) == after


@pytest.mark.parametrize(
    "html",
    [
        '<a href="https://pytorch.org/docs/">torch</a>',
        '<link rel="preconnect" href="//fonts.example.org">',
        '<img alt="A plot" src="data:image/png;base64,iVBORw0KGgo=">',
        '<a href="mailto:team@example.org">mail</a>',
        '<a title="see href=&quot;x&quot;" class="a">x</a>',
        "<script>const link = '<a href=\"../x/\">';</script>",
        '<pre><code>&lt;a href="../x/"&gt;</code></pre>',
        '<svg viewBox="0 0 2 2"><use href="#dot"/><a href="#dot"></a></svg>',
    ],
)
def test_what_is_not_a_relative_url_of_an_html_element_is_left_alone(html: str) -> None:
    assert _page(html) == html


def test_the_rest_of_the_page_is_unchanged() -> None:
    html = (
        '<!doctype html>\n<html lang="en" class="no-js"><head>\n<link rel="icon" href="../../q.svg">\n</head>\n'
        '<body>\n<p>Text <a href="../a/">a</a>, <svg><use href="#i"/></svg> and <a href="../b/">b</a>.</p>\n'
        "</body></html>\n"
    )
    out = _page(html)
    assert out == html.replace("../../q.svg", f"{SITE}q.svg").replace(
        '"../a/', f'"{SITE}blog/a/'
    ).replace('"../b/', f'"{SITE}blog/b/')


def test_the_404_page_resolves_from_the_site_root() -> None:
    html = '<link rel="stylesheet" href="/assets/a.css"><a href="/">home</a>'
    out = hook.on_post_template(html, "404.html", CONFIG)
    assert out == f'<link rel="stylesheet" href="{SITE}assets/a.css"><a href="{SITE}">home</a>'
    sitemap = "<urlset><url><loc>https://qkv.example.org/</loc></url></urlset>"
    assert hook.on_post_template(sitemap, "sitemap.xml", CONFIG) == sitemap


def test_a_site_served_below_a_path_keeps_that_path() -> None:
    config = SimpleNamespace(site_url="https://example.org/qkv/")
    assert (
        hook.on_post_page('<a href="../../">home</a>', ARTICLE, config)
        == '<a href="https://example.org/qkv/">home</a>'
    )
    assert hook.on_post_template('<a href="/qkv/blog/">b</a>', "404.html", config) == (
        '<a href="https://example.org/qkv/blog/">b</a>'
    )
