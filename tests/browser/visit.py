"""Load one page of the built site in Chromium and record what a reader's browser sees and fetches.

`visit()` opens the page in a tab of `visitor()` (its cache off, so the bytes counted are those of a first
visit), waits for the network to settle, opens every fold and brings each code block on screen once, reads the
facts the tests check from the DOM, runs an axe-core scan (and the colour rules again in the dark scheme; text
colours by sample: see `scan`), then narrows the viewport to a phone's width and measures horizontal overflow.
Code blocks' wrapped lines are read at both widths (`WRAPPED_LINES`).
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import urlsplit

from axe_playwright_python.base import AxeResults
from axe_playwright_python.sync_playwright import Axe
from playwright.sync_api import Browser, Page, Request
from playwright.sync_api import Error as PlaywrightError

PHONE = {"width": 375, "height": 812}
DESKTOP = {"width": 1280, "height": 800}
# The site lets the browser skip the layout of off-screen blocks (`content-visibility: auto` in extra.css); the
# checks below measure every block, so the page is first told to lay out all of them, and not to clip them.
SKIPPABLE = (
    "article.md-content__inner > *, .jupyter-wrapper .jp-Cell,"
    " .doc-object > .doc-signature, .doc-contents > :not(.doc-children)"
)
LAY_OUT_EVERYTHING = f"{SKIPPABLE} {{ content-visibility: visible !important; }} :where({SKIPPABLE}) {{ overflow: visible; }}"
MATH_TIMEOUT_MS = 20_000


def lay_out_everything(page: Page) -> None:
    """Have `page` lay out (and not clip) every block, on screen or not, as the checks that read them need.

    Laying a formula out is what fetches its font: wait for the fonts, so that the checks measure the blocks as
    they end up, not in the fallback font of a busy machine's first frames.
    """
    page.add_style_tag(content=LAY_OUT_EVERYTHING)
    page.evaluate(
        "async () => { document.body.getBoundingClientRect(); await document.fonts.ready; }"
    )


AXE = Axe()
VIOLATIONS = {"resultTypes": ["violations"]}  # every rule
COLOUR_RULES = ("color-contrast", "link-in-text-block")
COLOURS = {"runOnly": list(COLOUR_RULES), "resultTypes": ["violations"]}
NOT_COLOURS = {"rules": {rule: {"enabled": False} for rule in COLOUR_RULES}, **VIOLATIONS}

# axe's colour rules cost a few milliseconds for each element that holds text, and a page has thousands: the
# API reference's 1,952 inline `code` elements made its two colour scans 18 of the 22 s its visit took, and
# the token spans of the code blocks half of the FlashAttention article's. Two elements whose computed text
# colour, size, weight, opacity, shadow and decoration agree, under ancestors whose text colours, backgrounds
# and opacities agree, are drawn in the same colours on the same background (in the normal flow, which the
# site's text is in), so the colour rules check one element of each such kind, by sample; every other rule
# checks the whole page. Run again after a change of scheme: the kinds are those of the colours shown. Colours
# are read at their end (Material's links would otherwise fade to a new colour for 125 ms).
MARK_TEXT_SAMPLES = """() => {
  if (!document.getElementById("qkv-no-transitions")) {
    const style = document.head.appendChild(document.createElement("style"));
    style.id = "qkv-no-transitions";
    style.textContent = "*, ::before, ::after { transition: none !important; }";
  }
  const chains = new Map();
  const chain = (el) => {
    if (!el) return "";
    if (!chains.has(el)) {
      const s = getComputedStyle(el);
      chains.set(el, `${s.color} ${s.backgroundColor} ${s.backgroundImage} ${s.opacity}/${chain(el.parentElement)}`);
    }
    return chains.get(el);
  };
  const kinds = new Set();
  for (const el of document.querySelectorAll("[data-contrast-sample]")) delete el.dataset.contrastSample;
  for (const el of document.body.querySelectorAll("*")) {
    if (![...el.childNodes].some((node) => node.nodeType === Node.TEXT_NODE && node.data.trim())) continue;
    const s = getComputedStyle(el);
    const kind = [el.localName === "a", s.color, s.fontSize, s.fontWeight, s.opacity, s.textShadow,
                  s.textDecorationLine, chain(el.parentElement)].join("|");
    if (!kinds.has(kind)) { kinds.add(kind); el.dataset.contrastSample = ""; }
  }
  return kinds.size;
}"""
TEXT_SAMPLES = {"include": [["[data-contrast-sample]"]]}


def scan(page: Page, colours_only: bool = False) -> list[str]:
    """The serious axe violations on `page`: its text's colours by sample (above), then, unless
    `colours_only`, every other rule on the whole page."""
    page.evaluate(MARK_TEXT_SAMPLES)
    found = _serious(AXE.run(page, context=TEXT_SAMPLES, options=COLOURS))
    if not colours_only:
        found += _serious(AXE.run(page, options=NOT_COLOURS))
    return found


# Every formula typeset: each `.arithmatex` holds MathJax output, and no TeX delimiter is left in the text
# outside code. The text is read from a copy of the article with code, MathJax output and scripts removed.
MATH_STATE = """() => {
  const article = document.querySelector("article") || document.body;
  const copy = article.cloneNode(true);
  copy.querySelectorAll("pre, code, script, style, mjx-container, textarea").forEach((el) => el.remove());
  const raw = copy.textContent.match(/\\$\\$|\\\\\\(|\\\\\\[|\\\\begin\\{|\\$[^$\\s][^$]*\\$/g) || [];
  const math = [...document.querySelectorAll(".arithmatex")];
  return {
    raw: raw.slice(0, 5),
    untypeset: math.filter((el) => !el.querySelector("mjx-container")).map((el) => el.textContent.slice(0, 80)),
    formulas: document.querySelectorAll("mjx-container:not(mjx-container mjx-container)").length,
    nested: document.querySelectorAll("mjx-container mjx-container").length,
  };
}"""

MATH_DONE = f"""() => {{
  const state = ({MATH_STATE})();
  return state.raw.length === 0 && state.untypeset.length === 0;
}}"""

# Material sets up a code block (its copy button) when the block first comes on screen (mkdocs.yml:
# content.lazy), so a reader's scroll through the page is replayed, every fold opened (an exercise's answer
# or solution): each block not yet set up is brought on screen for two frames (the blocks on screen with it
# are set up at the same time).
SHOW_EVERY_CODE_BLOCK = """async () => {
  for (const fold of document.querySelectorAll(".md-content details:not([open])")) fold.open = true;
  for (const pre of document.querySelectorAll(".md-content pre")) {
    if (pre.querySelector("button.md-code__button")) continue;
    pre.scrollIntoView();
    await new Promise((done) => requestAnimationFrame(() => requestAnimationFrame(done)));
  }
  window.scrollTo(0, 0);
}"""

DOM_FACTS = """() => {
  const blocks = [...document.querySelectorAll(".md-content pre")]
    .filter((pre) => !pre.closest(".jp-OutputArea"));
  return {
    code_blocks: blocks.length,
    // Material adds its copy button to Markdown code blocks; mkdocs-jupyter gives each notebook input cell
    // its own <clipboard-copy> element.
    without_copy: blocks
      .filter((pre) => !pre.querySelector('button.md-code__button[data-md-type="copy"]'))
      .filter((pre) => !(pre.closest(".jp-InputArea")?.querySelector("clipboard-copy")
                         && customElements.get("clipboard-copy")))
      .map((pre) => pre.textContent.trim().slice(0, 60)),
    images: [...document.images].map((img) => ({alt: img.getAttribute("alt"), src: img.src.slice(0, 200)})),
    headings: [...document.querySelectorAll("h1, h2, h3, h4, h5, h6")]
      .map((h) => ({level: Number(h.tagName[1]), text: h.textContent.replace("¶", "").trim()})),
  };
}"""

# At desktop width, what the content column cuts off: a code block, a table or a display formula wider than
# its box (each of them would scroll inside itself rather than show everything).
CLIPPED = """() => [...document.querySelectorAll(
    ".md-content pre > code, .md-content .md-typeset__table, .md-content div.arithmatex")]
  .filter((el) => el.scrollWidth > el.clientWidth + 1)
  .map((el) => `${el.tagName.toLowerCase()} ${el.scrollWidth - el.clientWidth} px: `
                + el.textContent.trim().slice(0, 50))"""

# The lines of the code blocks that `selector` finds that take more than one row, and whether each such line's
# wrapped rows start right of its first character (a hanging indent) or at or left of it (where a line of its
# own, less indented, would start). A block that takes no more rows than it has lines is passed over unread.
WRAPPED_LINES = """(selector) => {
  const found = [];
  for (const code of document.querySelectorAll(selector)) {
    const style = getComputedStyle(code);
    const rowHeight = parseFloat(style.lineHeight);
    const height = code.clientHeight - parseFloat(style.paddingTop) - parseFloat(style.paddingBottom);
    if (Math.round(height / rowHeight) <= code.textContent.replace(/\\n$/, "").split("\\n").length) continue;
    const lines = [[]];  // each line: its pieces of text nodes, [node, start, end]
    const walker = document.createTreeWalker(code, NodeFilter.SHOW_TEXT);
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      if (node.parentElement.closest("button")) continue;
      let start = 0;
      for (let i = node.data.indexOf("\\n"); i >= 0; i = node.data.indexOf("\\n", start)) {
        if (i > start) lines.at(-1).push([node, start, i]);
        lines.push([]);
        start = i + 1;
      }
      if (node.data.length > start) lines.at(-1).push([node, start, node.data.length]);
    }
    const range = document.createRange();
    for (const pieces of lines) {
      const text = pieces.map(([node, start, end]) => node.data.slice(start, end)).join("");
      if (!text.trim()) continue;
      const rects = pieces.flatMap(([node, start, end]) => {
        range.setStart(node, start);
        range.setEnd(node, end);
        return [...range.getClientRects()].filter((rect) => rect.width > 0);
      });
      const tops = rects.map((rect) => rect.top).sort((a, b) => a - b);
      const rows = tops.filter((top, i) => i === 0 || top > tops[i - 1] + rowHeight / 2);
      if (rows.length < 2) continue;
      const [node, start] = pieces.find(([node, start, end]) => node.data.slice(start, end).trim());
      const first = start + node.data.slice(start).search(/\\S/);
      range.setStart(node, first);
      range.setEnd(node, first + 1);
      const indent = range.getBoundingClientRect().left;
      const wrappedLeft = Math.min(...rects.filter((rect) => rect.top > rows[0] + rowHeight / 2)
        .map((rect) => rect.left));
      found.push({rows: rows.length, hangs: wrappedLeft > indent + 1, text: text.trim().slice(0, 60)});
    }
  }
  return found;
}"""
TITLED_CODE = ".md-content .highlight:has(> .filename) > pre > code"
# every code block: Markdown's and the API reference's (`pre > code`), a notebook page's code cells (`pre` alone)
ANY_CODE = ".md-content pre > code, .md-content .highlight-ipynb > pre"

OVERFLOW = """async () => {
  await new Promise((done) => requestAnimationFrame(() => requestAnimationFrame(done)));
  const root = document.documentElement;
  const sticksOut = (el) => el.getBoundingClientRect().right > root.clientWidth + 1;
  // The outermost elements that stick out: what to fix when the page scrolls sideways.
  const culprits = [...document.querySelectorAll("body *")]
    .filter((el) => sticksOut(el) && !sticksOut(el.parentElement))
    .map((el) => el.tagName.toLowerCase() + "." + [...el.classList].join("."));
  return {excess: root.scrollWidth - root.clientWidth, widest: culprits.slice(0, 3)};
}"""


# Every change of a link's or an asset's URL on the page, from before its first script runs: Material's instant
# navigation rewrites each relative one at start-up, unless the build has written them absolute
# (docs/hooks/steps/absolute_urls.py). Rewrites that leave the value as it was (a `data:` URL set to itself) are not
# changes.
RECORD_URL_CHANGES = """
window.__urlChanges = [];
new MutationObserver((records) => {
  for (const r of records) {
    const now = r.target.getAttribute(r.attributeName);
    if (now !== r.oldValue) window.__urlChanges.push(`<${r.target.localName} ${r.attributeName}="${r.oldValue}"> -> ${now}`);
  }
}).observe(document, {subtree: true, attributes: true, attributeFilter: ["href", "src"], attributeOldValue: true});
"""


@dataclasses.dataclass
class Visit:
    """What loading one page did and showed."""

    path: str
    requests: list[str] = dataclasses.field(default_factory=list)
    failed: list[str] = dataclasses.field(default_factory=list)
    console_errors: list[str] = dataclasses.field(default_factory=list)
    bytes: int = 0
    formulas: int = 0
    untypeset: list[str] = dataclasses.field(default_factory=list)
    raw_tex: list[str] = dataclasses.field(default_factory=list)
    nested_math: int = 0
    code_blocks: int = 0
    without_copy: list[str] = dataclasses.field(default_factory=list)
    images: list[dict[str, str]] = dataclasses.field(default_factory=list)
    headings: list[dict[str, object]] = dataclasses.field(default_factory=list)
    violations: list[str] = dataclasses.field(default_factory=list)
    clipped: list[str] = dataclasses.field(default_factory=list)
    wrapped_titled: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    phone_wrapped: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    phone_overflow: int = 0
    phone_widest: list[str] = dataclasses.field(default_factory=list)
    url_changes: list[str] = dataclasses.field(default_factory=list)

    def foreign_requests(self, base_url: str) -> list[str]:
        """Requests to any host other than the one serving the site (data: and blob: URLs are local)."""
        local = urlsplit(base_url).netloc
        return [
            url
            for url in self.requests
            if urlsplit(url).scheme not in ("data", "blob") and urlsplit(url).netloc != local
        ]


@contextlib.contextmanager
def visitor(browser: Browser, base_url: str) -> Iterator[Page]:
    """A browser tab in which `visit` loads pages of the site at `base_url` one after another.

    Each visit is a first one: the tab's HTTP cache is off (every visit fetches, and counts, all it needs) and
    its storage is cleared after each. A request to another host is refused. One tab for many visits starts
    one renderer, not one per page (0.6 s a page, 2026-11-26).
    """
    context = browser.new_context(viewport=DESKTOP, color_scheme="light")
    local = urlsplit(base_url).netloc
    context.route(lambda url: urlsplit(url).netloc != local, lambda route: route.abort())
    tab = context.new_page()
    devtools = context.new_cdp_session(tab)
    devtools.send("Network.enable")
    devtools.send("Network.setCacheDisabled", {"cacheDisabled": True})
    tab.add_init_script(RECORD_URL_CHANGES)
    try:
        yield tab
    finally:
        context.close()


def visit(tab: Page, base_url: str, path: str) -> Visit:
    """Load `base_url + path` in `tab` (from `visitor`) and record the `Visit`."""
    record = Visit(path)
    finished: list[Request] = []
    listeners = {
        "request": lambda request: record.requests.append(request.url),
        "requestfinished": lambda request: finished.append(request),
        "requestfailed": lambda r: record.failed.append(f"{r.url} ({r.failure})"),
        "response": lambda r: r.status >= 400 and record.failed.append(f"{r.url} ({r.status})"),
        "console": lambda m: m.type == "error" and record.console_errors.append(m.text),
        "pageerror": lambda error: record.console_errors.append(str(error)),
    }
    tab.set_viewport_size(DESKTOP)
    tab.emulate_media(color_scheme="light")
    try:
        with listening(tab, listeners):
            _record(tab, base_url + path, record, finished)
    finally:
        with contextlib.suppress(PlaywrightError):
            tab.evaluate("() => { localStorage.clear(); sessionStorage.clear(); }")
        tab.goto("about:blank")
    return record


@contextlib.contextmanager
def listening(tab: Page, listeners: dict[str, Callable[[Any], object]]) -> Iterator[None]:
    """`listeners` (event name -> handler) on `tab` for the block only: the tab outlives the visit or test."""
    for event, listener in listeners.items():
        tab.on(event, listener)
    try:
        yield
    finally:
        for event, listener in listeners.items():
            tab.remove_listener(event, listener)


def _record(page: Page, url: str, record: Visit, finished: list[Request]) -> None:
    page.goto(url, wait_until="networkidle")
    # The page's weight: what opening it fetches, before the reader scrolls (lazy figures further down and
    # the other scheme's figures come later, if ever).
    record.bytes = sum(_body_size(request) for request in finished)
    record.url_changes = page.evaluate("window.__urlChanges")
    lay_out_everything(page)
    page.evaluate(SHOW_EVERY_CODE_BLOCK)
    math = page.evaluate(MATH_STATE)
    record.formulas, record.nested_math = math["formulas"], math["nested"]
    record.untypeset, record.raw_tex = math["untypeset"], math["raw"]
    facts = page.evaluate(DOM_FACTS)
    record.code_blocks, record.without_copy = facts["code_blocks"], facts["without_copy"]
    record.images, record.headings = facts["images"], facts["headings"]
    record.violations = scan(page)
    record.clipped = page.evaluate(CLIPPED)
    record.wrapped_titled = page.evaluate(WRAPPED_LINES, TITLED_CODE)
    # The same page as a reader whose system prefers dark colours sees it (the palette follows the system
    # until the reader picks one): colour contrast again.
    page.emulate_media(color_scheme="dark")
    page.wait_for_function("() => document.body.dataset.mdColorScheme === 'slate'")
    record.violations += [f"dark: {v}" for v in scan(page, colours_only=True)]
    page.set_viewport_size(PHONE)
    overflow = page.evaluate(OVERFLOW)
    record.phone_overflow, record.phone_widest = overflow["excess"], overflow["widest"]
    record.phone_wrapped = page.evaluate(WRAPPED_LINES, ANY_CODE)


def _serious(results: AxeResults) -> list[str]:
    return [
        f"{v['id']} ({v['impact']}, {len(v['nodes'])} nodes: {v['nodes'][0]['target']}): {v['help']}"
        for v in results.response["violations"]
        if v["impact"] in ("serious", "critical")
    ]


def _body_size(request: Request) -> int:
    """Bytes of the response body as transferred (the test server sends no compression)."""
    return max(request.sizes()["responseBodySize"], 0)
