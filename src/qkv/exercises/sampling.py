"""The exercise of sampling: the nucleus (top-p) filter of a next-token distribution."""

import torch
from torch import Tensor

from qkv.exercises.exercise import Case, Exercise, Mistake, normal
from qkv.gpt import next_token_probabilities

# --- small-gpt/top-p ---------------------------------------------------------------------------------------


def top_p(probs: Tensor, p: float) -> Tensor:
    """`qkv.gpt.next_token_probabilities` with `top_p=p`, on the logits `log(probs)`."""
    return next_token_probabilities(probs.log(), top_p=p)


def top_p_cases(gen: torch.Generator) -> list[Case]:
    rows = [  # (label, shape, spread of the logits, p, dtype)
        ("five tokens", (5,), 1.0, 0.7, torch.float64),
        ("eight tokens", (8,), 1.5, 0.5, torch.float64),
        ("a batch of rows", (3, 8), 1.0, 0.8, torch.float64),
        ("p = 1 keeps every token", (2, 6), 1.0, 1.0, torch.float64),
        ("one token past p", (2, 6), 4.0, 0.05, torch.float64),
        ("batch and positions", (2, 3, 16), 2.0, 0.9, torch.float64),
        ("float32", (4, 32), 2.0, 0.6, torch.float32),
    ]
    return [
        Case(
            label,
            {
                "probs": torch.softmax(normal(gen, *shape, std=spread), -1).to(
                    dtype
                ),
                "p": p,
            },
        )
        for label, shape, spread, p, dtype in rows
    ]


def nucleus(
    probs: Tensor,
    p: float,
    include_crossing=True,
    descending=True,
    scatter=True,
    norm=True,
    axis=-1,
    inverted=False,
    unsorted=False,
):
    """Top-p as readers write it, with the knobs their mistakes turn."""
    ordered, order = probs.sort(dim=-1, descending=descending)  # (..., V)
    mass = ordered.cumsum(axis)
    if include_crossing == "strict":
        keep = mass < p
    else:
        keep = (mass - ordered < p) if include_crossing else (mass <= p)
    if unsorted:  # the sorted order's mask on the tokens' own order
        kept = probs * keep
        return kept / kept.sum(-1, keepdim=True)
    kept = ordered * (~keep if inverted else keep)
    if norm:
        kept = kept / kept.sum(-1, keepdim=True)
    if scatter == "gather":
        return kept.gather(-1, order)
    return torch.zeros_like(probs).scatter(-1, order, kept) if scatter else kept


TOP_P = Exercise(
    name="small-gpt/top-p",
    signature="fn(probs, p)",
    outputs=("probs",),
    reference=top_p,
    cases=top_p_cases,
    mistakes=(
        Mistake(
            "the token that carries the mass past p is dropped: keep a token while the mass of the "
            "tokens before it is below p, so the nucleus reaches p",
            lambda probs, p: nucleus(probs, p, include_crossing=False),
        ),
        Mistake(
            "the token that carries the mass past p is dropped: keep a token while the mass of the "
            "tokens before it is below p, so the nucleus reaches p",
            lambda probs, p: nucleus(probs, p, include_crossing="strict"),
        ),
        Mistake(
            "the kept probabilities do not sum to 1: divide them by their sum",
            lambda probs, p: nucleus(probs, p, norm=False),
        ),
        Mistake(
            "the result is in sorted order: put each probability back at its token's index "
            "(scatter with the indices of the sort)",
            lambda probs, p: nucleus(probs, p, scatter=False),
        ),
        Mistake(
            "the least probable tokens were kept: sort in descending order, most probable first",
            lambda probs, p: nucleus(probs, p, descending=False),
        ),
        Mistake(
            "the cumulative sum runs over the wrong axis: the vocabulary is the last one, "
            "cumsum(dim=-1)",
            lambda probs, p: nucleus(probs, p, axis=0),
        ),
        Mistake(
            "gather reads kept[order[i]]; to put sorted entry i back at token order[i] use "
            "zeros.scatter(-1, order, kept)",
            lambda probs, p: nucleus(probs, p, scatter="gather"),
        ),
        Mistake(
            "the nucleus is zeroed and the rest kept: keep the most probable tokens",
            lambda probs, p: nucleus(probs, p, inverted=True),
        ),
        Mistake(
            "the mask is in sorted order and probs in the tokens' order: put the "
            "mask back at each token's index (scatter) before applying it",
            lambda probs, p: nucleus(probs, p, unsorted=True),
        ),
        Mistake(
            "divide the kept probabilities by their own sum, not by p",
            lambda probs, p: nucleus(probs, p, norm=False) / p,
        ),
    ),
)
