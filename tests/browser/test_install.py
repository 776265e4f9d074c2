"""The Get started page's install commands cannot be satisfied by a `qkv` from another index.

A stand-in for a public index holds `qkv 99.0`, a higher version than ours, and is made pip's main index
(`PIP_INDEX_URL`), as PyPI is for a reader. The command the page shows, as a reader copies it, still resolves
to the site's wheel; the command the site used to show (`qkv --extra-index-url <site>simple/`) resolves to the
stand-in's, which shows that the stand-in would win wherever a command lets it; a wheel whose sha256 differs
from the one the command names is refused. `pip install --dry-run --no-deps` resolves and downloads without
installing, so nothing here touches this environment.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from playwright.sync_api import Browser

from tests.browser.conftest import Site
from tests.browser.test_reader import _install_commands

HIJACK = "99.0"


def _stand_in_index(folder: Path) -> str:
    """A PEP 503 index at `folder` holding a `qkv` wheel of version `HIJACK`; its file:// URL."""
    wheel = folder / f"qkv-{HIJACK}-py3-none-any.whl"
    info = f"qkv-{HIJACK}.dist-info"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("qkv/__init__.py", "raise SystemExit('not the site')\n")
        archive.writestr(
            f"{info}/METADATA", f"Metadata-Version: 2.1\nName: qkv\nVersion: {HIJACK}\n"
        )
        wheel_file = (
            "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        )
        archive.writestr(f"{info}/WHEEL", wheel_file)
        archive.writestr(f"{info}/RECORD", "")
    project = folder / "simple" / "qkv"
    project.mkdir(parents=True)
    (project / "index.html").write_text(f'<a href="../../{wheel.name}">{wheel.name}</a>\n')
    return (folder / "simple").as_uri() + "/"


def _resolved(arguments: list[str], index: str, folder: Path) -> subprocess.CompletedProcess:
    """`pip install --dry-run` of `arguments` with `index` as the main index; the report in the result."""
    report = folder / "report.json"
    report.unlink(missing_ok=True)
    command = [sys.executable, "-m", "pip", "install", "--dry-run", "--no-deps"]
    command += ["--ignore-installed", "--no-cache-dir", "--report", str(report), *arguments]
    environment = {
        name: value for name, value in os.environ.items() if not name.startswith("PIP_")
    }  # no other index, no find-links: only the one given, as PyPI is for a reader
    environment |= {"PIP_CONFIG_FILE": os.devnull, "PIP_INDEX_URL": index}
    environment["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    result = subprocess.run(command, capture_output=True, text=True, env=environment)
    result.report = json.loads(report.read_text()) if report.exists() else None
    return result


def _version(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == 0, result.stderr[-2000:]
    (installed,) = result.report["install"]
    return installed["metadata"]["version"]


@pytest.fixture(scope="module")
def commands(site: Site, browser: Browser) -> list[list[str]]:
    """The Get started page's install commands, plain and with the extras, after `python -m pip`."""
    return [command[3:] for command in _install_commands(browser, site).values()]


def test_the_pages_commands_install_the_sites_qkv_past_a_higher_version(
    site: Site, commands: list[list[str]], tmp_path: Path
) -> None:
    index = _stand_in_index(tmp_path)
    ours = _version(_resolved(["qkv"], f"{site.url}simple/", tmp_path))  # the site's index alone
    assert ours != HIJACK
    unsafe = _resolved(["qkv", "--extra-index-url", f"{site.url}simple/"], index, tmp_path)
    assert _version(unsafe) == HIJACK  # the stand-in wins where a command lets it
    for command in commands:
        assert command[0] == "install", command
        assert "--extra-index-url" not in command, command
        assert _version(_resolved(command[1:], index, tmp_path)) == ours, command


def test_a_wheel_that_differs_from_its_checksum_is_refused(
    commands: list[list[str]], tmp_path: Path
) -> None:
    index = _stand_in_index(tmp_path)
    (requirement,) = [word for word in commands[0] if "#sha256=" in word]
    digest = requirement.rsplit("=", 1)[1]
    tampered = requirement.replace(digest, "0" * 64)
    result = _resolved([tampered], index, tmp_path)
    assert result.returncode != 0
    assert "THESE PACKAGES DO NOT MATCH THE HASHES" in result.stderr, result.stderr[-2000:]
