"""Build step: each page names its links and assets by their full address, so Material need not.

With `navigation.instant`, Material's bundle starts on every page load by turning each relative `href` and `src`
of the page into an absolute URL (its `vi()` in 9.8.1: the page's links must survive being swapped into
another page's address). That is a few hundred attributes on a page, a `<link>` to each stylesheet among them,
which the browser then loads and applies again, and it restyles the page inside Material's start-up task, the
longest task of a page load. This step writes the same absolute URLs when the site is built, from `site_url`,
which instant navigation already needs to be the address the site is served from, so Material finds nothing
to rewrite. Lighthouse's blocking time (mobile; a 2-core machine; medians of 4 runs, alternating with a build
without this step): the masking article 244-303 -> 198 ms (two sets), the API reference 330-344 -> 271-280 ms,
the playground notebook 318 -> 214 ms.
"""

from __future__ import annotations

import re
from html.parser import HTMLParser
from urllib.parse import urljoin

# What Material leaves alone: an address with a host ("https://...", "//..."). Others with a scheme
# ("data:", "mailto:") are addresses already and are left alone here too.
ABSOLUTE = re.compile(r"^(?:[a-z]+:)?//", re.IGNORECASE)
SCHEME = re.compile(r"^[a-z][a-z0-9+.-]*:", re.IGNORECASE)
# The attributes Material rewrites.
URL_ATTRIBUTES = ("href", "src")
# One attribute of a start tag, its value (if any) whole: a quoted value cannot pass for an attribute.
ATTRIBUTE = re.compile(
    r"""\s+(?P<name>[^\s=/>]+)(?:\s*=\s*(?P<value>"[^"]*"|'[^']*'|[^\s"'=<>`]+))?"""
)


def absolute_urls(html: str, base: str) -> str:
    """`html` with each relative `href` and `src` of its elements resolved against the URL `base`."""
    pieces, end = [], 0
    for start, tag in _RelativeTags(html).found:
        pieces += [
            html[end:start],
            ATTRIBUTE.sub(lambda attribute: _absolute(attribute, base), tag),
        ]
        end = start + len(tag)
    return "".join(pieces) + html[end:]


def _relative(url: str | None) -> bool:
    return bool(url) and not ABSOLUTE.match(url) and not SCHEME.match(url)


def _absolute(attribute: re.Match, base: str) -> str:
    """One attribute of a tag, its URL made absolute if it is an `href` or `src` that holds a relative one."""
    value = attribute["value"]
    if attribute["name"].lower() not in URL_ATTRIBUTES or value is None:
        return attribute[0]
    quote = value[0] if value[0] in "\"'" else ""
    url = value[len(quote) : len(value) - len(quote)]
    if not _relative(url):
        return attribute[0]
    name_and_equals = attribute[0][: attribute.start("value") - attribute.start()]
    return f"{name_and_equals}{quote}{urljoin(base, url)}{quote}"


class _RelativeTags(HTMLParser):
    """The start tags of a page's HTML elements that hold a relative `href` or `src`, in order: (offset in the
    page, the tag's text). Not inside an inline `<svg>`, where `<use href="#id">` must stay a reference into
    the page itself."""

    def __init__(self, html: str) -> None:
        super().__init__(convert_charrefs=True)
        self.line_starts = [0] + [newline.end() for newline in re.finditer("\n", html)]
        self.svg_depth = 0
        self.found: list[tuple[int, str]] = []
        self.feed(html)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.svg_depth += tag == "svg"
        self.handle_startendtag(tag, attrs)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if self.svg_depth == 0 and any(
            name in URL_ATTRIBUTES and _relative(value) for name, value in attrs
        ):
            line, column = self.getpos()
            self.found.append((self.line_starts[line - 1] + column, self.get_starttag_text()))

    def handle_endtag(self, tag: str) -> None:
        self.svg_depth -= tag == "svg"
