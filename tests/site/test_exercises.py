"""Every article ends with exercises that the checker knows, and its notebook carries them unsolved.

The rules (`problems` checks an article against 1-6; each has a companion test below that breaks it on a
small fake article):

1. The article has a `## Exercises` section, its last before `## References`.
2. The section holds three exercises or more, each under a `### <Kind>: <title>` heading, the kinds being
   Predict, Implement and Investigate, each at least once.
3. Each exercise opens with `*Practises: <section>.*`, naming a `##` section of its own article.
4. **Predict**: a block to run, and a collapsed `??? question "Answer"` that holds the block's expected
   output, or an assert, so that the answer cannot drift from what the block prints.
5. **Investigate**: a block whose printed measurement is shown (its expected output), and a collapsed
   `??? note` whose block asserts what the explanation says.
6. **Implement**: one starter, a block that defines a function whose body is `...` and passes it to
   `check("<name>", fn)`, `<name>` starting with the article's own slug, and shows the "not attempted yet"
   verdict; then a collapsed `??? success "A solution"` whose block defines the same function with a body,
   calls `check` with the same name and shows the "passed all N cases" verdict.

Beyond one article: the names given to `check` on the pages are exactly `qkv.exercises.names()`, and each
article's notebook has its starters as code cells, no other cell calling `check`, and its solutions only
as listings folded in `<details>`. The Markdown is read with the site tests' fence parser, as
pytest-codeblocks reads it; collapsed admonitions with the notebook hook's own pattern.
"""

from __future__ import annotations

import ast
import re
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest
from mkdocs.config import load_config

from qkv.exercises import names
from tests.site.build import load_step
from tests.site.markdown import Fence, parse_fences

ROOT = Path(__file__).resolve().parents[2]
POSTS = sorted((ROOT / "docs" / "blog" / "posts").glob("*.md"))
KINDS = ("Predict", "Implement", "Investigate")
ANSWER, SOLUTION = ("question", "Answer"), ("success", "A solution")
HEADING = re.compile(r"^(#{2,3}) +(.+?) *$", re.MULTILINE)
PRACTISES = re.compile(r"^\*Practises: (?P<section>.+?)\.\*", re.MULTILINE)

hook = load_step("article_notebooks")


# --- reading an article's exercises -------------------------------------------------------------------------


def _source(fence: Fence) -> str:
    return textwrap.dedent("\n".join(fence.body))


@dataclass
class Exercise:
    """One `### Kind: title` of an Exercises section: its Markdown, its fences and its folds."""

    kind: str
    title: str
    text: str
    fences: list[Fence]
    fold_of: dict[int, tuple[str, str | None]]  # a line inside a fold -> the fold's (kind, title)

    @property
    def folds(self) -> set[tuple[str, str | None]]:
        return set(self.fold_of.values())

    def runnable(self, *, folded: bool) -> list[Fence]:
        """The Python blocks that run as tests of their own, inside the folds or outside them."""
        return [f for f in self.fences if f.is_test and (f.line in self.fold_of) == folded]

    def output_after(self, fence: Fence) -> str | None:
        """The expected output that pytest-codeblocks compares with what `fence` prints, if any."""
        after = self.fences[self.fences.index(fence) + 1 :]
        return _source(after[0]) if after and after[0].joined == "expected-output" else None

    def asserts_in(self, fold: tuple[str, str | None]) -> bool:
        return any(
            f.syntax == "python" and "assert" in _source(f)
            for f in self.fences
            if self.fold_of.get(f.line) == fold
        )


def exercises(text: str) -> list[Exercise]:
    """The exercises of an article's `## Exercises` section (up to the next `##` heading)."""
    section = re.search(r"^## Exercises\n.*?(?=^## |\Z)", text, re.MULTILINE | re.DOTALL)
    found = []
    for part in re.split(r"^(?=### )", section[0] if section else "", flags=re.MULTILINE)[1:]:
        kind, _, title = part.split("\n", 1)[0].removeprefix("### ").partition(": ")
        fold_of = {}
        for fold in hook.FOLD.finditer(part):
            first = part.count("\n", 0, fold.start()) + 1
            for line in range(first, first + fold[0].count("\n")):
                fold_of[line] = (fold["kind"], fold["title"])
        found.append(Exercise(kind, title, part, parse_fences(part), fold_of))
    return found


def checked_names(source: str) -> list[str]:
    """The exercise names that a block passes to `check`."""
    return [
        node.args[0].value
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "check"
        and node.args
        and isinstance(node.args[0], ast.Constant)
    ]


def functions(source: str) -> dict[str, bool]:
    """The functions a block defines, each with whether its body is only `...` (after a docstring)."""
    found = {}
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef):
            body = node.body[1:] if ast.get_docstring(node) is not None else node.body
            found[node.name] = (
                len(body) == 1
                and isinstance(body[0], ast.Expr)
                and isinstance(body[0].value, ast.Constant)
                and body[0].value.value is Ellipsis
            )
    return found


# --- the rules ----------------------------------------------------------------------------------------------


def problems(text: str, slug: str) -> list[str]:
    """Why the exercises of the article `text`, whose slug is `slug`, break rules 1-6; [] if they keep them."""
    top = [title for level, title in HEADING.findall(text) if level == "##"]
    if "Exercises" not in top:
        return ["no ## Exercises section"]
    found = []
    if top[-2:] != ["Exercises", "References"]:  # rule 1
        found.append(f"## Exercises is not the last section before ## References: {top[-3:]}")
    listed = exercises(text)
    kinds = [exercise.kind for exercise in listed]
    if len(listed) < 3 or not set(KINDS) <= set(kinds) or not set(kinds) <= set(KINDS):  # rule 2
        found.append(f"exercises {kinds}: three or more needed, of the kinds {list(KINDS)}, each")
    for exercise in listed:
        where = f"{exercise.kind} {exercise.title!r}"
        practises = PRACTISES.search(exercise.text)
        if not practises or practises["section"] not in top:  # rule 3
            section = practises["section"] if practises else None
            found.append(f"{where}: practises {section!r}, not a section of the article")
        if exercise.kind in RULES:  # rules 4-6
            found += [f"{where}: {problem}" for problem in RULES[exercise.kind](exercise, slug)]
    return found


def _predict(exercise: Exercise, slug: str) -> list[str]:
    """Rule 4."""
    if not exercise.runnable(folded=False):
        return ["no block to run"]
    if ANSWER not in exercise.folds:
        return ['no ??? question "Answer"']
    outputs = [f for f in exercise.fences if f.joined == "expected-output"]
    if any(exercise.fold_of.get(f.line) != ANSWER for f in outputs):
        return ["an output is shown outside the answer"]
    if not outputs and not exercise.asserts_in(ANSWER):
        return ["the answer shows no expected output and asserts nothing"]
    return []


def _investigate(exercise: Exercise, slug: str) -> list[str]:
    """Rule 5."""
    shown = exercise.runnable(folded=False)
    if not shown or exercise.output_after(shown[0]) is None:
        return ["no block whose measurement is shown"]
    notes = [fold for fold in exercise.folds if fold[0] == "note"]
    if not any(exercise.asserts_in(fold) for fold in notes):
        return ["no ??? note whose block asserts what it explains"]
    return []


def _implement(exercise: Exercise, slug: str) -> list[str]:
    """Rule 6."""
    starters = [f for f in exercise.runnable(folded=False) if checked_names(_source(f))]
    if len(starters) != 1:
        return [f"{len(starters)} starters calling check, not one"]
    (starter,) = starters
    (name, *_) = checked_names(_source(starter))
    found = []
    if name.split("/")[0] != slug:
        found.append(f"check({name!r}) belongs to another article")
    empty = [fn for fn, is_empty in functions(_source(starter)).items() if is_empty]
    if len(empty) != 1:
        found.append("the starter needs one function whose body is `...`")
    if not (exercise.output_after(starter) or "").startswith(f"{name}: not attempted yet\n"):
        found.append("the starter does not show the 'not attempted yet' verdict")
    solutions = [
        f
        for f in exercise.runnable(folded=True)
        if exercise.fold_of[f.line] == SOLUTION and checked_names(_source(f)) == [name]
    ]
    if len(solutions) != 1:
        return [*found, f'{len(solutions)} blocks in ??? success "A solution" call check({name!r})']
    (solution,) = solutions
    if empty and functions(_source(solution)) != {empty[0]: False}:
        found.append(f"the solution does not define {empty[0]} with a body")
    verdict = exercise.output_after(solution) or ""
    if not re.fullmatch(rf"{re.escape(name)}: passed all \d+ cases", verdict):
        found.append(f"the solution shows {verdict!r}, not the 'passed all' verdict")
    return found


RULES = {"Predict": _predict, "Investigate": _investigate, "Implement": _implement}


# --- the site's articles ------------------------------------------------------------------------------------


@pytest.mark.parametrize("post", POSTS, ids=[post.stem for post in POSTS])
def test_every_article_has_exercises_that_keep_the_rules(post: Path) -> None:
    text = post.read_text(encoding="utf-8")
    assert problems(text, post.stem) == []


def test_the_pages_check_exactly_the_checkers_exercises() -> None:
    on_pages = set()
    for post in POSTS:
        for fence in parse_fences(post.read_text(encoding="utf-8")):
            if fence.syntax == "python" and fence.joined != "expected-output":
                on_pages.update(checked_names(_source(fence)))
    assert sorted(on_pages - set(names())) == [], "names the checker does not know"
    assert sorted(set(names()) - on_pages) == [], "exercises no page offers"


@pytest.fixture(scope="module")
def snippets() -> dict[str, object]:
    """The site's settings of pymdownx.snippets, from mkdocs.yml."""
    return load_config(str(ROOT / "mkdocs.yml")).mdx_configs["pymdownx.snippets"]


@pytest.mark.parametrize("post", POSTS, ids=[post.stem for post in POSTS])
def test_the_notebook_holds_the_starters_and_folds_the_solutions(
    post: Path, snippets: dict[str, object]
) -> None:
    text = post.read_text(encoding="utf-8")
    notebook = hook.article_notebook(text, snippets=snippets)
    code = [cell.source for cell in notebook.cells if cell.cell_type == "code"]
    markdown = "\n".join(cell.source for cell in notebook.cells if cell.cell_type == "markdown")
    implement = [e for e in exercises(text) if e.kind == "Implement"]
    checking = [source for source in code if checked_names(source)]
    assert len(checking) == len(implement), "one code cell per starter; no other calls check"
    assert all(any(functions(source).values()) for source in checking), "a cell is not a starter"
    for exercise in exercises(text):
        for fence in exercise.runnable(folded=True):  # solutions, and answers that assert
            body = _source(fence).strip("\n")
            assert not any(body in source for source in code), f"{exercise.title!r}: a code cell"
            assert f"```python\n{body}\n```" in markdown, f"{exercise.title!r}: not shown"
    folded = re.findall(r"<details>\n<summary>(.*?)</summary>\n", markdown)
    assert folded.count("A solution") == len(implement)
    assert "\n??? " not in markdown


# --- each rule can fail -------------------------------------------------------------------------------------

FAKE = '''---
slug: fake
---

# Fake

## Lookups

Text.

## Exercises

Intro.

### Predict: a sum

*Practises: Lookups.* What does it print?

```python
print(1 + 1)
```

??? question "Answer"

    <!--pytest-codeblocks:expected-output-->
    ```text
    2
    ```

### Implement: a double

*Practises: Lookups.* Write it.

```python
from qkv.exercises import check


def double(x):
    """Twice x."""
    ...


check("fake/double", double)
```

<!--pytest-codeblocks:expected-output-->
```text
fake/double: not attempted yet
double returned None: write its body, then run check again
```

??? success "A solution"

    ```python
    from qkv.exercises import check


    def double(x):
        return 2 * x


    check("fake/double", double)
    ```

    <!--pytest-codeblocks:expected-output-->
    ```text
    fake/double: passed all 3 cases
    ```

### Investigate: a width

*Practises: Lookups.* Change `n`.

```python
n = 4
print(n * n)
```

<!--pytest-codeblocks:expected-output-->
```text
16
```

??? note "What the measurement shows"

    <!--pytest-codeblocks:cont-->
    ```python
    assert all(n * n >= n for n in range(1, 9))
    ```

## References

- None.
'''


def test_a_fake_article_that_keeps_the_rules_passes() -> None:
    assert problems(FAKE, "fake") == []
    assert [e.kind for e in exercises(FAKE)] == list(KINDS)


@pytest.mark.parametrize(
    ("old", "new", "problem"),
    [
        ("## Exercises", "## Practice", "no ## Exercises section"),
        ("## References", "## More\n\nText.\n\n## References", "not the last section"),
        ("### Investigate: a width", "### Explore: a width", "three or more needed"),
        ("*Practises: Lookups.* What", "*Practises: Look-ups.* What", "practises 'Look-ups'"),
        ('??? question "Answer"', '??? question "Why"', 'no ??? question "Answer"'),
        (
            "    <!--pytest-codeblocks:expected-output-->\n    ```text\n    2",
            "    ```text\n    2",
            "asserts nothing",
        ),
        (
            "<!--pytest-codeblocks:expected-output-->\n```text\n16",
            "```text\n16",
            "measurement is shown",
        ),
        ("    assert all(n * n >= n", "    print(all(n * n >= n", "asserts what it explains"),
        ('check("fake/double", double)\n```\n\n<!--', "double(1)\n```\n\n<!--", "0 starters"),
        (
            '"fake/double", double)\n```\n\n<!--',
            '"other/double", double)\n```\n\n<!--',
            "another article",
        ),
        ('    """Twice x."""\n    ...', '    """Twice x."""\n    return 0', "body is `...`"),
        ("fake/double: not attempted yet\n", "fake/double: failed\n", "'not attempted yet'"),
        ('??? success "A solution"', '??? tip "A solution"', "0 blocks in ??? success"),
        (
            "    def double(x):\n        return",
            "    def twice(x):\n        return",
            "define double",
        ),
        ("passed all 3 cases", "failed case 1 of 3", "not the 'passed all' verdict"),
    ],
    ids=[
        "1-no-section",
        "1-not-last",
        "2-kinds",
        "3-practises",
        "4-no-answer",
        "4-unchecked",
        "5-no-output",
        "5-no-assert",
        "6-no-starter",
        "6-other-article",
        "6-not-empty",
        "6-not-attempted",
        "6-no-solution",
        "6-other-function",
        "6-verdict",
    ],
)
def test_each_rule_can_fail(old: str, new: str, problem: str) -> None:
    assert FAKE.count(old) == 1, old
    found = problems(FAKE.replace(old, new), "fake")
    assert any(problem in message for message in found), found
