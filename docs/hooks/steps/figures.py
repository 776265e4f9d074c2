"""Build step: draw the site's figures from the package when the site is built, in a light and a dark variant.

Each `docs/figures/<slug>.py` defines `FIGURES = {"figure-name": draw}`, where `draw()` takes no argument and
returns a matplotlib `Figure`. Every figure is drawn twice, under the light and the dark rcParams of the site's
one style (`docs/figures/_style.py`), and saved as SVG at the docs-relative paths `figures/<figure-name>.svg`
and `figures/<figure-name>-dark.svg`. A post shows it with ONE image, `![alt text](../../figures/<name>.svg)`
(strict link validation finds the file); on the page this step turns that `<img>` into two, the light one
marked `#only-light` and the dark one `#only-dark`, which Material shows according to the reader's colour
scheme and its toggle. The SVG is deterministic (fixed hash salt, no date), keeps its text as text in the
page's fonts, and is minified (`_minify`). Any error in a script fails the build, and so does a figure that
breaks the figure contract (`contract_breaches`: too wide for a phone, text below the style's base size, or
drawn outside its box) or whose two variants differ in size. Each `<img>` of a figure gets the figure's
width and height in CSS pixels, so the browser reserves its box before the file arrives (no layout shift; the
theme scales it to the column). Both are loaded lazily: the one of the scheme not shown is then never fetched.

A script may also define `DATA = {"name": compute}`: `compute()` returns the numbers of an interactive figure
(JSON data), saved as `figures/<name>.json` for its script to fetch (`data_of`).
"""

from __future__ import annotations

import importlib.util
import io
import json
import re
import sys
import traceback
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import matplotlib

matplotlib.use("Agg")

from matplotlib.figure import Figure
from matplotlib.text import Text
from matplotlib.transforms import Bbox

FIGURE_NAME = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*")
FIGURE_IMG = re.compile(
    r'<img (?P<attributes>[^>]*?)src="(?P<src>[^"]*figures/(?P<name>[a-z0-9-]+))\.svg"(?P<rest>[^>]*)>'
)
VARIANTS = {"light": "", "dark": "-dark"}  # variant: suffix of its file name

SVG, XLINK = "http://www.w3.org/2000/svg", "http://www.w3.org/1999/xlink"
ET.register_namespace("", SVG)
ET.register_namespace("xlink", XLINK)
# Text as <text>, not glyph outlines (smaller, selectable, drawn in the page's fonts); ids from a fixed salt.
# A figure with a mathtext radical keeps its text as outlines: the radical is a glyph of a STIX font that
# readers lack (write the character instead, "√$d_k$", to keep the text).
SVG_SETTINGS = {"svg.fonttype": "none", "svg.hashsalt": "qkv"}
GEOMETRY = {"d", "x", "y", "transform"}  # attributes whose numbers matplotlib writes to 6 decimals
DECIMAL = re.compile(r"-?\d+\.\d+")


FIGURES_DIR = Path(__file__).resolve().parents[2] / "figures"


def _helpers_importable() -> None:
    """Put docs/figures on `sys.path`: the scripts import the helper modules beside them (`_style`, the site's
    one style; `_diagram`), as when one runs `python docs/figures/<script>.py`. Checked before each script is
    loaded, since a plugin may restore an older `sys.path` in between."""
    if str(FIGURES_DIR) not in sys.path:
        sys.path.insert(0, str(FIGURES_DIR))


_helpers_importable()
import _style as style  # noqa: E402


def _load_script(script: Path) -> ModuleType:
    """Import a figure script by path (the folder is not a package, and names contain hyphens)."""
    _helpers_importable()
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
    """The `FIGURES` dict of a script, checked for shape and names.

    Raises:
        ValueError: the script fails to import, or its `FIGURES` is not a dict of named drawing functions.
    """
    try:
        module = _load_script(script)
    except Exception as error:
        raise ValueError(f"{script} failed to import:\n{_traceback(error)}") from error
    figures = getattr(module, "FIGURES", None)
    if not isinstance(figures, dict) or not figures:
        raise ValueError(f"{script}: defines no FIGURES dict of name -> drawing function")
    for name, draw in figures.items():
        if not isinstance(name, str) or not FIGURE_NAME.fullmatch(name):
            raise ValueError(f"{script}: figure name {name!r} is not lowercase-with-hyphens")
        if not callable(draw):
            raise ValueError(f"{script}: FIGURES[{name!r}] is not callable")
    return figures


def data_of(script: Path) -> dict[str, bytes]:
    """The JSON files of a script's `DATA = {"name": compute}` (none without one), by docs-relative path.

    Each `compute()` takes no argument and returns JSON data, saved as `figures/<name>.json`: the numbers an
    interactive figure shows, computed from the package when the site is built.

    Raises:
        ValueError: the script fails to import, `DATA` is not a dict of named functions, or a result is not
            JSON.
    """
    try:
        module = _load_script(script)
    except Exception as error:
        raise ValueError(f"{script} failed to import:\n{_traceback(error)}") from error
    data = getattr(module, "DATA", {})
    if not isinstance(data, dict):
        raise ValueError(f"{script}: DATA is not a dict of name -> function")
    files = {}
    for name, compute in data.items():
        if not isinstance(name, str) or not FIGURE_NAME.fullmatch(name) or not callable(compute):
            raise ValueError(
                f"{script}: DATA[{name!r}] is not a lowercase-with-hyphens name and a function"
            )
        try:
            files[f"figures/{name}.json"] = json.dumps(compute(), separators=(",", ":")).encode()
        except Exception as error:
            raise ValueError(f"{script}: DATA {name!r} failed:\n{_traceback(error)}") from error
    return files


def _svg(figure: Figure) -> bytes:
    """The figure as deterministic, minified SVG bytes, saved under the rcParams in effect (a variant's)."""
    buffer = io.BytesIO()
    radical = any("\\sqrt" in text.get_text() for text in figure.findobj(Text))
    with matplotlib.rc_context({**SVG_SETTINGS, **({"svg.fonttype": "path"} if radical else {})}):
        figure.savefig(buffer, format="svg", metadata={"Date": None})
    return _minify(buffer.getvalue())


def _minify(svg: bytes) -> bytes:
    """Matplotlib's SVG, drawn the same, in fewer bytes.

    Drops the metadata, comments, indentation, group ids and groups that carry nothing; rounds coordinates to
    1/100 pt; names the style's fonts once, in the stylesheet, instead of on every text. Text content is left
    as it is.
    """
    root = ET.fromstring(svg)  # comments and the DOCTYPE are not kept
    for metadata in root.findall(f"{{{SVG}}}metadata"):
        root.remove(metadata)
    for element in root.iter():
        if element.tag == f"{{{SVG}}}g":
            element.attrib.pop("id", None)
        for name in GEOMETRY & element.attrib.keys():
            value = " ".join(DECIMAL.sub(_hundredths, element.attrib[name]).split())
            element.attrib[name] = re.sub(r" ?([MLCQz]) ?", r"\1", value) if name == "d" else value
        if "style" in element.attrib:
            declarations = (
                d.split(":", 1) for d in element.attrib.pop("style").split(";") if d.strip()
            )
            kept = ";".join(
                f"{key.strip()}:{value.strip()}"
                for key, value in declarations
                if key.strip() != "font-family"
            )
            if kept:
                element.attrib["style"] = kept
        if element.tag != f"{{{SVG}}}style" and element.text and not element.text.strip():
            element.text = None
        if element.tail and not element.tail.strip():
            element.tail = None
    stylesheet = root.find(f"{{{SVG}}}defs/{{{SVG}}}style")
    fonts = ",".join(f"'{font}'" if " " in font else font for font in style.FONTS)
    stylesheet.text = f"text{{font-family:{fonts},sans-serif}}{stylesheet.text}"
    _drop_empty_groups(root)
    return b'<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(root, encoding="utf-8")


def _hundredths(number: re.Match[str]) -> str:
    text = f"{float(number[0]):.2f}".rstrip("0").rstrip(".")
    return "0" if text == "-0" else text


def _drop_empty_groups(parent: ET.Element) -> None:
    """Put the children of each group without attributes in its place, and drop empty groups."""
    children = []
    for child in parent:
        _drop_empty_groups(child)
        if child.tag != f"{{{SVG}}}g":
            children.append(child)
        elif not child.attrib:
            children.extend(child)
        elif len(child):
            children.append(child)
    parent[:] = children


def draw_variant(draw: Callable[[], Figure], variant: str) -> tuple[Figure, bytes]:
    """Draw and save a figure under the rcParams of one variant of the style; the figure and its SVG.

    Raises:
        TypeError: `draw` returned something else than a Figure.
        ValueError: the figure breaks the figure contract (`contract_breaches`).
    """
    with matplotlib.rc_context(style.rc(variant)):
        figure = draw()
        if not isinstance(figure, Figure):
            raise TypeError(f"returned {type(figure).__name__}, not a Figure")
        svg = _svg(figure)
        breaches = contract_breaches(figure)
    if breaches:
        raise ValueError(
            "breaks the figure contract (docs/figures/_style.py):\n" + "\n".join(breaches)
        )
    return figure, svg


def contract_breaches(figure: Figure) -> list[str]:
    """What keeps a drawn figure from being legible on a phone: too wide, text too small, text cut off.

    A figure at most `style.MAX_WIDTH_IN` wide, with no text smaller than `style.BASE_SIZE_PT`, shows its text
    at `style.MIN_PHONE_TEXT_PX` or more when shrunk into a `style.PHONE_COLUMN_PX` column. (The sub- and
    superscripts inside one text are smaller, as in print.)
    """
    breaches = []
    width, height = figure.get_size_inches()
    if width > style.MAX_WIDTH_IN:
        breaches.append(f"{width:g} in wide: at most {style.MAX_WIDTH_IN} in (stack the panels)")
    texts = [
        text
        for text in figure.findobj(Text)
        if text.get_visible() and text.get_text().strip() and text.get_figure() is not None
    ]
    small = sorted({text.get_text() for text in texts if text.get_fontsize() < style.BASE_SIZE_PT})
    if small:
        breaches.append(f"text smaller than {style.BASE_SIZE_PT:g} pt: {small[:5]}")
    shrink = min(1.0, style.PHONE_COLUMN_PX / (width * 96))
    smallest = min((text.get_fontsize() for text in texts), default=style.BASE_SIZE_PT)
    if smallest * 96 / 72 * shrink < style.MIN_PHONE_TEXT_PX:
        breaches.append(
            f"its smallest text is {smallest * 96 / 72 * shrink:.1f} CSS px in a "
            f"{style.PHONE_COLUMN_PX} px column: at least {style.MIN_PHONE_TEXT_PX:g}"
        )
    slack = 1 / 72  # inches
    for what, box in _extents(figure):
        overflow = {
            "left": -box.x0,
            "bottom": -box.y0,
            "right": box.x1 - width,
            "top": box.y1 - height,
        }
        past = {edge: inches for edge, inches in overflow.items() if inches > slack}
        if past:
            edges = ", ".join(
                f"{inches:.2f} in past the {edge} edge" for edge, inches in past.items()
            )
            breaches.append(
                f"{what} is drawn outside the {width:g} x {height:g} in figure: {edges}"
            )
    return breaches


def _extents(figure: Figure) -> list[tuple[str, Bbox]]:
    """What `figure` draws, each with its box in inches: every axes with its labels, ticks and legend (named
    by its title), and every text and legend placed on the figure itself."""
    named = [
        (f"axes {number} ({ax.get_title() or 'untitled'!r}, its labels and ticks)", ax)
        for number, ax in enumerate(figure.axes, start=1)
    ]
    named += [(f"text {text.get_text().strip()[:40]!r}", text) for text in figure.texts]
    named += [(f"legend {number}", legend) for number, legend in enumerate(figure.legends, 1)]
    inches = figure.dpi_scale_trans.inverted()
    return [(what, artist.get_tightbbox().transformed(inches)) for what, artist in named]


def draw_figures(docs_dir: Path) -> tuple[dict[str, bytes], dict[str, tuple[int, int]]]:
    """Run every figure script of `docs_dir/figures` and draw each figure in both variants.

    Returns:
        The SVG of each variant by its docs-relative path (`figures/<name>.svg`, `figures/<name>-dark.svg`),
        and the size of each figure in CSS pixels (width, height) by its name.

    Raises:
        ValueError: a script or a figure fails, a figure breaks the contract, its variants differ in size,
            two scripts draw the same name, or docs/ holds a committed file of a figure.
    """
    svgs: dict[str, bytes] = {}
    sizes: dict[str, tuple[int, int]] = {}
    drawn: dict[str, Path] = {}
    for script in scripts(docs_dir):
        for name, draw in _figures_of(script).items():
            if name in drawn:
                raise ValueError(f"{script}: figure {name!r} is also drawn by {drawn[name]}")
            variant_sizes = set()
            for variant, suffix in VARIANTS.items():
                uri = f"figures/{name}{suffix}.svg"
                if Path(docs_dir, uri).exists():
                    raise ValueError(
                        f"docs/{uri} exists: figures are drawn at build time, not committed"
                    )
                try:
                    figure, svgs[uri] = draw_variant(draw, variant)
                except Exception as error:
                    raise ValueError(
                        f"{script}: figure {name!r} ({variant}) failed:\n{_traceback(error)}"
                    ) from error
                width, height = figure.get_size_inches() * 96  # matplotlib's SVG: 72 pt per inch
                variant_sizes.add((round(width), round(height)))
            if len(variant_sizes) != 1:
                raise ValueError(
                    f"{script}: the variants of figure {name!r} differ in size: {variant_sizes}"
                )
            sizes[name] = variant_sizes.pop()
            drawn[name] = script
    return svgs, sizes


def with_variants(html: str, sizes: dict[str, tuple[int, int]]) -> str:
    """Turn each `<img>` of a figure in `sizes` into its light and dark variants, each with its size."""

    def variants(found: re.Match[str]) -> str:
        name = found["name"]
        if name not in sizes:
            return found[0]
        width, height = sizes[name]
        attributes, src, rest = found["attributes"], found["src"], found["rest"]
        return "".join(
            f'<img width="{width}" height="{height}" loading="lazy" {attributes}'
            f'src="{src}{suffix}.svg#only-{variant}"{rest}>'
            for variant, suffix in VARIANTS.items()
        )

    return FIGURE_IMG.sub(variants, html)


def _traceback(error: Exception) -> str:
    return "".join(traceback.format_exception(error))
