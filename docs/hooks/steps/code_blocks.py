"""Build step: say on the page what the test markers say in comments, and what each article was checked with.

pytest-codeblocks reads HTML comments that a reader never sees. Two of them change what a block means to
someone who copies it, so the rendered page states them in the block's title bar:

- `<!--pytest-codeblocks:cont-->`: the block continues the one before it (run that one first);
- `<!--pytest-codeblocks:expected-output-->`: the block is the output of the one before it.

The Markdown on disk, which the tests read, is left as it is. Each article also gets a line under its title
with the link to Get started and the versions its code was checked with: qkv's is the version of the wheel
the site serves (`package_index.py` puts it in `config.extra`), PyTorch's and Python's the build's own.

On a phone, a line of code too long for the screen wraps under its own indentation (`hanging_lines`): each
line of a highlighted block becomes a `<span class="line">` that states its indentation (`style="--i:8"`),
its leading spaces a `<span class="indent">`, and docs/stylesheets/extra.css indents the line's wrapped rows
past it. CSS alone cannot: a `pre` has no
element per line, and no selector reads leading spaces. The text of a block, which the copy button gives,
is unchanged. A plain name (Pygments' token `n`), which the theme colours as the code around it, loses its
span: on the longest articles, 1,500-1,800 elements that the browser styled and laid out for nothing.
"""

from __future__ import annotations

import datetime
import html
import os
import platform
import re
import subprocess
from importlib.metadata import version
from pathlib import Path

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
# The code of a block that pymdownx.highlight wrote (mkdocstrings' signatures too), or of a notebook's code cell
# (mkdocs-jupyter's `highlight-ipynb`, a `pre` without `code`): Pygments' tokens in spans.
HIGHLIGHTED = re.compile(
    r'(?P<open><div class="[^"]*\bhighlight\b[^"]*">(?:<span class="filename">[^<]*</span>)?'
    r"<pre>(?:<span></span>)?(?P<code_tag><code>)?)(?P<code>.*?)(?P<close>(?(code_tag)</code>)</pre>)",
    re.DOTALL,
)
TAG = re.compile(r"(<[^>]+>)")
PLAIN_NAME = re.compile(r'<span class="n">([^<]*)</span>')
TAG_NAME = re.compile(r"<([a-z0-9]+)")


def titled(markdown: str) -> str:
    """Give each continuation block and each expected-output block its title bar."""

    def title(found: re.Match[str]) -> str:
        return f'{found[0]} title="{TITLES[found["marker"]]}"'

    return MARKED_FENCE.sub(title, markdown)


def _build_epoch() -> int:
    """The build's date in seconds: SOURCE_DATE_EPOCH, else the time of the commit being built, so that
    everyone who builds one commit writes the same pages (never the clock)."""
    if "SOURCE_DATE_EPOCH" in os.environ:
        return int(os.environ["SOURCE_DATE_EPOCH"])
    try:
        commit_time = subprocess.run(
            ["git", "log", "-1", "--format=%ct"],
            cwd=Path(__file__).resolve().parent,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        return int(commit_time)
    except (OSError, subprocess.CalledProcessError, ValueError) as error:
        raise RuntimeError(
            "the build date comes from SOURCE_DATE_EPOCH or the git commit: set SOURCE_DATE_EPOCH "
            f"to build outside a git checkout ({error})"
        ) from error


def checked_with(qkv_version: str) -> str:
    """What the site's tests run the articles' code with: qkv, PyTorch and Python, and the build date."""
    built = datetime.datetime.fromtimestamp(_build_epoch(), tz=datetime.timezone.utc).date()
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


def hanging_lines(page_html: str) -> str:
    """Each line of each highlighted code block in a `<span class="line">`, with its indentation in `--i`.

    A token that spans lines (a docstring) is closed at the end of each line and opened again on the next,
    so that every line is whole HTML. A blank line stays as it is. Plain names lose their span.
    """

    def lines_of(found: re.Match[str]) -> str:
        lines, line, open_tags = [], "", []
        for part in TAG.split(PLAIN_NAME.sub(r"\1", found["code"])):
            if part.startswith("</"):
                open_tags.pop()
                line += part
            elif part.startswith("<") and not part.endswith("/>"):
                open_tags.append(part)
                line += part
            else:
                *ended, line_start = part.split("\n")
                for text in ended:
                    closing = "".join(f"</{TAG_NAME.match(tag)[1]}>" for tag in reversed(open_tags))
                    lines.append(line + text + closing)
                    line = "".join(open_tags)
                line += line_start
        lines.append(line)
        return found["open"] + "\n".join(map(_line, lines)) + found["close"]

    return HIGHLIGHTED.sub(lines_of, page_html)


def _line(line: str) -> str:
    """A line of a block in its span; its leading spaces in a `.indent` span, which the CSS keeps from wrapping
    (a line that wrapped after them would leave its first row empty)."""
    text = html.unescape(TAG.sub("", line))
    if not text.strip():
        return line
    indent = len(text) - len(text.lstrip(" "))
    if not indent:
        return f'<span class="line">{line}</span>'
    parts = TAG.split(line)  # text at even places, tags between
    for place in range(0, len(parts), 2):
        rest = parts[place].lstrip(" ")
        if len(rest) < len(parts[place]):
            parts[place] = f'<span class="indent">{parts[place][: -len(rest) or None]}</span>{rest}'
        if rest:
            break
    return f'<span class="line" style="--i:{indent}">{"".join(parts)}</span>'
