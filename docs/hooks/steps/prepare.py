"""Build step before the generator: a staged copy of docs/ holding what the MkDocs hooks add to the pages.

A generator that runs no MkDocs hook (Zensical) builds the site from this copy instead of docs/ itself, whose
Markdown the tests read. `prepare()` writes, beside the copy of every file of docs/ but the hooks:

- the package index (`package_index.py`): `packages/` and `simple/`;
- the figures (`figures.py`): `figures/<name>.svg`, `figures/<name>-dark.svg` and each script's JSON data,
  without the scripts themselves;
- every Markdown page with its placeholders filled (`package_index.filled`), its marked blocks titled
  (`code_blocks.titled`) and, for a post, the checked-with note under its title
  (`code_blocks.with_checked_note`): the same functions, in the same order, as the hooks run them;
- each notebook of `notebooks/` executed and converted to HTML with nbconvert and mkdocs-jupyter's template
  (as the mkdocs-jupyter plugin does, without importing MkDocs), as a Markdown page `notebooks/<name>.md`
  beside the notebook.

What it returns (`Prepared`) is what `finish.py` needs after the generator: the placeholders' values and
the figures' sizes.
"""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
from pathlib import Path

from mkdocs_jupyter.nbconvert2 import nb2html  # nbconvert, the plugin's template: no MkDocs

from steps.code_blocks import POSTS, titled, with_checked_note
from steps.figures import data_of, draw_figures, scripts
from steps.package_index import filled, package_index

NOT_STAGED = ("hooks", "__pycache__", ".ipynb_checkpoints")  # build machinery and caches
NOTEBOOKS = "notebooks"
HEADING = re.compile(r"^#\s+(?P<title>.+?)\s*$", re.MULTILINE)


@dataclasses.dataclass(frozen=True)
class Prepared:
    """What the steps after the generator need to know of the staged docs.

    Attributes:
        values: the placeholders' values by name (`site_url`, `qkv_version`, `qkv_wheel`, `qkv_sdist`).
        sizes: each figure's (width, height) in CSS pixels, by its name.
    """

    values: dict[str, str]
    sizes: dict[str, tuple[int, int]]

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), indent=1, sort_keys=True) + "\n"

    @classmethod
    def from_json(cls, text: str) -> Prepared:
        data = json.loads(text)
        return cls(data["values"], {name: tuple(size) for name, size in data["sizes"].items()})


def prepare(root: Path, staged: Path, site_url: str, *, notebooks: bool = True) -> Prepared:
    """Write the staged docs folder of the repository at `root` into `staged`, for a site at `site_url`.

    Args:
        root: the repository (pyproject.toml and docs/).
        staged: the folder to write; what it held before is removed.
        site_url: the address the site will be served from, ending with `/`.
        notebooks: execute and convert the notebooks of `docs/notebooks/` (False: copy them only).

    Raises:
        ValueError: `site_url` does not end with `/`, `staged` is inside docs/, or a figure fails
            (`draw_figures`).
        RuntimeError: the package does not build, or a notebook's cell fails.
    """
    docs = root / "docs"
    if not site_url.endswith("/"):
        raise ValueError(f"site_url must end with '/': {site_url!r}")
    if staged.resolve().is_relative_to(docs.resolve()):
        raise ValueError(f"the staged folder {staged} must not be inside {docs}")
    if staged.exists():
        shutil.rmtree(staged)
    shutil.copytree(docs, staged, ignore=_not_staged)
    try:
        values, published = package_index(root, site_url)
    except Exception as error:
        raise RuntimeError(f"building the package failed: {error}") from error
    values = {"site_url": site_url} | values
    svgs, sizes = draw_figures(docs)
    data = {uri: content for script in scripts(docs) for uri, content in data_of(script).items()}
    for path, content in {**published, **svgs, **data}.items():
        _write(staged / path, content)
    for page in sorted(staged.rglob("*.md")):
        src_uri = page.relative_to(staged).as_posix()
        markdown = page.read_text(encoding="utf-8")
        page.write_text(staged_markdown(markdown, src_uri, values), encoding="utf-8")
    if notebooks:
        for notebook in sorted((staged / NOTEBOOKS).glob("*.ipynb")):
            _write(notebook.with_suffix(".md"), notebook_markdown(notebook))
    return Prepared(values, sizes)


def staged_markdown(markdown: str, src_uri: str, values: dict[str, str]) -> str:
    """A page's Markdown as the MkDocs hooks hand it on: placeholders filled, marked blocks titled, and for a
    post (`src_uri` under `blog/posts/`) the checked-with note under its title."""
    markdown = titled(filled(markdown, values))
    return (
        with_checked_note(markdown, values["qkv_version"])
        if src_uri.startswith(POSTS)
        else markdown
    )


def notebook_markdown(notebook: Path) -> str:
    """A notebook executed and converted to HTML as mkdocs-jupyter renders it, as a Markdown page whose
    title is the notebook's first heading.

    Raises:
        RuntimeError: a cell fails.
    """
    try:
        body = nb2html(str(notebook), execute=True, kernel_name="python3", allow_errors=False)
    except Exception as error:
        raise RuntimeError(f"{notebook.name}: running or converting failed: {error}") from error
    cells = json.loads(notebook.read_text(encoding="utf-8"))["cells"]
    sources = ("".join(cell["source"]) for cell in cells if cell["cell_type"] == "markdown")
    heading = next((found for source in sources if (found := HEADING.search(source))), None)
    title = heading["title"] if heading else notebook.stem
    return f"---\ntitle: {json.dumps(title)}\n---\n\n{body.strip()}\n"


def _not_staged(folder: str, names: list[str]) -> set[str]:
    """What `shutil.copytree` leaves out: the hooks and caches, and the figure scripts."""
    left_out = {name for name in names if name in NOT_STAGED}
    if Path(folder).name == "figures":
        left_out |= {name for name in names if name.endswith(".py")}
    return left_out


def _write(path: Path, content: bytes | str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(content, str):
        path.write_text(content, encoding="utf-8")
    else:
        path.write_bytes(content)
