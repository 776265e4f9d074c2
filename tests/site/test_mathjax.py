"""docs/hooks/steps/mathjax.py on small inputs, with its Node process and without a build."""

from __future__ import annotations

import io
import re
from collections.abc import Iterator
from types import ModuleType

import pytest
from fontTools.ttLib import TTFont

from tests.site.build import load_step


@pytest.fixture(scope="module")
def mathjax() -> Iterator[ModuleType]:
    """The step's module with its Node process started (installing MathJax first if it is missing)."""
    module = load_step("mathjax")
    module.start()
    yield module
    module.stop()


def test_a_formula_becomes_commonhtml_with_its_tex(mathjax: ModuleType) -> None:
    html = mathjax.typeset("x_i < 1", display=False, where="page.md")
    assert html.startswith('<mjx-container data-tex="x_i &lt; 1" ')
    assert "<mjx-assistive-mml" in html  # what a screen reader reads
    assert 'display="true"' in mathjax.typeset("x", display=True, where="page.md")


def test_a_formula_carries_no_attribute_that_browsers_ignore(mathjax: ModuleType) -> None:
    html = mathjax.typeset("x", display=False, where="page.md")
    assert "<math><mi>x</mi></math>" in html  # the assistive MathML, without xmlns
    assert "unselectable" not in html


def test_a_tex_error_names_the_page_and_the_formula(mathjax: ModuleType) -> None:
    broken = r"\frac{a}{"
    message = re.escape(f"page.md: TeX error in {broken!r}: Missing close brace")
    with pytest.raises(ValueError, match=message):
        mathjax.typeset(broken, display=False, where="page.md")


def test_arithmatex_math_is_typeset_in_place(mathjax: ModuleType) -> None:
    html = '<p>A <span class="arithmatex">\\(q &lt; k\\)</span>.</p><div class="arithmatex">\\[v\\]</div>'
    typeset = mathjax.typeset_arithmatex(html, "page.md")
    assert typeset.startswith('<p>A <span class="arithmatex"><mjx-container data-tex="q &lt; k" ')
    assert '<div class="arithmatex"><mjx-container data-tex="v" ' in typeset
    assert "\\(" not in typeset
    assert "\\[" not in typeset


def test_dollars_are_typeset_in_notebook_markdown_but_not_in_code(mathjax: ModuleType) -> None:
    html = (
        '<div class="jp-RenderedMarkdown jp-MarkdownOutput"><p>$q_i$ and $$k$$ but <code>$x$</code></p></div>'
        "<p>$y$ outside a Markdown cell</p>"
    )
    typeset = mathjax.typeset_dollars(html, "notebook.ipynb")
    assert '<mjx-container data-tex="q_i" ' in typeset
    assert '<mjx-container data-tex="k" ' in typeset
    assert "<code>$x$</code>" in typeset
    assert typeset.endswith("<p>$y$ outside a Markdown cell</p>")


def test_the_stylesheet_names_fonts_that_ship(mathjax: ModuleType) -> None:
    mathjax.typeset("\\sum_i x_i", display=True, where="page.md")
    names = {font.name for font in mathjax.fonts()}
    named = set(re.findall(r"url\(\"?woff-v2/([^)\"]+)", mathjax.stylesheet()))
    assert "MathJax_Main-Regular.woff" in named
    assert named <= names


def test_the_characters_drawn_are_the_strings_of_content_declarations(mathjax: ModuleType) -> None:
    css = 'mjx-c.a::before{padding:0;content:"\\2211"}mjx-c.b::before{content:"x"}p{color:red}'
    assert mathjax.drawn_characters(css) == {"\u2211", "x"}


def test_a_cut_font_keeps_the_characters_drawn_and_drops_others(mathjax: ModuleType) -> None:
    mathjax.typeset("\\sum_i x_i", display=True, where="page.md")
    drawn = mathjax.drawn_characters(mathjax.stylesheet())
    assert {"\u2211", "x", "i"} <= drawn
    main = next(font for font in mathjax.fonts() if font.name == "MathJax_Main-Regular.woff")
    with TTFont(main) as font:
        whole = set(font.getBestCmap())
    cut = set(TTFont(io.BytesIO(mathjax.subset_font(main, drawn))).getBestCmap())
    assert whole & {ord(character) for character in drawn} <= cut
    assert "@" not in drawn
    assert ord("@") in whole - cut
