"""Build step: the site serves the `qkv` package, so a reader installs what the articles import from it.

Each build makes the wheel and the source distribution from the repository (hatchling's PEP 517 hooks, the
project's own build backend) and publishes them with a PEP 503 simple index:

    packages/qkv-<version>-py3-none-any.whl
    packages/qkv-<version>.tar.gz   the source, tests and site included: what `nox` runs
    simple/index.html               the project list: qkv
    simple/qkv/index.html           a link to each file, with its sha256 and Requires-Python

Pages never ask pip for the name `qkv` on more than one index: pip takes the highest version a name has on
any index it is given, and `qkv` is not ours on PyPI, so `--extra-index-url <site>simple/` would install
whatever someone uploads there under a higher version. Commands name the file instead, by its full address
and its sha256, which pip checks: `{{ qkv_wheel }}` and `{{ qkv_sdist }}` (`<site_url>packages/<file>#sha256=
<digest>`). Pages also name the site's address as `{{ site_url }}` and the version as `{{ qkv_version }}`.
This step fills all four in, with the configured `site_url`, so every command a reader copies points at the
site that served it. Four placeholders do not justify a templating plugin (mkdocs-macros would also read
every `{{` of every code block).
"""

from __future__ import annotations

import hashlib
import html
import os
import tempfile
from email.parser import HeaderParser
from pathlib import Path
from zipfile import ZipFile

from hatchling.build import build_sdist, build_wheel

PROJECT = "qkv"
PLACEHOLDERS = ("site_url", "qkv_version", "qkv_wheel", "qkv_sdist")  # each written {{ name }}
INDEX_PAGE = """<!DOCTYPE html>
<html lang="en">
<head><meta charset="utf-8"><meta name="pypi:repository-version" content="1.0"><title>{title}</title></head>
<body>
{links}
</body>
</html>
"""


def build(root: Path, directory: Path) -> tuple[Path, Path]:
    """Build the wheel and the sdist of the project at `root` into `directory`; returns their paths."""
    cwd = Path.cwd()
    os.chdir(root)  # PEP 517 backends build the project in the working directory
    try:
        return directory / build_wheel(str(directory)), directory / build_sdist(str(directory))
    finally:
        os.chdir(cwd)


def metadata(wheel: Path) -> dict[str, str]:
    """The wheel's core metadata (`Name`, `Version`, `Requires-Python`...), first value of each field."""
    with ZipFile(wheel) as archive:
        (path,) = (name for name in archive.namelist() if name.endswith(".dist-info/METADATA"))
        headers = HeaderParser().parsestr(archive.read(path).decode("utf-8"))
    return {key: headers[key] for key in headers}


def pinned(path: Path) -> str:
    """`<file name>#sha256=<digest>`: a file as a link names it so that pip checks what it downloads."""
    return f"{path.name}#sha256={hashlib.sha256(path.read_bytes()).hexdigest()}"


def project_page(pins: list[str], requires_python: str | None) -> str:
    """The PEP 503 page of the project: a link to each file (`pinned`), with Requires-Python."""
    attribute = f' data-requires-python="{html.escape(requires_python)}"' if requires_python else ""
    links = "<br>\n".join(
        f'<a href="../../packages/{pin}"{attribute}>{pin.partition("#")[0]}</a>' for pin in pins
    )
    return INDEX_PAGE.format(title=f"Links for {PROJECT}", links=links)


def package_index(root: Path, site_url: str) -> tuple[dict[str, str], dict[str, bytes | str]]:
    """Build the project at `root` and its simple index, for a site served at `site_url`.

    Returns:
        The values of the placeholders but `site_url` (`qkv_version`, `qkv_wheel`, `qkv_sdist`), and the
        files to publish: their content by their path on the site.
    """
    with tempfile.TemporaryDirectory(prefix="qkv-dist-") as folder:
        distributions = build(root, Path(folder))  # (wheel, sdist)
        found = metadata(distributions[0])
        pins = [pinned(path) for path in distributions]
        files: dict[str, bytes | str] = {
            f"packages/{path.name}": path.read_bytes() for path in distributions
        }
    files[f"simple/{PROJECT}/index.html"] = project_page(pins, found.get("Requires-Python"))
    files["simple/index.html"] = INDEX_PAGE.format(
        title="Simple index", links=f'<a href="{PROJECT}/">{PROJECT}</a>'
    )
    wheel, sdist = (f"{site_url}packages/{pin}" for pin in pins)
    return {"qkv_version": found["Version"], "qkv_wheel": wheel, "qkv_sdist": sdist}, files


def filled(markdown: str, values: dict[str, str]) -> str:
    """`markdown` with each `{{ name }}` of `values` replaced by its value."""
    for name, value in values.items():
        markdown = markdown.replace(f"{{{{ {name} }}}}", value)
    return markdown
