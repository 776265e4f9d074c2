"""Notebook pages keep only the CSS rules that can match them (docs/hooks/steps/notebook_styles.py)."""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

from tests.site.build import build_site, load_hook, load_step

notebook_styles = load_step("notebook_styles")
NOTEBOOK = SimpleNamespace(file=SimpleNamespace(src_uri="notebooks/x.ipynb"))
ARTICLE = SimpleNamespace(file=SimpleNamespace(src_uri="blog/posts/x.md"))
STYLE = """
.jupyter-wrapper .jp-Cell { color: red }
.jupyter-wrapper .jp-Widget { color: blue }
.jupyter-wrapper .jp-Cell:not(.jp-mod-active), .jupyter-wrapper .jp-Gone { margin: 0 }
.jupyter-wrapper :root { --jp-icon: url(data:x) }
@media print { .jupyter-wrapper .jp-Widget { display: none } .jupyter-wrapper .jp-Cell { break: avoid } }
@media print { .jupyter-wrapper .jp-Gone { display: none } }
@keyframes spin { to { transform: rotate(1turn) } }
"""


def test_rules_that_need_a_class_the_page_lacks_are_dropped() -> None:
    html = f'<style>{STYLE}</style><div class="jupyter-wrapper"><div class="jp-Cell">x</div></div>'
    pruned = notebook_styles.without_unused_css(html)
    assert ".jp-Cell { color: red }" in pruned
    assert ".jp-Cell:not(.jp-mod-active)" in pruned  # a negated class is not required
    assert "@media print {.jupyter-wrapper .jp-Cell { break: avoid }}" in pruned
    assert "@keyframes spin" in pruned
    assert ".jp-Gone { margin: 0 }" in pruned  # one selector of the list can match: the rule stays
    for gone in (".jp-Widget", ":root", "--jp-icon", "display: none"):
        assert gone not in pruned, gone
    assert pruned.endswith('<div class="jupyter-wrapper"><div class="jp-Cell">x</div></div>')


def test_only_notebook_pages_are_pruned() -> None:
    html = f'<style>{STYLE}</style><p class="x">y</p>'
    assert load_hook("notebook_styles").on_page_content(html, ARTICLE, None, None) == html
    assert load_hook("notebook_styles").on_page_content(html, NOTEBOOK, None, None) != html


def test_the_playground_page_ships_a_tenth_of_jupyterlabs_css() -> None:
    page = (Path(build_site()) / "notebooks" / "playground" / "index.html").read_text()
    inline_css = sum(len(css) for css in re.findall(r"<style[^>]*>(.*?)</style>", page, re.DOTALL))
    assert inline_css < 60_000, f"{inline_css:,} characters of inline CSS"
    assert ".jp-OutputArea-output" in page  # the rules the page uses are kept
