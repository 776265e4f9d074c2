"""The drift guard: every Python block on the site runs, and every included source section exists.

pytest-codeblocks (0.18) runs only fences whose info string is exactly `python` (and `sh`/`bash`); it silently
passes over `py`, `pycon`, `python title="x.py"`, `{.python}` and `~~~` fences, and it runs a skipped block never.
This guard reads every Markdown file under `docs/` itself and fails, naming file and line, on:

- a Python-like fence that pytest-codeblocks would not run, unless its body only includes package source
  (`--8<-- "src/..."`), which is how the site shows source that the package's tests check;
- a `python` fence whose body is a snippet include (it would run the include line as code);
- a skip or xfail marker on a runnable block, except `pytest.mark.skipif(..., reason="needs CUDA")`;
- an `sh`/`bash` fence (pytest-codeblocks would run it; commands for readers go in `console` fences);
- a snippet include whose file or section does not exist.

It then collects `pytest --codeblocks docs` and checks that pytest-codeblocks finds exactly the blocks the
guard expects, so a difference in parsing between the two cannot hide a block.
"""

from __future__ import annotations

import itertools
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from tests.site.markdown import INCLUDE, Fence, parse_fences

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"

PYTHON_LANGUAGES = {"py", "py3", "python", "python3", "pycon", "pyi", "ipython", "ipython3"}
SHELL_LANGUAGES = {"sh", "bash", "zsh", "shell"}
COLLECT_CODEBLOCKS = (
    *(sys.executable, "-m", "pytest", "--codeblocks", "docs"),
    *("--collect-only", "-q", "-p", "no:cacheprovider"),
)
ACCEPTED_SKIP = re.compile(r"pytest\.mark\.skipif\(.+,\s*reason\s*=\s*(['\"])needs CUDA\1\s*\)")

INCLUDE_BLOCK = re.compile(r"^[ \t]*-{1,}8<-{1,}[ \t]*$")
SECTION = re.compile(r"^(?P<path>.+?):(?P<section>[a-z][-_0-9a-z]*)$")
LINES = re.compile(r"^(?P<path>.+?):(?P<start>-?\d*)(?::(?P<end>-?\d*))?$")


def fence_problems(fence: Fence) -> list[str]:
    """Why this fence breaks the rule that every Python block on the site runs (empty when it does not)."""
    problems = []
    language = fence.language
    if language in PYTHON_LANGUAGES and fence.syntax != "python":
        targets = fence.includes()
        if not targets or not all(target.startswith("src/") for target in targets):
            problems.append(
                f"fence {fence.fence}{fence.info.strip()} is Python that pytest-codeblocks will not run: "
                f"open it with exactly {'`' * 3}python (only a fence that includes src/ may differ)"
            )
    if fence.syntax == "python" and any(INCLUDE.match(line) for line in fence.body):
        problems.append(
            "a snippet include in a runnable python fence runs as code: show source in a "
            'fence such as ```py title="src/qkv/..."'
        )
    if fence.is_test:
        for mark in fence.markers:
            skips = re.search(r"skip|xfail", mark)
            if skips and not ACCEPTED_SKIP.fullmatch(mark):
                problems.append(
                    f"marker {mark!r} skips a block without the one accepted reason: "
                    'pytest.mark.skipif(<condition>, reason="needs CUDA")'
                )
    if language in SHELL_LANGUAGES:
        problems.append(
            f"fence {fence.fence}{fence.info.strip()}: commands for readers go in a console fence "
            "(pytest-codeblocks runs sh and bash fences)"
        )
    return problems


def include_targets(text: str) -> list[tuple[int, str]]:
    """(line, target) of every snippet include, single-line (`--8<-- "x"`) or block form."""
    targets = []
    in_block = False
    for number, line in enumerate(text.splitlines(), start=1):
        if INCLUDE_BLOCK.match(line):
            in_block = not in_block
        elif in_block and line.strip():
            targets.append((number, line.strip()))
        elif match := INCLUDE.match(line):
            targets.append((number, match["target"]))
    return targets


def include_problem(target: str, root: Path = ROOT) -> str | None:
    """Why a snippet target would not resolve (file, line range or section missing), or None."""
    if (section := SECTION.match(target)) and not (root / target).exists():
        path, name = section["path"], section["section"]
        source = root / path
        if not source.is_file():
            return f"included file {path} does not exist"
        text = source.read_text(encoding="utf-8")
        missing = [
            f"[{edge}:{name}]" for edge in ("start", "end") if f"--8<-- [{edge}:{name}]" not in text
        ]
        return f"{path} has no {' and no '.join(missing)} section marker" if missing else None
    if (lines := LINES.match(target)) and not (root / target).exists():
        source = root / lines["path"]
        if not source.is_file():
            return f"included file {lines['path']} does not exist"
        count = len(source.read_text(encoding="utf-8").splitlines())
        for bound in (lines["start"], lines["end"]):
            if bound and abs(int(bound)) > count:
                return f"{lines['path']} has {count} lines, fewer than {bound}"
        return None
    return None if (root / target).is_file() else f"included file {target} does not exist"


def markdown_files() -> list[Path]:
    return sorted(DOCS.rglob("*.md"))


def relative(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def expected_tests() -> Counter[str]:
    """The test ids (`docs/x.md::line N`) that pytest-codeblocks should collect, by the guard's reading."""
    return Counter(
        f"{relative(path)}::line {fence.line}"
        for path in markdown_files()
        for fence in parse_fences(path.read_text(encoding="utf-8"))
        if fence.is_test
    )


# --- the guard, on the site ---------------------------------------------------------------------------------


def test_every_python_fence_runs() -> None:
    problems = [
        f"{relative(path)}:{fence.line}: {problem}"
        for path in markdown_files()
        for fence in parse_fences(path.read_text(encoding="utf-8"))
        for problem in fence_problems(fence)
    ]
    assert not problems, "\n".join(problems)


def continuation_problems(fences: list[Fence]) -> list[tuple[int, str]]:
    """(line, why) of each `cont` block that does not follow a runnable `python` block.

    pytest-codeblocks joins a `cont` block to the fence before it (an expected output in between aside);
    after a snippet listing (```python title="src/...") the joined code is never run.
    """
    problems = []
    shown = [fence for fence in fences if fence.joined != "expected-output"]
    for before, fence in itertools.pairwise(shown):
        if fence.joined == "cont" and before.syntax != "python":
            problems.append((fence.line, f"continues a fence that is not run: {before.info!r}"))
    return problems


def test_continuations_follow_a_runnable_block() -> None:
    problems = [
        f"{relative(path)}:{line}: {problem}"
        for path in markdown_files()
        for line, problem in continuation_problems(parse_fences(path.read_text(encoding="utf-8")))
    ]
    assert not problems, "\n".join(problems)


def test_a_continuation_after_a_listing_is_caught() -> None:
    page = (
        '```python title="src/qkv/x.py"\n--8<-- "src/qkv/x.py:y"\n```\n\n'
        "<!--pytest-codeblocks:cont-->\n```python\nz = 1\n```\n"
    )
    assert [line for line, _ in continuation_problems(parse_fences(page))] == [6]


COLUMNS = (
    80  # what the content column shows at 1280 px without clipping (the browser test measures it)
)


def test_article_code_fits_the_column() -> None:
    problems = [
        f"{relative(path)}:{fence.line + offset}: {len(line)} characters"
        for path in sorted((DOCS / "blog" / "posts").glob("*.md"))
        for fence in parse_fences(path.read_text(encoding="utf-8"))
        for offset, line in enumerate(fence.body, start=1)
        if len(line) > COLUMNS
    ]
    assert not problems, "\n".join(problems)


def test_snippet_includes_resolve() -> None:
    problems = [
        f"{relative(path)}:{line}: {problem}"
        for path in markdown_files()
        for line, target in include_targets(path.read_text(encoding="utf-8"))
        if (problem := include_problem(target))
    ]
    assert not problems, "\n".join(problems)


def test_guard_and_pytest_codeblocks_agree() -> None:
    """pytest-codeblocks collects exactly the blocks that the guard counts as tests, file by file."""
    result = subprocess.run(
        [*COLLECT_CODEBLOCKS],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode in (0, 5), result.stdout + result.stderr  # 5: nothing collected
    collected = Counter(re.findall(r"^(docs/\S+\.md::line \d+)$", result.stdout, re.MULTILINE))
    expected = expected_tests()
    assert collected == expected, (
        f"only pytest-codeblocks: {sorted((collected - expected).elements())}\n"
        f"only the guard: {sorted((expected - collected).elements())}"
    )


# --- the guard's parser, on small samples -------------------------------------------------------------------

TICKS = "`" * 3


def problems_in(text: str) -> list[str]:
    return [problem for fence in parse_fences(text) for problem in fence_problems(fence)]


@pytest.mark.parametrize(
    "info",
    [
        "py",
        "python3",
        "pycon",
        'python title="x.py"',
        'py title="x.py"',
        "{.python .numberLines}",
        " python",
    ],
)
def test_python_like_fence_that_would_not_run_is_flagged(info: str) -> None:
    problems = problems_in(f"Text.\n\n{TICKS}{info}\nx = 1\n{TICKS}\n")
    assert len(problems) == 1
    assert "will not run" in problems[0]


def test_tilde_python_fence_is_flagged() -> None:
    assert problems_in("~~~python\nx = 1\n~~~\n")


def test_exact_python_fence_passes_and_counts() -> None:
    fences = parse_fences(f"{TICKS}python\nx = 1\n{TICKS}\n\n{TICKS}text\nout\n{TICKS}\n")
    assert [fence.is_test for fence in fences] == [True, False]
    assert not problems_in(f"{TICKS}python\nx = 1\n{TICKS}\n")


def test_source_include_fence_is_accepted() -> None:
    text = f'{TICKS}py title="src/qkv/functional.py"\n--8<-- "src/qkv/functional.py:weights"\n{TICKS}\n'
    assert not problems_in(text)


def test_include_of_a_file_outside_src_is_flagged() -> None:
    assert problems_in(f'{TICKS}py\n--8<-- "docs/example.py"\n{TICKS}\n')


def test_include_in_a_runnable_python_fence_is_flagged() -> None:
    problems = problems_in(f'{TICKS}python\n--8<-- "src/qkv/functional.py:weights"\n{TICKS}\n')
    assert any("runs as code" in problem for problem in problems)


def test_indented_fence_in_an_admonition_is_found_and_flagged() -> None:
    text = (
        f'!!! note "Aside"\n\n    Some text.\n\n    {TICKS}py\n    x = 1\n    {TICKS}\n\nAfter.\n'
    )
    fences = parse_fences(text)
    assert [(fence.line, fence.language) for fence in fences] == [(5, "py")]
    assert problems_in(text)


def test_fence_in_a_content_tab_runs() -> None:
    fences = parse_fences(f'=== "Tab"\n\n    {TICKS}python\n    x = 1\n    {TICKS}\n')
    assert [fence.is_test for fence in fences] == [True]


def test_longer_fence_holds_a_shorter_one() -> None:
    text = f"````markdown\n{TICKS}python\nx = 1\n{TICKS}\n````\n"
    fences = parse_fences(text)
    assert [(fence.line, fence.language) for fence in fences] == [(1, "markdown")]


@pytest.mark.parametrize(
    "marker",
    [
        "<!--pytest.mark.skip-->",
        '<!--pytest.mark.skip(reason="slow")-->',
        '<!--pytest.mark.skipif(True, reason="flaky")-->',
        "<!--pytest-codeblocks:skip-->",
        "<!--pytest.mark.xfail-->",
        "<!--pytest-codeblocks:importorskip(triton)-->",
    ],
)
def test_skip_without_the_cuda_reason_is_flagged(marker: str) -> None:
    problems = problems_in(f"{marker}\n{TICKS}python\nx = 1\n{TICKS}\n")
    assert len(problems) == 1
    assert "needs CUDA" in problems[0]


def test_skip_that_needs_cuda_is_accepted() -> None:
    marker = '<!--pytest.mark.skipif(not __import__("torch").cuda.is_available(), reason="needs CUDA")-->'
    assert not problems_in(f"{marker}\n{TICKS}python\nx = 1\n{TICKS}\n")


def test_marks_wait_for_the_next_block_that_is_a_test() -> None:
    text = (
        f"{TICKS}python\nx = 1\n{TICKS}\n\n<!--pytest.mark.skip-->\n<!--pytest-codeblocks:cont-->\n"
        f"{TICKS}python\ny = x\n{TICKS}\n\n{TICKS}python\nz = 2\n{TICKS}\n"
    )
    fences = parse_fences(text)
    assert [fence.is_test for fence in fences] == [True, False, True]
    assert fences[2].markers == ["pytest.mark.skip"]


def test_expected_output_block_is_not_a_test() -> None:
    text = (
        f"{TICKS}python\nprint(1)\n{TICKS}\n\n<!--pytest-codeblocks:expected-output-->\n\n"
        f"{TICKS}python\n1\n{TICKS}\n"
    )
    assert [fence.is_test for fence in parse_fences(text)] == [True, False]


@pytest.mark.parametrize("info", ["sh", "bash", "bash title=x"])
def test_shell_fence_is_flagged(info: str) -> None:
    assert any("console" in problem for problem in problems_in(f"{TICKS}{info}\nls\n{TICKS}\n"))


def test_console_fence_passes() -> None:
    assert not problems_in(f"{TICKS}console\n$ pip install qkv\n{TICKS}\n")


def test_include_problems(tmp_path: Path) -> None:
    source = tmp_path / "src" / "m.py"
    source.parent.mkdir()
    source.write_text("# --8<-- [start:body]\nx = 1\n# --8<-- [end:body]\n# --8<-- [start:half]\n")
    assert include_problem("src/m.py", tmp_path) is None
    assert include_problem("src/m.py:body", tmp_path) is None
    assert include_problem("src/m.py:2:3", tmp_path) is None
    assert "[end:half]" in include_problem("src/m.py:half", tmp_path)
    assert "[start:nope]" in include_problem("src/m.py:nope", tmp_path)
    assert "does not exist" in include_problem("src/other.py:body", tmp_path)
    assert "fewer than 9" in include_problem("src/m.py:1:9", tmp_path)


def test_include_targets_single_line_and_block_form() -> None:
    text = '--8<-- "src/a.py:x"\n\n--8<--\nsrc/b.py\nsrc/c.py:y\n--8<--\n;--8<-- "escaped.py"\n'
    assert include_targets(text) == [(1, "src/a.py:x"), (4, "src/b.py"), (5, "src/c.py:y")]
