"""MkDocs hook: draw the site's figures from the package when the site is built.

Each `docs/figures/<slug>.py` defines `FIGURES = {"figure-name": draw}`, where `draw()` takes no argument and
returns a matplotlib `Figure`. Every figure is saved as SVG and added to the build at the docs-relative path
`figures/<figure-name>.svg`, so a post shows it with `![alt text](../../figures/<figure-name>.svg)` and strict link
validation finds the file. The SVG is deterministic (fixed hash salt, no date, text as paths). Any error in a
script fails the build. Each page's `<img>` of a figure gets the figure's width and height in CSS pixels, so the
browser reserves its box before the file arrives (no layout shift; the theme scales it to the column).
"""

from __future__ import annotations

import importlib.util
import io
import re
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import matplotlib

matplotlib.use("Agg")

from matplotlib.figure import Figure
from mkdocs.config.defaults import MkDocsConfig
from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File, Files

FIGURE_NAME = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*")
FIGURE_IMG = re.compile(
    r'<img (?P<attributes>[^>]*?)src="(?P<src>[^"]*figures/(?P<name>[a-z0-9-]+)\.svg)"'
)
_sizes: dict[str, tuple[int, int]] = {}
SVG_SETTINGS = {"svg.hashsalt": "qkv", "svg.fonttype": "path"}


def _load_script(script: Path) -> ModuleType:
    """Import a figure script by path (the folder is not a package, and names contain hyphens).

    The script's folder goes on `sys.path`, so that scripts share helpers from sibling modules (`_*.py`).
    """
    if str(script.parent) not in sys.path:
        sys.path.insert(0, str(script.parent))
    spec = importlib.util.spec_from_file_location(
        f"qkv_figures_{script.stem.replace('-', '_')}", script
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def scripts(docs_dir: str | Path) -> list[Path]:
    """The figure scripts: `docs/figures/*.py`, except helper modules, whose names start with `_`."""
    return sorted(Path(docs_dir, "figures").glob("[!_]*.py"))


def _figures_of(script: Path) -> dict[str, Callable[[], Figure]]:
    """The `FIGURES` dict of a script, checked for shape and names."""
    figures = getattr(_load_script(script), "FIGURES", None)
    if not isinstance(figures, dict) or not figures:
        raise PluginError(f"{script}: defines no FIGURES dict of name -> drawing function")
    for name, draw in figures.items():
        if not isinstance(name, str) or not FIGURE_NAME.fullmatch(name):
            raise PluginError(f"{script}: figure name {name!r} is not lowercase-with-hyphens")
        if not callable(draw):
            raise PluginError(f"{script}: FIGURES[{name!r}] is not callable")
    return figures


def _svg(figure: Figure) -> bytes:
    """The figure as deterministic SVG bytes."""
    buffer = io.BytesIO()
    with matplotlib.rc_context(SVG_SETTINGS):
        figure.savefig(buffer, format="svg", metadata={"Date": None})
    return buffer.getvalue()


def on_files(files: Files, config: MkDocsConfig) -> Files:
    """Run every figure script and add its figures to the build as `figures/<name>.svg`."""
    drawn: dict[str, Path] = {}
    for script in scripts(config.docs_dir):
        try:
            figures = _figures_of(script)
        except PluginError:
            raise
        except Exception as error:
            raise PluginError(f"{script} failed to import:\n{_traceback(error)}") from error
        for name, draw in figures.items():
            uri = f"figures/{name}.svg"
            if name in drawn:
                raise PluginError(f"{script}: figure {name!r} is also drawn by {drawn[name]}")
            if files.get_file_from_path(uri) is not None:
                raise PluginError(
                    f"docs/{uri} exists: figures are drawn at build time, not committed"
                )
            try:
                figure = draw()
            except Exception as error:
                raise PluginError(
                    f"{script}: figure {name!r} failed:\n{_traceback(error)}"
                ) from error
            if not isinstance(figure, Figure):
                raise PluginError(
                    f"{script}: figure {name!r} returned {type(figure).__name__}, not a Figure"
                )
            width, height = figure.get_size_inches() * 96  # matplotlib's SVG: 72 pt per inch
            _sizes[name] = (round(width), round(height))
            files.append(File.generated(config, uri, content=_svg(figure)))
            drawn[name] = script
    return files


def on_page_content(html: str, page: object, config: MkDocsConfig, files: Files) -> str:
    """Give each figure's `<img>` its width and height."""

    def sized(found: re.Match[str]) -> str:
        if found["name"] not in _sizes or "width=" in found["attributes"]:
            return found[0]
        width, height = _sizes[found["name"]]
        return f'<img width="{width}" height="{height}" {found["attributes"]}src="{found["src"]}"'

    return FIGURE_IMG.sub(sized, html)


def _traceback(error: Exception) -> str:
    return "".join(traceback.format_exception(error))
