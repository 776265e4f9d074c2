"""Build the site for the tests that look at it, once per run of the suite, and serve it locally.

`build_site()` runs `mkdocs build --strict` (so any warning fails it) with `SITE_URL` set to the address the
site will be served from: pages name their links and assets by full address under `site_url`, and Material's
instant navigation works only when it matches the served address. The site tests and the browser tests run
in separate nox sessions; both build for `LOCAL_URL` and share one build, kept in `build/` (ignored by git)
under a name made of the hash of everything the build reads (docs/, src/, mkdocs.yml, pyproject.toml, the
versions of the docs extra's packages) and the address. A change to any of them builds anew; the previous
build is removed.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import http.server
import importlib
import importlib.metadata
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]
BUILD = ROOT / "build"
# nox -s zensical builds for a port that is free as it starts (another run may serve at 8765) and names it
LOCAL_PORT = int(os.environ.get("QKV_SITE_PORT") or 8765)
LOCAL_URL = f"http://127.0.0.1:{LOCAL_PORT}/"
BUILD_INPUTS = ("docs", "src", "mkdocs.yml", "pyproject.toml")
COMPLETE = ".build-complete"  # written last: a folder without it is a build that did not finish
# A site built another way (noxfile.py's zensical session), which the tests read instead of building one
ZENSICAL_SITE = Path(os.environ["QKV_SITE"]).resolve() if os.environ.get("QKV_SITE") else None


def load_hook(name: str) -> ModuleType:
    """Import a MkDocs hook from docs/hooks/ by path, as mkdocs does (the folder is not a package)."""
    load_step(name)  # what the hook imports, from docs/hooks on `sys.path`
    path = ROOT / "docs" / "hooks" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"qkv_hook_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def load_step(name: str) -> ModuleType:
    """Import a build step from docs/hooks/steps/ (`steps.<name>`), as the MkDocs hooks do: docs/hooks is
    put on `sys.path`, as mkdocs puts a hook's folder while it loads the hook."""
    folder = str(ROOT / "docs" / "hooks")
    if folder not in sys.path:
        sys.path.insert(0, folder)
    return importlib.import_module(f"steps.{name}")


def site_folder(site_url: str = LOCAL_URL) -> Path:
    """Where the shared build for `site_url` of the current sources lies (built or not)."""
    digest = hashlib.sha256(site_url.encode())
    for name in BUILD_INPUTS:
        path = ROOT / name
        for file in sorted(path.rglob("*")) if path.is_dir() else [path]:
            skipped = {"__pycache__", "node_modules", ".ruff_cache"}.intersection(file.parts)
            if file.is_file() and not skipped:
                digest.update(str(file.relative_to(ROOT)).encode() + b"\0" + file.read_bytes())
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    docs_extra = re.findall(
        r'^    "([^"]+)",', re.search(r"^docs = \[\n(.*?)^\]", pyproject, re.M | re.S)[1], re.M
    )
    for requirement in sorted(docs_extra):
        name = re.match(r"[A-Za-z0-9._-]+", requirement)[0]
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            digest.update(f"{name}=={importlib.metadata.version(name)}".encode())
    return BUILD / f"site-{digest.hexdigest()[:16]}"


@functools.cache
def build_site(dest: Path | None = None, site_url: str = LOCAL_URL) -> Path:
    """Build the site into `dest`, or into the shared folder of `site_url` (`site_folder`); return it.

    Without `dest`, a build that an earlier test session finished for the same sources and address is reused,
    and test processes running side by side (pytest-xdist) build it once: the others wait for it.
    Cached: within one test session, the same arguments return the same folder without building again.

    Raises:
        RuntimeError: the strict build failed; the message holds mkdocs' output.
    """
    if dest is not None:
        _mkdocs_build(Path(dest), site_url)
        return Path(dest)
    if ZENSICAL_SITE is not None:  # nox -s zensical: built by Zensical between the build steps
        return ZENSICAL_SITE
    folder = site_folder(site_url)
    BUILD.mkdir(exist_ok=True)
    with (BUILD / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another test process building the same site: wait for it
        if (folder / COMPLETE).is_file():
            return folder
        partial = Path(tempfile.mkdtemp(prefix="partial-", dir=BUILD))
        try:
            _mkdocs_build(partial, site_url)
            (partial / COMPLETE).touch()
            for earlier in BUILD.glob("site-*"):
                shutil.rmtree(earlier)
            partial.rename(folder)
        finally:
            shutil.rmtree(partial, ignore_errors=True)
    return folder


def _mkdocs_build(dest: Path, site_url: str) -> None:
    command = [sys.executable, "-m", "mkdocs", "build", "--strict", "--clean"]
    result = subprocess.run(
        [*command, "--config-file", str(ROOT / "mkdocs.yml"), "--site-dir", str(dest)],
        cwd=ROOT,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1", "SITE_URL": site_url},
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        raise RuntimeError(f"mkdocs build --strict failed:\n{result.stdout}{result.stderr}")


@contextlib.contextmanager
def serve(
    site_dir: Path,
    handler: type[http.server.SimpleHTTPRequestHandler] | None = None,
    port: int = 0,
) -> Iterator[str]:
    """Serve `site_dir` on `port` of 127.0.0.1 (a free one for 0) in a background thread; yields its URL.

    `handler` answers the requests (default `QuietHandler`: files as they are, no log line per request).

    Raises:
        OSError: `port` is taken.
    """
    answer = functools.partial(handler or QuietHandler, directory=str(site_dir))
    with http.server.ThreadingHTTPServer(("127.0.0.1", port), answer) as server:
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        try:
            yield f"http://127.0.0.1:{server.server_port}/"
        finally:
            server.shutdown()
            thread.join()


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        """Keep the test output free of one line per request."""
