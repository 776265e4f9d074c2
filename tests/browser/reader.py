"""Run each block of one page alone, as a reader who copies one block would: `test_reader.py` starts this script
in the reader's Python.

It reads from standard input a JSON list of blocks, each `{"code": str, "output": str | None}` as the page
shows them, and prints a JSON list with one result per block: `null` when the block ran and printed what the
page's output block below it shows (if it has one), else what went wrong. Each block runs in a fresh namespace
of its own, in a child process forked after `import torch` (only torch is imported first, so a block that
forgets an import still fails).

This file runs under the reader's interpreter, which has torch and qkv but no test dependencies.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
import traceback


def run(code: str, namespace: dict) -> tuple[str, str | None]:
    """Execute `code`; returns (what it printed, the error's last traceback line or None)."""
    printed = io.StringIO()
    try:
        with contextlib.redirect_stdout(printed):
            exec(compile(code, "<block>", "exec"), namespace)
    except BaseException as error:  # a reader sees any exception, SystemExit included
        return printed.getvalue(), "".join(traceback.format_exception_only(error)).strip()
    return printed.getvalue(), None


def alone(block: dict) -> str | None:
    """Run `block` in a fresh namespace: None if it ran and printed what the page shows."""
    printed, error = run(block["code"], {"__name__": "__main__"})
    if error is None and block["output"] is not None and printed != block["output"]:
        error = f"printed {printed!r}, the page shows {block['output']!r}"
    return error


def each_alone(blocks: list[dict]) -> list[str | None]:
    import torch

    # Imported once, before the forks, so that each block starts fast. The first broadcast loads the modules
    # torch needs for it (sympy), which would cost every child a second or so; a block's namespace stays empty.
    torch.broadcast_shapes((1,), (1,))
    results: list[str | None] = []
    for block in blocks:
        read, write = os.pipe()
        child = os.fork()
        if child == 0:
            os.close(read)
            os.write(write, json.dumps(alone(block)).encode())
            os._exit(0)
        os.close(write)
        with os.fdopen(read) as pipe:
            answer = pipe.read()
        _, status = os.waitpid(child, 0)
        results.append(json.loads(answer) if answer else f"the process died ({status})")
    return results


if __name__ == "__main__":
    print(json.dumps(each_alone(json.load(sys.stdin))))
