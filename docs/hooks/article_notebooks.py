"""MkDocs hook: every article can be downloaded as a Jupyter notebook made from the same Markdown.

`article_notebook()` turns a post into a notebook: the front matter and the HTML comments on lines of their
own (pytest-codeblocks markers, the excerpt separator, formatter switches) are dropped; each fence whose info
string is exactly `python` becomes a code cell, in page order (the blocks that pytest-codeblocks runs, so the
notebook runs what the tests run). A block marked `pytest.mark.skipif(condition, ...)` keeps its condition in
the cell's metadata (`qkv.skipif`), for whoever runs the notebook unattended. Everything else stays Markdown:
expected output, console commands, math and prose. A snippet fence (`--8<-- "src/qkv/x.py:section"`) shows
package source that the article's code imports from `qkv`; it becomes a Markdown code listing with the source
filled in, not a code cell, so the notebook never defines the package's functions a second time. Relative
links and images become absolute URLs of the site, since a downloaded notebook has no site around it. The
first code cell installs `qkv` from the site's package index when the reader's environment lacks it, with the
extras the post's front matter names (`extras: [kernel]`).

The hook writes `<slug>.ipynb` next to each post's page and puts a download button at the top of the page.
"""

from __future__ import annotations

import json
import posixpath
import re
import textwrap
from collections.abc import Callable
from pathlib import Path

import nbformat
import yaml
from mkdocs.config.defaults import MkDocsConfig
from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File, Files
from mkdocs.structure.pages import Page

POSTS = "blog/posts/"
FRONT_MATTER = re.compile(r"\A---\n.*?\n---\n", re.DOTALL)
FENCE = re.compile(r"^(?P<indent> *)(?P<mark>`{3,}|~{3,})(?P<info>.*)$")
COMMENT = re.compile(r"^ *<!--\s*(?P<comment>.*?)\s*-->\s*$")  # a marker, `more`, `fmt: off`...
SKIPIF = re.compile(r"pytest\.mark\.skipif\((?P<condition>.*?),\s*reason=.*\)$")
SNIPPET = re.compile(r'^\s*--8<--\s+"(?P<path>[^":]+)(?::(?P<section>[a-z][-_0-9a-z]*))?"\s*$')
TITLE = re.compile(r'\btitle="(?P<title>[^"]*)"')
LINK = re.compile(r"(?P<head>!?\[[^\]]*\]\()(?P<target>[^)\s]+)(?P<tail>[^)]*\))")
ORIGIN = (
    "*Generated from the article at <{url}>: the same text and the same code, which the site's tests run. "
    "Run the cells in order; the first installs the `qkv` package from the site if it is missing.*"
)
INSTALL = """\
# Install qkv from the site's package index if this environment lacks it.
import importlib.util
import subprocess
import sys

if importlib.util.find_spec("qkv") is None:
    index = "{index_url}"
    pip = [sys.executable, "-m", "pip", "install", "--extra-index-url", index]
    subprocess.check_call([*pip, "{requirement}"])"""
LANGUAGES = {"py": "python"}  # highlighting names that Jupyter knows
KERNEL = {"display_name": "Python 3", "language": "python", "name": "python3"}


def article_notebook(
    markdown: str,
    *,
    root: Path,
    link: Callable[[str], str] = lambda target: target,
    url: str | None = None,
    index_url: str | None = None,
) -> nbformat.NotebookNode:
    """The notebook of one article.

    Args:
        markdown: the post's source, front matter included.
        root: the folder that snippet paths are relative to (the repository root).
        link: maps a relative link target of the post (`masking.md#anchor`, `../../figures/x.svg`) to the
            URL the notebook should use.
        url: the article's address on the site, named in a first cell that says where the notebook comes
            from.
        index_url: the site's package index (`<site>/simple/`); when given, the first code cell installs
            `qkv` from it, with the front matter's `extras`, if the environment lacks the package.

    Returns:
        A valid nbformat 4 notebook with deterministic cell ids.

    Raises:
        ValueError: an unclosed fence, or a snippet whose file or section does not exist.
    """
    front_matter = FRONT_MATTER.match(markdown)
    lines = markdown[front_matter.end() if front_matter else 0 :].splitlines()
    cells: list[nbformat.NotebookNode] = []
    if url is not None:
        cells.append(nbformat.v4.new_markdown_cell(ORIGIN.format(url=url)))
    if index_url is not None:
        meta = yaml.safe_load(front_matter[0].strip("-\n")) if front_matter else {}
        extras = ",".join((meta or {}).get("extras", []))
        requirement = f"qkv[{extras}]" if extras else "qkv"
        source = INSTALL.format(index_url=index_url, requirement=requirement)
        cells.append(nbformat.v4.new_code_cell(source))
    prose: list[str] = []
    markers: list[str] = []

    def add_markdown(text: str) -> None:
        text = text.strip("\n")
        if text.strip():
            cells.append(nbformat.v4.new_markdown_cell(LINK.sub(_linker(link), text)))

    index = 0
    while index < len(lines):
        line = lines[index]
        comment = COMMENT.match(line)
        fence = FENCE.match(line)
        if comment:
            markers.append(comment["comment"])
        elif fence:
            end = _closing_fence(lines, index, fence)
            body = textwrap.dedent("\n".join(lines[index + 1 : end]))
            info = fence["info"].strip()
            snippets = _snippets(body)
            if info == "python" and not snippets:
                add_markdown("\n".join(prose))
                prose = []
                cell = nbformat.v4.new_code_cell(body)
                conditions = [found["condition"] for m in markers if (found := SKIPIF.match(m))]
                if conditions:
                    cell.metadata["qkv"] = {"skipif": conditions[0]}
                cells.append(cell)
            elif snippets:
                title = TITLE.search(info)
                caption = f"From `{title['title']}`:\n\n" if title else ""
                source = "\n\n".join(_snippet(root, *snippet) for snippet in snippets)
                language = LANGUAGES.get(info.split()[0], info.split()[0]) if info else ""
                prose.append(f"{caption}```{language}\n{source}\n```")
            else:
                prose.extend(lines[index : end + 1])
            markers = []
            index = end
        else:
            prose.append(line)
            if line.strip():
                markers = []
        index += 1
    add_markdown("\n".join(prose))

    notebook = nbformat.v4.new_notebook(
        cells=cells, metadata={"kernelspec": KERNEL, "language_info": {"name": "python"}}
    )
    for number, cell in enumerate(notebook.cells):
        cell.id = f"cell-{number}"
    nbformat.validate(notebook)
    return notebook


def _closing_fence(lines: list[str], start: int, opening: re.Match[str]) -> int:
    """Index of the line that closes the fence opened at `start`."""
    close = re.compile(rf"^ *{re.escape(opening['mark'][0])}{{{len(opening['mark'])},}}\s*$")
    for end in range(start + 1, len(lines)):
        if close.match(lines[end]):
            return end
    raise ValueError(f"the fence opened on line {start + 1} is never closed")


def _snippets(body: str) -> list[tuple[str, str | None]]:
    """The (path, section) of each snippet a fence includes; none for ordinary code."""
    lines = [line for line in body.splitlines() if line.strip()]
    if not any(line.lstrip().startswith("--8<--") for line in lines):
        return []
    found = [SNIPPET.match(line) for line in lines]
    if not all(found):
        raise ValueError(
            f"a fence mixes code and snippet includes, or a form not handled: {body!r}"
        )
    return [(match["path"], match["section"]) for match in found]


def _snippet(root: Path, path: str, section: str | None) -> str:
    """The text pymdownx.snippets would include (`dedent_subsections: true`), without section markers."""
    file = root / path
    if not file.is_file():
        raise ValueError(f"snippet file not found: {path}")
    lines = file.read_text(encoding="utf-8").splitlines()
    if section is not None:
        starts = [i for i, line in enumerate(lines) if f"--8<-- [start:{section}]" in line]
        ends = [i for i, line in enumerate(lines) if f"--8<-- [end:{section}]" in line]
        if not starts or not ends or ends[0] < starts[0]:
            raise ValueError(f"snippet section not found: {path}:{section}")
        lines = lines[starts[0] + 1 : ends[0]]
    kept = [line for line in lines if not re.search(r"--8<-- \[(start|end):", line)]
    return textwrap.dedent("\n".join(kept)).strip("\n")


def _linker(link: Callable[[str], str]) -> Callable[[re.Match[str]], str]:
    """A `re.sub` replacement that passes relative link targets through `link`."""

    def replace(found: re.Match[str]) -> str:
        target = found["target"]
        if re.match(r"^([a-z][a-z0-9+.-]*:|#|/)", target):
            return found[0]
        return f"{found['head']}{link(target)}{found['tail']}"

    return replace


# --- the hook ----------------------------------------------------------------------------------------------


def on_page_content(html: str, page: Page, config: MkDocsConfig, files: Files) -> str:
    """Write the post's notebook next to its page and put a download button at the top of the page."""
    if not page.file.src_uri.startswith(POSTS) or not page.file.src_uri.endswith(".md"):
        return html
    folder = posixpath.dirname(page.file.dest_uri)  # where the page's index.html goes
    name = f"{page.meta.get('slug', page.file.name)}.ipynb"

    def link(target: str) -> str:
        path, _, anchor = target.partition("#")
        source = posixpath.normpath(posixpath.join(posixpath.dirname(page.file.src_uri), path))
        linked = files.get_file_from_path(source)
        if linked is None:
            raise PluginError(f"{page.file.src_uri}: no file {source} for the link {target!r}")
        return config.site_url + linked.url + (f"#{anchor}" if anchor else "")

    try:
        notebook = article_notebook(
            page.file.content_string,
            root=Path(config.config_file_path).parent,
            link=link,
            url=config.site_url + page.url,
            index_url=config.site_url + "simple/",
        )
    except ValueError as error:
        raise PluginError(f"{page.file.src_uri}: {error}") from error
    content = json.dumps(notebook, indent=1, ensure_ascii=False, sort_keys=True) + "\n"
    files.append(File.generated(config, posixpath.join(folder, name), content=content))
    icon = _icon(config, "material/download")
    button = (
        f'<a href="{name}" download class="md-content__button md-icon" '
        f'title="Download this article as a Jupyter notebook" '
        f'aria-label="Download this article as a Jupyter notebook">{icon}</a>'
    )
    return button + html


def _icon(config: MkDocsConfig, name: str) -> str:
    """An SVG icon shipped with the theme, as Material's templates include it."""
    for folder in config.theme.dirs:
        svg = Path(folder, ".icons", f"{name}.svg")
        if svg.is_file():
            return svg.read_text(encoding="utf-8").strip()
    raise PluginError(f"the theme has no icon {name}")
