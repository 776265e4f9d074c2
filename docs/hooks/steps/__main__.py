"""The build steps around a generator that runs no MkDocs hook, from the repository root:

    python docs/hooks/steps prepare --staged build/zensical/docs
    zensical build ...                      # docs_dir: the staged folder
    python docs/hooks/steps finish --staged build/zensical/docs --site build/zensical/site

`prepare` writes the staged docs folder and, beside it, `prepared.json` (what `finish` needs). The site's
address is `SITE_URL`, else mkdocs.yml's `site_url`; the snippets' settings are mkdocs.yml's, their
`base_path` taken from the repository root.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(
    0, str(ROOT / "docs" / "hooks")
)  # `python docs/hooks/steps` puts only this folder there

from steps.article_notebooks import rooted  # noqa: E402
from steps.finish import finish  # noqa: E402
from steps.prepare import Prepared, prepare  # noqa: E402

ICON = Path(".icons", "material", "download.svg")
THEMES = ("material", "zensical")  # packages that ship the theme's icons


def config(root: Path) -> dict[str, Any]:
    """mkdocs.yml, with `!ENV [NAME, default]` read from the environment."""

    class Loader(yaml.SafeLoader):
        pass

    def environment(loader: Loader, node: yaml.Node) -> Any:
        *names, default = loader.construct_sequence(node)
        return next((os.environ[name] for name in names if name in os.environ), default)

    Loader.add_constructor("!ENV", environment)
    return yaml.load((root / "mkdocs.yml").read_text(encoding="utf-8"), Loader=Loader)


def snippets_config(settings: dict[str, Any], root: Path) -> dict[str, Any]:
    """pymdownx.snippets' settings in mkdocs.yml, each base path taken from `root`."""
    for extension in settings["markdown_extensions"]:
        if isinstance(extension, dict) and "pymdownx.snippets" in extension:
            found = dict(extension["pymdownx.snippets"])
            found["base_path"] = rooted(found.get("base_path", ["."]), root)
            return found
    raise ValueError("mkdocs.yml lists no pymdownx.snippets")


def icon() -> str:
    """The download icon of the theme's icon set, from the installed theme's package."""
    for package in THEMES:
        spec = importlib.util.find_spec(package)
        for folder in spec.submodule_search_locations if spec else []:
            for svg in sorted(Path(folder).rglob(str(ICON))):
                return svg.read_text(encoding="utf-8").strip()
    raise RuntimeError(f"no theme package of {THEMES} ships {ICON}")


def main(arguments: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="python docs/hooks/steps", description=__doc__)
    parser.add_argument("step", choices=["prepare", "finish"])
    parser.add_argument("--staged", type=Path, default=ROOT / "build" / "zensical" / "docs")
    parser.add_argument("--site", type=Path, help="the built site (finish)")
    parser.add_argument("--no-notebooks", action="store_true", help="copy, not run, the notebooks")
    options = parser.parse_args(arguments)
    settings = config(ROOT)
    record = options.staged.parent / "prepared.json"
    if options.step == "prepare":
        site_url = os.environ.get("SITE_URL", settings["site_url"])
        prepared = prepare(ROOT, options.staged, site_url, notebooks=not options.no_notebooks)
        record.write_text(prepared.to_json(), encoding="utf-8")
    else:
        if options.site is None:
            parser.error("finish needs --site")
        finish(
            options.site,
            ROOT / "docs",
            options.staged,
            Prepared.from_json(record.read_text(encoding="utf-8")),
            snippets=snippets_config(settings, ROOT),
            icon=icon(),
        )


if __name__ == "__main__":
    main(sys.argv[1:])
