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
