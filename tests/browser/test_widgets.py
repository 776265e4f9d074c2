"""The interactive figures, driven as a reader drives them: the numbers they show are the ones qkv computes.

Each widget computes in the browser; these tests set its inputs to several values, read what it shows and
compare it with `qkv` (and with torch where the widget shows torch's behaviour), in Python. They also drive
each widget from the keyboard, scan it with axe in both colour schemes, fit it on a phone, and reach it by
Material's instant navigation.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator

import pytest
import torch
from playwright.sync_api import Browser, Page

import qkv
from qkv.kernels.tiles import classify_tiles
from tests.browser.conftest import Site
from tests.browser.visit import (
    AXE,
    COLOURS,
    DESKTOP,
    OVERFLOW,
    PHONE,
    VIOLATIONS,
    _serious,
    lay_out_everything,
    listening,
)
from tests.site.build import ROOT

MASKING = "blog/masking/"
LOOKUP = "blog/queries-keys-values/"
SCALING = "blog/scaling/"
FLASH = "blog/flash-attention/"
SMALL_GPT = "blog/small-gpt/"
WIDGETS = {
    "mask-builder": MASKING,
    "soft-lookup": LOOKUP,
    "scale-temperature": SCALING,
    "online-softmax": FLASH,
    "attention-heads": SMALL_GPT,
}
# What each convention of the mask builder writes in a cell where the query may attend, and where it may not.
SYMBOLS = {"sdpa": ("T", "F"), "mha": ("F", "T"), "inf": ("0", "\u2212\u221e"), "min": ("0", "min")}


@pytest.fixture(scope="module")
def tab(browser: Browser) -> Iterator[Page]:
    """One browser tab for this module's tests, each of which loads its page afresh in it.

    A new tab starts a renderer; loading a page in one that has loaded a page of the site before takes about
    a third of that (2026-11-26: 0.3-0.6 s against 0.8-1.2 s for a widget's page, on an idle machine).
    """
    context = browser.new_context(viewport=DESKTOP, color_scheme="light")
    yield context.new_page()
    context.close()


@pytest.fixture
def page(tab: Page) -> Iterator[Page]:
    """The module's tab, reset to a desktop in the light scheme, failing the test on a console error."""
    tab.set_viewport_size(DESKTOP)
    tab.emulate_media(color_scheme="light")
    errors: list[str] = []
    listeners = {
        "console": lambda message: message.type == "error" and errors.append(message.text),
        "pageerror": lambda error: errors.append(str(error)),
    }
    with listening(tab, listeners):
        yield tab
        tab.goto("about:blank")  # what the page still had to say is said before its errors are read
    assert not errors, f"console errors: {errors}"


# Every widget on the page is built (a widget that failed to start has no data-ready), and the fonts are in.
WIDGETS_BUILT = """async () => {
  await document.fonts.ready;
  return [...document.querySelectorAll(".md-content [data-ready]")]
    .every((root) => root.querySelector("[aria-live=polite]"));
}"""


def _open(page: Page, site: Site, path: str) -> None:
    page.goto(site.url + path, wait_until="load")
    page.wait_for_function(WIDGETS_BUILT)
    lay_out_everything(page)  # text is read from widgets that may sit below the screen


def _set(page: Page, root: str, settings: dict[str, object]) -> None:
    """Set the widget's inputs as a reader would: ranges by value (with an input event), selects by option."""
    for name, value in settings.items():
        control = page.locator(f"#{root}-{name}")
        if control.evaluate("el => el.tagName") == "SELECT":
            control.select_option(str(value))
        else:
            control.evaluate(
                "(el, v) => { el.value = v; el.dispatchEvent(new Event('input', {bubbles: true})); }",
                str(value),
            )


def _table(page: Page, selector: str) -> list[list[str]]:
    """The cells of a table's body, row by row, without the row headers."""
    return page.locator(selector).evaluate(
        "t => [...t.tBodies[0].rows].map(r => [...r.cells].filter(c => c.tagName === 'TD')"
        ".map(c => c.textContent))"
    )


def _assert_shown(shown: list[list[str]], expected: torch.Tensor, what: str) -> None:
    """Numbers shown with two decimals ("NaN" for NaN) match `expected` to the last digit shown."""
    assert [len(row) for row in shown] == [expected.size(1)] * expected.size(0), what
    for i, (shown_row, row) in enumerate(zip(shown, expected.tolist(), strict=True)):
        for j, (text, value) in enumerate(zip(shown_row, row, strict=True)):
            if value != value:  # NaN
                assert text == "NaN", f"{what} [{i}, {j}]: shown {text}, expected NaN"
            else:
                assert text != "NaN", f"{what} [{i}, {j}]: shown NaN, expected {value:.4f}"
                assert abs(float(text) - value) <= 0.005, (
                    f"{what} [{i}, {j}]: shown {text}, expected {value:.4f}"
                )


# Mask builder (masking article)

MASK_INPUTS = ("queries", "keys", "real", "side", "alignment", "window", "convention")
MASK_CASES = [
    (5, 5, 3, "left", "top_left", 0, "sdpa"),
    (5, 5, 3, "left", "top_left", 0, "mha"),
    (6, 4, 4, "right", "bottom_right", 0, "inf"),
    (6, 4, 4, "right", "bottom_right", 0, "min"),
    (3, 7, 6, "right", "bottom_right", 3, "sdpa"),
    (7, 7, 7, "right", "top_left", 2, "mha"),
    (4, 6, 0, "right", "none", 0, "min"),
    (8, 8, 5, "left", "top_left", 4, "inf"),
    (1, 1, 1, "right", "bottom_right", 1, "sdpa"),
]


def _masks(
    queries: int, keys: int, real: int, side: str, alignment: str, window: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """The structure `(L, S)` and the padding `(S,)`, as qkv builds them; True = may attend."""
    if alignment == "none":
        structure = torch.ones(queries, keys, dtype=torch.bool)
    elif window:
        structure = qkv.sliding_window_mask(queries, window, keys, alignment=alignment)
    else:
        structure = qkv.causal_mask(queries, keys, alignment=alignment)
    tokens = qkv.padding_mask(torch.tensor([real]), max_len=keys)[0, 0, 0]  # (1, 1, 1, S) -> (S,)
    return structure, tokens if side == "right" else tokens.flip(-1)


def _mask_weights(structure: torch.Tensor, tokens: torch.Tensor, convention: str) -> torch.Tensor:
    """`(L, S)` attention weights when every score is 0, computed by the library the convention names."""
    keep = structure & tokens
    queries, keys = keep.shape
    scores = torch.zeros(queries, keys)
    if convention == "sdpa":
        return qkv.attention_weights(torch.zeros(queries, 1), torch.zeros(keys, 1), attn_mask=keep)
    if convention == "mha":
        mha = torch.nn.MultiheadAttention(
            2, num_heads=1, batch_first=True
        )  # zero inputs: scores are 0
        _, weights = mha(
            torch.zeros(1, queries, 2),
            torch.zeros(1, keys, 2),
            torch.zeros(1, keys, 2),
            attn_mask=~structure,  # True = may NOT attend
            key_padding_mask=qkv.keep_to_key_padding(tokens[None]),  # (B, S), True = ignore
        )
        return weights[0].detach()
    if convention == "inf":
        return torch.softmax(scores + qkv.keep_to_additive(keep), dim=-1)
    return torch.softmax(scores.masked_fill(~keep, torch.finfo(torch.float32).min), dim=-1)


@pytest.mark.parametrize("case", MASK_CASES, ids=lambda case: "-".join(map(str, case)))
def test_mask_builder_shows_qkvs_mask_and_torchs_weights(
    page: Page, site: Site, case: tuple[object, ...]
) -> None:
    _open(page, site, MASKING)
    _set(page, "mask-builder", dict(zip(MASK_INPUTS, case, strict=True)))
    *inputs, convention = case
    structure, tokens = _masks(*inputs)
    keep = structure & tokens
    yes, no = SYMBOLS[convention]
    shown_mask = _table(page, "#mask-builder .qkv-mask")
    assert shown_mask == [[yes if k else no for k in row] for row in keep.tolist()]
    expected = _mask_weights(structure, tokens, convention)
    _assert_shown(_table(page, "#mask-builder .qkv-weights"), expected, f"weights {case}")
    empty = [f"q{i}" for i in range(keep.size(0)) if not keep[i].any()]
    summary = page.locator("#mask-builder [aria-live=polite]").inner_text()
    assert (", ".join(empty) in summary) if empty else summary.startswith("Every query")


# Soft lookup (queries-keys-values article)

LOOKUP_CASES = [
    (0.9, 0.1, 1.0),
    (0.0, 0.0, 1.0),
    (-2.0, 2.0, 1.0),
    (1.5, -0.7, 2**-0.5),
    (2.0, 2.0, 2**-0.5),
]


def _lookup(page: Page, x: float, y: float, scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    """qkv's scores and weights `(S, 2)` and its output `(1, 1)` for the widget's keys and values."""
    root = page.locator("#soft-lookup")
    keys = torch.tensor(root.evaluate("el => JSON.parse(el.dataset.keys)"), dtype=torch.float32)
    values = torch.tensor(root.evaluate("el => JSON.parse(el.dataset.values)"), dtype=torch.float32)
    query = torch.tensor([[x, y]])  # (L, d_k) = (1, 2)
    scores = query @ keys.T * scale  # (1, S)
    weights = qkv.attention_weights(query, keys, scale=scale)  # (1, S)
    output = qkv.scaled_dot_product_attention(query, keys, values[:, None], scale=scale)
    return torch.cat([scores, weights]).T, output


@pytest.mark.parametrize("case", LOOKUP_CASES, ids=lambda case: "_".join(f"{x:g}" for x in case))
def test_soft_lookup_shows_qkvs_scores_weights_and_output(
    page: Page, site: Site, case: tuple[float, float, float]
) -> None:
    _open(page, site, LOOKUP)
    x, y, scale = case
    _set(page, "soft-lookup", {"x": x, "y": y})
    page.locator("#soft-lookup-scale").select_option(index=0 if scale == 1 else 1)
    expected, output = _lookup(page, x, y, scale)
    shown = [row[:2] for row in _table(page, "#soft-lookup .qkv-lookup")]
    _assert_shown(shown, expected, f"scores and weights at {case}")
    _assert_shown([[page.locator("#soft-lookup .qkv-output").inner_text()]], output, "output")


def _query(page: Page) -> list[float]:
    return [float(page.locator(f"#soft-lookup-{axis}").input_value()) for axis in "xy"]


def test_soft_lookup_follows_the_pointer(page: Page, site: Site) -> None:
    _open(page, site, LOOKUP)
    # Press on the point (0, 1) of the plane (key k1), then drag to (-1, -1.5).
    point = "([x, y]) => { const p = document.querySelector('#soft-lookup svg').createSVGPoint();"
    point += " p.x = (x + 2) * 60; p.y = (2 - y) * 60;"
    point += (
        " const s = p.matrixTransform(document.querySelector('#soft-lookup svg').getScreenCTM());"
    )
    point += " return [s.x, s.y]; }"
    page.locator("#soft-lookup svg").scroll_into_view_if_needed()
    page.mouse.move(*page.evaluate(point, [0, 1]))
    page.mouse.down()
    assert _query(page) == [0.0, 1.0]
    page.mouse.move(*page.evaluate(point, [-1, -1.5]), steps=5)
    page.mouse.up()
    assert _query(page) == [-1.0, -1.5]
    expected, output = _lookup(page, -1.0, -1.5, 1.0)
    _assert_shown([row[:2] for row in _table(page, "#soft-lookup .qkv-lookup")], expected, "drag")
    _assert_shown([[page.locator("#soft-lookup .qkv-output").inner_text()]], output, "output")


def test_soft_lookup_fallback_without_javascript_is_qkvs_lookup(
    browser: Browser, site: Site
) -> None:
    context = browser.new_context(java_script_enabled=False)
    page = context.new_page()
    page.goto(site.url + LOOKUP, wait_until="networkidle")
    page.locator("#soft-lookup").scroll_into_view_if_needed()  # laid out as a reader reaches it
    expected, output = _lookup(page, 0.9, 0.1, 1.0)
    _assert_shown([row[1:3] for row in _table(page, "#soft-lookup table")], expected, "fallback")
    assert f"output {output.item():.2f}" in page.locator("#soft-lookup").inner_text()
    context.close()


# Scale and temperature (scaling article)

SCALE_INPUTS = ("dk", "scaled", "temperature", "keys")
SCALE_CASES = [
    (64, "yes", 1.0, 16),
    (64, "no", 1.0, 16),
    (1024, "no", 0.25, 32),
    (4, "yes", 4.0, 2),
    (256, "yes", 0.5, 8),
]


def _scale_numbers(page: Page, dk: int, scaled: str, temperature: float) -> list[float]:
    """qkv's numbers for the query and keys the widget drew: spread, max weight, entropy, e^H, sum|J|, |dp/dq|."""
    drawn = page.locator("#scale-temperature").evaluate("el => el.qkvInputs")
    query = torch.tensor(drawn["query"], dtype=torch.float64)  # (d_k,)
    keys = torch.tensor(drawn["keys"], dtype=torch.float64)  # (S, d_k)
    assert query.shape == (dk,)
    scale = (dk**-0.5 if scaled == "yes" else 1.0) / temperature

    def weights(q: torch.Tensor) -> torch.Tensor:  # (d_k,) -> (S,)
        return qkv.attention_weights(q[None], keys, scale=scale)[0]

    p = weights(query)
    entropy = torch.special.entr(p).sum().item()
    to_query = torch.autograd.functional.jacobian(weights, query)  # (S, d_k)
    return [
        (keys @ query * scale).std().item(),
        p.max().item(),
        entropy,
        math.exp(entropy),
        2 * (1 - (p**2).sum().item()),
        to_query.norm().item(),
    ]


def _assert_scale_numbers(page: Page, expected: list[float], what: object) -> None:
    """The six numbers shown (three significant digits) are qkv's."""
    shown = page.locator("#scale-temperature .qkv-numbers td").all_inner_texts()
    assert len(shown) == len(expected)
    for text, value in zip(shown, expected, strict=True):
        assert math.isclose(float(text), value, rel_tol=5.1e-3, abs_tol=1e-12), (
            f"{what}: shown {shown}, expected {[f'{x:.3g}' for x in expected]}"
        )
    tallest = page.locator("#scale-temperature .qkv-chart").nth(1).locator("rect").first
    assert abs(float(tallest.get_attribute("height")) / 90 - expected[1]) < 1e-3


@pytest.mark.parametrize("case", SCALE_CASES, ids=lambda case: "-".join(map(str, case)))
def test_scale_temperature_shows_qkvs_numbers(
    page: Page, site: Site, case: tuple[object, ...]
) -> None:
    _open(page, site, SCALING)
    _set(page, "scale-temperature", dict(zip(SCALE_INPUTS, case, strict=True)))
    dk, scaled, temperature, keys = case
    _assert_scale_numbers(page, _scale_numbers(page, dk, scaled, temperature), case)
    assert page.locator("#scale-temperature .qkv-chart rect").count() == 2 * keys
    before = page.locator("#scale-temperature").evaluate("el => el.qkvInputs.query")
    page.locator("#scale-temperature-redraw").click()
    assert page.locator("#scale-temperature").evaluate("el => el.qkvInputs.query") != before
    _assert_scale_numbers(page, _scale_numbers(page, dk, scaled, temperature), f"{case}, new draw")


def test_without_the_scale_wide_heads_saturate(page: Page, site: Site) -> None:
    """What the article teaches, seen in the figure: raw scores at d_k = 1024 give a near one-hot softmax."""
    _open(page, site, SCALING)
    largest = {}
    for scaled in ("yes", "no"):
        _set(page, "scale-temperature", {"dk": 1024, "scaled": scaled, "keys": 16})
        largest[scaled] = float(
            page.locator("#scale-temperature .qkv-numbers td").nth(1).inner_text()
        )
    assert largest["no"] > 0.9 > 0.5 > largest["yes"]


# Online softmax stepper (FlashAttention article)

BLOCK_M, BLOCK_N = 4, 2  # the widget's tiles


def _data(page: Page, root: str, name: str) -> torch.Tensor:
    return torch.tensor(
        page.locator(f"#{root}").evaluate(f"el => JSON.parse(el.dataset.{name})"),
        dtype=torch.float64,
    )


@pytest.mark.parametrize("mask", ["causal", "none"])
@pytest.mark.parametrize("block", [0, 1])
def test_online_softmax_steps_to_qkvs_attention(
    page: Page, site: Site, block: int, mask: str
) -> None:
    _open(page, site, FLASH)
    q, k = _data(page, "online-softmax", "queries"), _data(page, "online-softmax", "keys")
    v = _data(page, "online-softmax", "values")[:, None]  # (S, 1)
    L, S = q.size(0), k.size(0)  # noqa: N806 (the article's names)
    keep = qkv.causal_mask(L, S) if mask == "causal" else torch.ones(L, S, dtype=torch.bool)
    kinds = classify_tiles(L, S, BLOCK_M, BLOCK_N, causal=mask == "causal")[block]
    rows = slice(block * BLOCK_M, (block + 1) * BLOCK_M)
    _set(page, "online-softmax", {"block": block, "mask": mask})
    shown_kinds = page.locator("#online-softmax .qkv-tiles li").all_inner_texts()
    assert [text.rsplit(": ", 1)[1] for text in shown_kinds] == [
        "skipped" if kind == "empty" else kind for kind in kinds
    ]
    scores = (q @ k.T / q.size(-1) ** 0.5).masked_fill(~keep, float("-inf"))  # (L, S)
    for visited in range(len(kinds) + 1):
        _set(page, "online-softmax", {"step": visited})
        seen = visited * BLOCK_N
        shown = _table(page, "#online-softmax .qkv-online")  # m, alpha, l, o, o / l per row
        m = scores[rows, :seen].amax(dim=-1) if seen else torch.full((BLOCK_M,), float("-inf"))
        some = keep[rows, :seen].any(dim=-1)
        for r, row in enumerate(shown):
            assert row[0] == ("\u2212\u221e" if not some[r] else f"{m[r]:.3f}"), (visited, r, row)
            if not some[r]:
                assert row[2:] == ["0.000", "0.000", "\u2014"], (visited, r, row)
                continue
            previous = scores[rows][r, : seen - BLOCK_N].amax() if seen > BLOCK_N else -math.inf
            if kinds[visited - 1] == "empty":
                assert row[1] == "\u2014", (visited, r, row)
            else:
                _assert_shown([row[1:2]], torch.exp(previous - m[r : r + 1])[None], "alpha")
            lse = torch.logsumexp(scores[rows][r, :seen], dim=-1)
            out = qkv.scaled_dot_product_attention(
                q[rows][r : r + 1], k[:seen], v[:seen], attn_mask=keep[rows][r : r + 1, :seen]
            )
            expected = torch.stack(
                [torch.exp(lse - m[r]), torch.exp(lse - m[r]) * out[0, 0], out[0, 0]]
            )
            _assert_shown([row[2:]], expected[None], f"tile {visited}, row {r}")
    final = qkv.scaled_dot_product_attention(q, k, v, attn_mask=keep)[rows]  # (BLOCK_M, 1)
    _assert_shown([row[4:] for row in _table(page, "#online-softmax .qkv-online")], final, "output")


def test_online_softmax_next_button_steps_and_stops(page: Page, site: Site) -> None:
    _open(page, site, FLASH)
    button = page.locator("#online-softmax-next")
    for visited in range(1, 5):
        button.click()
        assert page.locator("#online-softmax-step").input_value() == str(visited)
    assert button.is_disabled()
    assert "skipped" in page.locator("#online-softmax [aria-live=polite]").inner_text()


# Attention heads (small GPT article)


@pytest.fixture(scope="module")
def head_maps() -> torch.Tensor:
    """The trained site GPT's weights over the widget's passage, `(layers, H, L, L)`, recomputed here."""
    from qkv_lab.gpt_attention import PASSAGE, attention_maps
    from qkv_lab.gpt_training import encode, trained_site_gpt

    model, _ = trained_site_gpt()  # the run the build drew its numbers from (qkv_lab.remember)
    return attention_maps(model, encode(PASSAGE)[None])[:, 0]


@pytest.mark.parametrize(("layer", "head", "query"), [(0, 0, 5), (1, 3, 46), (2, 1, 20), (0, 2, 1)])
def test_attention_heads_show_the_trained_models_weights(
    page: Page, site: Site, head_maps: torch.Tensor, layer: int, head: int, query: int
) -> None:
    _open(page, site, SMALL_GPT)
    _set(page, "attention-heads", {"query": query, "layer": layer, "head": head})
    summary = page.locator("#attention-heads [aria-live=polite]").inner_text()
    # the file holds each weight in percent with one decimal; the widget shows the largest, first of ties
    row = [round(100 * w, 1) for w in head_maps[layer, head, query, : query + 1].tolist()]
    top = row.index(max(row))
    assert f"gives {row[top]:.1f}% of its weight to byte {top} " in summary, summary
    weights = head_maps[layer, head]  # (L, L)
    previous = weights.diagonal(offset=-1).mean().item()  # the article's previous-byte score
    first = weights[1:, 0].mean().item()
    shown = [float(x) for x in re.findall(r"(\d+\.\d)%", summary)[1:]]
    assert shown == pytest.approx([100 * previous, 100 * first], abs=0.06), summary
    cells = page.locator("#attention-heads svg rect:not(.qkv-query-row)").count()
    drawn = [round(100 * w, 1) >= 0.5 for i, r in enumerate(weights.tolist()) for w in r[: i + 1]]
    assert cells == sum(drawn), "one cell per weight of at least 0.5%"


# Every widget


@pytest.mark.parametrize(
    ("root", "first", "second"),
    [
        ("mask-builder", "queries", "keys"),
        ("soft-lookup", "x", "y"),
        ("scale-temperature", "temperature", "keys"),
        ("online-softmax", "step", "next"),
        ("attention-heads", "query", "layer"),
    ],
)
def test_widget_is_operated_from_the_keyboard(
    page: Page, site: Site, root: str, first: str, second: str
) -> None:
    _open(page, site, WIDGETS[root])
    slider = page.locator(f"#{root}-{first}")
    slider.focus()
    before = slider.input_value()
    summary = page.locator(f"#{root} [aria-live=polite]").inner_text()
    page.keyboard.press("ArrowRight")
    assert slider.input_value() != before
    shown = page.locator(f"#{root} output[for='{root}-{first}']").inner_text()
    assert float(shown) == float(slider.input_value())
    assert page.locator(f"#{root} [aria-live=polite]").inner_text() != summary
    assert slider.evaluate("el => getComputedStyle(el).outlineStyle") != "none", "no visible focus"
    page.keyboard.press("Tab")
    assert page.evaluate("() => document.activeElement.id") == f"{root}-{second}"
    for control in page.locator(f"#{root}").locator("input, select").all():
        label = control.evaluate("el => el.labels.length && el.labels[0].textContent")
        assert label, f"{control.get_attribute('id')} has no label"


SETTINGS = {
    "mask-builder": {
        "queries": 8,
        "keys": 8,
        "real": 5,
        "side": "left",
        "alignment": "bottom_right",
    },
    "soft-lookup": {"x": -2, "y": 2},
    "scale-temperature": {"dk": 1024, "scaled": "no", "temperature": 0.25, "keys": 32},
    "online-softmax": {"block": 1, "mask": "causal", "step": 3},
    "attention-heads": {"layer": 1, "head": 2, "query": 30},
}


@pytest.mark.parametrize("root", WIDGETS)
def test_widget_fits_a_phone_and_passes_axe_in_both_schemes(
    page: Page, site: Site, root: str
) -> None:
    _open(page, site, WIDGETS[root])
    _set(page, root, SETTINGS[root])
    for scheme, options in (
        ("light", VIOLATIONS),
        ("dark", COLOURS),
    ):  # every rule, then colours again
        page.emulate_media(color_scheme=scheme)
        violations = _serious(AXE.run(page, context=f"#{root}", options=options))
        assert not violations, f"{scheme}: {violations}"
    page.set_viewport_size(PHONE)
    overflow = page.evaluate(OVERFLOW)
    assert overflow["excess"] <= 0, f"sideways scrolling on a phone: {overflow}"
    box = page.locator(f"#{root}").bounding_box()
    assert box["x"] >= 0, f"{root} sticks out on the left: {box}"
    assert box["x"] + box["width"] <= PHONE["width"], f"{root} sticks out on the right: {box}"


@pytest.mark.parametrize("root", WIDGETS)
def test_widget_is_built_after_instant_navigation(page: Page, site: Site, root: str) -> None:
    _open(page, site, "")
    page.evaluate("() => { window.qkvSamePage = true; }")
    page.locator(f'.md-content a[href$="{WIDGETS[root]}"]').first.click()
    page.wait_for_selector(f"#{root}[data-ready] [aria-live=polite]")
    assert page.evaluate("() => window.qkvSamePage === true"), "the link reloaded the whole page"
    lay_out_everything(page)
    assert page.locator(f"#{root} [aria-live=polite]").inner_text()


def test_readme_states_the_bytes_each_widget_adds() -> None:
    """The README's table of widget weights matches the files that are served."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    stylesheet = (ROOT / "docs" / "stylesheets" / "widgets.css").stat().st_size
    for root in WIDGETS:
        script = (ROOT / "docs" / "javascripts" / "widgets" / f"{root}.js").stat().st_size
        row = f"| `{root}.js` | {script:,} | {stylesheet:,} | {script + stylesheet:,} |"
        assert row in readme, f"README.md lacks the row {row}"
