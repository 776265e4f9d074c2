"""What an exercise is (its cases, its reference, its known mistakes), and the pieces several share.

An exercise's cases come small first, then the edges (length 1, L != S, fully masked rows, batch and head
dimensions, float32, large values), all drawn from the generator `check` passes in. A mistake is the output of
one wrong solution that readers write, computed on the same case: when the reader's answer equals it, the
checker prints its hint. Every reference and every mistake takes the arguments of the reader's function.
"""

# The articles' names: L, S, D and Dv for lengths and sizes.
# ruff: noqa: N803

import dataclasses
import math
from collections.abc import Callable

import torch
from torch import Tensor

# (rtol, atol) of the large-value cases: they test for overflow, not for rounding
LOOSE = (1e-3, 2e-3)


@dataclasses.dataclass(frozen=True)
class Case:
    """One call of the reader's function: its arguments in order, and what the case is for."""

    label: str
    args: dict[str, object]
    # (rtol, atol); None: the dtype's own
    tolerance: tuple[float, float] | None = None
    # entries no tensor the reader's function makes may reach: its cost
    largest: int | None = None
    cost: str = ""  # what `largest` stands for, in the verdict: "the full (L, S) scores"
    # torch calls counted and compared with the other counted cases: a loop's grow with the sizes
    counted: bool = False


@dataclasses.dataclass(frozen=True)
class Mistake:
    """A known wrong solution: `output` computes what it returns, `hint` names the mistake."""

    hint: str
    output: Callable[..., object]


@dataclasses.dataclass(frozen=True)
class Exercise:
    """What `check` needs of one exercise."""

    name: str
    signature: str  # how `check` calls the reader's function
    # the names of what it returns: one tensor, or a tuple of them
    outputs: tuple[str, ...]
    reference: Callable[..., object]
    cases: Callable[[torch.Generator], list[Case]]
    mistakes: tuple[Mistake, ...]


def normal(
    gen: torch.Generator, *shape: int, dtype=torch.float64, std=1.0, mean=0.0
) -> Tensor:
    """Normal draws, made in float64 then cast, so that a case's float32 copy is its float64 one rounded."""
    return (
        torch.randn(shape, generator=gen, dtype=torch.float64) * std + mean
    ).to(dtype)


def integers(
    gen: torch.Generator, *shape: int, low: int, high: int, dtype=torch.float32
) -> Tensor:
    """Whole numbers in [low, high] as floats: large scores that every order of operations gets exactly."""
    return torch.randint(low, high + 1, shape, generator=gen).to(dtype)


# --- hints that more than one exercise gives --------------------------------------------------------------

INVERTED = (
    "True and False are swapped: here True = may attend (torch's attn_mask); "
    "True = ignore is nn.MultiheadAttention's key_padding_mask"
)
NO_MAX = (
    "exp overflowed on large scores: subtract each row's max before exp "
    "(softmax(x) = softmax(x - max)), or use torch.softmax"
)
BY_D = "the scores are divided by d_k: divide by sqrt(d_k), the scale 1/sqrt(D)"
UNSCALED = (
    "the scores are not scaled: multiply q k^T by 1/sqrt(D) before the softmax"
)


def naive_softmax(scores: Tensor, dim: int = -1) -> Tensor:
    """softmax without subtracting the max: exp overflows to inf, and inf / inf is NaN."""
    e = scores.exp()
    return e / e.sum(dim, keepdim=True)


def attend(q, k, v, scale=None, dim=-1, softmax=torch.softmax) -> Tensor:
    """Softmax attention as readers write it, with the knobs their mistakes turn."""
    scale = 1 / math.sqrt(q.size(-1)) if scale is None else scale
    scores = q @ k.transpose(-2, -1) * scale  # (..., L, S)
    return softmax(scores, dim=dim) @ v  # (..., L, Dv)


def attention_inputs(
    gen, batch, L, S, D, Dv, dtype=torch.float64
) -> dict[str, object]:
    """q (*batch, L, D), k (*batch, S, D), v (*batch, S, Dv)."""
    return {
        "q": normal(gen, *batch, L, D, dtype=dtype),
        "k": normal(gen, *batch, S, D, dtype=dtype),
        "v": normal(gen, *batch, S, Dv, dtype=dtype),
    }


def attention_shapes() -> list[
    tuple[str, tuple, int, int, int, int, torch.dtype]
]:
    """(label, batch, L, S, D, Dv, dtype) of the attention exercises' cases, small first."""
    f32, f64 = torch.float32, torch.float64
    return [
        ("small", (), 3, 3, 4, 4, f64),
        ("small", (), 4, 4, 8, 8, f64),
        ("length 1", (), 1, 1, 4, 4, f64),
        ("L != S, Dv != D", (), 2, 5, 4, 3, f64),
        ("L > S", (), 5, 2, 4, 6, f64),
        ("one key", (), 4, 1, 4, 4, f64),
        ("batch", (2,), 3, 5, 4, 4, f64),
        ("batch and heads", (2, 3), 4, 6, 8, 5, f64),
        ("float32", (2, 2), 3, 5, 4, 4, f32),
    ]


def large_scores(
    gen: torch.Generator, L: int, S: int, dtype=torch.float32, low=-30, high=30
) -> dict[str, object]:
    """q, k of whole numbers in [low, high] with D = 4: scores in the thousands, exact in any order.

    With `low` and `-high` alike and large, every score is far below zero: exp underflows unless the
    row's own maximum is subtracted.
    """
    return {
        "q": integers(gen, 2, L, 4, low=low, high=high, dtype=dtype),
        "k": integers(gen, 2, S, 4, low=-high, high=-low, dtype=dtype),
        "v": normal(gen, 2, S, 4, dtype=dtype),
    }
