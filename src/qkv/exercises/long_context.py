"""The exercise of long context: the tokens that a StreamingLLM cache keeps of a stream."""

import torch
from torch import Tensor

from qkv.cache import streaming_window
from qkv.exercises.exercise import Case, Exercise, Mistake, normal

# --- long-context/streaming-window -------------------------------------------------------------------------


def window_cases(gen: torch.Generator) -> list[Case]:
    rows = [  # (label, x's shape, window, sinks, dtype)
        ("two over the window", (8, 2), 6, 2, torch.float64),
        ("many over", (20, 3), 6, 2, torch.float64),
        ("one over", (7, 2), 6, 4, torch.float64),
        ("no sinks", (10, 2), 4, 0, torch.float64),
        ("every slot but one a sink", (9, 2), 5, 4, torch.float64),
        ("full, not over", (6, 3), 6, 2, torch.float64),
        ("shorter than the sinks", (3, 2), 8, 4, torch.float64),
        ("batch and heads", (2, 3, 12, 4), 8, 4, torch.float64),
        ("float32", (2, 2, 40, 4), 16, 4, torch.float32),
    ]
    return [
        Case(
            label,
            {
                "x": normal(gen, *shape, dtype=dtype),
                "window": window,
                "sinks": sinks,
            },
        )
        for label, shape, window, sinks, dtype in rows
    ]


def kept(x: Tensor, window: int, sinks: int, rule: str) -> Tensor:
    """The eviction as readers write it, with the knob their mistakes turn."""
    if x.size(-2) <= window:
        return x
    first, recent = (
        x[..., :sinks, :],
        x[..., x.size(-2) - (window - sinks) :, :],
    )
    if rule == "no sinks":
        return x[..., -window:, :]
    if rule == "window recent":
        return torch.cat([first, x[..., -window:, :]], dim=-2)
    if rule == "first axis":
        return torch.cat([x[:sinks], x[x.size(0) - (window - sinks) :]])
    if rule == "recent first":
        return torch.cat([recent, first], dim=-2)
    newest_dropped = x[..., x.size(-2) - (window - sinks) - 1 : -1, :]
    return torch.cat([first, newest_dropped], dim=-2)


STREAMING_WINDOW = Exercise(
    name="long-context/streaming-window",
    signature="fn(x, window, sinks)",
    outputs=("kept",),
    reference=streaming_window,
    cases=window_cases,
    mistakes=(
        Mistake(
            "that is a plain sliding window: the first sinks tokens must stay, "
            "then only the last window - sinks",
            lambda x, window, sinks: kept(x, window, sinks, "no sinks"),
        ),
        Mistake(
            "the order: the sinks first, then the recent tokens as they came "
            "(the order in the cache gives each token its position)",
            lambda x, window, sinks: kept(x, window, sinks, "recent first"),
        ),
        Mistake(
            "the newest token is missing: the window ends with the token just "
            "appended, x[..., -1, :]",
            lambda x, window, sinks: kept(x, window, sinks, "newest dropped"),
        ),
        Mistake(
            "the sinks take slots of the window: keep the last window - sinks tokens after them, "
            "window in all",
            lambda x, window, sinks: kept(x, window, sinks, "window recent"),
        ),
        Mistake(
            "the tokens are the second-to-last axis of x (..., T, D): slice x[..., :sinks, :], "
            "not x[:sinks], which cuts the batch",
            lambda x, window, sinks: kept(x, window, sinks, "first axis"),
        ),
    ),
)
