"""Fixtures of the browser tests: the site built once, served on 127.0.0.1, and every page visited once.

The site is the one the site tests built (`tests.site.build.build_site`, `mkdocs build --strict`, shared
through `build/`), served at the address it was built for; if that port is taken, it is built anew for a free
port. One headless Chromium (Debian's `chromium`) is shared by all tests;
each page is visited in its own context by `visit.visit`, and the tests read the records.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from playwright.sync_api import Browser, sync_playwright

from tests.browser.visit import Visit, visit
from tests.site.build import LOCAL_PORT, LOCAL_URL, ROOT, build_site, serve, site_folder

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
# Bytes a reader's browser downloads on a first visit to any one page (response bodies, uncompressed, cold
# cache). Math is typeset when the site is built: pages load MathJax's stylesheet and the fonts they use.
PAGE_BUDGET_BYTES = 750_000  # heaviest page 682,485 on 2026-11-24 (the scaling article)

_visits: dict[str, Visit] = {}


@dataclass(frozen=True)
class Site:
    """The built site: where it lies, where it is served, and its pages as paths relative to the root."""

    folder: Path
    url: str
    pages: tuple[str, ...]


@dataclass(frozen=True)
class Post:
    """An article as its Markdown source states it."""

    slug: str
    title: str
    meta: dict

    @property
    def path(self) -> str:
        """Its page, relative to the site's root (`post_url_format: "{slug}"`)."""
        return f"blog/{self.slug}/"


def posts() -> list[Post]:
    """Every article in docs/blog/posts/, from its front matter and its `# Title` line."""
    found = []
    for source in sorted((ROOT / "docs" / "blog" / "posts").glob("*.md")):
        _, front_matter, body = source.read_text(encoding="utf-8").split("---\n", 2)
        meta = yaml.safe_load(front_matter)
        title = re.search(r"^# (.+)$", body, re.MULTILINE)[1].strip()
        found.append(Post(meta.get("slug", source.stem), title, meta))
    return found


def _pages(folder: Path) -> tuple[str, ...]:
    """Every HTML page of the built site, as the path a browser asks for.

    Theme assets and the package index under `simple/` (pages for pip, not for readers) are left out.
    """
    pages = []
    for html in sorted(folder.rglob("*.html")):
        relative = html.relative_to(folder)
        if relative.parts[0] in ("assets", "simple"):
            continue
        pages.append(
            relative.parent.as_posix() + "/" if html.name == "index.html" else str(relative)
        )
    return tuple("" if page == "./" else page for page in pages)


@pytest.fixture(scope="session")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    """The site served where the site tests built it (`LOCAL_URL`), so that their build is reused.

    If that port is taken, the site is built anew for a free port (the build needs the address first).
    """
    with contextlib.ExitStack() as stack:
        try:
            folder = site_folder(LOCAL_URL)
            url = stack.enter_context(serve(folder, port=LOCAL_PORT))
        except OSError:
            folder = tmp_path_factory.mktemp("site")
            url = stack.enter_context(serve(folder))
        try:
            folder = build_site(None if url == LOCAL_URL else folder, site_url=url)
        except RuntimeError as error:
            pytest.fail(str(error))
        yield Site(folder, url, _pages(folder))


@pytest.fixture(scope="session")
def browser() -> Iterator[Browser]:
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} not found: install Debian's chromium (apt-get install chromium)")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture(scope="session")
def visits(site: Site, browser: Browser) -> list[Visit]:
    """Every page of the site, visited once."""
    for page in site.pages:
        _visits[page] = visit(browser, site.url, page)
    return list(_visits.values())


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """The numbers for the record: pages visited, formulas typeset, page weights and the budget."""
    if not _visits:
        return
    write = terminalreporter.write_line
    terminalreporter.section("site in the browser")
    for record in sorted(_visits.values(), key=lambda record: -record.bytes):
        write(f"{record.bytes:>10,} B  {record.formulas:>4} formulas  /{record.path}")
    heaviest = max(_visits.values(), key=lambda record: record.bytes)
    write(f"pages visited: {len(_visits)}")
    write(f"formulas typeset: {sum(record.formulas for record in _visits.values())}")
    write(
        f"heaviest page: /{heaviest.path} at {heaviest.bytes:,} bytes "
        f"(budget {PAGE_BUDGET_BYTES:,} bytes per page)"
    )
