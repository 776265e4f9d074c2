"""One entry point for attention that picks the fastest implementation that applies.

Backends:

- `"triton"`: the package's FlashAttention kernel (`qkv.kernels.flash_attention`), on CUDA, for fp16/bf16
  `(B, H, N, D)` inputs with a head size of 16, 32, 64 or 128, no `attn_mask` and no dropout (asked for by
  name, it also runs on CPU tensors under Triton's interpreter, `TRITON_INTERPRET=1`: slowly, in fp16 only,
  for testing);
- `"torch"`: `torch.nn.functional.scaled_dot_product_attention`, everything else;
- `"reference"`: the package's explicit formula, `qkv.scaled_dot_product_attention`, on request only.

`select_backend` says which one a call would use; `attention` logs its choice at DEBUG level on the `qkv`
logger.
"""

import importlib.util
import logging
import os
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor

from qkv._checks import check_attention_inputs
from qkv.functional import scaled_dot_product_attention
from qkv.masks import causal_mask

Backend = Literal["auto", "triton", "torch", "reference"]
BACKENDS = ("auto", "triton", "torch", "reference")
TRITON_HEAD_DIMS = (16, 32, 64, 128)

logger = logging.getLogger("qkv")


def select_backend(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attn_mask: Tensor | None = None,
    dropout_p: float = 0.0,
    backend: Backend = "auto",
) -> str:
    """The backend `attention` uses for these inputs: `backend` itself unless it is `"auto"`.

    Args:
        query: `(..., L, E)`.
        key: `(..., S, E)`.
        value: `(..., S, Ev)`.
        attn_mask: bool (True = may attend) or float (added), broadcastable to `(..., L, S)`.
        dropout_p: probability of zeroing each attention weight.
        backend: `"auto"`, `"triton"`, `"torch"` or `"reference"`.

    Returns:
        `"triton"`, `"torch"` or `"reference"`.

    Raises:
        TypeError, ValueError: inputs `attention` rejects, an unknown backend, or `"triton"` asked for
            inputs it cannot take.
    """
    check_attention_inputs(query, key, value, attn_mask, False, None, False, dropout_p)
    return _select(query, key, value, attn_mask, dropout_p, backend)


def _select(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attn_mask: Tensor | None,
    dropout_p: float,
    backend: Backend,
) -> str:
    """`select_backend` without the checks, for `attention`, which made them."""
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    fits_triton = _fits_triton(query, key, value, attn_mask, dropout_p)
    interpreted = os.environ.get("TRITON_INTERPRET") == "1"
    if backend == "triton" and not (fits_triton and (query.is_cuda or interpreted)):
        raise ValueError(
            "the triton backend needs fp16/bf16 (B, H, N, D) inputs on CUDA (or TRITON_INTERPRET=1) with D in "
            f"{TRITON_HEAD_DIMS}, no attn_mask and no dropout; got query {tuple(query.shape)} "
            f"{query.dtype} on {query.device}"
        )
    if backend != "auto":
        return backend
    return "triton" if fits_triton and query.is_cuda else "torch"


def attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attn_mask: Tensor | None = None,
    is_causal: bool = False,
    scale: float | None = None,
    dropout_p: float = 0.0,
    backend: Backend = "auto",
) -> Tensor:
    """Scaled dot-product attention by the best backend that applies (see `select_backend`).

    Args:
        query: `(..., L, E)`; `(B, H, L, E)` for the triton backend.
        key: `(..., S, E)`.
        value: `(..., S, Ev)`.
        attn_mask: bool (True = may attend) or float (added), broadcastable to `(..., L, S)`.
        is_causal: let query `i` attend keys `j <= i` only (top-left aligned when `L != S`).
        scale: multiplies the scores; `1 / sqrt(E)` when None.
        dropout_p: probability of zeroing each attention weight.
        backend: `"auto"`, `"triton"`, `"torch"` or `"reference"`.

    Returns:
        `(..., L, Ev)`, the same whichever backend computes it (up to rounding).

    Raises:
        TypeError, ValueError: as `qkv.scaled_dot_product_attention`, or a backend that cannot take the inputs.
    """
    check_attention_inputs(query, key, value, attn_mask, is_causal, scale, False, dropout_p)
    return _attention(query, key, value, attn_mask, is_causal, scale, dropout_p, backend)


def _attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attn_mask: Tensor | None = None,
    is_causal: bool = False,
    scale: float | None = None,
    dropout_p: float = 0.0,
    backend: Backend = "auto",
) -> Tensor:
    """`attention` without the input checks, for callers that made them."""
    chosen = _select(query, key, value, attn_mask, dropout_p, backend)
    logger.debug("attention: %s backend for query %s %s", chosen, tuple(query.shape), query.dtype)
    if chosen == "triton":
        from qkv.kernels import flash_attention

        return flash_attention(query, key, value, causal=is_causal, scale=scale)
    if chosen == "torch" and is_causal and scale is not None and scale <= 0:
        # torch 2.13's fused CPU kernel returns NaN for is_causal with a scale <= 0; its mask path is right
        attn_mask, is_causal = causal_mask(query.size(-2), key.size(-2), device=query.device), False
    sdpa = F.scaled_dot_product_attention if chosen == "torch" else scaled_dot_product_attention
    return sdpa(
        query,
        key,
        value,
        attn_mask=attn_mask,
        dropout_p=dropout_p,
        is_causal=is_causal,
        scale=scale,
    )


def _fits_triton(
    query: Tensor, key: Tensor, value: Tensor, attn_mask: Tensor | None, dropout_p: float
) -> bool:
    return (
        query.dtype in (torch.float16, torch.bfloat16)
        and query.dim() == key.dim() == 4
        and query.size(-1) in TRITON_HEAD_DIMS
        and key.shape == value.shape
        and query.shape[:2] == key.shape[:2]
        and attn_mask is None
        and dropout_p == 0.0
        and importlib.util.find_spec("triton") is not None
    )
