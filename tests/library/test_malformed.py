"""Every public attention function, fed the same classes of malformed input, answers with a clear error.

Each callable takes its query, key and value (and whatever else it needs, well formed) through a wrapper.
Each class of malformed input spoils one argument; the call must raise a `TypeError` or `ValueError`
(never an exception from inside torch, never a result) whose message names the spoiled argument. The
modules' own tables (`test_multihead.py`, `test_block.py`, `test_classic.py`, `test_efficient.py`, and
`test_malformed_<module>.py` for the paged cache, the GPT, MLA, flex, RoPE scaling, the caches and the
kernels) go further for each callable; this file holds the whole package to one rule.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest
import torch

import qkv

B, H, N, E = 2, 2, 8, 4


def _packed(x: object) -> object:
    """A `(B, H, N, E)` tensor as B sequences of N packed one after another, `(B * N, H, E)`; else as given."""
    if isinstance(x, torch.Tensor) and x.dim() == 4:
        return x.transpose(1, 2).flatten(0, 1)  # (B, H, N, E) -> (B, N, H, E) -> (B * N, H, E)
    return x


CU_SEQLENS = torch.arange(
    0, (B + 1) * N, N, dtype=torch.int32
)  # B sequences of N: 0, N, ..., B * N
CALLABLES: dict[str, Callable] = {
    "scaled_dot_product_attention": qkv.scaled_dot_product_attention,
    "attention": qkv.attention,
    "attention_weights": lambda q, k, v: qkv.attention_weights(q, k),
    "sliding_window_attention": lambda q, k, v: qkv.sliding_window_attention(q, k, v, window=3),
    "block_sparse_attention": lambda q, k, v: qkv.block_sparse_attention(
        q, k, v, torch.ones(N, N, dtype=torch.bool), block_size=4
    ),
    "linear_attention": qkv.linear_attention,
    "linear_attention_weights": lambda q, k, v: qkv.linear_attention_weights(q, k),
    "linformer_attention": lambda q, k, v: qkv.linformer_attention(
        q, k, v, torch.randn(4, N, dtype=torch.float64)
    ),
    "flash_attention": qkv.flash_attention,
    "flash_attention_varlen": lambda q, k, v: qkv.flash_attention_varlen(
        _packed(q), _packed(k), _packed(v), CU_SEQLENS, CU_SEQLENS
    ),
    "decode_attention": qkv.decode_attention,
}
WITHOUT_VALUE = {"attention_weights", "linear_attention_weights"}  # nothing to spoil in their value


def _valid(name: str) -> dict[str, torch.Tensor]:
    kernels = ("flash_attention", "flash_attention_varlen", "decode_attention")
    dtype = torch.float16 if name in kernels else torch.float64  # the kernels' dtypes
    return {name: torch.randn(B, H, N, E, dtype=dtype) for name in ("query", "key", "value")}


SPOILS = {  # argument -> (how it is spoiled, what it becomes)
    "not a tensor": ("query", lambda x: x.tolist()),
    "integer dtype": ("key", lambda x: x.round().long()),
    "another dtype": ("key", lambda x: x.float()),
    "another feature size": ("key", lambda x: torch.randn(B, H, N, E + 1, dtype=x.dtype)),
    "another length": ("value", lambda x: torch.randn(B, H, N + 3, E, dtype=x.dtype)),
    "one dimension": ("query", lambda x: torch.randn(E, dtype=x.dtype)),
}
ARGUMENT = {"query": r"\b(query|q)\b", "key": r"\b(key|k)\b", "value": r"\b(value|v)\b"}


@pytest.mark.parametrize(
    ("name", "spoil"),
    [
        (name, spoil)
        for name in CALLABLES
        for spoil, (argument, _) in SPOILS.items()
        if not (argument == "value" and name in WITHOUT_VALUE)
    ],
)
def test_malformed_input_is_refused_naming_the_argument(name: str, spoil: str) -> None:
    argument, make = SPOILS[spoil]
    inputs = _valid(name)
    inputs[argument] = make(inputs[argument])
    with pytest.raises((TypeError, ValueError)) as raised:
        CALLABLES[name](inputs["query"], inputs["key"], inputs["value"])
    assert type(raised.value) in (TypeError, ValueError), raised.value  # not a subclass from torch
    message = str(raised.value)
    assert re.search(ARGUMENT[argument], message), f"{name}, {spoil}: {message}"


@pytest.mark.parametrize("name", ["scaled_dot_product_attention", "attention_weights"])
@pytest.mark.parametrize("flag", ["bottom_right", "no", 1])
def test_a_causal_flag_that_is_not_one_raises(name: str, flag: object) -> None:
    q = torch.randn(B, H, N, E)
    call = {
        "scaled_dot_product_attention": lambda: qkv.scaled_dot_product_attention(
            q, q, q, is_causal=flag
        ),
        "attention_weights": lambda: qkv.attention_weights(q, q, is_causal=flag),
    }[name]
    with pytest.raises(TypeError, match="is_causal"):
        call()


@pytest.mark.parametrize("flag", ["no", 1, "bottom_right"])
def test_linear_attentions_causal_takes_a_bool(flag: object) -> None:
    q = torch.randn(B, H, N, E, dtype=torch.float64)
    with pytest.raises(TypeError, match="causal"):
        qkv.linear_attention(q, q, q, causal=flag)
