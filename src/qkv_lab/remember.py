"""Results of slow, deterministic lab functions, kept on disk and keyed by everything they depend on.

A toy's training takes seconds to a minute and gives the same numbers every time on the same software: the
site's tests, its build and a reader's notebook all ask for the same runs. `@remembered` keeps a function's
result in a file named by the hash of the function's name, its arguments (defaults filled in), the source of
the `qkv` and `qkv_lab` packages, and the torch version; a change to any of them trains anew. The results are
plain data (lists, numbers, tensors), read back with `torch.load(weights_only=True)`. Processes that ask for
the same result at once compute it once: the first holds a lock file beside it, the others wait and read.

The folder is `$QKV_CACHE`, else `$XDG_CACHE_HOME/qkv`, else `~/.cache/qkv`; `QKV_CACHE=off` switches the
cache off.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import os
from collections.abc import Callable
from pathlib import Path
from typing import ParamSpec, TypeVar

import torch
from filelock import FileLock  # a dependency of torch

import qkv

P = ParamSpec("P")
R = TypeVar("R")


def folder() -> Path | None:
    """Where results are kept, or None when `QKV_CACHE=off`."""
    chosen = os.environ.get("QKV_CACHE")
    if chosen == "off":
        return None
    if chosen:
        return Path(chosen)
    return (
        Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "qkv"
    )


@functools.cache
def _source_digest() -> str:
    """The hash of every Python file of `qkv` and `qkv_lab`, as installed."""
    digest = hashlib.sha256()
    for package in (Path(qkv.__file__).parent, Path(__file__).parent):
        for path in sorted(package.rglob("*.py")):
            digest.update(
                path.relative_to(package.parent).as_posix().encode()
                + path.read_bytes()
            )
    return digest.hexdigest()


def remembered(fn: Callable[P, R]) -> Callable[P, R]:
    """`fn`, its results kept on disk (see the module docstring); its arguments must have stable `repr`s."""
    signature = inspect.signature(fn)

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        where = folder()
        if where is None:
            return fn(*args, **kwargs)
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        key = f"{fn.__module__}.{fn.__qualname__}{tuple(bound.arguments.items())!r}"
        key += f"|torch {torch.__version__}|{_source_digest()}"
        path = (
            where
            / f"{fn.__qualname__}-{hashlib.sha256(key.encode()).hexdigest()[:24]}.pt"
        )
        if path.is_file():
            return torch.load(path, weights_only=True)
        where.mkdir(parents=True, exist_ok=True)
        # Processes asking at once (the site's build beside its tests) compute it once: the others wait.
        with FileLock(path.with_suffix(".lock")):
            if path.is_file():
                return torch.load(path, weights_only=True)
            result = fn(*args, **kwargs)
            partial = path.with_suffix(f".{os.getpid()}.partial")
            torch.save(result, partial)
            partial.replace(path)  # whole or not at all
        return result

    return wrapper
