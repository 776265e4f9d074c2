"""MkDocs hook over `steps/package_index.py`: the site serves the `qkv` package it was built from.

Three values cross files: `qkv_version`, `qkv_wheel` and `qkv_sdist` go into `config.extra`, which
`code_blocks.py` and `article_notebooks.py` read.
"""

from __future__ import annotations

from pathlib import Path

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File, Files
from mkdocs.structure.pages import Page
from steps.package_index import PLACEHOLDERS, PROJECT, filled, package_index


def on_files(files: Files, config: MkDocsConfig) -> Files:
    """Add the distributions and the simple index to the site; keep the placeholders' values in `extra`."""
    try:
        values, published = package_index(Path(config.config_file_path).parent, config.site_url)
    except Exception as error:
        raise PluginError(f"building the {PROJECT} distributions failed: {error}") from error
    config.extra.update(values)  # qkv_version also goes under each article's title (code_blocks.py)
    for path, content in published.items():
        files.append(File.generated(config, path, content=content))
    return files


def on_page_markdown(markdown: str, page: Page, config: MkDocsConfig, files: Files) -> str:
    """Fill in `{{ site_url }}`, `{{ qkv_version }}`, `{{ qkv_wheel }}` and `{{ qkv_sdist }}`."""
    values = {"site_url": config.site_url} | {name: config.extra[name] for name in PLACEHOLDERS[1:]}
    return filled(markdown, values)
