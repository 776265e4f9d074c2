"""What the checker says of a wrong answer when no cause is certain: `qkv.exercises.observe`."""

import pytest
import torch

from qkv.exercises.observe import observe


def close(a, b):
    return a.shape == b.shape and torch.allclose(a, b, rtol=1e-5, atol=1e-6, equal_nan=True)


RIGHT = (
    torch.arange(1.0, 25.0, dtype=torch.float64).reshape(2, 3, 4).sin() + 2
)  # no zeros, distinct


@pytest.mark.parametrize(
    ("got", "seen"),
    [
        (RIGHT * 0.5, "every value is 0.5 times the expected one"),
        (RIGHT * 0, "every value is 0"),
        (RIGHT * torch.tensor([1.0, 2.0, 3.0])[:, None], "each row is the expected row times"),
        (RIGHT + 0.25, "every value is the expected one +0.25"),
        (RIGHT.flip(-1), "each row holds the expected values, in another order"),
        (RIGHT.flatten().flip(0).reshape(2, 3, 4), "the expected values, in other places"),
        (RIGHT.roll(1, dims=-2), "the expected values moved 1 place later along axis -2"),
        (RIGHT.permute(1, 0, 2), "the right values with the axes in another order"),
        (RIGHT.reshape(4, 3, 2), "the right values in the right order, in another shape"),
        (
            RIGHT + torch.where(torch.arange(3)[:, None] == 1, torch.arange(4) / 10, 0.0),
            "4 of 6 rows are right; wrong: rows 1, 4",
        ),
    ],
    ids=[
        "scale",
        "zeros",
        "row-scale",
        "offset",
        "row-order",
        "places",
        "shift",
        "axes",
        "shape",
        "rows",
    ],
)
def test_what_is_seen_is_said(got, seen):
    assert seen in observe(got, RIGHT, close)


def test_a_square_result_transposed_is_seen():
    square = RIGHT[:, :3, :3]
    assert observe(square.mT, square, close) == (
        "observed: the right values, transposed: the last two axes swapped"
    )


def test_nothing_is_said_of_a_right_answer_or_of_noise():
    assert observe(RIGHT.clone(), RIGHT, close) is None
    noise = torch.randn(2, 3, 4, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    assert observe(noise, RIGHT, close) is None


def test_a_mask_moved_by_a_diagonal_is_seen_as_a_shift():
    right = torch.ones(4, 6, dtype=torch.bool).tril(2)
    got = torch.ones(4, 6, dtype=torch.bool).tril(1)
    assert "moved 1 place" in observe(
        got, right, lambda a, b: a.shape == b.shape and torch.equal(a, b)
    )


def _causal_scores(diagonal: int) -> torch.Tensor:
    """Scores 1..16 with -inf on the keys after each query (above `diagonal`)."""
    scores = torch.arange(1.0, 17.0, dtype=torch.float64).reshape(4, 4)
    return scores.masked_fill(torch.ones(4, 4, dtype=torch.bool).triu(diagonal), -torch.inf)


MASKED = _causal_scores(1)


@pytest.mark.parametrize(
    ("got", "seen"),
    [
        (MASKED * 2, "every value is 2 times the expected one"),
        (MASKED.nan_to_num(neginf=-1e9), "the right values, except -1e+09 where -inf is expected"),
        (
            torch.where(MASKED.isinf(), 1.0, -torch.inf).double(),
            "-inf exactly where the expected values are finite",
        ),
        (_causal_scores(0), "the -inf entries moved 1 place earlier along axis -1"),
        (
            MASKED.mT.masked_fill(torch.eye(4, dtype=torch.bool), 1.0),
            "-inf on the other side of the diagonal",
        ),
        (
            MASKED.masked_fill(torch.eye(4, dtype=torch.bool) & (torch.arange(4) == 2), -torch.inf),
            "-inf at 1 place more than expected, the first at [2, 2]",
        ),
        (
            MASKED.masked_fill(torch.ones(4, 4, dtype=torch.bool).triu(3), 0.0),
            "a number at 1 place where -inf is expected, the first at [0, 3]",
        ),
    ],
    ids=["scale", "filled", "inverted", "moved", "transposed", "extra", "missing"],
)
def test_entries_masked_with_minus_inf_are_seen(got, seen):
    assert seen in observe(got, MASKED, close)
