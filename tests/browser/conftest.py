"""Fixtures of the browser tests: the site built once and served on 127.0.0.1, every page visited once.

The site is the shared build of `tests.site.build.build_site` (`mkdocs build --strict`, kept in `build/`),
served by the main pytest process at the address it is built for (`pytest_configure`). The main process
starts the build in the background as the run begins, so that the tests that need no site run meanwhile; a
test that needs it waits for it (`site`). If the port is taken, the site is built first, for a free port.
With `QKV_SITE` set (`nox -s zensical`), the site is the one built there for `LOCAL_URL`
(`tests.site.build.ZENSICAL_SITE`), served as it is.
Under `pytest -n 2 --dist loadgroup` (as `nox -s tests` runs), the reader's run (`test_reader.py`,
`test_install.py`) is one group, kept to one worker; the pages are visited in `SHARDS` shards, each a group
of its own, so that both workers visit pages; every other browser test goes to whichever worker is free.
Each worker shares one headless Chromium (Debian's `chromium`) among its tests; a shard's pages are visited
one after another in one tab (`visit.visitor`, `visit.visit`), and the tests read the records.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from playwright.sync_api import Browser, sync_playwright

from tests.browser.visit import Visit, visit, visitor
from tests.site.build import (
    LOCAL_PORT,
    LOCAL_URL,
    ROOT,
    ZENSICAL_SITE,
    build_site,
    serve,
    site_folder,
)

HERE = Path(__file__).parent
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
PAGE_BUDGET_BYTES = 750_000  # heaviest page 693,591 on 2026-11-26 (the FlashAttention article)

SHARDS = 4  # the pages are visited in this many groups, side by side: page i in shard i % SHARDS

_visits: dict[str, Visit] = {}
_numbers: dict[str, tuple[int, int]] = {}  # path -> (bytes, formulas), from the xdist workers


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


SITE = "QKV_TEST_SITE"  # the folder and the address of the served site, for the xdist workers
_serving = pytest.StashKey[contextlib.ExitStack]()


def pytest_configure(config: pytest.Config) -> None:
    """Serve the site for the whole run, from the main process (the xdist workers inherit its address).

    The site is the one the site tests built for `LOCAL_URL`, served there, so that their build is reused;
    if that port is taken, it is built anew for a free port (the build needs the address first).
    """
    if hasattr(config, "workerinput"):  # an xdist worker: the main process serves
        return
    stack = config.stash[_serving] = contextlib.ExitStack()
    try:
        folder = ZENSICAL_SITE or site_folder(LOCAL_URL)
        url = stack.enter_context(serve(folder, port=LOCAL_PORT))
    except OSError:
        if ZENSICAL_SITE is not None:  # built for this port: it cannot be built for another
            stack.close()
            message = f"port {LOCAL_PORT} is taken: cannot serve {ZENSICAL_SITE}"
            raise pytest.UsageError(message) from None
        folder = Path(tempfile.mkdtemp(prefix="qkv-site-"))
        url = stack.enter_context(serve(folder))
        try:
            build_site(folder, site_url=url)
        except RuntimeError as error:
            stack.close()
            raise pytest.UsageError(str(error)) from None
    else:
        building = threading.Thread(target=_build_in_background)
        building.start()
        stack.callback(building.join)
    os.environ[SITE] = json.dumps([str(folder), url])


def _build_in_background() -> None:
    """The shared build; a failed one is left to the tests that need the site: they build again and report it."""
    with contextlib.suppress(RuntimeError):
        build_site()


def pytest_unconfigure(config: pytest.Config) -> None:
    if _serving in config.stash:
        config.stash[_serving].close()


# The reader's run is the longest group: it goes first, so that a worker takes it as soon as the browser tests
# start, its longest test first, so that pytest-xdist queues nothing behind it until it is nearly done.
FIRST = ("test_reader.py", "test_install.py")


@pytest.hookimpl(wrapper=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> Iterator[None]:
    """The groups that `pytest --dist loadgroup` keeps to one worker each (the reader's run, each shard of
    pages), marked before pytest-xdist reads them; then the reader's tests moved to the front of this wing."""
    mine = [index for index, item in enumerate(items) if HERE in item.path.parents]
    for index in mine:
        item = items[index]
        if item.path.name in FIRST:
            item.add_marker(pytest.mark.xdist_group("reader"))
        elif "visits" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.xdist_group(shard_group(item.callspec.params["visits"])))
    yield
    # `-k` and `-m` deselect inside the yield: the wing's items are found again in what is left
    mine = [index for index, item in enumerate(items) if HERE in item.path.parents]
    rank = {name: position for position, name in enumerate(FIRST)}
    ordered = sorted(
        (items[i] for i in mine), key=lambda item: rank.get(item.path.name, len(FIRST))
    )
    for index, item in zip(mine, ordered, strict=True):
        items[index] = item


def shard_group(shard: int) -> str:
    """The xdist group of the tests that read the visits of `shard`."""
    return f"pages-{shard}"


@pytest.fixture(scope="session")
def site() -> Site:
    """The site that `pytest_configure` serves, once it is built."""
    folder, url = json.loads(os.environ[SITE])
    if url == LOCAL_URL:
        build_site()  # the main process's build: wait until it is complete (or build, if none is running)
    return Site(Path(folder), url, _pages(Path(folder)))


@pytest.fixture(scope="session")
def browser() -> Iterator[Browser]:
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} not found: install Debian's chromium (apt-get install chromium)")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture(scope="session", params=range(SHARDS), ids=lambda shard: f"shard-{shard}")
def visits(request: pytest.FixtureRequest, site: Site, browser: Browser) -> list[Visit]:
    """The pages of one shard (`request.param`) of the site, each visited once."""
    records = []
    with visitor(browser, site.url) as tab:
        for page in shard_pages(site, request.param):
            _visits[page] = visit(tab, site.url, page)
            records.append(_visits[page])
    return records


def shard_pages(site: Site, shard: int) -> tuple[str, ...]:
    """The pages that `shard` visits: every `SHARDS`-th page of the site, from the `shard`-th."""
    return site.pages[shard::SHARDS]


def pytest_sessionfinish(session: pytest.Session) -> None:
    """In an xdist worker, hand the pages' numbers to the main process for the summary."""
    if hasattr(session.config, "workeroutput"):
        numbers = [[record.path, record.bytes, record.formulas] for record in _visits.values()]
        session.config.workeroutput["visits"] = json.dumps(numbers)


def pytest_testnodedown(node: object, error: object) -> None:
    """In the main process, collect the pages' numbers from each xdist worker as it finishes."""
    for path, size, formulas in json.loads(getattr(node, "workeroutput", {}).get("visits", "[]")):
        _numbers[path] = (size, formulas)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """The numbers for the record: pages visited, formulas typeset, page weights and the budget."""
    numbers = _numbers | {
        record.path: (record.bytes, record.formulas) for record in _visits.values()
    }
    if not numbers:
        return
    write = terminalreporter.write_line
    terminalreporter.section("site in the browser")
    for path, (size, formulas) in sorted(numbers.items(), key=lambda item: -item[1][0]):
        write(f"{size:>10,} B  {formulas:>4} formulas  /{path}")
    heaviest = max(numbers, key=lambda path: numbers[path][0])
    write(f"pages visited: {len(numbers)}")
    write(f"formulas typeset: {sum(formulas for _, formulas in numbers.values())}")
    write(
        f"heaviest page: /{heaviest} at {numbers[heaviest][0]:,} bytes "
        f"(budget {PAGE_BUDGET_BYTES:,} bytes per page)"
    )
