"""The site wing's tests that read the built site run in one pytest-xdist worker (`--dist loadgroup`).

The first of them builds the site (`tests.site.build.build_site`); in one worker, the others wait for nothing
and the other worker goes on with the rest of the suite.
"""

import pytest

READ_THE_BUILD = {"test_site_build.py", "test_notebook_styles.py", "test_links.py"}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.path.name in READ_THE_BUILD and item.path.parent.name == "site":
            item.add_marker(pytest.mark.xdist_group("site-build"))
