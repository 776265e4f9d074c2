"""MkDocs hook: self-host MathJax 3.2.2 from the installed PyPI package `django-static-mathjax==3.2.2.1`.

That package installs the upstream MathJax distribution as `mathjax/static/mathjax/` (found through the
distribution's metadata: this hook's own module name would shadow the import name `mathjax`). The files the site needs are added to the build under `assets/mathjax/`; nothing is vendored in the repository.
`docs/javascripts/mathjax.js` loads `assets/mathjax/tex-mml-chtml.js` on pages that have math.
"""

from __future__ import annotations

import json
from importlib.metadata import distribution
from pathlib import Path

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File, Files

MATHJAX_VERSION = "3.2.2"
DEST = "assets/mathjax"
# The combined TeX and MathML -> CommonHTML component (the accessibility explorer needs its MathML input), and
# what it fetches on demand: the fonts, the TeX extensions that `autoload`/`\require` pull in, and the
# accessibility tools behind MathJax's context menu (the explorer and its speech rules).
NEEDED = ("tex-mml-chtml.js", "output/chtml/fonts/woff-v2", "input/tex/extensions", "a11y", "sre")


def _distribution() -> Path:
    """The `es5/` folder of the installed MathJax, after checking its version."""
    root = Path(distribution("django-static-mathjax").locate_file("mathjax/static/mathjax"))
    found = json.loads((root / "package.json").read_text(encoding="utf-8"))["version"]
    if found != MATHJAX_VERSION:
        raise PluginError(f"MathJax {MATHJAX_VERSION} expected, {found} installed in {root}")
    return root / "es5"


def on_files(files: Files, config: MkDocsConfig) -> Files:
    """Add MathJax's files to the build under `assets/mathjax/`."""
    es5 = _distribution()
    for entry in NEEDED:
        path = es5 / entry
        if not path.exists():
            raise PluginError(f"MathJax file missing: {path}")
        sources = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
        for source in sources:
            uri = f"{DEST}/{source.relative_to(es5).as_posix()}"
            files.append(File.generated(config, uri, abs_src_path=str(source)))
    return files
