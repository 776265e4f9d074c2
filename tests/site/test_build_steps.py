"""The build steps around a generator (docs/hooks/steps/prepare.py and finish.py) on a small project, and
the MkDocs hooks as adapters over the same functions, without a build."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import markdown as python_markdown
import pytest
import yaml
from mkdocs.config.defaults import MkDocsConfig

from tests.site.build import ROOT, load_hook, load_step

SITE = "https://qkv.example.org/"
HOOKS = ROOT / "docs" / "hooks"
PYPROJECT = """\
[build-system]
requires = ["hatchling"]
build-backend = "hatchling.build"

[project]
name = "qkv"
version = "9.8.7"
requires-python = ">=3.11"

[tool.hatch.build.targets.wheel]
packages = ["src/qkv"]
"""
POST = """\
---
date: 2026-01-01
slug: a-post
---

# A post

Installed from `{{ qkv_wheel }}`; see [the home page](../../index.md) and ![a line](../../figures/a-line.svg).

<!-- more -->

```python
x = 1
```

<!--pytest-codeblocks:cont-->
```python
print(x + 1)
```
"""
FIGURE = """\
from matplotlib.figure import Figure

def line():
    fig = Figure(figsize=(2, 1))
    fig.add_subplot().plot([0, 1], [1, 0])
    return fig

FIGURES = {"a-line": line}
DATA = {"a-line-data": lambda: [1, 2]}
"""
NOTEBOOK = {
    "cells": [
        {"cell_type": "markdown", "id": "m", "metadata": {}, "source": ["# Tiny\n", "\n", "$x_i$"]},
        {
            "cell_type": "code",
            "execution_count": None,
            "id": "c",
            "metadata": {},
            "outputs": [],
            "source": ["print(6 * 7)"],
        },
    ],
    "metadata": {
        "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"}
    },
    "nbformat": 4,
    "nbformat_minor": 5,
}
ARTICLE = '<article class="md-content__inner md-typeset">'


def _project(root: Path) -> Path:
    """A repository with a package, a home page, a post, a figure script, a notebook and a hook."""
    files = {
        "pyproject.toml": PYPROJECT,
        "src/qkv/__init__.py": '"""A stand-in."""\n',
        "docs/index.md": "# Home\n\nVersion {{ qkv_version }} at {{ site_url }}.\n",
        "docs/blog/posts/a-post.md": POST,
        "docs/figures/lines.py": FIGURE,
        "docs/notebooks/tiny.ipynb": json.dumps(NOTEBOOK),
        "docs/hooks/some_hook.py": "def on_config(config):\n    return config\n",
    }
    for path, text in files.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text, encoding="utf-8")
    return root


@pytest.fixture(scope="module")
def prepared(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, object]:
    """The small project and what `prepare` made of it (in `<root>/staged`)."""
    root = _project(tmp_path_factory.mktemp("project"))
    return root, load_step("prepare").prepare(root, root / "staged", SITE)


def test_prepare_stages_what_the_hooks_add(prepared: tuple[Path, object]) -> None:
    root, result = prepared
    staged = root / "staged"
    assert result.values["site_url"] == SITE
    assert result.values["qkv_version"] == "9.8.7"
    assert result.sizes == {"a-line": (192, 96)}
    assert (staged / "packages" / "qkv-9.8.7-py3-none-any.whl").is_file()
    assert (staged / "simple" / "qkv" / "index.html").is_file()
    for name in ("a-line.svg", "a-line-dark.svg"):
        assert (staged / "figures" / name).read_bytes().startswith(b"<?xml")
    assert json.loads((staged / "figures" / "a-line-data.json").read_text()) == [1, 2]
    assert not (staged / "figures" / "lines.py").exists()
    assert not (staged / "hooks").exists()
    assert (staged / "index.md").read_text() == f"# Home\n\nVersion 9.8.7 at {SITE}.\n"
    post = (staged / "blog" / "posts" / "a-post.md").read_text()
    assert f"Installed from `{result.values['qkv_wheel']}`" in post
    assert '```python title="Continues the block above"' in post
    assert re.search(r"^# A post\n\nTo run this page's code, \[install `qkv`\]", post, re.M)
    assert "{{" in (root / "docs" / "blog" / "posts" / "a-post.md").read_text()  # docs/ untouched


def test_prepare_converts_each_notebook_into_a_page(prepared: tuple[Path, object]) -> None:
    root, _ = prepared
    page = (root / "staged" / "notebooks" / "tiny.md").read_text()
    front_matter, body = page.removeprefix("---\n").split("\n---\n", 1)
    assert yaml.safe_load(front_matter) == {"title": "Tiny"}
    assert "jp-MarkdownOutput" in body
    assert "42" in re.sub(r"<[^>]+>", "", body)  # executed: the cell's output
    assert (root / "staged" / "notebooks" / "tiny.ipynb").is_file()  # the download, beside it


def test_prepare_refuses_a_staged_folder_inside_docs(tmp_path: Path) -> None:
    prepare = load_step("prepare").prepare
    with pytest.raises(ValueError, match="must not be inside"):
        prepare(tmp_path, tmp_path / "docs" / "staged", SITE)
    with pytest.raises(ValueError, match="must end with '/'"):
        prepare(tmp_path, tmp_path / "staged", "https://qkv.example.org")


def _built_site(site: Path) -> None:
    """What a generator makes of the staged project: three pages, the package index, a feed."""
    pages = {
        "index.html": (
            f'<html><head><link href="assets/a.css" rel="stylesheet"></head><body>{ARTICLE}'
            '<span class="arithmatex">\\(x_i\\)</span><img alt="a" src="figures/a-line.svg">'
            '<div class="highlight"><pre><span></span><code>if x:\n    y = 1\n</code></pre></div>'
            '<a href="blog/a-post/">a post</a></article></body></html>'
        ),
        "blog/a-post/index.html": (
            f'<html><head></head><body>{ARTICLE}<a href="../../">home</a></article></body>'
        ),
        "notebooks/tiny/index.html": (
            f"<html><head></head><body>{ARTICLE}<style>.jupyter-wrapper .jp-Unused {{color: red}}"
            ".jupyter-wrapper .jp-MarkdownOutput {color: blue}</style>"
            '<div class="jupyter-wrapper"><div class="jp-MarkdownOutput">$x_i$</div></div>'
            "</article></body></html>"
        ),
        "simple/qkv/index.html": '<a href="../../packages/q.whl">q.whl</a>',
        "feed_rss_created.xml": "<rss><image><url>None</url><title>t</title></image></rss>",
    }
    for path, text in pages.items():
        (site / path).parent.mkdir(parents=True, exist_ok=True)
        (site / path).write_text(text, encoding="utf-8")


def test_finish_does_to_the_built_pages_what_the_hooks_do(
    prepared: tuple[Path, object], tmp_path: Path
) -> None:
    root, result = prepared
    site = tmp_path / "site"
    _built_site(site)
    snippets = {"base_path": [str(root)], "check_paths": True}
    load_step("finish").finish(
        site, root / "docs", root / "staged", result, snippets=snippets, icon="<svg></svg>"
    )
    home = (site / "index.html").read_text()
    assert '<mjx-container data-tex="x_i"' in home
    assert f'src="{SITE}figures/a-line.svg#only-light"' in home
    assert f'src="{SITE}figures/a-line-dark.svg#only-dark"' in home
    assert 'width="192" height="96"' in home
    assert f'href="{SITE}assets/a.css"' in home
    assert f'href="{SITE}blog/a-post/"' in home
    assert '<span class="line" style="--i:4">' in home  # the hanging indent of code lines
    assert f'title="JSON feed" href="{SITE}feed_json_created.json">' in home.split("</head>")[0]
    post = (site / "blog" / "a-post" / "index.html").read_text()
    assert f'<a href="{SITE}blog/a-post/a-post.ipynb" download' in post
    assert f'href="{SITE}"' in post
    notebook = json.loads((site / "blog" / "a-post" / "a-post.ipynb").read_text())
    text = "".join("".join(cell["source"]) for cell in notebook["cells"])
    assert f"[the home page]({SITE})" in text
    assert f"({SITE}figures/a-line.svg)" in text
    assert result.values["qkv_wheel"] in text  # the install cell
    page = (site / "notebooks" / "tiny" / "index.html").read_text()
    assert "<mjx-container" in page
    assert "$x_i$" not in page
    assert "jp-Unused" not in page
    assert "jp-MarkdownOutput {color: blue}" in page
    assert f'href="{SITE}notebooks/tiny/tiny.ipynb" download' in page
    assert (site / "notebooks" / "tiny" / "tiny.ipynb").is_file()
    assert (site / "simple" / "qkv" / "index.html").read_text().startswith('<a href="../../')
    assert "None" not in (site / "feed_rss_created.xml").read_text()
    assert (site / "assets" / "mathjax" / "chtml.css").read_text().startswith("mjx-container")
    assert (site / "assets" / "mathjax" / "woff-v2" / "MathJax_Math-Italic.woff").is_file()


def test_finish_fails_on_a_tex_error_and_stops_the_typesetter(
    prepared: tuple[Path, object], tmp_path: Path
) -> None:
    root, result = prepared
    (tmp_path / "index.html").write_text('<span class="arithmatex">\\(\\frac{a}{\\)</span>')
    with pytest.raises(ValueError, match=r"index.html: TeX error in '\\\\frac\{a\}\{'"):
        load_step("finish").finish(
            tmp_path, root / "docs", root / "staged", result, snippets={}, icon="<svg></svg>"
        )
    assert not load_step("mathjax").running()
    assert not (tmp_path / "assets").exists()


# --- the MkDocs hooks: adapters over the steps -----------------------------------------------------------------


def _hook_files() -> list[Path]:
    return sorted(HOOKS.glob("*.py"))


def test_the_steps_import_no_generator() -> None:
    for module in sorted((HOOKS / "steps").glob("*.py")):
        imported = set()
        for node in ast.walk(ast.parse(module.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                imported |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module:
                imported.add(node.module.split(".")[0])
        assert not imported & {"mkdocs", "material", "zensical"}, module.name


def test_each_hook_is_an_adapter_over_its_step() -> None:
    """A hook defines MkDocs' events and private helpers only: its plain functions live in the step."""
    for hook in _hook_files():
        tree = ast.parse(hook.read_text(encoding="utf-8"))
        public = [
            node.name
            for node in tree.body
            if isinstance(node, ast.FunctionDef | ast.ClassDef) and not node.name.startswith("_")
        ]
        assert public, hook.name
        assert all(name.startswith("on_") for name in public), (hook.name, public)
        steps = {node.module for node in tree.body if isinstance(node, ast.ImportFrom)}
        assert f"steps.{hook.stem}" in steps or "steps" in steps, hook.name


def test_mkdocs_yml_takes_no_mkdocs_only_tag_and_links_the_math_stylesheet() -> None:
    text = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    assert "!relative" not in text  # Zensical rejects it
    staged_config = load_step("staged_config")
    settings = staged_config.read_mkdocs_yml(ROOT / "mkdocs.yml")
    assert load_step("mathjax").STYLESHEET in settings["extra_css"]
    assert staged_config.snippets_of(settings, ROOT)["base_path"] == [str(ROOT)]


def test_snippet_paths_start_at_mkdocs_yml_whatever_the_working_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "part.txt").write_text("included\n", encoding="utf-8")
    (tmp_path / "docs").mkdir()
    config = MkDocsConfig(config_file_path=str(tmp_path / "mkdocs.yml"))
    config.load_dict(
        {
            "site_name": "t",
            "docs_dir": str(tmp_path / "docs"),
            "markdown_extensions": [
                {"pymdownx.snippets": {"base_path": ["."], "check_paths": True}}
            ],
        }
    )
    assert config.validate() == ([], [])
    monkeypatch.chdir(tmp_path.parent)  # mkdocs run from another folder
    load_hook("code_blocks").on_config(config)
    extensions = {"extensions": ["pymdownx.snippets"], "extension_configs": config.mdx_configs}
    assert python_markdown.markdown('--8<-- "part.txt"', **extensions) == "<p>included</p>"


def test_the_staged_config_keeps_the_reading_order_without_hooks() -> None:
    staged_config = load_step("staged_config")
    settings = staged_config.read_mkdocs_yml(ROOT / "mkdocs.yml")
    docs = ROOT / "docs"  # read only: the staged folder's home page and posts are docs/'s
    config = staged_config.staged_config(settings, ROOT, docs, SITE)
    order = load_step("reading_order").reading_order((docs / "index.md").read_text())
    titles = [next(iter(item)) if isinstance(item, dict) else item for item in config["nav"]]
    assert titles == [
        "Home",
        "Get started",
        "Articles",
        "Playground",
        "API reference",
        "Kernel source",
        "Blog",
    ]
    addresses = [f"{SITE}blog/{Path(post).stem}/" for post in order]  # each post's slug is its name
    assert [next(iter(item.values())) for item in config["nav"][2]["Articles"]] == addresses
    assert config["nav"][2]["Articles"][0] == {
        "Queries, keys and values": f"{SITE}blog/queries-keys-values/"
    }
    assert config["nav"][3] == {"Playground": "notebooks/playground.md"}
    assert "hooks" not in config
    assert "mkdocs-jupyter" not in str(config["plugins"])
    assert (config["docs_dir"], config["site_dir"], config["site_url"]) == ("docs", "site", SITE)
    assert config["theme"]["custom_dir"] == "docs/overrides"
    assert "base_path: ['.']" not in str(config["markdown_extensions"])
    assert settings["nav"][2] == {
        "Playground": "notebooks/playground.ipynb"
    }  # mkdocs.yml's, unchanged
