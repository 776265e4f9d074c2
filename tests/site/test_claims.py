"""The ledger of claims: every sentence of an article that states something checkable says how it is backed.

Each article `docs/blog/posts/<stem>.md` has a ledger `tests/site/claims/<stem>.yml`, a YAML list in the
article's order. An entry quotes a piece of the article's Markdown source and names its backing:

```yaml
- claim: "the soft lookup returns 19.2"   # verbatim source; whitespace and line breaks may differ
  kind: assert                            # a Python block on the page checks it
  block: "-> 19.2"                        # a substring of that block or of its expected output
- claim: "introduced it to let a translation model"
  kind: citation                          # a fact from a paper or a library's documentation
  source: "Bahdanau et al., 2015, ICLR, §1"   # authors, year, venue, section/table/figure
- claim: "ran 3.1x faster"
  kind: benchmark                         # a number drawn from a recorded run
  report: "decoding"                      # the name given to qkv_lab.results.recorded(...)
- claim: "on three keys in two dimensions"
  kind: setting                           # a value the page chose: a width, a seed, a length
  block: "keys = torch.tensor("           # the block that uses it
- claim: "a heat map of 64 positions"
  kind: setting
  file: "docs/figures/positions.py"       # not on the page: a figure script, a module or a test
  block: "N = 64"                         # a substring of that file
- claim: "the package's tests check it against torch"
  kind: assert
  file: "tests/library/test_flash.py"
  block: "def test_matches_torch"         # in a file, an assert statement or a test function
- claim: "failed two of 236"
  kind: benchmark
  report: "benchmarks/gpu/2026-11-25-h100/tests.txt"   # a recorded file (under benchmarks/ or the results)
  shows: "2 failed, 234 passed"           # optional: what the record must say
```

Quote a claim that holds double quotes with single quotes (`'...'`, a `'` doubled inside). Any entry may carry
`todo: "what is missing"`: the backing it names is then not checked (rules 2-4), and the entries are counted
in a warning instead of failing; the claim must still be on the page.

The rules (`entry_problems` checks 1-4 and the schema, `uncovered` checks 5), each with a companion test
below that feeds it a small fake article and shows that it can fail:

1. `claim` occurs in the article (both sides with whitespace collapsed) exactly once, unless it is a whole
   prose sentence that the page repeats (a caption shown again as a widget's fallback), and the entries come
   in the article's order.
2. `assert` and `setting`: `block` occurs in exactly one runnable ```` ```python ```` block of the article
   (a fence whose info string is exactly `python`), counted together with the expected output that
   follows it (`<!--pytest-codeblocks:expected-output-->`); for `assert`, that block contains `assert` or has
   an expected output. Whitespace is collapsed on both sides. With `file` (a path from the repository's
   root, under `docs/blog/posts/`, `docs/figures/`, `docs/javascripts/`, `src/` or `tests/`), `block`
   occurs in that file instead: another article's blocks run with the site's tests, a figure script and its
   asserts whenever the site is built, a widget's script in the browser tests, a test with the tests. For `assert`,
   `block` is then itself an assert statement (it contains `assert`) or names a test (`def test_...`, in a
   file under `tests/`).
3. `citation`: `source` is not empty and its first word (the first author's surname, or the library's name)
   appears in the article's `## References` list (anywhere in the article if it has none).
4. `benchmark`: the recorded report exists: `report` names a report of `qkv_lab.results` (`report_path`)
   or, holding a `/`, a recorded file under `benchmarks/` or `src/qkv_lab/results/`; with `shows`, that
   file's text holds it (whitespace collapsed).
5. Coverage: every prose sentence that contains a digit 0-9 is covered by an entry: an entry's claim occurs in
   the sentence, or the sentence occurs in the claim. Sentences with digits that claim nothing (a section
   number, a seed) are listed as `setting`.

What counts as prose, and where sentences end (`prose_sentences`): the front matter, fenced blocks (with their
expected output), headings, HTML comments, lines of raw HTML, footnote and link definitions (`[x]: ...`),
`/// caption` markers and everything from `## References` to the next heading of level 1 or 2 are left out.
A paragraph ends at a blank line and wherever a list item, a table row, a block quote or an admonition begins
(list markers are dropped); each table row is one sentence. Inside a paragraph, a sentence ends after `.`, `?`
or `!` (and any closing `)`, quote, `*` or `_`) followed by a space and then an upper-case letter or `$`
(optionally behind `*`, `_`, a quote or `[`). The digits are looked for after inline code spans, link and image
targets `(...)` and autolinks are removed; math is kept, so `$d_k = 64$` states a number.
"""

from __future__ import annotations

import functools
import itertools
import re
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from tests.site.markdown import FENCE, parse_fences

ROOT = Path(__file__).resolve().parents[2]
POSTS = ROOT / "docs" / "blog" / "posts"
LEDGERS = Path(__file__).resolve().parent / "claims"

KINDS = {"assert": "block", "setting": "block", "citation": "source", "benchmark": "report"}
OPTIONAL = {"assert": {"file"}, "setting": {"file"}, "citation": set(), "benchmark": {"shows"}}
SOURCE_FOLDERS = ("docs/blog/posts/", "docs/figures/", "docs/javascripts/", "src/", "tests/")
RECORD_FOLDERS = ("benchmarks/", "src/qkv_lab/results/")  # where a recorded file may be


def report_path(name: str) -> Path:
    """The file of the recorded benchmark report `name` (what `qkv_lab.results.recorded(name)` reads)."""
    return ROOT / "src" / "qkv_lab" / "results" / f"{name}.json"


def read_repository_file(path: str) -> str | None:
    """The text of the file at `path` (from the repository's root), or None if there is none."""
    file = ROOT / path
    return file.read_text(encoding="utf-8") if ".." not in path and file.is_file() else None


# --- reading an article -------------------------------------------------------------------------------------

FRONT_MATTER = re.compile(r"\A---\n.*?\n---\n", re.DOTALL)
HEADING = re.compile(r"^\s{0,3}(?P<level>#{1,6})\s+(?P<title>.*?)\s*#*\s*$")
RAW_HTML = re.compile(r"^\s*</?[A-Za-z][\w-]*(?:[\s>]|/?>|$)")
DEFINITION = re.compile(r"^\s*\[[^\]]+\]:\s")
CAPTION = re.compile(r"^\s*///")
TABLE_ROW = re.compile(r"^\s*\|")
BLOCK_START = re.compile(r"^\s*(?:[-*+]\s+|\d+[.)]\s+|>\s?|(?:!!!|\?\?\?\+?|===)\s)")
SENTENCE_END = re.compile('[.?!][)"\u201d\u2019*_]*(?=\\s+[*_"\u201c\\[]*[A-Z$])')
CODE_SPAN = re.compile(r"(`+).+?\1")
LINK_TARGET = re.compile(r"\]\([^)]*\)|\]\[[^\]]*\]")
AUTOLINK = re.compile(r"<(?:https?|mailto):[^>]*>")
DIGIT = re.compile(r"[0-9]")


def collapse(text: str) -> str:
    """The text with every run of whitespace (line breaks included) made one space."""
    return " ".join(text.split())


@dataclass
class Sentence:
    line: int  # where it starts in the article (1-based)
    source: str  # its Markdown source, whitespace collapsed
    bare: str  # the source without inline code, link targets and autolinks: where digits count

    @property
    def has_digit(self) -> bool:
        return bool(DIGIT.search(self.bare))


def split_sentences(lines: list[tuple[int, str]]) -> list[Sentence]:
    """The sentences of one paragraph, given as (line number, text) pairs."""
    joined, starts = "", []
    for number, text in lines:
        starts.append((len(joined), number))
        joined += text.strip() + " "
    cuts = [0, *(match.end() for match in SENTENCE_END.finditer(joined)), len(joined)]
    sentences = []
    for begin, end in itertools.pairwise(cuts):
        source = collapse(joined[begin:end])
        if source:
            offset = begin + len(joined[begin:end]) - len(joined[begin:end].lstrip())
            line = max(number for start, number in starts if start <= offset)
            bare = AUTOLINK.sub(" ", LINK_TARGET.sub("]", CODE_SPAN.sub(" ", source)))
            sentences.append(Sentence(line, source, bare))
    return sentences


def prose_sentences(text: str) -> list[Sentence]:
    """Every sentence of the article's prose, by the rules in this module's docstring."""
    front = FRONT_MATTER.match(text)
    skipped = front.group().count("\n") if front else 0
    paragraphs: list[list[tuple[int, str]]] = [[]]
    fence = None
    in_comment = in_references = False
    for number, line in enumerate(text.splitlines()[skipped:], start=skipped + 1):
        if fence:
            if re.match(rf"^[ \t]*{re.escape(fence[0])}{{{len(fence)},}}[ \t]*$", line):
                fence = None
            continue
        if in_comment:
            if "-->" not in line:
                continue
            line, in_comment = line.split("-->", 1)[1], False
        line = re.sub(r"<!--.*?-->", " ", line)
        if "<!--" in line:
            line, in_comment = line.split("<!--", 1)[0], True
        opening = FENCE.match(line)
        heading = HEADING.match(line)
        if opening and not (opening["fence"][0] == "`" and "`" in opening["info"]):
            fence = opening["fence"]
        elif heading:
            if len(heading["level"]) <= 2:
                in_references = heading["title"].strip() == "References"
        elif in_references or RAW_HTML.match(line) or DEFINITION.match(line) or CAPTION.match(line):
            pass
        elif TABLE_ROW.match(line):
            paragraphs += [[(number, line)], []]
            continue
        elif BLOCK_START.match(line):
            paragraphs.append([(number, BLOCK_START.sub("", line, count=1))])
            continue
        elif line.strip():
            paragraphs[-1].append((number, line))
            continue
        paragraphs.append([])
    return [sentence for paragraph in paragraphs for sentence in split_sentences(paragraph)]


@dataclass
class Block:
    """A runnable python block, with the expected output that pytest-codeblocks compares after it."""

    line: int
    code: str
    output: str = ""

    def has(self, needle: str) -> bool:
        return needle in collapse(self.code) or needle in collapse(self.output)

    @property
    def checks(self) -> bool:
        return "assert" in self.code or bool(self.output)


def python_blocks(text: str) -> list[Block]:
    """The article's runnable ```python blocks (info string exactly `python`), each with its output."""
    blocks: list[Block] = []
    for fence in parse_fences(text):
        body = "\n".join(fence.body)
        if fence.joined == "expected-output" and blocks:
            blocks[-1].output += body + "\n"
        elif fence.joined != "expected-output" and fence.syntax == "python":
            blocks.append(Block(fence.line, body))
    return blocks


def references(text: str) -> str:
    """The article's `## References` section, or the whole article if it has none."""
    match = re.search(r"^##\s+References\s*$(?P<body>.*?)(?=^#{1,2}\s|\Z)", text, re.M | re.S)
    return match["body"] if match else text


# --- the rules ----------------------------------------------------------------------------------------------


def entry_problems(
    text: str,
    entries: object,
    read: Callable[[str], str | None] = read_repository_file,
) -> list[str]:
    """Why the ledger `entries` does not hold for the article `text` (rules 1-4 and the schema); [] if it does."""
    if not isinstance(entries, list):
        return ["the ledger is not a YAML list of entries"]
    article = collapse(text)
    blocks = python_blocks(text)
    cited = references(text)
    whole = {sentence.source for sentence in prose_sentences(text)}
    problems = []
    last = 0
    for number, entry in enumerate(entries, start=1):
        where = f"entry {number}"
        if not isinstance(entry, dict) or not isinstance(entry.get("claim"), str):
            problems.append(f"{where}: not a mapping with a `claim` string")
            continue
        claim = collapse(entry["claim"])
        where = f"entry {number} ({claim[:60]!r})"
        kind = entry.get("kind")
        if kind not in KINDS:
            problems.append(f"{where}: kind {kind!r} is not one of {sorted(KINDS)}")
            continue
        todo = entry.get("todo")
        allowed = {"claim", "kind", KINDS[kind], "todo", *OPTIONAL[kind]}
        if unknown := sorted(set(entry) - allowed):
            problems.append(f"{where}: keys {unknown} do not belong to a {kind} entry")
        if "todo" in entry and not (isinstance(todo, str) and todo.strip()):
            problems.append(f"{where}: `todo` must say what is missing")
        # rule 1: the claim is on the page, once (or is a sentence the page repeats), in order
        count = article.count(claim) if claim else 0
        if count == 0 or (count > 1 and claim not in whole):
            problems.append(
                f"{where}: the claim occurs {count} times in the article, not once"
                + (" (lengthen it)" if count > 1 else "")
            )
        elif (position := article.find(claim, last)) < 0:
            problems.append(f"{where}: out of the article's order")
        else:
            last = position
        if todo:
            continue
        backing = entry.get(KINDS[kind])
        if not (isinstance(backing, str) and backing.strip()):
            problems.append(f"{where}: a {kind} entry needs a non-empty `{KINDS[kind]}`")
            continue
        if kind in {"assert", "setting"} and "file" in entry:  # rule 2, in a file
            problems += file_problems(where, kind, entry["file"], collapse(backing), read)
        elif kind in {"assert", "setting"}:  # rule 2
            needle = collapse(backing)
            found = [block for block in blocks if block.has(needle)]
            if len(found) != 1:
                lines = ", ".join(str(block.line) for block in found)
                problems.append(
                    f"{where}: block {needle[:60]!r} is in {len(found)} python blocks, not one"
                    + (f" (lines {lines})" if found else "")
                )
            elif kind == "assert" and not found[0].checks:
                problems.append(
                    f"{where}: the block at line {found[0].line} has no assert and no expected output"
                )
        elif kind == "citation":  # rule 3
            surname = re.match("[^\\W\\d_][\\w'\u2019-]*", backing.strip())
            if not surname or not re.search(rf"\b{re.escape(surname.group())}\b", cited):
                problems.append(
                    f"{where}: {backing!r}: its first author is not in the article's references"
                )
        else:  # rule 4
            problems += record_problems(where, backing, entry.get("shows"), read)
    return problems


def file_problems(
    where: str, kind: str, path: object, needle: str, read: Callable[[str], str | None]
) -> list[str]:
    """Rule 2 for a backing in a file: `needle` in the file at `path`, an assert or a test for `assert`."""
    if not (isinstance(path, str) and path.startswith(SOURCE_FOLDERS)):
        return [f"{where}: file {path!r} is not under {' or '.join(SOURCE_FOLDERS)}"]
    text = read(path)
    if text is None:
        return [f"{where}: no file {path!r}"]
    if needle not in collapse(text):
        return [f"{where}: block {needle[:60]!r} is not in {path}"]
    names_test = needle.startswith("def test_") and path.startswith("tests/")
    if kind == "assert" and not ("assert" in needle or names_test):
        return [f"{where}: block {needle[:60]!r} in {path} is neither an assert nor a test"]
    return []


def record_problems(
    where: str, report: str, shows: object, read: Callable[[str], str | None]
) -> list[str]:
    """Rule 4: the recorded report or file exists, and holds `shows` when there is one."""
    if "/" in report:
        if not report.startswith(RECORD_FOLDERS):
            return [f"{where}: {report!r} is not under {' or '.join(RECORD_FOLDERS)}"]
        path = report
    else:
        path = report_path(report).relative_to(ROOT).as_posix()
    text = read(path)
    if text is None:
        return [f"{where}: no recorded report {report!r} ({path})"]
    if shows is not None and not (isinstance(shows, str) and collapse(shows) in collapse(text)):
        return [f"{where}: {path} does not show {shows!r}"]
    return []


def uncovered(text: str, entries: list[dict]) -> list[Sentence]:
    """Rule 5: the prose sentences with a digit that no entry's claim covers."""
    claims = [
        collapse(entry["claim"])
        for entry in entries
        if isinstance(entry, dict) and isinstance(entry.get("claim"), str)
    ]
    return [
        sentence
        for sentence in prose_sentences(text)
        if sentence.has_digit
        and not any(claim in sentence.source or sentence.source in claim for claim in claims)
    ]


# --- the ledgers of the site --------------------------------------------------------------------------------


def ledger_files() -> list[Path]:
    return sorted(LEDGERS.glob("*.yml"))


@functools.cache
def load(ledger: Path) -> tuple[str, list]:
    """(the article's text, the ledger's entries), read once per run."""
    article = POSTS / f"{ledger.stem}.md"
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml's parser when it is there
    entries = yaml.load(ledger.read_text(encoding="utf-8"), Loader=loader) or []
    return article.read_text(encoding="utf-8"), entries


LEDGER_PARAMS = [pytest.param(path, id=path.stem) for path in ledger_files()]


def test_each_ledger_names_an_article() -> None:
    orphans = [path.name for path in ledger_files() if not (POSTS / f"{path.stem}.md").is_file()]
    assert not orphans, f"ledgers without an article in docs/blog/posts/: {orphans}"


@pytest.mark.parametrize("ledger", LEDGER_PARAMS)
def test_ledger_entries_are_backed(ledger: Path) -> None:
    if not (POSTS / f"{ledger.stem}.md").is_file():
        pytest.fail(f"{ledger.name} names no article")
    text, entries = load(ledger)
    problems = entry_problems(text, entries)
    assert not problems, f"{ledger.relative_to(ROOT)}:\n" + "\n".join(problems)


@pytest.mark.parametrize("ledger", LEDGER_PARAMS)
def test_every_sentence_with_a_number_is_in_the_ledger(ledger: Path) -> None:
    if not (POSTS / f"{ledger.stem}.md").is_file():
        pytest.fail(f"{ledger.name} names no article")
    text, entries = load(ledger)
    missing = uncovered(text, entries if isinstance(entries, list) else [])
    article = (POSTS / f"{ledger.stem}.md").relative_to(ROOT)
    assert not missing, (
        f"{len(missing)} sentences with numbers are not in {ledger.name}:\n"
        + "\n".join(f"{article}:{sentence.line}: {sentence.source}" for sentence in missing)
    )


@pytest.mark.filterwarnings("default::UserWarning")
def test_todo_entries_are_counted() -> None:
    todos = [
        f"{path.stem}: {entry['todo']} ({collapse(entry['claim'])[:60]!r})"
        for path in ledger_files()
        if (POSTS / f"{path.stem}.md").is_file()
        for entry in load(path)[1]
        if isinstance(entry, dict) and entry.get("todo") and isinstance(entry.get("claim"), str)
    ]
    if todos:
        warnings.warn(
            f"{len(todos)} TODO entries in the ledger of claims:\n" + "\n".join(todos), stacklevel=1
        )


# --- each rule can fail -------------------------------------------------------------------------------------

FAKE = """---
date: 2026-01-01
---

# A title with 3 words

Attention was introduced by Bahdanau et al. (2015). It ran 2.5x faster
than the loop. See [part 2](part-2.md) and `x[0]` for more.

<!-- a comment with 42 in it -->
<div class="w" data-n="[1, 2]" markdown>

| key | weight |
| --- | --- |
| k0 | 0.44 |

</div>

```python
import torch

scores = torch.tensor([0.9, 0.1])
assert abs(scores.sum() - 1.0) < 1e-6
```

```python
print(round(19.2, 1))
```

<!--pytest-codeblocks:expected-output-->
```text
19.2
```

```python
seed = 7
```

The sum is $1.0$ for $d_k = 64$. A soft lookup returns 19.2.

- a list item with 8 heads
- another with none

[^1]: A footnote with 99.

## References

- Bahdanau, Cho, Bengio (2015). Neural Machine Translation. ICLR 2015.
"""

FULL = [
    {
        "claim": "introduced by Bahdanau et al. (2015)",
        "kind": "citation",
        "source": "Bahdanau et al., 2015, ICLR, §1",
    },
    {"claim": "It ran 2.5x faster", "kind": "benchmark", "report": "fake"},
    {"claim": "See [part 2](part-2.md)", "kind": "setting", "block": "seed = 7"},
    {"claim": "| k0 | 0.44 |", "kind": "assert", "block": "19.2"},
    {"claim": "The sum is $1.0$ for $d_k = 64$.", "kind": "assert", "block": "scores.sum() - 1.0"},
    {"claim": "A soft lookup returns 19.2.", "kind": "assert", "block": "print(round(19.2, 1))"},
    {"claim": "a list item with 8 heads", "kind": "setting", "block": "seed = 7"},
]


FAKE_FILES = {
    "src/qkv_lab/results/fake.json": '{"ms": 2.5}',
    "benchmarks/gpu/run/tests.txt": "2 failed,\n 234 passed",
    "docs/figures/fake.py": "N = 64\nassert N % 8 == 0\n",
    "tests/library/test_fake.py": "def test_zeros():\n    pass\n",
}


def fake_problems(entries: list[dict], files: dict[str, str] = FAKE_FILES) -> list[str]:
    return entry_problems(FAKE, entries, files.get)


def test_a_complete_fake_ledger_passes() -> None:
    assert fake_problems(FULL) == []
    assert uncovered(FAKE, FULL) == []


def test_rule_1_a_claim_not_on_the_page_is_reported() -> None:
    entry = {"claim": "It ran 3.5x faster", "kind": "benchmark", "report": "fake"}
    assert fake_problems([entry]) == [
        "entry 1 ('It ran 3.5x faster'): the claim occurs 0 times in the article, not once"
    ]


def test_rule_1_a_claim_that_is_not_unique_or_out_of_order_is_reported() -> None:
    twice = {"claim": "19.2", "kind": "assert", "block": "19.2"}
    assert "occurs 3 times" in fake_problems([twice])[0]
    assert "out of the article's order" in fake_problems([FULL[1], FULL[0]])[0]


def test_rule_1_a_repeated_whole_sentence_may_be_listed_once() -> None:
    text = FAKE + "\nA soft lookup returns 19.2.\n"
    entry = {
        "claim": "A soft lookup returns 19.2.",
        "kind": "assert",
        "block": "print(round(19.2, 1))",
    }
    assert entry_problems(text, [entry]) == []
    part = {**entry, "claim": "lookup returns 19.2."}
    assert "occurs 2 times" in entry_problems(text, [part])[0]


def test_rule_1_line_breaks_in_a_claim_count_as_spaces() -> None:
    entry = {"claim": "It ran 2.5x\n  faster than the loop.", "kind": "benchmark", "report": "fake"}
    assert fake_problems([entry]) == []


def test_rule_2_a_vanished_block_is_reported() -> None:
    entry = {"claim": "The sum is $1.0$", "kind": "assert", "block": "scores.mean()"}
    assert "is in 0 python blocks, not one" in fake_problems([entry])[0]


def test_rule_2_a_block_named_ambiguously_is_reported() -> None:
    entry = {"claim": "The sum is $1.0$", "kind": "setting", "block": "1"}
    assert "is in 2 python blocks, not one" in fake_problems([entry])[0]


def test_rule_2_an_assert_needs_a_block_that_checks() -> None:
    entry = {"claim": "The sum is $1.0$", "kind": "assert", "block": "seed = 7"}
    assert "has no assert and no expected output" in fake_problems([entry])[0]
    assert fake_problems([{**entry, "kind": "setting"}]) == []


def test_rule_2_only_runnable_python_blocks_count() -> None:
    text = FAKE.replace("```python\nseed = 7", "```py\nseed = 7")
    entry = {"claim": "a list item with 8 heads", "kind": "setting", "block": "seed = 7"}
    assert "is in 0 python blocks" in entry_problems(text, [entry])[0]


def test_rule_3_a_citation_needs_a_source_in_the_references() -> None:
    absent = {
        "claim": "introduced by Bahdanau",
        "kind": "citation",
        "source": "Luong et al., 2015, EMNLP, §3",
    }
    assert "its first author is not in the article's references" in fake_problems([absent])[0]
    empty = {"claim": "introduced by Bahdanau", "kind": "citation", "source": " "}
    assert "needs a non-empty `source`" in fake_problems([empty])[0]
    # the name must be in the reference list, not only in the prose
    text = FAKE.replace("- Bahdanau, Cho, Bengio", "- Cho, Bengio")
    cited = {
        "claim": "introduced by Bahdanau",
        "kind": "citation",
        "source": "Bahdanau et al., 2015",
    }
    assert "not in the article's references" in entry_problems(text, [cited])[0]


def test_rule_4_a_benchmark_needs_a_recorded_report() -> None:
    entry = {"claim": "It ran 2.5x faster", "kind": "benchmark", "report": "gone"}
    assert "no recorded report 'gone'" in fake_problems([entry])[0]
    assert report_path("decoding").is_file()  # a report that the articles read
    assert read_repository_file("src/qkv_lab/results/decoding.json")
    assert read_repository_file("src/qkv_lab/results/gone.json") is None


def test_rule_4_a_recorded_file_must_exist_and_show_what_the_entry_says() -> None:
    entry = {"claim": "It ran 2.5x faster", "kind": "benchmark"}
    record = {**entry, "report": "benchmarks/gpu/run/tests.txt", "shows": "2 failed, 234 passed"}
    assert fake_problems([record]) == []
    assert fake_problems([{**entry, "report": "fake", "shows": '"ms": 2.5'}]) == []
    wrong = {**record, "shows": "0 failed"}
    assert "does not show '0 failed'" in fake_problems([wrong])[0]
    gone = {**record, "report": "benchmarks/gpu/run/gone.txt"}
    assert "no recorded report" in fake_problems([gone])[0]
    elsewhere = {**record, "report": "docs/figures/fake.py"}
    assert "is not under benchmarks/" in fake_problems([elsewhere])[0]


def test_rule_2_a_backing_in_a_file_must_be_there_and_check_it() -> None:
    entry = {"claim": "a list item with 8 heads", "file": "docs/figures/fake.py"}
    assert fake_problems([{**entry, "kind": "setting", "block": "N = 64"}]) == []
    assert fake_problems([{**entry, "kind": "assert", "block": "assert N % 8 == 0"}]) == []
    assert (
        "neither an assert nor a test"
        in fake_problems([{**entry, "kind": "assert", "block": "N = 64"}])[0]
    )
    assert (
        "is not in docs/figures/fake.py"
        in fake_problems([{**entry, "kind": "setting", "block": "N = 32"}])[0]
    )
    test = {
        **entry,
        "kind": "assert",
        "file": "tests/library/test_fake.py",
        "block": "def test_zeros",
    }
    assert fake_problems([test]) == []
    gone = {**test, "file": "tests/library/test_gone.py"}
    assert "no file 'tests/library/test_gone.py'" in fake_problems([gone])[0]
    outside = {**test, "file": "README.md"}
    assert "is not under docs/blog/posts/" in fake_problems([outside])[0]


def test_rule_5_every_uncovered_sentence_is_reported_with_its_line() -> None:
    missing = [(sentence.line, sentence.source) for sentence in uncovered(FAKE, FULL[3:5])]
    assert missing == [
        (7, "Attention was introduced by Bahdanau et al. (2015)."),
        (7, "It ran 2.5x faster than the loop."),
        (8, "See [part 2](part-2.md) and `x[0]` for more."),
        (39, "A soft lookup returns 19.2."),
        (41, "a list item with 8 heads"),
    ]


def test_rule_5_what_is_not_prose() -> None:
    sources = [sentence.source for sentence in prose_sentences(FAKE)]
    assert sources == [
        "Attention was introduced by Bahdanau et al. (2015).",
        "It ran 2.5x faster than the loop.",
        "See [part 2](part-2.md) and `x[0]` for more.",
        "| key | weight |",
        "| --- | --- |",
        "| k0 | 0.44 |",
        "The sum is $1.0$ for $d_k = 64$.",
        "A soft lookup returns 19.2.",
        "a list item with 8 heads",
        "another with none",
    ]
    # digits in link targets and code spans do not count; those in link text and math do
    digits = {sentence.source: sentence.has_digit for sentence in prose_sentences(FAKE)}
    assert digits["See [part 2](part-2.md) and `x[0]` for more."] is True
    assert not prose_sentences("See [part](part-2.md) and `x[0]`.")[0].has_digit


def test_rule_5_a_claim_inside_a_sentence_or_a_sentence_inside_a_claim_covers_it() -> None:
    text = "One has 1 cat. Two has 2 dogs.\n"
    assert uncovered(text, [{"claim": "1 cat"}, {"claim": "Two has 2 dogs. And more"}]) == []
    assert [s.source for s in uncovered(text, [{"claim": "2 cats"}])] == [
        "One has 1 cat.",
        "Two has 2 dogs.",
    ]


def test_sentences_split_only_before_a_capital_or_math() -> None:
    text = "Bahdanau et al. scored 2 pairs. $x$ is 3! Is it 4? yes, e.g. 5.\n"
    assert [s.source for s in prose_sentences(text)] == [
        "Bahdanau et al. scored 2 pairs.",
        "$x$ is 3!",
        "Is it 4? yes, e.g. 5.",
    ]


def test_schema_problems_are_reported() -> None:
    assert entry_problems(FAKE, {"claim": "x"}) == ["the ledger is not a YAML list of entries"]
    problems = fake_problems(
        [
            {"claim": "It ran 2.5x faster", "kind": "measured", "report": "fake"},
            {"claim": "It ran 2.5x faster", "kind": "benchmark", "report": "fake", "block": "x"},
            {"claim": "It ran 2.5x faster", "kind": "benchmark", "report": "fake", "todo": ""},
            {"kind": "setting"},
        ]
    )
    assert [problem.split(": ", 1)[1] for problem in problems] == [
        "kind 'measured' is not one of ['assert', 'benchmark', 'citation', 'setting']",
        "keys ['block'] do not belong to a benchmark entry",
        "`todo` must say what is missing",
        "not a mapping with a `claim` string",
    ]


def test_a_todo_entry_skips_its_backing_but_not_its_claim() -> None:
    todo = {"claim": "It ran 2.5x faster", "kind": "benchmark", "todo": "no recorded run"}
    assert fake_problems([todo]) == []
    assert "occurs 0 times" in fake_problems([{**todo, "claim": "ran 9x"}])[0]
