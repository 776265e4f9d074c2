"""What a wrong answer looks like next to the right one, said without guessing its cause.

When no known mistake explains an answer, the verdict says only what is seen: the right values with the
axes in another order, or in another arrangement; every value a constant times, or a constant off, the
right one; each row its own multiple of the right row; the right values transposed; the rows' values in
another order; the right values shifted along an axis; which rows are right; one number where -inf (a
masked entry) is expected, or -inf elsewhere than expected. Entries that are -inf (or inf, or NaN) in both
are left out of the comparison.
"""

import itertools
import math

import torch
from torch import Tensor

MAX_SHIFT = 3  # shifts tried along each axis, either way


def observe(got: Tensor, expected: Tensor, close) -> str | None:
    """One sentence about how `got` relates to `expected`, or None; `close(a, b)` compares values."""
    if got.shape != expected.shape:
        return _reshaped(got, expected, close)
    if close(got, expected):
        return None
    if expected.dtype == torch.bool:
        return _shifted(got, expected, close) or _rows(got, expected, close)
    masked = _filled(got, expected, close) or _masked(got, expected)
    if masked:
        return masked
    # masked in both: 0 in both, so that scales and orders see the rest
    both = ~got.isfinite() & (
        (got == expected) | (got.isnan() & expected.isnan())
    )
    got, expected = got.masked_fill(both, 0), expected.masked_fill(both, 0)
    if not got.isfinite().all():
        return _rows(got, expected, close)
    return (
        _scaled(got, expected, close)
        or _offset(got, expected, close)
        or _shifted(got, expected, close)
        or _transposed(got, expected, close)
        or _permuted(got, expected, close)
        or _rows(got, expected, close)
    )


def _transposed(got: Tensor, expected: Tensor, close) -> str | None:
    if got.dim() >= 2 and close(got, expected.mT):
        return (
            "observed: the right values, transposed: the last two axes swapped"
        )
    return None


def _filled(got: Tensor, expected: Tensor, close) -> str | None:
    """The right values, but one number where -inf (or another non-number) is expected."""
    hole = ~expected.isfinite()
    if not hole.any() or not got[hole].isfinite().all():
        return None
    held = got[hole]
    if not (held == held[0]).all() or not close(
        got.masked_fill(hole, 0), expected.masked_fill(hole, 0)
    ):
        return None
    wanted = expected[hole][0].item()
    return (
        f"observed: the right values, except {held[0].item():.4g} where {wanted} "
        "is expected"
    )


def _masked(got: Tensor, expected: Tensor) -> str | None:
    """Where -inf is, when it is not where the expected result has it."""
    mine, theirs = got == -math.inf, expected == -math.inf
    overflowed = got.isnan().any() or (got == math.inf).any()
    if overflowed or torch.equal(mine, theirs):
        return None
    if mine.dim() >= 1 and torch.equal(mine, ~theirs):
        return "observed: -inf exactly where the expected values are finite"
    square = mine.dim() >= 2 and mine.size(-1) == mine.size(-2)
    if square and torch.equal(mine, theirs.mT):
        return (
            "observed: -inf on the other side of the diagonal: where the "
            "expected result has it, transposed"
        )
    moved = _shifted(mine, theirs, torch.equal)
    if moved:
        return moved.replace("the expected values", "the -inf entries")
    extra, missing = mine & ~theirs, theirs & ~mine
    if not missing.any():
        first = [int(i) for i in extra.nonzero()[0]]
        return (
            f"observed: -inf at {_places(extra)} more than expected, "
            f"the first at {first}"
        )
    if not extra.any():
        first = [int(i) for i in missing.nonzero()[0]]
        return (
            f"observed: a number at {_places(missing)} where -inf is "
            f"expected, the first at {first}"
        )
    return None


def _places(where: Tensor) -> str:
    n = int(where.sum())
    return f"{n} place{'s' * (n != 1)}"


def _reshaped(got: Tensor, expected: Tensor, close) -> str | None:
    if got.numel() != expected.numel() or got.dim() > 6:
        return None
    if got.dim() == expected.dim():
        for order in itertools.permutations(range(got.dim())):
            moved = expected.permute(order)
            if moved.shape == got.shape and close(got, moved):
                return (
                    f"observed: the right values with the axes in another order: yours are the "
                    f"expected result's axes {list(order)}"
                )
    if close(got.reshape(expected.shape), expected):
        return "observed: the right values in the right order, in another shape"
    if close(got.flatten().sort().values, expected.flatten().sort().values):
        return "observed: the right values, arranged differently"
    return None


def _scaled(got: Tensor, expected: Tensor, close) -> str | None:
    big = expected.abs() > expected.abs().max() * 1e-3
    if not big.any() or not close(got * 0, expected * 0):
        return None
    ratio = (got[big] / expected[big]).double()
    factor = ratio.median().item()
    if math.isfinite(factor) and close(got, expected * factor):
        if factor == 0:
            return "observed: every value is 0"
        return f"observed: every value is {factor:.4g} times the expected one"
    if expected.dim() >= 1 and expected.size(-1) > 1:
        safe = torch.where(big, expected, torch.ones_like(expected))
        row = (
            torch.where(big, got / safe, torch.nan)
            .nanmedian(-1, keepdim=True)
            .values
        )
        if row.isfinite().all() and close(got, expected * row):
            return "observed: each row is the expected row times a factor of its own"
    return None


def _offset(got: Tensor, expected: Tensor, close) -> str | None:
    shift = (got - expected).flatten().median().item()
    if got.numel() > 1 and shift and close(got, expected + shift):
        return f"observed: every value is the expected one {shift:+.4g}"
    return None


def _permuted(got: Tensor, expected: Tensor, close) -> str | None:
    rows = got.dim() >= 1 and got.size(-1) > 1
    if rows and close(got.sort(-1).values, expected.sort(-1).values):
        return "observed: each row holds the expected values, in another order"
    if got.numel() > 1 and close(
        got.flatten().sort().values, expected.flatten().sort().values
    ):
        return "observed: the expected values, in other places"
    return None


def _shifted(got: Tensor, expected: Tensor, close) -> str | None:
    for axis in range(-1, -got.dim() - 1, -1):
        n = got.size(axis)
        # the moved part overlaps half the axis at least
        longest = min(MAX_SHIFT, n // 2)
        for step in (s for k in range(1, longest + 1) for s in (k, -k)):
            mine = got.narrow(axis, max(step, 0), n - abs(step))
            theirs = expected.narrow(axis, max(-step, 0), n - abs(step))
            if close(mine, theirs) and not close(
                mine, expected.narrow(axis, max(step, 0), n - abs(step))
            ):
                way = "later" if step > 0 else "earlier"
                return (
                    f"observed: the expected values moved {abs(step)} place{'s' * (abs(step) > 1)} "
                    f"{way} along axis {axis}"
                )
    return None


def _rows(got: Tensor, expected: Tensor, close) -> str | None:
    if got.dim() < 2:
        return None
    rows = got.reshape(-1, got.size(-1))
    right = [
        close(mine, theirs)
        for mine, theirs in zip(rows, expected.reshape(rows.shape), strict=True)
    ]
    wrong = [i for i, ok in enumerate(right) if not ok]
    if len(wrong) == len(right):
        return None
    shown = ", ".join(map(str, wrong[:6])) + (", ..." if len(wrong) > 6 else "")
    return (
        f"observed: {len(right) - len(wrong)} of {len(right)} rows are right; wrong: row{'s' * (len(wrong) > 1)} "
        f"{shown} (rows counted over the leading axes)"
    )
