"""The figures as a reader on a 390 px phone sees them, in the light and the dark scheme.

Each figure of a post is two images (docs/hooks/steps/figures.py): the one of the reader's scheme shows, the other is
hidden and never fetched; the one shown loads, fits the column, and keeps the box its width and height
attributes reserved (no layout shift).
"""

from __future__ import annotations

import pytest
from playwright.sync_api import Browser

from tests.browser.conftest import Site, posts
from tests.browser.visit import lay_out_everything

PHONE = {"width": 390, "height": 844}

# The images load lazily: each one shown is brought on screen and decoded (loaded, or failed).
LOAD_SHOWN_FIGURES = """async () => {
  for (const img of document.querySelectorAll('article img[src*="/figures/"]')) {
    if (!img.checkVisibility()) continue;
    img.scrollIntoView();
    await img.decode().catch(() => null);
  }
}"""

FIGURES = """() => [...document.querySelectorAll('article img[src*="/figures/"]')].map((img) => {
  const box = img.getBoundingClientRect();
  return {
    src: img.getAttribute("src"),
    shown: getComputedStyle(img).display !== "none",
    loaded: img.complete && img.naturalWidth > 0,
    width: box.width,
    height: box.height,
    ratio: img.width / img.height,
    attributes: Number(img.getAttribute("width")) / Number(img.getAttribute("height")),
    column: img.closest("article").getBoundingClientRect().width,
    caption: img.closest("figure")?.querySelector("figcaption")?.textContent.trim() ?? "",
  };
})"""


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_each_figure_shows_its_scheme_and_fits_a_phone(
    site: Site, browser: Browser, scheme: str
) -> None:
    context = browser.new_context(viewport=PHONE, color_scheme=scheme, device_scale_factor=1)
    page = context.new_page()
    problems, shown_in_all = [], 0
    try:
        for post in posts():
            page.goto(site.url + post.path, wait_until="networkidle")
            lay_out_everything(page)  # so that the figures below the screen count as visible
            page.evaluate(LOAD_SHOWN_FIGURES)
            found = page.evaluate(FIGURES)
            shown = [image for image in found if image["shown"]]
            shown_in_all += len(shown)
            dark = [image["src"].endswith("-dark.svg#only-dark") for image in shown]
            if len(shown) * 2 != len(found) or set(dark) - {scheme == "dark"}:
                problems.append((post.path, "wrong variant shown", [i["src"] for i in shown]))
            for image in shown:
                if not image["loaded"]:
                    problems.append((post.path, "not loaded", image["src"]))
                if image["width"] > image["column"] + 0.5:
                    problems.append((post.path, "wider than the column", image))
                if abs(image["width"] / image["height"] - image["attributes"]) > 0.01:
                    problems.append((post.path, "box differs from its attributes", image))
                if not image["caption"]:
                    problems.append((post.path, "no caption", image["src"]))
            hidden = {image["src"] for image in found if not image["shown"]}
            fetched = page.evaluate(
                "() => performance.getEntriesByType('resource').map((entry) => entry.name)"
            )
            wasted = [
                url
                for url in fetched
                if any(url.endswith(src.split("#")[0].lstrip("./")) for src in hidden)
            ]
            if wasted:
                problems.append((post.path, "the other scheme's image was fetched", wasted))
    finally:
        context.close()
    assert not problems, problems
    assert shown_in_all >= 20
