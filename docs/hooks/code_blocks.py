"""MkDocs hook: say on the page what the test markers say in comments, and what each article was checked with.

pytest-codeblocks reads HTML comments that a reader never sees. Two of them change what a block means to
someone who copies it, so the rendered page states them in the block's title bar:

- `<!--pytest-codeblocks:cont-->`: the block continues the one before it (run that one first);
- `<!--pytest-codeblocks:expected-output-->`: the block is the output of the one before it.

The Markdown on disk, which the tests read, is left as it is. Each article also gets a line under its title
with the link to Get started and the versions its code was checked with: qkv's is the version of the wheel
the site serves (`package_index.py` puts it in `config.extra`), PyTorch's and Python's the build's own.
"""

from __future__ import annotations

import datetime
import os
import platform
import re
from importlib.metadata import version

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import Files
from mkdocs.structure.pages import Page

POSTS = "blog/posts/"
CONTINUES = "Continues the block above"
OUTPUT = "Output"
TITLES = {"pytest-codeblocks:cont": CONTINUES, "pytest-codeblocks:expected-output": OUTPUT}
MARKED_FENCE = re.compile(
    r"^(?P<indent> *)<!--\s*(?P<marker>pytest-codeblocks:(?:cont|expected-output))\s*-->\n"
    r"(?P=indent)(?P<fence>`{3,})(?P<language>python|text)[ \t]*$",
    re.MULTILINE,
)
TITLE = re.compile(r"^# .+$", re.MULTILINE)


def titled(markdown: str) -> str:
    """Give each continuation block and each expected-output block its title bar."""

    def title(found: re.Match[str]) -> str:
        return f'{found[0]} title="{TITLES[found["marker"]]}"'

    return MARKED_FENCE.sub(title, markdown)


def checked_with(qkv_version: str) -> str:
    """What the site's tests run the articles' code with: qkv, PyTorch and Python, and the build date."""
    built = datetime.datetime.fromtimestamp(
        int(os.environ.get("SOURCE_DATE_EPOCH", datetime.datetime.now().timestamp())),
        tz=datetime.timezone.utc,
    ).date()
    return (
        f"qkv {qkv_version}, PyTorch {version('torch')} and Python {platform.python_version()}, "
        f"built {built.isoformat()}"
    )


def with_checked_note(markdown: str, qkv_version: str) -> str:
    """An article's Markdown with the Get started link and the versions (`checked_with`) under its title."""
    note = (
        "To run this page's code, [install `qkv`](../../get-started.md). "
        f"Its blocks are checked with {checked_with(qkv_version)}.\n{{ .qkv-checked }}"
    )
    return TITLE.sub(lambda heading: f"{heading[0]}\n\n{note}", markdown, count=1)


# --- the MkDocs hook ------------------------------------------------------------------------------------------


def on_page_markdown(markdown: str, page: Page, config: MkDocsConfig, files: Files) -> str:
    """Title the marked blocks; put the Get started link and the versions under an article's title."""
    markdown = titled(markdown)
    if not page.file.src_uri.startswith(POSTS):
        return markdown
    return with_checked_note(markdown, config.extra["qkv_version"])
