"""Fenced blocks of the site's Markdown, read as pytest-codeblocks reads them: one parser for the site tests."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

COLLECTED_SYNTAXES = {"python", "sh", "bash"}  # what pytest-codeblocks 0.18 turns into tests

FENCE = re.compile(r"^[ \t]*(?P<fence>`{3,}|~{3,})(?P<info>.*)$")
MARKER = re.compile(r"^<!--[-\s]*(?P<marker>pytest(?:-codeblocks:|\.mark\.).*?)[-\s]*-->$")
INCLUDE = re.compile(
    r"""^[ \t]*-{1,}8<-{1,}[ \t]+(?P<quote>["'])(?P<target>[^"']+)(?P=quote)[ \t]*$"""
)


@dataclass
class Fence:
    """One fenced block: where it opens, its fence and info string, its body and the markers before it."""

    line: int
    fence: str
    info: str
    body: list[str]
    markers: list[str] = field(default_factory=list)
    joined: str | None = None  # "cont" or "expected-output": the block is not a test of its own

    @property
    def language(self) -> str:
        """The language as highlighters read it: the first word, or the first `.class` of `{...}`."""
        info = self.info.strip()
        if info.startswith("{"):
            match = re.search(r"\.([\w+-]+)", info)
            return match[1].lower() if match else ""
        return re.split(r"[\s{]", info, maxsplit=1)[0].lower() if info else ""

    @property
    def syntax(self) -> str | None:
        """What pytest-codeblocks reads as the syntax: the rest of the stripped line (backtick fences only)."""
        return self.info.rstrip() if self.fence[0] == "`" else None

    @property
    def is_test(self) -> bool:
        """pytest-codeblocks collects this block as a test of its own."""
        return self.syntax in COLLECTED_SYNTAXES and self.joined is None

    def includes(self) -> list[str]:
        """The snippet targets included by the body, if the body is nothing but includes; else []."""
        lines = [line for line in self.body if line.strip()]
        matches = [INCLUDE.match(line) for line in lines]
        if not lines or not all(matches):
            return []
        return [match["target"] for match in matches]


def parse_fences(text: str) -> list[Fence]:
    """Every fenced block of a Markdown text, at any indentation, with backticks or tildes (3 or more).

    Markers (`<!--pytest.mark...-->`, `<!--pytest-codeblocks:...-->`) attach to the fence that follows them, as
    pytest-codeblocks attaches them: marks wait for the next block that becomes a test of its own, and `cont`
    or `expected-output` joins the next fence, of any language, to the block before.
    """
    fences: list[Fence] = []
    pending_marks: list[str] = []
    joined: str | None = None
    lines = text.splitlines()
    index = 0
    while index < len(lines):
        stripped = lines[index].strip()
        marker = MARKER.match(stripped)
        if marker:
            keyword = marker["marker"]
            if keyword.startswith("pytest-codeblocks:") and keyword.split(":", 1)[1].strip(
                "- "
            ).startswith(("cont", "expected-output")):
                joined = keyword.split(":", 1)[1].strip("- ")
            else:
                pending_marks.append(keyword)
            index += 1
            continue
        opening = FENCE.match(lines[index])
        if not opening or (opening["fence"][0] == "`" and "`" in opening["info"]):
            index += 1
            continue
        fence = opening["fence"]
        closing = re.compile(rf"^[ \t]*{re.escape(fence[0])}{{{len(fence)},}}[ \t]*$")
        end = index + 1
        while end < len(lines) and not closing.match(lines[end]):
            end += 1
        block = Fence(index + 1, fence, opening["info"], lines[index + 1 : end], joined=joined)
        if joined is None:
            block.markers, pending_marks = pending_marks, []
        joined = None
        fences.append(block)
        index = end + 1
    return fences
