"""What a reader does on the site: search, switch the palette, follow a link without a full reload."""

from __future__ import annotations

from collections.abc import Iterator
from urllib.parse import urlsplit

import pytest
from playwright.sync_api import Browser, Page

from tests.browser.conftest import Site, posts
from tests.browser.visit import DESKTOP, MATH_DONE, MATH_STATE, MATH_TIMEOUT_MS, PHONE
from tests.site.build import ZENSICAL_SITE

# On Zensical's build (nox -s zensical), what the search tests drive is not there (strict: it shows if it comes)
ZENSICAL_SEARCH = pytest.mark.xfail(
    ZENSICAL_SITE is not None,
    reason="Zensical 0.0.73's search is its own dialog, opened by a button, without Material's"
    " .md-search__input, and its index is search.json",
    strict=True,
)


@pytest.fixture
def page(browser: Browser, site: Site) -> Iterator[Page]:
    context = browser.new_context(viewport=DESKTOP, color_scheme="light")
    page = context.new_page()
    page.goto(site.url, wait_until="networkidle")
    yield page
    context.close()


def _articles_about(word: str) -> list[str]:
    """Titles of the articles whose title or tags contain `word`: search must find at least these."""
    return [
        post.title
        for post in posts()
        if word in post.title.lower() or any(word in tag.lower() for tag in post.meta["tags"])
    ]


@ZENSICAL_SEARCH
@pytest.mark.parametrize("word", ["softmax", "mask"])
def test_search_finds_the_articles(page: Page, word: str) -> None:
    expected = _articles_about(word)
    assert expected, f"no article has {word!r} in its title or tags"
    page.locator(".md-search__input").click()
    page.locator(".md-search__input").press_sequentially(word, delay=30)
    results = page.locator(".md-search-result__list")
    page.wait_for_function(
        "() => document.querySelectorAll('.md-search-result__item').length > 0", timeout=15_000
    )
    found = results.inner_text()
    missing = [title for title in expected if title not in found]
    assert not missing, f"search for {word!r} did not list {missing}; it listed:\n{found[:2000]}"


@ZENSICAL_SEARCH
@pytest.mark.parametrize(
    ("viewport", "opener"),
    [
        (DESKTOP, ".md-search__input"),
        (PHONE, 'label.md-header__button[for="__search"]'),
    ],
    ids=["desktop", "phone"],
)
def test_the_search_index_is_fetched_when_search_is_opened(
    browser: Browser, site: Site, viewport: dict[str, int], opener: str
) -> None:
    """docs/javascripts/search-on-demand.js: a page load does not fetch the index; opening search does."""
    page = browser.new_page(viewport=viewport)
    fetched: list[str] = []
    page.on(
        "request", lambda r: r.url.endswith("/search/search_index.json") and fetched.append(r.url)
    )
    page.goto(site.url + "blog/masking/", wait_until="networkidle")
    at_load = list(fetched)
    page.locator(opener).click()
    page.locator(".md-search__input").press_sequentially("softmax", delay=30)
    page.wait_for_function(
        "() => document.querySelectorAll('.md-search-result__item').length > 0", timeout=15_000
    )
    page.close()
    assert at_load == []
    assert len(fetched) == 1


def test_a_page_opened_from_a_search_result_highlights_the_words(
    browser: Browser, site: Site
) -> None:
    """Material's search.highlight needs the index at load when the address holds `?h=`."""
    page = browser.new_page()
    page.goto(site.url + "blog/masking/?h=softmax", wait_until="networkidle")
    page.wait_for_function(
        "() => document.querySelectorAll('.md-content mark').length > 0", timeout=15_000
    )
    marked = page.locator(".md-content mark").first.inner_text()
    page.close()
    assert marked.lower() == "softmax"


def _scheme(page: Page) -> tuple[str, str]:
    scheme, background = page.evaluate(
        "() => [document.body.dataset.mdColorScheme, getComputedStyle(document.body).backgroundColor]"
    )
    return scheme, background


def _toggle_until(page: Page, scheme: str) -> tuple[str, str]:
    """Click the palette toggle (it cycles system -> light -> dark) until `scheme`, at most three times."""
    for _ in range(3):
        page.locator("[data-qkv-palette] label:not([hidden])").click()
        if _scheme(page)[0] == scheme:
            break
    return _scheme(page)


def _browser_bar(page: Page) -> tuple[str, str]:
    """The theme-color meta (the phone browser's bar) and the header's background, once the page is idle."""
    page.wait_for_function("() => document.querySelector('meta[name=theme-color]')?.content")
    return page.evaluate(
        "() => [document.querySelector('meta[name=theme-color]').content,"
        " getComputedStyle(document.querySelector('.md-header')).backgroundColor]"
    )


def test_palette_toggle_switches_to_dark_and_back(page: Page) -> None:
    light_scheme, light_background = _scheme(page)
    assert light_scheme == "default"
    bar, header = _browser_bar(page)
    assert bar == header
    dark_scheme, dark_background = _toggle_until(page, "slate")
    assert dark_scheme == "slate"
    assert dark_background != light_background
    assert (
        page.evaluate("() => document.querySelector('meta[name=color-scheme]').content") == "dark"
    )
    page.reload()
    assert _scheme(page) == (dark_scheme, dark_background), "the choice did not outlive a reload"
    assert _toggle_until(page, "default") == (light_scheme, light_background)


def test_the_palette_toggle_answers_the_enter_key(page: Page) -> None:
    shown = "[data-qkv-palette] label:not([hidden])"
    before = page.locator(shown).get_attribute("title")
    page.locator("[data-qkv-palette] input:checked").focus()
    page.keyboard.press("Enter")
    assert page.locator(shown).count() == 1
    assert page.locator(shown).get_attribute("title") != before


# Every change to the palette's attributes on <body>, and whether the article had been parsed by then.
WATCH_PALETTE = """
window.qkvPalette = [];
new MutationObserver((changes) => {
  for (const change of changes)
    if (change.target === document.body && change.attributeName.startsWith("data-md-color"))
      window.qkvPalette.push([change.attributeName, document.querySelector(".md-content") !== null]);
}).observe(document, { attributes: true, subtree: true });
"""


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_the_palette_is_set_before_the_article_is_parsed(
    browser: Browser, site: Site, scheme: str
) -> None:
    """Setting it later restyles the whole page (Material's component did, three times: half the blocking
    time of the longest articles); the reader's system preference decides it on a first visit."""
    context = browser.new_context(viewport=DESKTOP, color_scheme=scheme)
    page = context.new_page()
    page.add_init_script(WATCH_PALETTE)
    page.goto(site.url + posts()[0].path, wait_until="networkidle")
    changes = page.evaluate("window.qkvPalette")
    scheme_on_body = _scheme(page)[0]
    context.close()
    assert [name for name, late in changes if late] == []
    assert scheme_on_body == {"light": "default", "dark": "slate"}[scheme]


def test_instant_navigation_typesets_the_next_page(page: Page, site: Site) -> None:
    errors: list[str] = []
    page.on("console", lambda message: message.type == "error" and errors.append(message.text))
    page.evaluate("() => { window.qkvSamePage = true; }")
    post = posts()[0]
    page.locator(f'.md-content a[href$="{post.path}"]').first.click()
    page.wait_for_url(lambda url: urlsplit(url).path == f"/{post.path}")
    page.wait_for_function(MATH_DONE, timeout=MATH_TIMEOUT_MS)
    math = page.evaluate(MATH_STATE)
    assert page.evaluate("() => window.qkvSamePage === true"), "the link reloaded the whole page"
    assert math["formulas"] > 0
    assert math["nested"] == 0
    assert not errors
