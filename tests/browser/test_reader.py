"""A new reader, end to end: install `qkv` from the served site, then run what the pages show.

A fresh virtual environment gets nothing but `torch==2.13.0`, then `qkv` exactly as the Get started page
says (its install commands, read from the rendered page, which point at the served site): first the plain
package, then, for the articles whose front matter names `extras`, the command with every extra. Outside the
repository, in that environment:

- each article's Python blocks, as the copy button gives them (the text of the rendered `pre > code`), run
  in page order in one interpreter, and print what the page's output blocks show; an article that names no
  extra runs with the plain package, before the extras are installed;
- each block runs alone too, and the blocks that fail alone are exactly the ones whose title bar says they
  continue the block above;
- every notebook the site offers for download (each article's, and the playground) runs top to bottom.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest
from playwright.sync_api import Browser

from tests.browser.conftest import Site, posts
from tests.site.build import ROOT, load_hook

READER = Path(__file__).with_name("reader.py")
CONTINUES = "Continues the block above"  # docs/hooks/code_blocks.py
OUTPUT = "Output"
TORCH = "torch==2.13.0"
EXTRAS = "qkv[kernel,plots]"  # the Get started command that installs every page's needs
NOTEBOOK_RUNNER = ("ipykernel", "nbclient")  # what a reader who opens a notebook has: Jupyter
BLOCKS = """() => [...document.querySelectorAll(".md-content div.highlight")].map((box) => ({
  language: [...box.classList].find((name) => name.startsWith("language-")) || "",
  title: box.querySelector(":scope > .filename")?.textContent ?? null,
  code: box.querySelector("pre > code").textContent,
}))"""
DOWNLOADS = (
    """() => [...document.querySelectorAll('a[download][href$=".ipynb"]')].map((a) => a.href)"""
)


@dataclass(frozen=True)
class Block:
    """A runnable block of a page, as copied, and what the page says about it."""

    page: str
    number: int
    code: str
    output: str | None
    continues: bool

    def __str__(self) -> str:
        return f"/{self.page} block {self.number}"


def _reading_order() -> list[str]:
    """The articles' paths on the site, in the reading order (the hook that builds the navigation)."""
    order = load_hook("reading_order").reading_order(
        (ROOT / "docs" / "index.md").read_text(encoding="utf-8")
    )
    return [f"blog/{Path(source).stem}/" for source in order]  # post_url_format: "{slug}"


def _environment() -> dict[str, str]:
    """The reader's environment: this one without what the test suite sets for itself.

    pip is told not to byte-compile what it installs (`PIP_NO_COMPILE`): Python compiles each module when it
    is first imported anyway, and compiling all of torch's and Triton's files up front only costs the test time.
    """
    dropped = {"TRITON_INTERPRET", "PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME"}
    kept = {name: value for name, value in os.environ.items() if name not in dropped}
    return kept | {"PIP_NO_COMPILE": "1"}


def _run(command: list[str], cwd: Path, stdin: str | None = None) -> str:
    result = subprocess.run(
        command, cwd=cwd, input=stdin, capture_output=True, text=True, env=_environment()
    )
    if result.returncode != 0:
        pytest.fail(
            f"{shlex.join(command)} failed:\n{result.stdout[-3000:]}{result.stderr[-3000:]}"
        )
    return result.stdout


def _install_commands(browser: Browser, site: Site) -> dict[str, list[str]]:
    """The Get started commands that install qkv, plain and with every extra, as a reader copies them."""
    page = browser.new_page()
    page.goto(site.url + "get-started/")
    consoles = [b["code"] for b in page.evaluate(BLOCKS) if b["language"] == "language-console"]
    page.close()
    lines = "\n".join(consoles).replace("\\\n", " ").splitlines()  # continuation lines joined
    commands = [line.removeprefix("$ ").strip() for line in lines if line.startswith("$ ")]
    installs = [c for c in commands if c.startswith("python -m pip install ") and "qkv" in c]
    (plain,) = [c for c in installs if '"qkv @ ' in c]
    (extras,) = [c for c in installs if EXTRAS in c]
    assert len(installs) == 2, installs
    found = {"plain": shlex.split(plain), "extras": shlex.split(extras)}
    for command in found.values():
        assert site.url in " ".join(command), command
    return found


@pytest.fixture(scope="session")
def install_commands(site: Site, browser: Browser) -> dict[str, list[str]]:
    return _install_commands(browser, site)


@pytest.fixture(scope="session")
def reader(
    install_commands: dict[str, list[str]], tmp_path_factory: pytest.TempPathFactory
) -> Path:
    """The reader's working folder, outside the repository, with a fresh `venv/` and the plain package."""
    folder = tmp_path_factory.mktemp("reader")
    _run([sys.executable, "-m", "venv", "venv"], folder)
    python = str(folder / "venv" / "bin" / "python")
    _run([python, "-m", "pip", "install", "-q", TORCH], folder)
    _run([python, *install_commands["plain"][1:]], folder)
    _run([python, "-m", "pip", "install", "-q", *NOTEBOOK_RUNNER], folder)
    return folder


def _needs_extras(path: str) -> bool:
    (post,) = [post for post in posts() if post.path == path]
    return bool(post.meta.get("extras"))


def _run_articles(reader: Path, articles: dict[str, list[Block]]) -> dict[str, dict[str, list]]:
    """Each article's blocks in page order (one interpreter per article) and each alone: side by side."""
    with ThreadPoolExecutor(max_workers=os.cpu_count()) as pool:
        runs = {
            (mode, path): pool.submit(_results, reader, mode, found)
            for path, found in articles.items()
            for mode in ("in-order", "alone")
        }
        found = {"in-order": {}, "alone": {}}
        for (mode, path), run in runs.items():
            found[mode][path] = run.result()
        return found


@pytest.fixture(scope="session")
def plain_errors(reader: Path, articles: dict[str, list[Block]]) -> dict[str, dict[str, list]]:
    """The articles that name no extra, run with the plain package only (see `_run_articles`)."""
    plain = {path: found for path, found in articles.items() if not _needs_extras(path)}
    return _run_articles(reader, plain)


@pytest.fixture(scope="session")
def full_reader(reader: Path, install_commands: dict[str, list[str]], plain_errors: dict) -> Path:
    """The reader's folder once the plain articles have run and the extras are installed."""
    python = str(reader / "venv" / "bin" / "python")
    _run([python, *install_commands["extras"][1:]], reader)
    return reader


@pytest.fixture(scope="session")
def articles(site: Site, browser: Browser) -> dict[str, list[Block]]:
    """Each article's runnable blocks, in reading order, as the rendered page shows them."""
    found: dict[str, list[Block]] = {}
    page = browser.new_page()
    for path in _reading_order():
        page.goto(site.url + path)
        shown = page.evaluate(BLOCKS)
        blocks = []
        for index, box in enumerate(shown):
            runnable = box["language"] == "language-python" and box["title"] in (None, CONTINUES)
            if not runnable:
                continue
            after = shown[index + 1] if index + 1 < len(shown) else None
            output = after["code"] if after and after["title"] == OUTPUT else None
            blocks.append(
                Block(path, len(blocks) + 1, box["code"], output, box["title"] == CONTINUES)
            )
        found[path] = blocks
    page.close()
    assert all(found.values()), {path: len(blocks) for path, blocks in found.items()}
    return found


def _results(reader: Path, mode: str, blocks: list[Block]) -> list[str | None]:
    python = str(reader / "venv" / "bin" / "python")
    given = json.dumps([{"code": block.code, "output": block.output} for block in blocks])
    return json.loads(_run([python, str(READER), mode], reader, stdin=given))


def _blocks(articles: dict[str, list[Block]]) -> list[Block]:
    return [block for found in articles.values() for block in found]


@pytest.fixture(scope="session")
def errors(
    full_reader: Path, articles: dict[str, list[Block]], plain_errors: dict[str, dict[str, list]]
) -> dict[str, list[str | None]]:
    """What each block raised (None: it ran and printed what the page shows), in page order and alone.

    The articles that name no extra ran before the extras were installed; the others run now.
    """
    rest = {path: found for path, found in articles.items() if path not in plain_errors["alone"]}
    found = _run_articles(full_reader, rest)
    return {
        mode: [error for path in articles for error in (plain_errors[mode] | found[mode])[path]]
        for mode in ("in-order", "alone")
    }


def test_every_article_runs_in_order_as_copied(
    articles: dict[str, list[Block]], errors: dict[str, list[str | None]]
) -> None:
    problems = [
        f"{block}: {error}"
        for block, error in zip(_blocks(articles), errors["in-order"], strict=True)
        if error is not None
    ]
    assert not problems, "\n".join(problems)


def test_blocks_that_fail_alone_are_marked_as_continuations(
    articles: dict[str, list[Block]], errors: dict[str, list[str | None]]
) -> None:
    """A block runs alone, or its title says that it continues the one above.

    A marked block may still run alone when it only defines names that it uses later (a class whose
    methods read the page's constants): it is counted, not failed.
    """
    blocks = _blocks(articles)
    results = errors["alone"]
    unmarked = [
        f"{block}: {error}"
        for block, error in zip(blocks, results, strict=True)
        if error and not block.continues
    ]
    assert not unmarked, "\n".join(unmarked)
    alone = sum(
        error is None and not block.continues for block, error in zip(blocks, results, strict=True)
    )
    defining = sum(
        error is None and block.continues for block, error in zip(blocks, results, strict=True)
    )
    print(
        f"\nblocks that run alone: {alone}; marked as continuations: {len(blocks) - alone}"
        f" (of which {defining} only define names and run alone too)"
    )


def test_every_notebook_offered_runs(site: Site, browser: Browser, full_reader: Path) -> None:
    page = browser.new_page()
    links: list[str] = []
    for path in [*_reading_order(), "notebooks/playground/"]:
        page.goto(site.url + path)
        links += page.evaluate(DOWNLOADS)
    page.close()
    assert len(links) == len(_reading_order()) + 1, links
    jupyter = str(full_reader / "venv" / "bin" / "jupyter-execute")
    for link in links:
        notebook = full_reader / Path(link).name
        with urllib.request.urlopen(link) as response:
            notebook.write_bytes(response.read())
        _run([jupyter, "--timeout=600", notebook.name], full_reader)
    print(f"\nnotebooks run: {len(links)}")
