"""Build step: every article can be downloaded as a Jupyter notebook made from the same Markdown.

`article_notebook()` turns a post into a notebook with jupytext, which reads Markdown: each `python` fence
becomes a code cell, in page order (the blocks that pytest-codeblocks runs, so the notebook runs what the
tests run); everything else stays Markdown: expected output, console commands, math and prose. Before
jupytext reads the post, the HTML comments on lines of their own (pytest-codeblocks markers, the excerpt
separator, formatter switches) are dropped, and pymdownx.snippets, with the site's own settings, fills in
each snippet fence (`--8<-- "src/qkv/x.py:section"`). A fence with a file name (`python title="src/qkv/x.py"`,
which pytest-codeblocks does not run) shows package source that the article's code imports from `qkv`: it
goes into a jupytext region, so it stays a Markdown listing under the name of its file, not a code cell, and
the notebook never defines the package's functions a second time. Relative links and images become
absolute URLs of the site, since a downloaded notebook has no site around it. The first code cell installs
`qkv` from the site's package index when the reader's environment lacks it, with the extras the post's front
matter names (`extras: [kernel]`).

A collapsed admonition (`??? success "A solution"`, `??? question "Answer"`, `???+` for one shown open)
becomes an HTML `<details>` with its title as the summary, its body dedented, inside a jupytext region: the
answers and solutions of an article's exercises stay folded, and the Python fences inside them become
listings, not code cells. The notebook is the reader's exercise book, run top to bottom: its cells are the
starters, which `qkv.exercises.check` reports as not attempted yet, and a solution that ran as a cell would
overwrite the reader's function with the answer before the reader had tried. A listing inside `<details>`
keeps the solution one click away, as on the page, and offline, so the notebook needs no pointer back to the
site. (pytest-codeblocks still runs those fences on the page; jupytext leaves indented fences as Markdown
anyway, so without this step they would show as raw `???` lines and indented text.)

The build writes `<slug>.ipynb` next to each post's page and puts a download button at the top of the page.
"""

from __future__ import annotations

import json
import posixpath
import re
import textwrap
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import jupytext
import markdown as python_markdown
import nbformat
import yaml

POSTS = "blog/posts/"
COMMENT = re.compile(r"^ *<!--.*?-->[ \t]*\n", re.MULTILINE)  # a marker, `more`, `fmt:off`...
# A fence with a file name shows a file of the package: jupytext keeps a fence inside a region as Markdown.
LISTING = re.compile(
    r'^```(?:py|python) title="(?P<title>[^"]*)"\n(?P<body>.*?)^```$', re.MULTILINE | re.DOTALL
)
# A collapsed admonition and its body: the lines indented by four spaces, and blank lines, that follow it.
FOLD = re.compile(
    r'^\?\?\?(?P<open>\+?) +(?P<kind>[\w-]+)(?: +"(?P<title>[^"]*)")?[ \t]*\n'
    r"(?P<body>(?:(?: {4}.*)?\n)*)",
    re.MULTILINE,
)
LINK = re.compile(r"(?P<head>!?\[[^\]]*\]\()(?P<target>[^)\s]+)(?P<tail>[^)]*\))")
ABSOLUTE = re.compile(r"^([a-z][a-z0-9+.-]*:|#|/)")  # a scheme, an anchor on the page, a root path
ORIGIN = (
    "*Generated from the article at <{url}>: the same text and the same code, which the site's tests run. "
    "Run the cells in order; the first installs the `qkv` package from the site if it is missing.*"
)
INSTALL = """\
# Install qkv from the site if this environment lacks it: the file by its address and sha256
import importlib.util
import subprocess
import sys

if importlib.util.find_spec("qkv") is None:
    qkv = "{requirement} @ {wheel_url}"
    subprocess.check_call([sys.executable, "-m", "pip", "install", qkv])"""
KERNEL = {"display_name": "Python 3", "language": "python", "name": "python3"}


def article_notebook(
    markdown: str,
    *,
    snippets: Mapping[str, Any],
    link: Callable[[str], str] = lambda target: target,
    url: str | None = None,
    wheel_url: str | None = None,
) -> nbformat.NotebookNode:
    """The notebook of one article.

    Args:
        markdown: the post's source, front matter included.
        snippets: the configuration of pymdownx.snippets, as the site sets it (its `base_path` is where
            snippet paths start).
        link: maps a relative link target of the post (`masking.md#anchor`, `../../figures/x.svg`) to the
            URL the notebook should use.
        url: the article's address on the site, named in a first cell that says where the notebook comes
            from.
        wheel_url: the address of the site's wheel with its sha256 (`<site>packages/<wheel>#sha256=...`);
            when given, the first code cell installs `qkv` from it, with the front matter's `extras`, if
            the environment lacks the package (an address, never a name looked up on an index).

    Returns:
        A valid nbformat 4 notebook with deterministic cell ids.

    Raises:
        pymdownx.snippets.SnippetMissingError: a snippet whose file or section does not exist.
    """
    include = python_markdown.Markdown(
        extensions=["pymdownx.snippets"], extension_configs={"pymdownx.snippets": dict(snippets)}
    ).preprocessors["snippet"]
    text = "\n".join(include.run(COMMENT.sub("", markdown).split("\n")))
    read = jupytext.reads(FOLD.sub(_details, LISTING.sub(_listing, text)), fmt="md")
    cells: list[nbformat.NotebookNode] = []
    if url is not None:
        cells.append(nbformat.v4.new_markdown_cell(ORIGIN.format(url=url)))
    if wheel_url is not None:
        front_matter = next((c.source for c in read.cells if c.cell_type == "raw"), "")
        extras = ",".join((yaml.safe_load(front_matter.strip("-\n")) or {}).get("extras", []))
        requirement = f"qkv[{extras}]" if extras else "qkv"
        install = INSTALL.format(wheel_url=wheel_url, requirement=requirement)
        cells.append(nbformat.v4.new_code_cell(install))
    body: list[nbformat.NotebookNode] = []
    for cell in read.cells:
        if cell.cell_type == "code":
            body.append(nbformat.v4.new_code_cell(cell.source))
        elif cell.cell_type == "markdown":
            prose = LINK.sub(lambda found: _linked(found, link), cell.source)
            # jupytext splits prose at regions and at two blank lines: one cell between code cells
            if body and body[-1].cell_type == "markdown":
                body[-1].source += "\n\n" + prose
            else:
                body.append(nbformat.v4.new_markdown_cell(prose))
    notebook = nbformat.v4.new_notebook(
        cells=cells + body, metadata={"kernelspec": KERNEL, "language_info": {"name": "python"}}
    )
    for number, cell in enumerate(notebook.cells):
        cell.id = f"cell-{number}"
    nbformat.validate(notebook)
    return notebook


def _listing(fence: re.Match[str]) -> str:
    """A fence that shows a file of the package, as a Markdown listing under the file's name."""
    source = fence["body"].strip("\n")
    return f"<!-- #region -->\nFrom `{fence['title']}`:\n\n```python\n{source}\n```\n<!-- #endregion -->"


def _details(fold: re.Match[str]) -> str:
    """A collapsed admonition as a folded `<details>` that jupytext keeps as Markdown, fences included."""
    title = fold["title"] if fold["title"] is not None else fold["kind"].capitalize()
    body = textwrap.dedent(fold["body"]).strip("\n")
    opening = "<details open>" if fold["open"] else "<details>"
    return (
        f"<!-- #region -->\n{opening}\n<summary>{title}</summary>\n\n{body}\n\n</details>\n"
        "<!-- #endregion -->\n\n"
    )


def _linked(found: re.Match[str], link: Callable[[str], str]) -> str:
    """A Markdown link or image whose relative target is passed through `link`."""
    if ABSOLUTE.match(found["target"]):
        return found[0]
    return f"{found['head']}{link(found['target'])}{found['tail']}"


def site_link(target: str, *, page: str, urls: Mapping[str, str]) -> str:
    """The address of a relative link `target` of the page whose docs path is `page`.

    Args:
        target: as written in the page (`masking.md#anchor`, `../../figures/x.svg`).
        page: the page's path under docs/ (`blog/posts/x.md`).
        urls: the address on the site of each file, by its path under docs/.

    Raises:
        ValueError: the link names no file of the site.
    """
    path, _, anchor = target.partition("#")
    source = posixpath.normpath(posixpath.join(posixpath.dirname(page), path))
    if source not in urls:
        raise ValueError(f"{page}: no file {source} for the link {target!r}")
    return urls[source] + (f"#{anchor}" if anchor else "")


def rooted(base_path: list[str], root: Path) -> list[str]:
    """pymdownx.snippets' `base_path` with each relative path taken from `root` (mkdocs.yml's folder)."""
    return [str(root / path) for path in base_path]


def notebook_json(notebook: nbformat.NotebookNode) -> str:
    """The text of the notebook's `.ipynb` file."""
    return json.dumps(notebook, indent=1, ensure_ascii=False, sort_keys=True) + "\n"


def with_download_button(html: str, notebook_name: str, icon: str) -> str:
    """A page's content with a button at the top that downloads `notebook_name`, beside the page."""
    button = (
        f'<a href="{notebook_name}" download class="md-content__button md-icon" '
        f'title="Download this article as a Jupyter notebook" '
        f'aria-label="Download this article as a Jupyter notebook">{icon}</a>'
    )
    return button + html
