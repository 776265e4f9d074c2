"""Page-speed benchmark of the built site: Lighthouse, mobile settings, on every page (`nox -s lighthouse`).

Builds the site (`mkdocs build --strict`, `SITE_URL` set to where it is served), serves it on 127.0.0.1, and runs
Lighthouse (npm, pinned by `package-lock.json` beside this file, installed with `npm ci`) in Debian's Chromium
against each page, `--runs` times. Lighthouse's defaults are kept: a mobile device with simulated slow 4G and
a 4x slower CPU. For each page the report gives the median of the runs: the four category scores, largest
contentful paint, total blocking time, cumulative layout shift and the bytes transferred, with each run's
performance score, next to the machine, the versions and the date. It writes `report.json` and `report.md` into `--out`.

Scores move by several points between runs on a busy machine: compare runs made together, not across days.
"""

from __future__ import annotations

import argparse
import datetime
import functools
import gzip
import http.server
import io
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import BinaryIO

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
CHROMIUM = "/usr/bin/chromium"
CHROME_FLAGS = "--headless=new --no-sandbox --disable-gpu --disable-background-networking"
CATEGORIES = ("performance", "accessibility", "best-practices", "seo")
AUDITS = {
    "lcp_ms": "largest-contentful-paint",
    "tbt_ms": "total-blocking-time",
    "cls": "cumulative-layout-shift",
    "bytes": "total-byte-weight",
}
COMPRESSED = {".html", ".css", ".js", ".json", ".svg", ".xml", ".txt", ".ipynb"}
TARGETS = {"performance": 95, "accessibility": 100, "best-practices": 100, "seo": 100}


@functools.cache
def _gzipped(path: Path) -> bytes:
    """A file's bytes compressed, once: compressing at every request took CPU from the page being measured."""
    return gzip.compress(path.read_bytes(), mtime=0)


class _Server(http.server.SimpleHTTPRequestHandler):
    """Serves the built site as GitHub Pages does: text compressed with gzip when the browser accepts it."""

    def send_head(self) -> io.BytesIO | BinaryIO | None:
        path = Path(self.translate_path(self.path))
        if path.is_dir() and self.path.split("?")[0].endswith("/"):
            path = path / "index.html"
        gzip_ok = "gzip" in self.headers.get("Accept-Encoding", "")
        if not gzip_ok or path.suffix not in COMPRESSED or not path.is_file():
            return super().send_head()
        body = _gzipped(path)
        self.send_response(200)
        self.send_header("Content-Type", self.guess_type(str(path)))
        self.send_header("Content-Encoding", "gzip")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        return io.BytesIO(body)

    def log_message(self, format: str, *args: object) -> None:
        """No line per request."""


def pages(site: Path) -> list[str]:
    """Every page a reader can open: each index.html, but not the theme's assets or the package index."""
    found = []
    for index in sorted(site.rglob("index.html")):
        relative = index.parent.relative_to(site)
        if relative.parts and relative.parts[0] in ("assets", "simple"):
            continue
        found.append("" if relative == Path(".") else relative.as_posix() + "/")
    return found


def lighthouse(url: str) -> dict:
    """One Lighthouse run of `url`: the category scores (0-100) and the audits in AUDITS."""
    command = [
        str(HERE / "node_modules" / ".bin" / "lighthouse"),
        url,
        "--output=json",
        "--quiet",
        f"--only-categories={','.join(CATEGORIES)}",
        f"--chrome-flags={CHROME_FLAGS}",
    ]
    done = subprocess.run(
        command,
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "CHROME_PATH": CHROMIUM},
    )
    result = json.loads(done.stdout)
    scores = {name: round(100 * result["categories"][name]["score"]) for name in CATEGORIES}
    audits = {key: result["audits"][audit]["numericValue"] for key, audit in AUDITS.items()}
    return {
        **scores,
        **audits,
        "benchmark_index": result["environment"]["benchmarkIndex"],
        "lighthouse": result["lighthouseVersion"],
    }


def median_of(runs: list[dict]) -> dict:
    """Each number's median over the runs."""
    numbers = [key for key, value in runs[0].items() if isinstance(value, (int, float))]
    return {key: statistics.median(run[key] for run in runs) for key in numbers}


def environment() -> dict:
    chromium = subprocess.run([CHROMIUM, "--version"], capture_output=True, text=True).stdout
    cpu = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        platform.processor(),
    )
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "cpu": cpu,
        "cores": os.cpu_count(),
        "chromium": chromium.strip(),
        "python": platform.python_version(),
        "settings": "Lighthouse defaults: mobile, simulated slow 4G, 4x CPU slowdown",
    }


def markdown(report: dict) -> str:
    env = report["environment"]
    index = [m["benchmark_index"] for m in report["pages"].values()]
    lines = [
        "# Lighthouse report",
        "",
        f"{env['date']}, Lighthouse {report['lighthouse']}, {env['chromium']}, {env['cpu']} "
        f"({env['cores']} cores). {env['settings']}; median of {report['runs']} run(s) per page. "
        f"Targets: performance >= {TARGETS['performance']}, the other categories 100. Lighthouse's "
        f"benchmark index of this machine (its CPU speed, higher is faster): {min(index):.0f} to "
        f"{max(index):.0f} (medians per page).",
        "",
        "| page | perf | perf, each run | a11y | best pr. | SEO | LCP (s) | TBT (ms) | CLS | bytes |",
        "| --- | ---: | :--- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for page, m in report["pages"].items():
        each = " ".join(str(score) for score in m["performance_runs"])
        lines.append(
            f"| /{page} | {m['performance']:.0f} | {each} | {m['accessibility']:.0f} | "
            f"{m['best-practices']:.0f} | {m['seo']:.0f} | {m['lcp_ms'] / 1000:.1f} | "
            f"{m['tbt_ms']:.0f} | {m['cls']:.3f} | {m['bytes']:,.0f} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--runs", type=int, default=3, help="runs per page (the median is reported)"
    )
    parser.add_argument(
        "--out", type=Path, default=HERE, help="folder for report.json and report.md"
    )
    parser.add_argument(
        "--page",
        action="append",
        help="only this page, e.g. blog/masking/ (repeatable; default: every page)",
    )
    args = parser.parse_args(argv)
    site = Path(tempfile.mkdtemp(prefix="qkv-lighthouse-"))
    handler = functools.partial(_Server, directory=str(site))
    with http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler) as server:
        url = f"http://127.0.0.1:{server.server_port}/"
        subprocess.run(
            [
                sys.executable,
                "-m",
                "mkdocs",
                "build",
                "--strict",
                "--quiet",
                "--site-dir",
                str(site),
            ],
            cwd=ROOT,
            env={**os.environ, "SITE_URL": url, "NO_MKDOCS_2_WARNING": "1"},
            check=True,
        )
        threading.Thread(target=server.serve_forever, daemon=True).start()
        results, version = {}, None
        chosen = args.page or pages(site)
        for number, page in enumerate(chosen, start=1):
            runs = [lighthouse(url + page) for _ in range(args.runs)]
            version = runs[0]["lighthouse"]
            results[page] = {
                **median_of(runs),
                "performance_runs": [r["performance"] for r in runs],
            }
            print(f"[{number}] /{page}: {results[page]}", file=sys.stderr, flush=True)
        server.shutdown()
    report = {
        "environment": environment(),
        "lighthouse": version,
        "runs": args.runs,
        "targets": TARGETS,
        "pages": results,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "report.json").write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    (args.out / "report.md").write_text(markdown(report), encoding="utf-8")
    missed = [
        f"/{page} {name} {m[name]:.0f} < {target}"
        for page, m in results.items()
        for name, target in TARGETS.items()
        if m[name] < target
    ]
    print("\n".join(missed) or "every page meets the targets", file=sys.stderr)
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
