"""Run the code of one page as a reader would: the script that `test_reader.py` starts in the reader's Python.

It reads from standard input a JSON list of blocks, each `{"code": str, "output": str | None}` as the page
shows them, and prints a JSON list with one result per block (`null` when it ran as the page says, else what
went wrong). Two modes:

- `in-order`: every block in turn in one namespace, as someone pasting a page into one Python session; a
  block that the page follows with an output block must print exactly that.
- `alone`: every block in a fresh namespace of its own, in a child process forked after `import torch`
  (only torch is imported first, so a block that forgets an import still fails).

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


def in_order(blocks: list[dict]) -> list[str | None]:
    namespace: dict = {"__name__": "__main__"}
    results: list[str | None] = []
    for block in blocks:
        printed, error = run(block["code"], namespace)
        if error is None and block["output"] is not None and printed != block["output"]:
            error = f"printed {printed!r}, the page shows {block['output']!r}"
        results.append(error)
    return results


def alone(blocks: list[dict]) -> list[str | None]:
    import torch  # noqa: F401  (imported once, before the forks, so each block starts fast)

    results: list[str | None] = []
    for block in blocks:
        read, write = os.pipe()
        child = os.fork()
        if child == 0:
            os.close(read)
            _, error = run(block["code"], {"__name__": "__main__"})
            os.write(write, json.dumps(error).encode())
            os._exit(0)
        os.close(write)
        with os.fdopen(read) as pipe:
            answer = pipe.read()
        _, status = os.waitpid(child, 0)
        results.append(json.loads(answer) if answer else f"the process died ({status})")
    return results


if __name__ == "__main__":
    mode = {"in-order": in_order, "alone": alone}[sys.argv[1]]
    print(json.dumps(mode(json.load(sys.stdin))))
