"""What the FlashAttention kernels take: the one statement that `qkv.flash_attention` and `qkv.attention` read.

`refusal` says why the kernels cannot take a call, or None; `qkv.attention` reads it to choose a backend,
and `check_kernel_inputs` (`qkv.flash_attention`'s check) raises it. Importing this module does not import
Triton.
"""

import importlib.util
from typing import NamedTuple

import torch
from torch import Tensor

from qkv._checks import check_same_dtype_and_device, check_scale, check_tensor, shape
from qkv.masks import Mask

NO_TRITON = (
    "the kernels need Triton, which is not installed: install qkv with its kernel extra, "
    "qkv[kernel] (the Get started page gives the command), or pip install triton"
)


def triton_installed() -> bool:
    """Whether Triton can be imported, without importing it."""
    return importlib.util.find_spec("triton") is not None


def interpreted() -> bool:
    """Whether Triton runs the kernels in its CPU interpreter (`TRITON_INTERPRET=1` before its import).

    Imports Triton: call it only where Triton is installed.
    """
    import triton

    return triton.knobs.runtime.interpret


DTYPES = (torch.float16, torch.bfloat16)
HEAD_DIMS = (16, 32, 64, 128)
MAX_GRID_YZ = 65535  # CUDA's limit on grid axes 1 and 2 (axis 0 allows 2**31 - 1)


class Refusal(NamedTuple):
    """Why the kernels cannot take a call: the error a caller raises if it asked for them, and the reason."""

    error: type[TypeError] | type[ValueError]
    reason: str


def refusal(
    q: Tensor, k: Tensor, v: Tensor, mask: Mask | None = None, dropout_p: float = 0.0
) -> Refusal | None:
    """Why the kernels cannot take `q`, `k`, `v` with `mask` and `dropout_p`, or None if they can.

    The kernels take `q (B, H, L, D)`, `k` and `v (B, H_kv, S, D)` with `H_kv` dividing `H`, float16 or
    bfloat16, `D` in `HEAD_DIMS`, `L, S >= 1`, `B, H <= MAX_GRID_YZ`; a mask without a dense part (a causal
    alignment, a window, key lengths) and no dropout. They run on CUDA, or on the CPU under Triton's
    interpreter, which cannot multiply bfloat16.

    Args:
        q, k, v: tensors of one floating dtype and device (the caller has checked that).
        mask: the parsed masks; None for none.
        dropout_p: the probability of dropping an attention weight.
    """
    if dropout_p > 0.0:
        return Refusal(ValueError, f"the kernels have no dropout, got dropout_p={dropout_p}")
    for name, x in (("q", q), ("k", k), ("v", v)):
        if x.dim() != 4:
            return Refusal(ValueError, f"{name} must be 4-D (B, H, N, D), got shape {shape(x)}")
    if q.dtype not in DTYPES:
        return Refusal(
            TypeError,
            f"q has dtype {q.dtype}; flash_attention takes torch.float16 or torch.bfloat16",
        )
    shapes = f"q {shape(q)}, k {shape(k)}, v {shape(v)}"
    if not q.size(0) == k.size(0) == v.size(0):
        return Refusal(ValueError, f"q, k and v disagree on the batch size B: {shapes}")
    if k.size(1) != v.size(1) or q.size(1) % k.size(1) != 0:
        return Refusal(
            ValueError,
            "k and v must have the same number of heads H_kv, dividing q's H (grouped-query "
            f"attention): {shapes}",
        )
    if k.size(2) != v.size(2):
        return Refusal(ValueError, f"k and v disagree on length S: k {shape(k)} vs v {shape(v)}")
    if not q.size(3) == k.size(3) == v.size(3):
        return Refusal(ValueError, f"q, k and v disagree on head size D: {shapes}")
    if q.size(3) not in HEAD_DIMS:
        return Refusal(
            ValueError, f"head size D must be one of {HEAD_DIMS}, got {q.size(3)}: q {shape(q)}"
        )
    if max(q.shape[:2]) > MAX_GRID_YZ:
        return Refusal(
            ValueError,
            f"batch and heads must each be at most {MAX_GRID_YZ} (CUDA's limit on a launch grid "
            f"axis): q {shape(q)}",
        )
    if q.size(2) == 0 or k.size(2) == 0:
        return Refusal(
            ValueError, f"q and k need at least one position: q {shape(q)}, k {shape(k)}"
        )
    if not triton_installed():
        return Refusal(ValueError, NO_TRITON)
    if q.device.type == "cpu" and not interpreted():
        return Refusal(
            ValueError,
            f"q, k and v are on the CPU {shape(q)}: the kernels need CUDA tensors, or Triton's "
            "interpreter (TRITON_INTERPRET=1 set before triton is imported)",
        )
    if interpreted() and q.dtype == torch.bfloat16:
        return Refusal(
            TypeError,
            "q has dtype torch.bfloat16, which Triton's interpreter cannot multiply (it reads "
            "bfloat16 tl.dot operands as 16-bit integers); use float16, or run on a GPU",
        )
    return None if mask is None else mask_refusal(q, k, v, mask)


# The head size at which the backward kernel's dK with key lengths failed its CUDA tests (H100 on
# 2026-11-25 and H200 on 2026-11-26, Triton 3.6: dK off by up to about 1 at L = 19, S = 7 and S = 33,
# while dQ, dV and the output were right, and D = 16, 32 and 64 passed). Until that is understood,
# such a call that needs gradients is refused on a GPU; the interpreter computes it right.
WRONG_DK_WITH_KEY_LENGTHS = 128


def mask_refusal(q: Tensor, k: Tensor, v: Tensor, mask: Mask) -> Refusal | None:
    """Why the kernels cannot take `mask` for tensors that `refusal` accepts, or None.

    Reads whether gradients will be asked for (grad mode and `requires_grad`), as the call is made.
    """
    if mask.dense is not None:
        return Refusal(
            ValueError,
            "the kernels take no attn_mask (masks: is_causal, window, key_lengths; "
            "MultiHeadAttention passes a key_padding_mask that hides a suffix of each row as key_lengths)",
        )
    wants_gradients = torch.is_grad_enabled() and any(x.requires_grad for x in (q, k, v))
    if (
        mask.key_lengths is not None
        and wants_gradients
        and q.size(3) == WRONG_DK_WITH_KEY_LENGTHS
        and not interpreted()
    ):
        return Refusal(
            ValueError,
            f"with key_lengths and head size D = {WRONG_DK_WITH_KEY_LENGTHS} (q {shape(q)}), the "
            "kernels' gradient dK is wrong on a GPU (a known defect, found by their CUDA tests): "
            "compute without gradients (torch.no_grad()), or with backend='torch'",
        )
    return None


def check_kernel_inputs(q: Tensor, k: Tensor, v: Tensor, scale: object) -> None:
    """Raise, naming the argument and the shapes, unless the kernels can take `q`, `k`, `v` and `scale`.

    Checks that they are tensors of one floating dtype and device, and a number or None, then raises the
    `refusal` if there is one.
    """
    for name, x in (("q", q), ("k", k), ("v", v)):
        check_tensor(name, x)
    check_same_dtype_and_device(q=q, k=k, v=v)
    check_scale(scale)
    refused = refusal(q, k, v)
    if refused is not None:
        raise refused.error(refused.reason)
