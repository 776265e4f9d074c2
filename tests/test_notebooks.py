"""The notebook each article offers for download runs as it reads.

The notebooks are made by `docs/hooks/article_notebooks.py` from the posts' Markdown, here without building
the site, and executed top to bottom by nbclient in a `python3` kernel of this interpreter, from the
repository root (where pytest-codeblocks runs the same blocks). A cell whose block the docs tests skip under a
condition (`qkv.skipif`, e.g. "needs CUDA") is left out when that condition holds here.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import nbformat
import pytest
from jupyter_client.kernelspec import KernelSpecManager
from nbclient import NotebookClient
from pytest_codeblocks.main import extract_from_file

ROOT = Path(__file__).resolve().parent.parent
POSTS = sorted((ROOT / "docs" / "blog" / "posts").glob("*.md"))
CELL_TIMEOUT_S = 600


def _hook() -> ModuleType:
    path = ROOT / "docs" / "hooks" / "article_notebooks.py"
    spec = importlib.util.spec_from_file_location("qkv_hook_article_notebooks", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


article_notebook = _hook().article_notebook


def _code(notebook: nbformat.NotebookNode) -> list[str]:
    return [cell.source for cell in notebook.cells if cell.cell_type == "code"]


def _skipped_here(cell: nbformat.NotebookNode) -> bool:
    condition = cell.metadata.get("qkv", {}).get("skipif")
    return condition is not None and bool(eval(condition))  # the docs' own marker expression


@pytest.mark.parametrize("post", POSTS, ids=[post.stem for post in POSTS])
def test_notebook_holds_the_code_the_docs_tests_run(post: Path) -> None:
    notebook = article_notebook(post.read_text(encoding="utf-8"), root=ROOT, url="https://x/")
    blocks = [block.code for block in extract_from_file(post) if block.syntax == "python"]
    assert _code(notebook), f"{post.name} has no Python block"
    # pytest-codeblocks joins a `cont` block to the one before it; the notebook keeps them as cells.
    assert "".join(blocks).split() == "\n".join(_code(notebook)).split()
    assert notebook.cells[0].source.startswith("*Generated from the article at <https://x/>")
    markdown = "\n".join(c.source for c in notebook.cells if c.cell_type == "markdown")
    assert "<!--pytest" not in markdown
    assert "--8<--" not in markdown
    assert not markdown.startswith("---")


def test_kernel_runs_this_interpreter() -> None:
    argv = KernelSpecManager().get_kernel_spec("python3").argv
    # jupyter_client starts a spec whose command is plain `python` with sys.executable.
    assert argv[0] in ("python", "python3", sys.executable)


@pytest.mark.parametrize("post", POSTS, ids=[post.stem for post in POSTS])
def test_article_notebook_runs(post: Path) -> None:
    notebook = article_notebook(post.read_text(encoding="utf-8"), root=ROOT)
    notebook.cells = [cell for cell in notebook.cells if not _skipped_here(cell)]
    client = NotebookClient(
        notebook,
        kernel_name="python3",
        timeout=CELL_TIMEOUT_S,
        resources={"metadata": {"path": str(ROOT)}},
    )
    client.execute()  # raises CellExecutionError, naming the cell, on the first error
    errors = [
        output
        for cell in notebook.cells
        if cell.cell_type == "code"
        for output in cell.outputs
        if output.output_type == "error"
    ]
    assert not errors
    assert all(cell.execution_count for cell in notebook.cells if cell.cell_type == "code")
