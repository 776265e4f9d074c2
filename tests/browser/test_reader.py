"""A new reader, end to end: install `qkv` from the served site, then run what the pages show.

A fresh virtual environment gets nothing but `torch==2.13.0`, then `qkv` exactly as the Get started page
says (its install commands, read from the rendered page, which point at the served site): first the plain
package and Jupyter, then, for the articles whose front matter names `extras`, the command with every extra.
Outside the repository, in that environment:

- each article's notebook, downloaded from its page, runs top to bottom; its code cells are the page's blocks
  in page order, as the copy button gives them (the text of the rendered `pre > code`), and each prints what
  the page's output block below it shows. This is a reader pasting the page into one Python session;
- the playground notebook runs top to bottom.

An article that names no extra runs with the plain package, before the extras are installed. Blocks folded
away in a collapsed admonition (a solution, say) are not notebook cells.

Each block alone is pytest-codeblocks' run (`pytest --codeblocks`, in the same test run): every block whose
title does not say that it continues the one above runs there in a namespace of its own and prints what the
page shows, folded blocks included. Running them alone here again would only change the interpreter, which
the notebooks already exercise.
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
from tests.site.build import ROOT, load_step

CONTINUES = "Continues the block above"  # docs/hooks/steps/code_blocks.py
OUTPUT = "Output"
TORCH = "torch==2.13.0"
EXTRAS = "qkv[kernel,plots,hf]"  # the Get started command that installs every page's needs
NOTEBOOK_RUNNER = ("ipykernel", "nbclient")  # what a reader who opens a notebook has: Jupyter
BLOCKS = """() => [...document.querySelectorAll(".md-content div.highlight")].map((box) => ({
  language: [...box.classList].find((name) => name.startsWith("language-")) || "",
  title: box.querySelector(":scope > .filename")?.textContent ?? null,
  code: box.querySelector("pre > code").textContent,
  folded: box.closest("details") !== null,
}))"""
PLAYGROUND = "notebooks/playground/"
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
    folded: bool  # inside a collapsed admonition: not a cell of the page's notebook

    def __str__(self) -> str:
        return f"/{self.page} block {self.number}"


def _reading_order() -> list[str]:
    """The articles' paths on the site, in the reading order (the hook that builds the navigation)."""
    order = load_step("reading_order").reading_order(
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
def reader_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The reader's working folder, outside the repository, with a fresh `venv/`: torch and Jupyter only.

    Nothing here needs the site, so it is set up while the site is still being built.
    """
    folder = tmp_path_factory.mktemp("reader")
    _run([sys.executable, "-m", "venv", "venv"], folder)
    python = str(folder / "venv" / "bin" / "python")
    _run([python, "-m", "pip", "install", "-q", TORCH, *NOTEBOOK_RUNNER], folder)
    return folder


@pytest.fixture(scope="session")
def reader(reader_python: Path, install_commands: dict[str, list[str]]) -> Path:
    """The reader's folder once the plain package is installed from the site."""
    python = str(reader_python / "venv" / "bin" / "python")
    _run([python, *install_commands["plain"][1:]], reader_python)
    return reader_python


def _needs_extras(path: str) -> bool:
    (post,) = [post for post in posts() if post.path == path]
    return bool(post.meta.get("extras"))


@dataclass(frozen=True)
class Article:
    """An article as the rendered page shows it: its runnable blocks, in page order, and its notebook."""

    path: str
    blocks: list[Block]
    notebook: str  # the address of the notebook its download button offers


@dataclass(frozen=True)
class Cell:
    """A code cell of a notebook that ran: its source, what it printed, and the error it raised, if any."""

    source: str
    printed: str
    error: str | None


@pytest.fixture(scope="session")
def articles(site: Site, browser: Browser) -> dict[str, Article]:
    """Each article as the rendered page shows it, in reading order."""
    found: dict[str, Article] = {}
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
            blocks.append(Block(path, len(blocks) + 1, box["code"], output, box["folded"]))
        (notebook,) = page.evaluate(DOWNLOADS)
        found[path] = Article(path, blocks, notebook)
    page.close()
    assert all(article.blocks for article in found.values()), found.keys()
    return found


def _notebook(reader: Path, url: str) -> list[Cell]:
    """Download the notebook at `url` into the reader's folder, run it top to bottom, and read its code cells.

    Jupyter runs on past a failing cell (`--allow-errors`) so that every failure is reported, not the first.
    """
    notebook = reader / Path(url).name
    with urllib.request.urlopen(url) as response:
        notebook.write_bytes(response.read())
    jupyter = str(reader / "venv" / "bin" / "jupyter-execute")
    _run([jupyter, "--timeout=600", "--allow-errors", "--inplace", notebook.name], reader)
    cells = []
    for cell in json.loads(notebook.read_text(encoding="utf-8"))["cells"]:
        if cell["cell_type"] != "code":
            continue
        outputs = cell["outputs"]
        printed = "".join("".join(out["text"]) for out in outputs if out.get("name") == "stdout")
        errors = [
            f"{out['ename']}: {out['evalue']}" for out in outputs if out["output_type"] == "error"
        ]
        cells.append(Cell("".join(cell["source"]), printed, errors[0] if errors else None))
    return cells


def _run_articles(reader: Path, articles: list[Article]) -> dict[str, list[Cell]]:
    """Each article's notebook, run top to bottom, side by side: its code cells, by article."""
    with ThreadPoolExecutor(max_workers=os.cpu_count()) as pool:
        cells = {a.path: pool.submit(_notebook, reader, a.notebook) for a in articles}
        return {path: future.result() for path, future in cells.items()}


@pytest.fixture(scope="session")
def plain_runs(reader: Path, articles: dict[str, Article]) -> dict[str, list[Cell]]:
    """The articles that name no extra, run with the plain package only (see `_run_articles`)."""
    return _run_articles(reader, [a for path, a in articles.items() if not _needs_extras(path)])


@pytest.fixture(scope="session")
def full_reader(
    reader: Path, install_commands: dict[str, list[str]], plain_runs: dict[str, list[Cell]]
) -> Path:
    """The reader's folder once the plain articles have run and the extras are installed."""
    python = str(reader / "venv" / "bin" / "python")
    _run([python, *install_commands["extras"][1:]], reader)
    return reader


@pytest.fixture(scope="session")
def runs(
    full_reader: Path, articles: dict[str, Article], plain_runs: dict[str, list[Cell]]
) -> dict[str, list[Cell]]:
    """Every article's run, in reading order: the articles that name an extra run now, with the extras."""
    rest = _run_articles(full_reader, [a for path, a in articles.items() if path not in plain_runs])
    return {path: (plain_runs | rest)[path] for path in articles}


def _in_order(article: Article, cells: list[Cell]) -> list[str]:
    """What differs between the page, read top to bottom, and its notebook's run."""
    install, *cells = cells
    if not install.source.startswith("# Install qkv"):
        return [
            f"/{article.path}: the notebook's first cell does not install qkv: {install.source[:60]!r}"
        ]
    shown = [block for block in article.blocks if not block.folded]
    sources = [cell.source.rstrip("\n") for cell in cells]
    if sources != [block.code.rstrip("\n") for block in shown]:
        return [
            f"/{article.path}: the notebook's {len(cells)} cells are not the page's {len(shown)} blocks"
        ]
    problems = []
    for block, cell in zip(shown, cells, strict=True):
        if cell.error is not None:
            problems.append(f"{block}: {cell.error}")
        elif block.output is not None and cell.printed != block.output:
            problems.append(f"{block}: printed {cell.printed!r}, the page shows {block.output!r}")
    return problems


def test_every_article_runs_in_order_as_copied(
    articles: dict[str, Article], runs: dict[str, list[Cell]]
) -> None:
    problems = [p for path, cells in runs.items() for p in _in_order(articles[path], cells)]
    assert not problems, "\n".join(problems)


def test_every_notebook_offered_runs(
    site: Site, browser: Browser, full_reader: Path, articles: dict[str, Article], runs: dict
) -> None:
    """The articles' notebooks ran (above); the playground's too, and no page offers another."""
    page = browser.new_page()
    links: list[str] = []
    for path in [*_reading_order(), PLAYGROUND]:
        page.goto(site.url + path)
        links += page.evaluate(DOWNLOADS)
    page.close()
    playground = [link for link in links if link not in {a.notebook for a in articles.values()}]
    assert len(playground) == 1, links
    errors = [cell.error for cell in _notebook(full_reader, playground[0]) if cell.error]
    assert not errors, errors
    print(f"\nnotebooks run: {len(runs) + len(playground)}")
