"""MkDocs hook over `steps/figures.py`: the figures drawn at build time, in a light and a dark variant."""

from __future__ import annotations

from pathlib import Path

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File, Files
from steps.figures import data_of, draw_figures, scripts, with_variants

_sizes: dict[str, tuple[int, int]] = {}  # of the figures drawn by on_files, for the pages


def on_files(files: Files, config: MkDocsConfig) -> Files:
    """Draw every figure and add it to the build as `figures/<name>.svg` and `figures/<name>-dark.svg`, and
    each script's `DATA` as `figures/<name>.json`."""
    try:
        svgs, sizes = draw_figures(Path(config.docs_dir))
        data = {
            uri: content
            for script in scripts(config.docs_dir)
            for uri, content in data_of(script).items()
        }
    except ValueError as error:
        raise PluginError(str(error)) from error
    for uri, content in {**svgs, **data}.items():
        files.append(File.generated(config, uri, content=content))
    _sizes.update(sizes)
    return files


def on_page_content(html: str, page: object, config: MkDocsConfig, files: Files) -> str:
    """Turn each figure's `<img>` into its light and dark variants, each with its width and height."""
    return with_variants(html, _sizes)
