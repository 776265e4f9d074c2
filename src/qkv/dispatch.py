"""One entry point for attention that runs each call on the backend measured fastest for it.

Backends:

- `"triton"`: the package's FlashAttention kernels (`qkv.flash_attention`), for the inputs that
  `qkv.kernels.contract` states: fp16/bf16 `(B, H, L, D)` with `D` in 16, 32, 64, 128, grouped key/value
  heads, masks given as `is_causal`, `window` and `key_lengths`, no `attn_mask`, no dropout; on CUDA (asked
  for by name, also on CPU tensors under Triton's interpreter, `TRITON_INTERPRET=1`: slowly, for testing);
- `"torch"`: `torch.nn.functional.scaled_dot_product_attention`; a bottom-right alignment, `window` and
  `key_lengths` become a boolean mask, built by `qkv.masks`;
- `"reference"`: the package's explicit formula, `qkv.scaled_dot_product_attention`'s, on request only.

Every call is checked, and its masks parsed into one `qkv.masks.Mask`, once, at the public boundary
(`attention`, `select_backend`, `MultiHeadAttention`); the choice and the backends read that value.

`"auto"` picks triton where the kernels take the call, on CUDA, and where they were measured faster than
torch on this GPU model: `qkv/kernels/measured.json` holds both backends' times, written by
`benchmarks/gpu.sh` (`python -m qkv_lab.bench --table`). A call takes the winner of the measured case of its kind
(`call_kind`: dtype, head size, mask options, grouped heads, forward or forward+backward) nearest to it in
`log L + log S`. Where this GPU model has no case of that kind, auto picks torch.

`select_backend` says which one a call would use; `attention` logs its choice at DEBUG level on the `qkv`
logger.
"""

import functools
import importlib.resources
import json
import logging
import math
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor

from qkv._checks import broadcast_shape, check_sinks, shape
from qkv.functional import _scaled_dot_product_attention, parse_call
from qkv.kernels import contract
from qkv.masks import Causal, Mask, keep_to_additive

Backend = Literal["auto", "triton", "torch", "reference"]
BACKENDS = ("auto", "triton", "torch", "reference")

logger = logging.getLogger("qkv")


def select_backend(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attn_mask: Tensor | None = None,
    dropout_p: float = 0.0,
    backend: Backend = "auto",
    *,
    is_causal: Causal = False,
    scale: float | None = None,
    enable_gqa: bool = False,
    window: int | None = None,
    key_lengths: Tensor | None = None,
) -> str:
    """The backend `attention` uses for these inputs: `backend` itself unless it is `"auto"`.

    Args:
        query: `(..., L, E)`.
        key: `(..., S, E)`.
        value: `(..., S, Ev)`.
        attn_mask: bool (True = may attend) or float (added), broadcastable to `(..., L, S)`.
        dropout_p: probability of zeroing each attention weight.
        backend: `"auto"`, `"triton"`, `"torch"` or `"reference"`.
        is_causal: False, True, `"top_left"` or `"bottom_right"`, as for `attention`.
        scale: multiplies the scores; `1 / sqrt(E)` when None.
        enable_gqa: let each key/value head serve a group of query heads.
        window: how many recent keys each query sees, as for `attention`.
        key_lengths: `(B,)` integer tensor, as for `attention`.

    Returns:
        `"triton"`, `"torch"` or `"reference"`.

    Raises:
        TypeError, ValueError: inputs `attention` rejects, an unknown backend, or `"triton"` asked for
            inputs it cannot take.
    """
    mask = _parse(
        query, key, value, attn_mask, is_causal, scale, dropout_p, backend, enable_gqa, window,
        key_lengths,
    )  # fmt: skip
    return _select(query, key, value, mask, dropout_p, backend)


def attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attn_mask: Tensor | None = None,
    is_causal: Causal = False,
    scale: float | None = None,
    dropout_p: float = 0.0,
    backend: Backend = "auto",
    *,
    enable_gqa: bool = False,
    window: int | None = None,
    key_lengths: Tensor | None = None,
    sinks: Tensor | None = None,
) -> Tensor:
    """Scaled dot-product attention by the backend that applies and measured fastest (see `select_backend`).

    Args:
        query: `(..., L, E)`; `(B, H, L, E)` for the triton backend and with `key_lengths`.
        key: `(..., S, E)`; with `enable_gqa`, its heads (dim -3) may divide the query's.
        value: `(..., S, Ev)`.
        attn_mask: bool (True = may attend) or float (added), broadcastable to `(..., L, S)`, at least
            `(L, S)` or `(1, S)`.
        is_causal: False; True or `"top_left"` lets query `i` attend keys `j <= i` (torch's `is_causal`);
            `"bottom_right"` keys `j <= i + S - L` (new queries against cached keys).
        scale: multiplies the scores; `1 / sqrt(E)` when None.
        dropout_p: probability of zeroing each attention weight.
        backend: `"auto"`, `"triton"`, `"torch"` or `"reference"`.
        enable_gqa: let each key/value head serve a group of query heads (grouped-query attention).
        window: each query also sees only the `window` most recent keys it may see; needs `is_causal`.
        key_lengths: `(B,)` integer tensor; in batch `b`, keys `j >= key_lengths[b]` are masked.
        sinks: `(H,)` float, one learned logit per query head (query `(..., H, L, E)`): the softmax of each
            row runs over its scores and the sink, and the sink's share is dropped, so the weights sum to
            `1 - e^sink / (e^sink + sum_j e^s_j)` and a query may give part of its attention to nothing.
            A query with every key masked gives all of it to the sink (zeros). Not for the triton backend.

    Returns:
        `(..., L, Ev)`, the same whichever backend computes it (up to rounding); zeros for a query that may
        attend no key.

    Raises:
        TypeError, ValueError: as `qkv.scaled_dot_product_attention` and `qkv.flash_attention` for the
            mask options, `attn_mask` together with `key_lengths`, or a backend that cannot take the inputs.
    """
    mask = _parse(
        query, key, value, attn_mask, is_causal, scale, dropout_p, backend, enable_gqa, window,
        key_lengths,
    )  # fmt: skip
    check_sinks(sinks, query)
    return _attention(
        query, key, value, mask, dropout_p, backend, scale, enable_gqa, sinks
    )


def _parse(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attn_mask: Tensor | None,
    is_causal: Causal,
    scale: float | None,
    dropout_p: float,
    backend: Backend,
    enable_gqa: bool,
    window: int | None,
    key_lengths: Tensor | None,
) -> Mask:
    """Check a call of `attention` or `select_backend`, whichever backend runs it; parse its masks."""
    check_backend(backend)
    mask = parse_call(
        query,
        key,
        value,
        attn_mask,
        is_causal,
        scale,
        enable_gqa,
        dropout_p,
        window,
        key_lengths,
    )
    # torch's kernels fail on it with 4-D inputs
    if attn_mask is not None and attn_mask.dim() < 2:
        raise ValueError(
            f"attn_mask must have at least 2 dimensions (..., L, S), got shape {shape(attn_mask)}: "
            "give a row of S flags that every query shares as (1, S)"
        )
    return mask


def check_backend(backend: object) -> None:
    """Raise unless `backend` names one of `BACKENDS`."""
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")


def _attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    mask: Mask,
    dropout_p: float = 0.0,
    backend: Backend = "auto",
    scale: float | None = None,
    enable_gqa: bool = False,
    sinks: Tensor | None = None,
) -> Tensor:
    """`attention` of checked inputs, with the masks parsed into `mask`."""
    chosen = _select(query, key, value, mask, dropout_p, backend, sinks)
    logger.debug(
        "attention: %s backend for query %s %s",
        chosen,
        tuple(query.shape),
        query.dtype,
    )
    if chosen == "triton":
        from qkv.kernels.flash import attend

        return attend(query, key, value, mask, scale)
    if chosen == "reference":
        return _scaled_dot_product_attention(
            query, key, value, mask, dropout_p, scale, enable_gqa, sinks
        )
    if sinks is not None:
        return _torch_with_sinks(
            query, key, value, mask, dropout_p, scale, enable_gqa, sinks
        )
    # torch's own is_causal for a top-left causal mask alone; torch 2.13's fused CPU kernel returns NaN
    # for it with a scale <= 0, where its mask path is right
    causal = mask.alignment == "top_left" and (scale is None or scale > 0)
    if (
        causal
        and mask.window is None
        and mask.key_lengths is None
        and mask.dense is None
    ):
        attn_mask = None
    else:
        causal, attn_mask = (
            False,
            mask.as_tensor(query.size(-2), key.size(-2), query.device),
        )
    return F.scaled_dot_product_attention(
        query,
        key,
        value,
        attn_mask=attn_mask,
        dropout_p=dropout_p,
        is_causal=causal,
        scale=scale,
        enable_gqa=enable_gqa,
    )


def _torch_with_sinks(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    mask: Mask,
    dropout_p: float,
    scale: float | None,
    enable_gqa: bool,
    sinks: Tensor,
) -> Tensor:
    """torch's function with one more key per head: zeros (a score of 0, a value of 0) and a mask that
    adds the head's sink to its score, so that the softmax runs over the concatenated logit."""
    seqlen_q, seqlen_k = query.size(-2), key.size(-2)
    dtype = torch.promote_types(query.dtype, torch.float32)
    # None, bool or float (..., L, S)
    dense = mask.as_tensor(seqlen_q, seqlen_k, query.device)
    if dense is None:
        dense = torch.zeros(
            seqlen_q, seqlen_k, device=query.device, dtype=dtype
        )
    elif dense.dtype == torch.bool:
        dense = keep_to_additive(dense, dtype)
    batch = broadcast_shape(dense.shape[:-2], query.shape[:-2])  # (..., H)
    dense = dense.to(dtype).expand(*batch, seqlen_q, seqlen_k)  # (..., H, L, S)
    # (..., H, L, 1)
    sink = sinks.to(dtype)[:, None, None].expand(*batch, seqlen_q, 1)
    # (..., H_kv, 1, E)
    extra_key = key.new_zeros(*key.shape[:-2], 1, key.size(-1))
    extra_value = value.new_zeros(*value.shape[:-2], 1, value.size(-1))
    return F.scaled_dot_product_attention(
        query,
        torch.cat([key, extra_key], dim=-2),  # (..., H_kv, S + 1, E)
        torch.cat([value, extra_value], dim=-2),
        # (..., H, L, S + 1)
        attn_mask=torch.cat([dense, sink], dim=-1).to(query.dtype),
        dropout_p=dropout_p,
        scale=scale,
        enable_gqa=enable_gqa,
    )


def _select(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    mask: Mask,
    dropout_p: float,
    backend: Backend,
    sinks: Tensor | None = None,
) -> str:
    """`select_backend` of checked inputs, with the masks parsed into `mask`."""
    if backend in ("torch", "reference"):
        return backend
    if sinks is not None:
        if backend == "triton":
            raise ValueError(
                "the triton backend cannot take these inputs: the kernels take no sinks"
            )
        return "torch"
    if backend == "auto" and not query.is_cuda:
        return "torch"
    refusal = contract.refusal(query, key, value, mask, dropout_p)
    if backend == "triton":
        if refusal is not None:
            raise refusal.error(
                f"the triton backend cannot take these inputs: {refusal.reason}"
            )
        return backend
    if refusal is not None:
        return "torch"
    backward = torch.is_grad_enabled() and any(
        x.requires_grad for x in (query, key, value)
    )
    kind = call_kind(query, key, mask, backward)
    return _measured_winner(
        _device_name(query.device), kind, query.size(-2), key.size(-2)
    )


def call_kind(query: Tensor, key: Tensor, mask: Mask, backward: bool) -> dict:
    """What a call and a measured case must share for `"auto"` to compare them (JSON-ready)."""
    aligned = mask.alignment
    if aligned == "bottom_right" and query.size(-2) == key.size(-2):
        aligned = "top_left"  # the same mask when L == S
    return {
        "dtype": str(query.dtype).removeprefix("torch."),
        "head_dim": query.size(-1),
        "causal": aligned or "none",
        "window": mask.window is not None,
        "key_lengths": mask.key_lengths is not None,
        "grouped": query.size(-3) != key.size(-3),
        "mode": "forward+backward" if backward else "forward",
    }


def _measured_winner(
    device_name: str, kind: dict, seqlen_q: int, seqlen_k: int
) -> str:
    """The faster backend of the nearest measured case of this kind on this GPU model; torch if none."""
    cases = [
        case
        for case in _measurements()
        if case["device_name"] == device_name
        and all(case[name] == kind[name] for name in kind)
    ]
    if not cases:
        return "torch"

    def distance(case: dict) -> float:
        return abs(math.log2(case["seqlen_q"] / seqlen_q)) + abs(
            math.log2(case["seqlen_k"] / seqlen_k)
        )

    nearest = min(cases, key=distance)
    return "triton" if nearest["triton_ms"] < nearest["torch_ms"] else "torch"


@functools.cache
def _measurements() -> list[dict]:
    """The measured cases of `qkv/kernels/measured.json` (see `qkv_lab.bench.dispatch_table`)."""
    table = importlib.resources.files("qkv.kernels").joinpath("measured.json")
    return json.loads(table.read_text(encoding="utf-8"))["cases"]


@functools.cache
def _device_name(device: torch.device) -> str:
    return torch.cuda.get_device_name(device)
