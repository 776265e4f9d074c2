"""Build step before the generator: the configuration a generator without hooks builds the staged docs with.

mkdocs.yml, read with its `!ENV` values, and changed where the MkDocs hooks and plugins did the work:

- `docs_dir` is the staged folder and `site_dir` a folder beside it (Zensical wants both under the folder of
  its configuration file, which is written beside them); the theme's `custom_dir` is the staged overrides;
- the snippets' base paths start at the repository root;
- no `hooks` and no mkdocs-jupyter (the staged folder holds each notebook converted as a page,
  `notebooks/<name>.md`, which the navigation names instead);
- the navigation has the articles in the home page's reading order (`reading_order.articles`) after
  "Get started", as the reading order hook puts them, and the blog's section last. Each is named by its
  address (`blog/<slug>/`) under its title: Zensical 0.0.73 links a post named by its file to
  `blog/posts/<name>.md`, which is no page.
"""

from __future__ import annotations

import copy
import os
import re
from pathlib import Path
from typing import Any

import yaml

from steps.article_notebooks import rooted
from steps.reading_order import BLOG_SECTION, GET_STARTED, HOME, POSTS, SECTION_TITLE, articles

LEFT_OUT_PLUGINS = {"mkdocs-jupyter"}  # prepare converts the notebooks
FRONT_MATTER = re.compile(r"\A---\n(?P<yaml>.*?)\n---\n", re.DOTALL)
HEADING = re.compile(r"^# (?P<title>.+?)\s*$", re.MULTILINE)


def post_slug(markdown: str, name: str) -> str:
    """A post's slug: its front matter's `slug`, else its file's `name` without `.md` (the blog's
    `post_url_format: "{slug}"` puts it at `blog/<slug>/`)."""
    found = FRONT_MATTER.match(markdown)
    meta = (yaml.safe_load(found["yaml"]) if found else None) or {}
    return str(meta.get("slug", name.removesuffix(".md")))


def post_title(markdown: str, name: str) -> str:
    """A post's title: its front matter's `title`, else its first `# ` heading, else its file's `name`."""
    found = FRONT_MATTER.match(markdown)
    meta = (yaml.safe_load(found["yaml"]) if found else None) or {}
    heading = HEADING.search(markdown[found.end() if found else 0 :])
    return str(meta.get("title") or (heading["title"] if heading else name))


def read_mkdocs_yml(path: Path) -> dict[str, Any]:
    """mkdocs.yml, with `!ENV [NAME, ..., default]` read from the environment.

    Raises:
        yaml.YAMLError: it holds another tag a plain reader cannot take.
    """

    class Loader(yaml.SafeLoader):
        pass

    def environment(loader: Loader, node: yaml.Node) -> Any:
        *names, default = loader.construct_sequence(node)
        return next((os.environ[name] for name in names if name in os.environ), default)

    Loader.add_constructor("!ENV", environment)
    return yaml.load(path.read_text(encoding="utf-8"), Loader=Loader)


def snippets_of(settings: dict[str, Any], root: Path) -> dict[str, Any]:
    """pymdownx.snippets' settings in `settings` (mkdocs.yml), each base path taken from `root`.

    Raises:
        ValueError: the settings list no pymdownx.snippets.
    """
    for extension in settings["markdown_extensions"]:
        if isinstance(extension, dict) and "pymdownx.snippets" in extension:
            found = dict(extension["pymdownx.snippets"])
            found["base_path"] = rooted(found.get("base_path", ["."]), root)
            return found
    raise ValueError("mkdocs.yml lists no pymdownx.snippets")


def staged_config(
    settings: dict[str, Any], root: Path, staged: Path, site_url: str
) -> dict[str, Any]:
    """The configuration of a build of the staged folder `staged`, written beside it (`staged.parent`).

    Args:
        settings: mkdocs.yml (`read_mkdocs_yml`).
        root: the repository.
        staged: the staged docs folder (`prepare`).
        site_url: the address the site will be served from.

    Raises:
        ValueError: the reading order does not list every post once (`articles`), or the navigation lacks
            Get started or the blog's section.
    """
    config = copy.deepcopy(settings)
    config.pop("hooks", None)
    config["site_url"] = site_url
    config["docs_dir"] = staged.name
    config["site_dir"] = "site"
    config["theme"]["custom_dir"] = f"{staged.name}/overrides"
    config["plugins"] = [
        plugin
        for plugin in config["plugins"]
        if (next(iter(plugin)) if isinstance(plugin, dict) else plugin) not in LEFT_OUT_PLUGINS
    ]
    for extension in config["markdown_extensions"]:
        if isinstance(extension, dict) and "pymdownx.snippets" in extension:
            extension["pymdownx.snippets"] = snippets_of(settings, root)
    posts = [path.relative_to(staged).as_posix() for path in sorted(staged.glob(f"{POSTS}*.md"))]
    order = articles((staged / HOME).read_text(encoding="utf-8"), posts)
    config["nav"] = _nav(config["nav"], [_article(staged / post, site_url) for post in order])
    return config


def _article(post: Path, site_url: str) -> dict[str, str]:
    """A post in the navigation: its title and its address."""
    markdown = post.read_text(encoding="utf-8")
    return {post_title(markdown, post.name): f"{site_url}blog/{post_slug(markdown, post.name)}/"}


def _nav(nav: list[Any], order: list[dict[str, str]]) -> list[Any]:
    """The navigation with the articles after Get started, the blog's section last, and each notebook as
    its converted page."""
    items = [_converted(item) for item in nav]
    blog = [item for item in items if isinstance(item, dict) and BLOG_SECTION in item]
    rest = [item for item in items if not (isinstance(item, dict) and BLOG_SECTION in item)]
    pages = [next(iter(item.values())) if isinstance(item, dict) else item for item in rest]
    if len(blog) != 1 or GET_STARTED not in pages:
        raise ValueError(f"the nav needs {GET_STARTED} and one '{BLOG_SECTION}' section")
    after = pages.index(GET_STARTED) + 1
    return [*rest[:after], {SECTION_TITLE: order}, *rest[after:], *blog]


def _converted(item: Any) -> Any:
    """A navigation item with a notebook (`x.ipynb`) named by its converted page (`x.md`)."""
    if isinstance(item, str):
        return item.removesuffix(".ipynb") + ".md" if item.endswith(".ipynb") else item
    if isinstance(item, dict):
        return {title: _converted(value) for title, value in item.items()}
    return [_converted(child) for child in item]


def write(config: dict[str, Any], staged: Path) -> Path:
    """Write `config` beside the staged folder as mkdocs.yml; returns its path."""
    path = staged.parent / "mkdocs.yml"
    path.write_text(yaml.safe_dump(config, sort_keys=False, allow_unicode=True), encoding="utf-8")
    return path
