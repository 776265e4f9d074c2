"""Suite-wide settings: Triton's CPU interpreter, seeded randomness, one hypothesis profile."""

import os

# Triton reads this when it is imported: the kernel tests run on CPU tensors through its interpreter.
os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest
import torch
from hypothesis import settings

from qkv_lab.toys import one_thread as _single_thread

settings.register_profile("qkv", deadline=None, max_examples=40, derandomize=True)
settings.load_profile("qkv")


@pytest.fixture(autouse=True)
def _seed() -> None:
    torch.manual_seed(0)


@pytest.fixture
def one_thread():
    """Torch on one thread for the test: tiny models run many times slower on two busy cores otherwise
    (`qkv_lab.toys.one_thread`). A module asks for it with `pytestmark = pytest.mark.usefixtures(...)`."""
    with _single_thread():
        yield


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the groups
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Under `pytest -n 2 --dist loadgroup` (nox), each article's blocks run on one worker, in page order.

    Blocks of one article read the same trained toys (`qkv_lab.remember`): on two workers, the second would
    wait for the first to train (30 s of an idle core for the serving article's draft model, 2026-11-26).
    """
    for item in items:
        if item.path.suffix == ".md":
            item.add_marker(pytest.mark.xdist_group(f"article-{item.path.stem}"))
