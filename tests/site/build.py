"""Build the site for the tests that look at it, once per test session, and serve it locally.

`build_site()` runs `mkdocs build --strict` (so any warning fails it) with `SITE_URL` set to the address the
site will be served from (`serve()` picks a free port): pages name their links and assets by full address under
`site_url`, and Material's instant navigation works only when it matches the served address.
"""

from __future__ import annotations

import contextlib
import functools
import http.server
import importlib.util
import os
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]
LOCAL_URL = "http://127.0.0.1:8765/"


def load_hook(name: str) -> ModuleType:
    """Import a build hook from docs/hooks/ by path, as mkdocs does (the folder is not a package)."""
    path = ROOT / "docs" / "hooks" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"qkv_hook_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@functools.cache
def build_site(dest: Path | None = None, site_url: str = LOCAL_URL) -> Path:
    """Build the site into `dest` (a fresh temporary folder when None) and return that folder.

    Cached: within one test session, the same arguments return the same folder without building again.

    Raises:
        RuntimeError: the strict build failed; the message holds mkdocs' output.
    """
    dest = Path(tempfile.mkdtemp(prefix="qkv-site-")) if dest is None else Path(dest)
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
    return dest


@contextlib.contextmanager
def serve(
    site_dir: Path, handler: type[http.server.SimpleHTTPRequestHandler] | None = None
) -> Iterator[str]:
    """Serve `site_dir` on a free port of 127.0.0.1 in a background thread; yields its URL.

    `handler` answers the requests (default `QuietHandler`: files as they are, no log line per request).
    """
    answer = functools.partial(handler or QuietHandler, directory=str(site_dir))
    with http.server.ThreadingHTTPServer(("127.0.0.1", 0), answer) as server:
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
