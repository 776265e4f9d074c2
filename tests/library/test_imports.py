"""The walls between the wings, and no import cycle: the library never imports the lab.

Read from the source with `ast` (every import statement, at module level or inside a function, counts), and
checked once for real: `import qkv` in a fresh interpreter loads no module of the lab.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"
LIBRARY, LAB = "qkv", "qkv_lab"


def modules(package: str) -> dict[str, Path]:
    """Every module of `package` under src/, by dotted name (a package by its own name)."""
    found = {}
    for path in sorted((SRC / package).rglob("*.py")):
        parts = path.relative_to(SRC).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def imports(path: Path, name: str, known: set[str]) -> set[str]:
    """The modules of `known` that the module `name` at `path` imports, by any import statement."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from .x import y
                anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{anchor}.{base}".rstrip(".")
            # `from a import b` imports the module a.b when there is one, else a name of the module a
            targets = [
                f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base
                for alias in node.names
            ]
        else:
            continue
        found |= {target for target in targets if target in known}
    return found - {name}


def graph() -> dict[str, set[str]]:
    every = modules(LIBRARY) | modules(LAB)
    return {name: imports(path, name, set(every)) for name, path in every.items()}


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Each strongly connected group of more than one module (Tarjan's algorithm), as a sorted list."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in edges.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return found


def test_the_library_never_imports_the_lab():
    offenders = {
        name: sorted(target for target in targets if target.partition(".")[0] == LAB)
        for name, targets in graph().items()
        if name.partition(".")[0] == LIBRARY
    }
    assert not {name: lab for name, lab in offenders.items() if lab}


def test_importing_the_library_loads_nothing_of_the_lab():
    probe = "import sys, qkv, qkv.kernels.contract; print(sorted(m for m in sys.modules if m.startswith('qkv_lab')))"
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "[]"


def test_no_import_cycle():
    assert cycles(graph()) == []


@pytest.mark.parametrize(
    ("edges", "expected"),
    [
        ({"a": {"b"}, "b": {"a"}, "c": {"a"}}, [["a", "b"]]),
        ({"a": {"b"}, "b": {"c"}, "c": set()}, []),
    ],
)
def test_cycles_finds_a_loop_and_only_a_loop(edges: dict, expected: list) -> None:
    assert cycles(edges) == expected


def test_imports_reads_function_level_and_relative_imports(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text(
        "def f():\n    from qkv.kernels import flash\n\nfrom . import masks\n"
        "from qkv.dispatch import attention\n"
    )
    known = {"qkv.kernels", "qkv.kernels.flash", "qkv.masks", "qkv.dispatch"}
    # qkv.kernels itself is only the parent of the module imported: no edge to it
    assert imports(module, "qkv.m", known) == {"qkv.kernels.flash", "qkv.masks", "qkv.dispatch"}
