"""The figures' style and contract (docs/figures/_style.py, docs/hooks/steps/figures.py), without a build.

The built site's figures are checked by tests/site/test_site_build.py: the build fails on any figure that breaks the
contract, because the hook checks each one as it draws it.
"""

from __future__ import annotations

import io
import re
import xml.etree.ElementTree as ET

import matplotlib
import pytest
from matplotlib.figure import Figure

from tests.site.build import ROOT, load_step

figures = load_step("figures")
style = figures.style
SVG = "{http://www.w3.org/2000/svg}"


def _line(width: float = 4.0, x: float = 0.5, **text: object) -> Figure:
    fig = Figure(figsize=(width, 3.0), layout="constrained")
    ax = fig.subplots()
    ax.plot([0, 1], [1, 0], label="a line")
    ax.set_title("a title")
    fig.text(x, 0.5, "0.0042", **text)
    ax.set_xlabel("√$d_k$")
    ax.legend()
    return fig


def _texts(svg: bytes) -> list[str]:
    """The text content of every <text> element, in order."""
    root = ET.fromstring(svg)
    return ["".join("".join(text.itertext()).split()) for text in root.iter(f"{SVG}text")]


def test_a_figure_at_the_widest_keeps_its_text_legible_on_a_phone() -> None:
    shrink = style.PHONE_COLUMN_PX / (style.MAX_WIDTH_IN * 96)  # 358 CSS px for 528
    assert style.BASE_SIZE_PT * 96 / 72 * shrink >= style.MIN_PHONE_TEXT_PX


@pytest.mark.parametrize("variant", ["light", "dark"])
def test_colours_stand_out_from_the_page(variant: str) -> None:
    page, text = style.PAGES[variant]
    assert style.contrast(text, page) >= 4.5
    for colour in style.CYCLES[variant]:
        assert style.contrast(colour, page) >= 3.0, colour


def test_the_ink_on_a_cell_reads_on_it() -> None:
    with matplotlib.rc_context(style.rc("dark")):
        for colour in [*style.CYCLES["dark"], *matplotlib.colormaps["viridis"].colors[::8]]:
            assert style.contrast(style.ink_on(colour), colour) >= 4.5, colour


def test_each_variant_draws_in_its_own_colours_on_a_transparent_page() -> None:
    light = figures.draw_variant(_line, "light")[1].decode()
    dark = figures.draw_variant(_line, "dark")[1].decode()
    for svg, variant, other in ((light, "light", "dark"), (dark, "dark", "light")):
        assert f"stroke:{style.CYCLES[variant][0]}" in svg  # C0, the line
        assert f"fill:{style.PAGES[variant][1]}" in svg  # the text
        assert f"stroke:{style.CYCLES[other][0]}" not in svg
    background = ET.fromstring(dark.encode()).find(f"{SVG}path")  # the figure's own patch
    assert background.get("style") == "fill:none"


@pytest.mark.parametrize(
    ("draw", "breach"),
    [
        (lambda: _line(width=7.0), "7 in wide"),
        (lambda: _line(fontsize=8), "smaller than 10 pt: ['0.0042']"),
        (lambda: _line(fontsize="small"), "smaller than 10 pt"),
        (lambda: _line(x=1.2), "text '0.0042' is drawn outside the 4 x 3 in figure"),
        (lambda: _line(x=1.2), "in past the right edge"),
    ],
)
def test_a_figure_that_breaks_the_contract_fails(draw, breach: str) -> None:
    with pytest.raises(ValueError, match=re.escape(breach)):
        figures.draw_variant(draw, "light")


def test_a_figure_within_the_contract_passes() -> None:
    figure, svg = figures.draw_variant(lambda: _line(width=style.MAX_WIDTH_IN), "dark")
    assert figures.contract_breaches(figure) == []
    assert svg.startswith(b"<?xml")


def test_minified_svg_keeps_every_text_and_is_smaller() -> None:
    buffer = io.BytesIO()
    with matplotlib.rc_context(style.rc("light") | figures.SVG_SETTINGS):
        _line().savefig(buffer, format="svg", metadata={"Date": None})
    original = buffer.getvalue()
    minified = figures._minify(original)
    assert _texts(minified) == _texts(original)
    assert "0.0042" in _texts(minified)  # numbers in text are not rounded, only coordinates
    assert len(minified) < 0.7 * len(original)
    assert b"font-family" not in minified.split(b"</style>", 1)[1]
    assert b"<metadata" not in minified
    assert b"text{font-family:Helvetica,Arial,'DejaVu Sans',sans-serif}" in minified


def test_a_figure_with_a_radical_keeps_its_text_as_outlines() -> None:
    def with_radical() -> Figure:
        figure = _line()
        figure.axes[0].set_ylabel(r"$1/\sqrt{M}$")
        return figure

    assert b"<text" in figures.draw_variant(_line, "light")[1]
    outlines = figures.draw_variant(with_radical, "light")[1]
    assert b"<text" not in outlines
    assert outlines.count(b"<path") > 20


def test_the_page_shows_the_variant_of_the_scheme() -> None:
    sizes = {"a-line": (384, 288)}
    html = '<figure>\n<p><img alt="A line" src="../../figures/a-line.svg" /></p>'
    shown = figures.with_variants(html, sizes)
    assert shown == (
        '<figure>\n<p><img width="384" height="288" loading="lazy" alt="A line" '
        'src="../../figures/a-line.svg#only-light" />'
        '<img width="384" height="288" loading="lazy" alt="A line" '
        'src="../../figures/a-line-dark.svg#only-dark" /></p>'
    )
    untouched = '<img alt="x" src="../../figures/not-drawn.svg" />'
    assert figures.with_variants(untouched, sizes) == untouched


# A colour, a grey level, a colormap or a font size named in a figure script: the contract says to use the
# cycle "C0".."C9", rcParams and the style's helpers instead, so that both variants come from the same code.
NAMED = re.compile(
    r"""["']\#[0-9a-fA-F]{3,8}["']"""
    r"""|["'](?:white|black|gr[ae]y|red|blue|green|orange|tab:\w+)["']"""
    r"""|colou?r\w*\s*=\s*["'][01]?\.\d+["']"""
    r"""|cmap\s*=\s*["']"""
    r"""|fontsize\s*=\s*(?:\d|["'](?:small|x-small|xx-small|smaller)["'])"""
)


def test_figure_scripts_name_no_colour_and_no_font_size() -> None:
    # the figure scripts and the helpers they share, such as _diagram.py
    scripts = [path for path in (ROOT / "docs/figures").glob("*.py") if path.name != "_style.py"]
    assert len(scripts) > len(figures.scripts(ROOT / "docs"))
    found = {
        f"{script.name}:{number}": line.strip()
        for script in scripts
        for number, line in enumerate(script.read_text(encoding="utf-8").splitlines(), 1)
        if NAMED.search(line)
    }
    assert not found, found


def test_a_scripts_data_becomes_json_and_bad_data_fails(tmp_path) -> None:
    script = tmp_path / "widget.py"
    script.write_text('DATA = {"a-map": lambda: {"rows": [[1, 0], [0.5, 0.5]]}}\n')
    assert figures.data_of(script) == {"figures/a-map.json": b'{"rows":[[1,0],[0.5,0.5]]}'}
    script.write_text("FIGURES = {}\n")
    assert figures.data_of(script) == {}
    script.write_text('DATA = {"a-map": lambda: {1, 2}}\n')  # a set is not JSON
    with pytest.raises(ValueError, match="DATA 'a-map' failed"):
        figures.data_of(script)
    script.write_text('DATA = {"A map": dict}\n')
    with pytest.raises(ValueError, match="lowercase-with-hyphens"):
        figures.data_of(script)
