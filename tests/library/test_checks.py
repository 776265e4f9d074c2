"""The shared validators of qkv._checks that are more than a message: the broadcast rule."""

import subprocess
import sys

import torch
from hypothesis import given
from hypothesis import strategies as st

from qkv._checks import broadcast_shape

SHAPES = st.lists(st.lists(st.sampled_from([0, 1, 2, 3]), max_size=4), min_size=1, max_size=3)


@given(SHAPES)
def test_broadcast_shape_is_torchs_rule(shapes):
    try:
        expected = tuple(torch.broadcast_shapes(*shapes))
    except RuntimeError:
        expected = None
    assert broadcast_shape(*shapes) == expected


def test_broadcast_shape_examples():
    assert broadcast_shape((2, 1, 4), (3, 1)) == (2, 3, 4)
    assert broadcast_shape((0,), (1,)) == (0,)
    assert broadcast_shape((2,), (3,)) is None
    assert broadcast_shape() == ()


def test_a_first_attention_call_does_not_import_sympy():
    """torch.broadcast_shapes imports sympy on its first call: seconds before a reader's first result."""
    code = (
        "import sys, torch, qkv\n"
        "q = torch.randn(2, 2, 4, 8)\n"
        "mask = torch.ones(4, 4, dtype=torch.bool).tril()\n"
        "qkv.scaled_dot_product_attention(q, q, q, attn_mask=mask)\n"
        "qkv.attention(q, q, q, is_causal=True)\n"
        "print('sympy' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"
