"""The notebook each article offers for download holds the article's code, in the article's order.

The notebooks are made by `docs/hooks/steps/article_notebooks.py` from the posts' Markdown, here without building
the site. Running them is the reader test's job (tests/browser/test_reader.py): it executes the notebooks the
built site serves, in a fresh environment that installed qkv from the site.
"""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
from mkdocs.config import load_config
from pymdownx.snippets import SnippetMissingError
from pytest_codeblocks.main import extract_from_file

from tests.site.build import load_step
from tests.site.markdown import parse_fences

ROOT = Path(__file__).resolve().parents[2]
POSTS = sorted((ROOT / "docs" / "blog" / "posts").glob("*.md"))


hook = load_step("article_notebooks")
article_notebook, FOLD = hook.article_notebook, hook.FOLD


@pytest.fixture(scope="module")
def snippets() -> dict[str, object]:
    """The site's settings of pymdownx.snippets, from mkdocs.yml."""
    return load_config(str(ROOT / "mkdocs.yml")).mdx_configs["pymdownx.snippets"]


def _code(notebook: nbformat.NotebookNode) -> list[str]:
    return [cell.source for cell in notebook.cells if cell.cell_type == "code"]


def _folded_lines(markdown: str) -> set[int]:
    """The line numbers (1-based) of the collapsed admonitions (`??? ...`) and their bodies."""
    lines = set()
    for fold in FOLD.finditer(markdown):
        first = markdown.count("\n", 0, fold.start()) + 1
        lines.update(range(first, first + fold[0].count("\n")))
    return lines


@pytest.mark.parametrize("post", POSTS, ids=[post.stem for post in POSTS])
def test_notebook_holds_the_code_the_docs_tests_run(
    post: Path, snippets: dict[str, object]
) -> None:
    text = post.read_text(encoding="utf-8")
    notebook = article_notebook(text, snippets=snippets, url="https://x/")
    blocks = [block.code for block in extract_from_file(post) if block.syntax == "python"]
    fences = [
        f for f in parse_fences(text) if f.syntax == "python" and f.joined != "expected-output"
    ]
    assert _code(notebook), f"{post.name} has no Python block"
    # pytest-codeblocks joins a `cont` block to the one before it; the notebook keeps them as cells.
    assert "".join(blocks).split() == "\n".join("\n".join(f.body) for f in fences).split()
    # except the blocks folded on the page (answers, solutions), which stay folded listings
    folded = _folded_lines(text)
    shown = ["\n".join(f.body) for f in fences if f.line not in folded]
    assert "\n".join(shown).split() == "\n".join(_code(notebook)).split()
    assert notebook.cells[0].source.startswith("*Generated from the article at <https://x/>")
    markdown = "\n".join(c.source for c in notebook.cells if c.cell_type == "markdown")
    assert "<!--" not in markdown
    assert "--8<--" not in markdown
    assert not markdown.startswith("---")


POST = """---
date: 2026-11-02
slug: example
---

# Example

Intro with $x$ and a [link](other.md#part), a [site](https://example.org/) and ![a figure](../../f.svg).

<!-- more -->

```python
x = 1
```

<!--pytest-codeblocks:cont-->
```python
print(x)
```

<!--pytest-codeblocks:expected-output-->
```text
1
```

<!-- fmt: off -->
```python title="src/pkg/mod.py"
--8<-- "src/pkg/mod.py:part"
```
<!-- fmt: on -->

```console
$ pip install qkv
```
"""

SOURCE = """def outside():
    pass


class Thing:
    # --8<-- [start:part]
    def inside(self):
        return 1
    # --8<-- [end:part]
"""


@pytest.fixture
def tmp_snippets(tmp_path: Path, snippets: dict[str, object]) -> dict[str, object]:
    """The site's snippet settings, with snippet paths starting at a folder that holds `SOURCE`."""
    (tmp_path / "src" / "pkg").mkdir(parents=True)
    (tmp_path / "src" / "pkg" / "mod.py").write_text(SOURCE, encoding="utf-8")
    return {**snippets, "base_path": [str(tmp_path)]}


def test_only_python_fences_become_code_cells(tmp_snippets: dict[str, object]) -> None:
    notebook = article_notebook(
        POST, snippets=tmp_snippets, link=lambda target: f"https://site/{target}"
    )
    kinds = [cell.cell_type for cell in notebook.cells]
    assert kinds == ["markdown", "code", "code", "markdown"]
    assert _code(notebook) == ["x = 1", "print(x)"]
    assert [cell.id for cell in notebook.cells] == ["cell-0", "cell-1", "cell-2", "cell-3"]
    intro, _, _, rest = (cell.source for cell in notebook.cells)
    assert intro.startswith("# Example")
    assert "[link](https://site/other.md#part)" in intro
    assert "[site](https://example.org/)" in intro
    assert "![a figure](https://site/../../f.svg)" in intro
    assert "<!--" not in intro + rest
    assert "date:" not in intro
    assert rest.startswith("```text\n1\n```")
    assert "```console\n$ pip install qkv\n```" in rest


FOLDED = """# Folds

```python
def f():
    ...
```

??? success "A solution"

    ```python
    def f():
        return 1
    ```

    <!--pytest-codeblocks:expected-output-->
    ```text
    1
    ```

    Said after the code.

???+ note

    Open from the start.

After the folds.
"""


def test_a_collapsed_admonition_becomes_a_folded_listing(tmp_snippets: dict[str, object]) -> None:
    notebook = article_notebook(FOLDED, snippets=tmp_snippets)
    assert _code(notebook) == ["def f():\n    ..."]  # the solution is not a cell
    (_, _, rest) = notebook.cells
    solution = (
        "<details>\n<summary>A solution</summary>\n\n```python\ndef f():\n    return 1\n```\n\n"
        "```text\n1\n```\n\nSaid after the code.\n\n</details>"
    )
    assert rest.source.startswith(solution)
    assert (
        "<details open>\n<summary>Note</summary>\n\nOpen from the start.\n\n</details>"
        in rest.source
    )
    assert rest.source.endswith("After the folds.")
    assert "???" not in rest.source
    assert "<!--" not in rest.source


def test_snippet_becomes_a_listing_of_the_included_source(tmp_snippets: dict[str, object]) -> None:
    rest = article_notebook(POST, snippets=tmp_snippets).cells[-1].source
    listing = "From `src/pkg/mod.py`:\n\n```python\ndef inside(self):\n    return 1\n```"
    assert listing in rest
    assert "outside" not in rest


@pytest.mark.parametrize(
    ("post", "message"),
    [
        (POST.replace("mod.py:part", "mod.py:missing"), "section 'missing' could not be located"),
        (POST.replace("src/pkg/mod.py:part", "src/pkg/gone.py:part"), "could not be found"),
    ],
    ids=["missing-section", "missing-file"],
)
def test_bad_snippet_raises(tmp_snippets: dict[str, object], post: str, message: str) -> None:
    with pytest.raises(SnippetMissingError, match=message):
        article_notebook(post, snippets=tmp_snippets)


def test_first_code_cell_installs_qkv_from_the_site_with_the_posts_extras(
    tmp_snippets: dict[str, object],
) -> None:
    post = POST.replace("slug: example\n", "slug: example\nextras: [kernel]\n")
    wheel = "https://site/packages/qkv-1.0-py3-none-any.whl#sha256=" + "0" * 64
    install = article_notebook(post, snippets=tmp_snippets, wheel_url=wheel).cells[0]
    assert install.cell_type == "code"
    assert f'qkv = "qkv[kernel] @ {wheel}"' in install.source
    assert "index" not in install.source  # never a name looked up on an index
    plain = article_notebook(POST, snippets=tmp_snippets, wheel_url=wheel).cells[0]
    assert f'qkv = "qkv @ {wheel}"' in plain.source


def test_a_relative_link_becomes_the_address_of_its_file() -> None:
    site_link = load_step("article_notebooks").site_link
    urls = {
        "blog/posts/masking.md": "https://x/blog/masking/",
        "figures/a.svg": "https://x/figures/a.svg",
    }
    page = "blog/posts/scaling.md"
    assert site_link("masking.md#mask", page=page, urls=urls) == "https://x/blog/masking/#mask"
    assert site_link("../../figures/a.svg", page=page, urls=urls) == "https://x/figures/a.svg"
    with pytest.raises(
        ValueError, match=r"scaling.md: no file blog/posts/gone.md for the link 'gone.md'"
    ):
        site_link("gone.md", page=page, urls=urls)


def test_the_notebook_file_keeps_its_characters_and_sorts_its_keys(
    tmp_snippets: dict[str, object],
) -> None:
    notebook_json = load_step("article_notebooks").notebook_json
    text = notebook_json(
        article_notebook(POST.replace("# Example", "# √d_k"), snippets=tmp_snippets)
    )
    assert text.startswith('{\n "cells": [\n  {\n   "cell_type": "markdown",\n')
    assert '"source": "# √d_k' in text
    assert text.endswith('"nbformat_minor": 5\n}\n')
    assert nbformat.reads(text, as_version=4).cells[0].source.startswith("# √d_k")


def test_the_download_button_comes_first_and_names_the_notebook() -> None:
    with_download_button = load_step("article_notebooks").with_download_button
    page = with_download_button("<h1>Masking</h1>", "masking.ipynb", "<svg></svg>")
    assert page.startswith('<a href="masking.ipynb" download class="md-content__button md-icon" ')
    assert page.endswith("><svg></svg></a><h1>Masking</h1>")
