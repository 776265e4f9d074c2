"""The site tests that build the site or start MathJax share one pytest-xdist worker (`--dist loadgroup`).

The first of them builds the site (`tests.site.build.build_site`), and the build installs MathJax with `npm ci`
as the MathJax hook's own tests do: two processes installing into one folder at once break each other. In one
worker they take turns, and the other worker goes on with the rest of the suite.
"""

import pytest

ONE_WORKER = {"test_site_build.py", "test_notebook_styles.py", "test_links.py", "test_mathjax.py"}


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the groups
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.path.name in ONE_WORKER and item.path.parent.name == "site":
            item.add_marker(pytest.mark.xdist_group("site-build"))
