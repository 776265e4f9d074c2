"""What the FlashAttention kernels take: the one statement that `qkv.flash_attention` and `qkv.attention` check.

The masks (`check_masks`) are shared by every backend of `qkv.attention`; the rest (`check_kernel_inputs`)
holds only for the kernels. Importing this module does not import Triton.
"""

import importlib.util
from typing import Literal

import torch
from torch import Tensor

from qkv._checks import check_same_dtype_and_device, check_scale, check_tensor, shape
from qkv.masks import ALIGNMENTS, Alignment

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

Causal = bool | Literal["top_left", "bottom_right"]


def alignment(causal: object, name: str = "causal") -> Alignment | None:
    """The alignment that a `causal` argument asks for: None, `"top_left"` (for True) or `"bottom_right"`.

    Raises:
        TypeError: `causal` is neither a bool nor a str.
        ValueError: an unknown alignment.
    """
    if isinstance(causal, bool):
        return "top_left" if causal else None
    if not isinstance(causal, str):
        raise TypeError(
            f"{name} must be a bool or one of {ALIGNMENTS}, got {type(causal).__name__}"
        )
    if causal not in ALIGNMENTS:
        raise ValueError(f"{name} must be False, True or one of {ALIGNMENTS}, got {causal!r}")
    return causal


def check_masks(
    causal: object,
    window: object,
    key_lengths: object,
    batch: int,
    device: torch.device,
    causal_name: str = "causal",
) -> None:
    """Raise, naming the argument, unless `causal`, `window` and `key_lengths` describe a mask.

    Args:
        causal: False, True, `"top_left"` or `"bottom_right"`.
        window: None, or an int >= 1; needs a causal alignment.
        key_lengths: None, or an integer tensor `(B,)` on `device`.
        batch: B, the batch size of the call.
        device: the device of the queries.
        causal_name: what the caller calls its `causal` argument.
    """
    aligned = alignment(causal, causal_name)
    if window is not None:
        if isinstance(window, bool) or not isinstance(window, int):
            raise TypeError(f"window must be an int or None, got {type(window).__name__}")
        if window < 1:
            raise ValueError(f"window must be at least 1, got {window}")
        if aligned is None:
            raise ValueError(
                f"window={window} needs a causal alignment: pass {causal_name}=True, 'top_left' or "
                "'bottom_right' (the window ends at the last key a query may see)"
            )
    if key_lengths is None:
        return
    if not isinstance(key_lengths, Tensor):
        raise TypeError(f"key_lengths must be a tensor or None, got {type(key_lengths).__name__}")
    if (
        key_lengths.is_floating_point()
        or key_lengths.is_complex()
        or key_lengths.dtype == torch.bool
    ):
        raise TypeError(f"key_lengths must be an integer tensor, got dtype {key_lengths.dtype}")
    if key_lengths.shape != (batch,):
        raise ValueError(
            f"key_lengths must be (B,) = ({batch},), one length per batch, got {shape(key_lengths)}"
        )
    if key_lengths.device != device:
        raise ValueError(f"key_lengths is on {key_lengths.device} but the queries are on {device}")


def check_kernel_inputs(q: Tensor, k: Tensor, v: Tensor, scale: object) -> None:
    """Raise, naming the argument and the shapes, unless the kernels can take `q`, `k`, `v` and `scale`.

    The kernels take `q (B, H, L, D)`, `k` and `v (B, H_kv, S, D)` with `H_kv` dividing `H`, of one dtype
    (float16 or bfloat16) and device, `D` in `HEAD_DIMS`, `L, S >= 1`, `B, H <= MAX_GRID_YZ`. They run on
    CUDA, or on the CPU under Triton's interpreter, which cannot multiply bfloat16.
    """
    for name, x in (("q", q), ("k", k), ("v", v)):
        check_tensor(name, x)
        if x.dim() != 4:
            raise ValueError(f"{name} must be 4-D (B, H, N, D), got shape {shape(x)}")
    if q.dtype not in DTYPES:
        raise TypeError(
            f"q has dtype {q.dtype}; flash_attention takes torch.float16 or torch.bfloat16"
        )
    check_same_dtype_and_device(q=q, k=k, v=v)
    if not q.size(0) == k.size(0) == v.size(0):
        raise ValueError(
            f"q, k and v disagree on the batch size B: q {shape(q)}, k {shape(k)}, v {shape(v)}"
        )
    if k.size(1) != v.size(1) or q.size(1) % k.size(1) != 0:
        raise ValueError(
            "k and v must have the same number of heads H_kv, dividing q's H (grouped-query "
            f"attention): q {shape(q)}, k {shape(k)}, v {shape(v)}"
        )
    if k.size(2) != v.size(2):
        raise ValueError(f"k and v disagree on length S: k {shape(k)} vs v {shape(v)}")
    if not q.size(3) == k.size(3) == v.size(3):
        raise ValueError(
            f"q, k and v disagree on head size D: q {shape(q)}, k {shape(k)}, v {shape(v)}"
        )
    if q.size(3) not in HEAD_DIMS:
        raise ValueError(f"head size D must be one of {HEAD_DIMS}, got {q.size(3)}: q {shape(q)}")
    if max(q.shape[:2]) > MAX_GRID_YZ:
        raise ValueError(
            f"batch and heads must each be at most {MAX_GRID_YZ} (CUDA's limit on a launch grid "
            f"axis): q {shape(q)}"
        )
    if q.size(2) == 0 or k.size(2) == 0:
        raise ValueError(f"q and k need at least one position: q {shape(q)}, k {shape(k)}")
    check_scale(scale)
    if not triton_installed():
        raise ValueError(NO_TRITON)
    if q.device.type == "cpu" and not interpreted():
        raise ValueError(
            f"q, k and v are on the CPU {shape(q)}: the kernels need CUDA tensors, or Triton's "
            "interpreter (TRITON_INTERPRET=1 set before triton is imported)"
        )
    if interpreted() and q.dtype == torch.bfloat16:
        raise TypeError(
            "q has dtype torch.bfloat16, which Triton's interpreter cannot multiply (it reads bfloat16 "
            "tl.dot operands as 16-bit integers); use float16, or run on a GPU"
        )
