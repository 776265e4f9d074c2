"""The build steps around a generator that runs no MkDocs hook, from the repository root:

    python docs/hooks/steps prepare --staged build/zensical/docs
    zensical build ...                      # docs_dir: the staged folder
    python docs/hooks/steps finish --staged build/zensical/docs --site build/zensical/site

`prepare` writes the staged docs folder and, beside it, `prepared.json` (what `finish` needs) and the
configuration to build it with (`staged_config.py`): `zensical build -f build/zensical/mkdocs.yml`. The
site's address is mkdocs.yml's `site_url` (`SITE_URL` if set); the snippets' settings are mkdocs.yml's, their
`base_path` taken from the repository root.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(
    0, str(ROOT / "docs" / "hooks")
)  # `python docs/hooks/steps` puts only this folder there

from steps.finish import finish  # noqa: E402
from steps.prepare import Prepared, prepare  # noqa: E402
from steps.staged_config import read_mkdocs_yml, snippets_of, staged_config, write  # noqa: E402

ICON = Path(".icons", "material", "download.svg")
THEMES = ("material", "zensical")  # packages that ship the theme's icons


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
    settings = read_mkdocs_yml(ROOT / "mkdocs.yml")
    record = options.staged.parent / "prepared.json"
    if options.step == "prepare":
        site_url = settings["site_url"]
        prepared = prepare(ROOT, options.staged, site_url, notebooks=not options.no_notebooks)
        record.write_text(prepared.to_json(), encoding="utf-8")
        write(staged_config(settings, ROOT, options.staged, site_url), options.staged)
    else:
        if options.site is None:
            parser.error("finish needs --site")
        finish(
            options.site,
            ROOT / "docs",
            options.staged,
            Prepared.from_json(record.read_text(encoding="utf-8")),
            snippets=snippets_of(settings, ROOT),
            icon=icon(),
        )


if __name__ == "__main__":
    main(sys.argv[1:])
