"""The exercise of sparse attention: a lightning indexer's causal scores."""

# The articles' names: L, S, D and H for lengths and sizes.
# ruff: noqa: N806

import math

import torch
from torch import Tensor

from qkv.exercises.exercise import Case, Exercise, Mistake, normal
from qkv.masks import causal_mask
from qkv.topk import indexer_scores

# --- sparse-attention/indexer-scores -----------------------------------------------------------------------


def scores_cases(gen: torch.Generator) -> list[Case]:
    rows = [  # (label, B, H, L, S, D, dtype)
        ("small", 1, 2, 4, 4, 3, torch.float64),
        ("more heads", 2, 4, 6, 6, 8, torch.float64),
        ("one head", 1, 1, 5, 5, 4, torch.float64),
        ("a decoding step, L = 1", 2, 3, 1, 7, 4, torch.float64),
        ("queries after a cache, L < S", 1, 2, 3, 8, 4, torch.float64),
        ("length 1", 1, 2, 1, 1, 4, torch.float64),
        ("float32", 2, 4, 16, 16, 8, torch.float32),
    ]
    return [
        Case(
            label,
            {
                "q": normal(gen, B, H, L, D, dtype=dtype),
                "k": normal(gen, B, S, D, dtype=dtype),
                "weights": normal(gen, B, L, H, dtype=dtype),
            },
        )
        for label, B, H, L, S, D, dtype in rows
    ]


def reference(q: Tensor, k: Tensor, weights: Tensor) -> Tensor:
    """The scores under a bottom-right causal mask: query i sits at S - L + i."""
    L, S = q.size(-2), k.size(-2)
    causal = causal_mask(L, S, alignment="bottom_right")
    return indexer_scores(q, k, weights, mask=causal)


def scored(q: Tensor, k: Tensor, weights: Tensor, rule: str) -> Tensor:
    """The scores as readers write them, with the knob their mistakes turn."""
    L, S, D = q.size(-2), k.size(-2), q.size(-1)
    dots = q @ k.unsqueeze(1).mT  # (B, H, L, S)
    if rule != "no scale":
        dots = dots / math.sqrt(D)
    per_head = dots if rule in ("no relu", "relu after") else torch.relu(dots)
    if rule == "no weights":
        scores = per_head.sum(1)
    elif rule == "mean":
        scores = per_head.mean(1)
    else:
        scores = torch.einsum("blh,bhls->bls", weights, per_head)
    if rule == "relu after":
        scores = torch.relu(scores)
    alignment = "top_left" if rule == "top left" else "bottom_right"
    keep = causal_mask(L, S, alignment=alignment)  # True: may be seen
    if rule == "own key masked":
        keep = torch.ones(L, S, dtype=torch.bool).tril(S - L - 1)
    fill = 0.0 if rule == "zero" else -math.inf
    scores = scores.masked_fill(keep if rule == "inverted" else ~keep, fill)
    return scores.softmax(-1) if rule == "softmax" else scores


INDEXER_SCORES = Exercise(
    name="sparse-attention/indexer-scores",
    signature="fn(q, k, weights)",
    outputs=("scores",),
    reference=reference,
    cases=scores_cases,
    mistakes=(
        Mistake(
            "the ReLU is missing: each head's score is ReLU(q_h . k / sqrt(D)) "
            "before the weights",
            lambda q, k, weights: scored(q, k, weights, "no relu"),
        ),
        Mistake(
            "the ReLU goes on each head's product, before the weighted sum over "
            "the heads, not on the sum",
            lambda q, k, weights: scored(q, k, weights, "relu after"),
        ),
        Mistake(
            "not scaled: divide each q_h . k by sqrt(D), D = q.size(-1), inside "
            "the ReLU",
            lambda q, k, weights: scored(q, k, weights, "no scale"),
        ),
        Mistake(
            "the weights are left out: multiply head h's ReLU by "
            "weights[..., h], then sum over the heads",
            lambda q, k, weights: scored(q, k, weights, "no weights"),
        ),
        Mistake(
            "the queries are the last L of S positions: query i sits at S - L + i "
            "and sees keys 0 to S - L + i (a bottom-right causal mask)",
            lambda q, k, weights: scored(q, k, weights, "top left"),
        ),
        Mistake(
            "a future key must score -inf, not 0: 0 is a real score (every ReLU "
            "at 0) and top-k could pick it",
            lambda q, k, weights: scored(q, k, weights, "zero"),
        ),
        Mistake(
            "a query sees its own key: only the keys after position S - L + i "
            "get -inf, triu(S - L + 1), not triu(S - L)",
            lambda q, k, weights: scored(q, k, weights, "own key masked"),
        ),
        Mistake(
            "the mask is inverted: masked_fill fills where the mask is True, and "
            "causal_mask is True where a key may be seen; fill where it is False",
            lambda q, k, weights: scored(q, k, weights, "inverted"),
        ),
        Mistake(
            "the indexer's scores are not normalised: no softmax, top-k ranks "
            "the weighted sums as they are",
            lambda q, k, weights: scored(q, k, weights, "softmax"),
        ),
        Mistake(
            "that is the heads' mean: weight head h by weights[..., h] and sum "
            "over the heads",
            lambda q, k, weights: scored(q, k, weights, "mean"),
        ),
    ),
)
