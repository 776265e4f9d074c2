"""The exercises of a block's parts: splitting and merging heads, RoPE, layer norm."""

# The articles' names: B, N, H and D for batch, tokens, heads and width.
# ruff: noqa: N803, N806

import torch
import torch.nn.functional as F
from torch import Tensor

from qkv.exercises.exercise import (
    LOOSE,
    Case,
    Exercise,
    Mistake,
    normal,
)
from qkv.multihead import MultiHeadAttention
from qkv.positions import apply_rope

# --- multi-head-attention/split-heads and merge-heads -----------------------------------------------------


def heads_module(embed_dim: int, num_heads: int) -> MultiHeadAttention:
    """A `qkv.MultiHeadAttention` whose split and merge are the references (its weights play no part)."""
    return MultiHeadAttention(embed_dim, num_heads)


def split_heads(x: Tensor, num_heads: int) -> Tensor:
    return heads_module(x.size(-1), num_heads)._split_heads(x)


def merge_heads(x: Tensor) -> Tensor:
    H, head_dim = x.size(1), x.size(3)
    return heads_module(H * head_dim, H)._merge_heads(x)


HEAD_SHAPES = [  # (label, B, N, H, D/H, dtype)
    ("one token", 1, 1, 2, 2, torch.float64),
    ("small", 1, 3, 2, 2, torch.float64),
    ("batch", 2, 3, 3, 2, torch.float64),
    ("N = H", 2, 4, 4, 2, torch.float64),
    ("one head", 1, 5, 1, 6, torch.float64),
    ("D/H = 1", 2, 3, 6, 1, torch.float64),
    ("float32", 2, 4, 4, 3, torch.float32),
]


def split_cases(gen: torch.Generator) -> list[Case]:
    return [
        Case(
            label, {"x": normal(gen, B, N, H * hd, dtype=dtype), "num_heads": H}
        )
        for label, B, N, H, hd, dtype in HEAD_SHAPES
    ]


def merge_heads_cases(gen: torch.Generator) -> list[Case]:
    return [
        Case(label, {"x": normal(gen, B, H, N, hd, dtype=dtype)})
        for label, B, N, H, hd, dtype in HEAD_SHAPES
    ]


def channels_strided(x: Tensor, num_heads: int) -> Tensor:
    """Head h takes channels h, h + H, h + 2H, ...: the split through (B, N, D/H, H)."""
    B, N, D = x.shape
    # (B, H, N, D/H)
    return x.reshape(B, N, D // num_heads, num_heads).permute(0, 3, 1, 2)


SPLIT_HEADS = Exercise(
    name="multi-head-attention/split-heads",
    signature="fn(x, num_heads)",
    outputs=("heads",),
    reference=split_heads,
    cases=split_cases,
    mistakes=(
        Mistake(
            "a view straight to (B, H, N, D/H) mixes tokens into heads: reshape to "
            "(B, N, H, D/H), then transpose(1, 2)",
            lambda x, H: x.reshape(x.size(0), H, x.size(1), x.size(2) // H),
        ),
        Mistake(
            "head h takes the channels h*D/H to (h+1)*D/H - 1, side by side: reshape to "
            "(B, N, H, D/H), not (B, N, D/H, H)",
            channels_strided,
        ),
        Mistake(
            "that is (B, N, H, D/H): transpose(1, 2) brings the heads before the tokens",
            lambda x, H: x.reshape(*x.shape[:2], H, x.size(2) // H),
        ),
    ),
)
MERGE_HEADS = Exercise(
    name="multi-head-attention/merge-heads",
    signature="fn(x)",
    outputs=("x",),
    reference=merge_heads,
    cases=merge_heads_cases,
    mistakes=(
        Mistake(
            "a reshape without transpose(1, 2) mixes heads and tokens: go to (B, N, H, D/H) "
            "first, then reshape to (B, N, D)",
            lambda x: x.reshape(x.size(0), x.size(2), -1),
        ),
        Mistake(
            "the channels of head h must stay side by side (h*D/H to (h+1)*D/H - 1): "
            "permute to (B, N, H, D/H), not (B, N, D/H, H)",
            lambda x: x.permute(0, 2, 3, 1).reshape(x.size(0), x.size(2), -1),
        ),
        Mistake(
            "that is (B, N, H, D/H): flatten the last two axes into (B, N, D)",
            lambda x: x.transpose(1, 2),
        ),
    ),
)


# --- positions/rope ----------------------------------------------------------------------------------------


def rope_cases(gen: torch.Generator) -> list[Case]:
    rows = [  # (label, x's shape, positions, base, dtype)
        ("position 0", (1, 2), [0], 10000.0, torch.float64),
        ("small", (3, 4), range(3), 10000.0, torch.float64),
        ("batch", (2, 5, 8), range(5), 10000.0, torch.float64),
        (
            "positions after a cache",
            (4, 8),
            range(6, 10),
            10000.0,
            torch.float64,
        ),
        (
            "batch and heads, base 100",
            (2, 3, 4, 6),
            range(4),
            100.0,
            torch.float64,
        ),
        (
            "D = 2, positions in any order",
            (3, 2),
            [2, 0, 5],
            10000.0,
            torch.float64,
        ),
        ("length 1", (1, 8), [7], 10000.0, torch.float64),
        ("float32", (2, 2, 5, 8), range(5), 10000.0, torch.float32),
        (
            "positions in the tens of thousands",
            (3, 8),
            [30001, 47000, 65535],
            10000.0,
            torch.float64,
        ),
        (
            "float32, positions in the tens of thousands, base 5e5",
            (2, 4, 16),
            [40000, 51234, 60000, 65000],
            500000.0,
            torch.float32,
        ),
    ]
    return [
        Case(
            label,
            {
                "x": normal(gen, *shape, dtype=dtype),
                "positions": torch.tensor(list(positions)),
                "base": base,
            },
        )
        for label, shape, positions, base, dtype in rows
    ]


def turned(
    x, positions, base, exponents=None, dtype=torch.float64, swap=False
) -> Tensor:
    """RoPE as readers write it, with their mistakes' knobs: pair i turns at `base**exponents[i]`."""
    D = x.size(-1)
    exponents = (
        -torch.arange(0, D, 2, dtype=torch.float64) / D
        if exponents is None
        else exponents
    )
    # (N, D/2)
    angles = positions[:, None].to(dtype) * (base**exponents).to(dtype)
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    if swap:
        cos, sin = sin, cos
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)


def rope_by_index(x: Tensor, positions: Tensor, base: float) -> Tensor:
    """Pair i turning at `base**(-i/D)`, twice as slow as it should for the last pairs."""
    return turned(
        x,
        positions,
        base,
        -torch.arange(x.size(-1) // 2, dtype=torch.float64) / x.size(-1),
    )


ROPE = Exercise(
    name="positions/rope",
    signature="fn(x, positions, base)",
    outputs=("x",),
    reference=lambda x, positions, base: apply_rope(x, positions, base=base),
    cases=rope_cases,
    mistakes=(
        Mistake(
            "that is the interleaved layout, pairs (2i, 2i+1); here channel i pairs with "
            "i + D/2 (rotate half: x1, x2 = x.chunk(2, dim=-1))",
            lambda x, positions, base: apply_rope(
                x, positions, base=base, interleaved=True
            ),
        ),
        Mistake(
            "the rotation goes the wrong way: (x1 cos - x2 sin, x1 sin + x2 cos), "
            "rotate_half(x) = cat(-x2, x1)",
            lambda x, positions, base: apply_rope(x, -positions, base=base),
        ),
        Mistake(
            "pair i turns at base**(-2i/D) for i = 0 .. D/2 - 1 (torch.arange(0, D, 2) / D), "
            "not base**(-i/D)",
            rope_by_index,
        ),
        Mistake(
            "each row turns by its position from `positions`, not by its row index",
            lambda x, positions, base: apply_rope(x, base=base),
        ),
        Mistake(
            "the frequencies come from the `base` argument: base**(-2i/D)",
            lambda x, positions, base: apply_rope(x, positions),
        ),
        Mistake(
            "the angles were computed in float32, which is off by about 1e-3 radians at "
            "positions in the tens of thousands: compute them in float64, then round cos and sin",
            lambda x, positions, base: turned(
                x, positions, base, dtype=torch.float32
            ),
        ),
        Mistake(
            "cos and sin are swapped: pair i turns to (x1 cos - x2 sin, x1 sin + x2 cos)",
            lambda x, positions, base: turned(x, positions, base, swap=True),
        ),
        Mistake(
            "each row turns by one position too many: the row at position p turns by p * theta_i",
            lambda x, positions, base: turned(x, positions + 1, base),
        ),
        Mistake(
            "each row turns by one position too few: the row at position p turns by p * theta_i",
            lambda x, positions, base: turned(x, positions - 1, base),
        ),
        Mistake(
            "the exponent must be negative: theta_i = base**(-2i/D), slower for later pairs",
            lambda x, positions, base: turned(
                x,
                positions,
                base,
                torch.arange(0, x.size(-1), 2, dtype=torch.float64)
                / x.size(-1),
            ),
        ),
    ),
)


# --- transformer-block/layer-norm --------------------------------------------------------------------------


def normalise(
    x,
    weight,
    bias,
    eps,
    dim=-1,
    correction=0,
    inside=True,
    sqrt=True,
    two_pass=True,
):
    """Layer norm as readers write it, with their mistakes' knobs."""
    mean = x.mean(dim, keepdim=True)
    if two_pass:
        var = ((x - mean) ** 2).sum(dim, keepdim=True) / (
            x.size(dim) - correction
        )
    else:
        var = (x**2).mean(dim, keepdim=True) - mean**2
    if not sqrt:
        return (x - mean) / (var + eps) * weight + bias
    if inside:
        return (x - mean) / torch.sqrt(var + eps) * weight + bias
    return (x - mean) / (torch.sqrt(var) + eps) * weight + bias


def layer_norm_cases(gen: torch.Generator) -> list[Case]:
    rows = [  # (label, x's shape, eps, std, mean, dtype)
        ("small", (2, 4), 1e-5, 1.0, 0.0, torch.float64),
        ("eps = 0.1, small variance", (3, 6), 0.1, 0.3, 0.0, torch.float64),
        ("batch", (2, 3, 8), 1e-5, 2.0, 1.0, torch.float64),
        ("D = 1", (3, 1), 1e-5, 1.0, 0.0, torch.float64),
        ("float32", (4, 5), 1e-5, 1.0, 0.0, torch.float32),
        ("float32, mean 1000", (3, 16), 1e-5, 1.0, 1000.0, torch.float32),
        ("float64, mean 1e8", (2, 8), 1e-5, 1.0, 1e8, torch.float64),
        ("batch and heads", (2, 2, 3, 6), 1e-5, 1.0, 0.0, torch.float64),
    ]
    cases = []
    for label, shape, eps, std, mean, dtype in rows:
        D = shape[-1]
        args = {
            "x": normal(gen, *shape, dtype=dtype, std=std, mean=mean),
            "weight": normal(gen, D, dtype=dtype, std=0.5, mean=1.0),
            "bias": normal(gen, D, dtype=dtype, std=0.5),
            "eps": eps,
        }
        cases.append(Case(label, args, LOOSE if mean > 100 else None))
    return cases


LAYER_NORM = Exercise(
    name="transformer-block/layer-norm",
    signature="fn(x, weight, bias, eps)",
    outputs=("out",),
    reference=lambda x, weight, bias, eps: F.layer_norm(
        x, x.shape[-1:], weight, bias, eps
    ),
    cases=layer_norm_cases,
    mistakes=(
        Mistake(
            "that is the unbiased variance (divided by D - 1); layer norm divides by D: "
            "x.var(-1, keepdim=True, unbiased=False)",
            lambda *args: normalise(*args, correction=1),
        ),
        Mistake(
            "eps goes inside the square root: (x - mean) / sqrt(var + eps)",
            lambda *args: normalise(*args, inside=False),
        ),
        Mistake(
            "brackets are missing: (x - mean) / sqrt(var + eps) * weight + bias; "
            "as written, eps * weight is added to (x - mean) / sqrt(var)",
            lambda x, weight, bias, eps: (
                normalise(x, 1.0, 0.0, 0.0) + eps * weight + bias
            ),
        ),
        Mistake(
            "divide by the standard deviation sqrt(var + eps), not by the variance",
            lambda *args: normalise(*args, sqrt=False),
        ),
        Mistake(
            "weight and bias are missing: x_hat * weight + bias, after normalising",
            lambda x, weight, bias, eps: normalise(x, 1.0, 0.0, eps),
        ),
        Mistake(
            "weight and bias apply after normalising: x_hat * weight + bias",
            lambda x, weight, bias, eps: normalise(
                x * weight + bias, 1.0, 0.0, eps
            ),
        ),
        Mistake(
            "weight and bias are swapped: weight multiplies, bias adds",
            lambda x, weight, bias, eps: normalise(x, bias, weight, eps),
        ),
        *(
            Mistake(
                "normalise over the last axis, the D features of each row (dim=-1)",
                lambda *args, dim=dim: normalise(*args, dim=dim),
            )
            for dim in (0, 1)
        ),
        Mistake(
            "E[x^2] - E[x]^2 loses its digits when the mean is large: compute the variance as "
            "((x - mean) ** 2).mean(-1, keepdim=True)",
            lambda *args: normalise(*args, two_pass=False),
        ),
        Mistake(
            "eps is missing: (x - mean) / sqrt(var + eps)",
            lambda x, weight, bias, eps: normalise(x, weight, bias, 0.0),
        ),
        Mistake(
            "that is the mean and variance of the whole tensor: take them over each row's last "
            "axis (dim=-1, keepdim=True)",
            lambda x, weight, bias, eps: (
                (x - x.mean()) / torch.sqrt(x.var(correction=0) + eps) * weight
                + bias
            ),
        ),
    ),
)
