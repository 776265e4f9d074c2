"""docs/hooks/steps/package_index.py on a small project, without a build."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

from tests.site.build import load_step

package_index = load_step("package_index")
SITE = "https://qkv.example.org/"
PYPROJECT = """\
[build-system]
requires = ["hatchling"]
build-backend = "hatchling.build"

[project]
name = "qkv"
version = "9.8.7"
requires-python = ">=3.11"

[tool.hatch.build.targets.wheel]
packages = ["src/qkv"]
"""


def test_the_index_links_each_distribution_by_its_hash(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text(PYPROJECT, encoding="utf-8")
    (tmp_path / "src" / "qkv").mkdir(parents=True)
    (tmp_path / "src" / "qkv" / "__init__.py").write_text('"""A stand-in."""\n', encoding="utf-8")
    values, files = package_index.package_index(tmp_path, SITE)
    wheel, sdist = "qkv-9.8.7-py3-none-any.whl", "qkv-9.8.7.tar.gz"
    assert list(files) == [
        f"packages/{wheel}",
        f"packages/{sdist}",
        "simple/qkv/index.html",
        "simple/index.html",
    ]
    digests = {
        name: hashlib.sha256(files[f"packages/{name}"]).hexdigest() for name in (wheel, sdist)
    }
    assert values == {
        "qkv_version": "9.8.7",
        "qkv_wheel": f"{SITE}packages/{wheel}#sha256={digests[wheel]}",
        "qkv_sdist": f"{SITE}packages/{sdist}#sha256={digests[sdist]}",
    }
    links = re.findall(
        r'<a href="([^"]+)" data-requires-python="&gt;=3.11">', files["simple/qkv/index.html"]
    )
    assert links == [f"../../packages/{name}#sha256={digests[name]}" for name in (wheel, sdist)]
    assert '<a href="qkv/">qkv</a>' in files["simple/index.html"]


def test_placeholders_are_filled_in() -> None:
    markdown = (
        "pip install '{{ qkv_wheel }}' # {{ qkv_version }}, not {{qkv_version}} or {{ other }}"
    )
    values = {"qkv_wheel": "https://x/q.whl#sha256=0", "qkv_version": "1.0"}
    assert package_index.filled(markdown, values) == (
        "pip install 'https://x/q.whl#sha256=0' # 1.0, not {{qkv_version}} or {{ other }}"
    )
