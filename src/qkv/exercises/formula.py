"""The exercises of the formula: attention, a stable softmax, the two masks, Bahdanau's score."""

# The articles' names: L and S for lengths, W, U and A for Bahdanau's weights and width.
# ruff: noqa: N803, N806

import math

import torch
from torch import Tensor

from qkv.classic import AdditiveAttention
from qkv.exercises.exercise import (
    BY_D,
    INVERTED,
    LOOSE,
    NO_MAX,
    UNSCALED,
    Case,
    Exercise,
    Mistake,
    attend,
    attention_inputs,
    attention_shapes,
    integers,
    large_scores,
    naive_softmax,
    normal,
)
from qkv.functional import safe_softmax, scaled_dot_product_attention
from qkv.masks import causal_mask, padding_mask

# --- queries-keys-values/attention -------------------------------------------------------------------------


def attention_cases(gen: torch.Generator) -> list[Case]:
    cases = [
        Case(label, attention_inputs(gen, *shape))
        for label, *shape in attention_shapes()
    ]
    return [
        *cases,
        Case("float32, large scores", large_scores(gen, 3, 5), LOOSE),
        Case(
            "float64, every score below -800",
            large_scores(gen, 2, 4, torch.float64, low=20, high=60),
            LOOSE,
        ),
    ]


ATTENTION = Exercise(
    name="queries-keys-values/attention",
    signature="fn(q, k, v)",
    outputs=("out",),
    reference=lambda q, k, v: scaled_dot_product_attention(q, k, v),
    cases=attention_cases,
    mistakes=(
        Mistake(BY_D, lambda q, k, v: attend(q, k, v, scale=1 / q.size(-1))),
        Mistake(UNSCALED, lambda q, k, v: attend(q, k, v, scale=1.0)),
        Mistake(
            "the scale uses v's size Dv: it is 1/sqrt(D), D being the size of q and k",
            lambda q, k, v: attend(q, k, v, scale=1 / math.sqrt(v.size(-1))),
        ),
        Mistake(
            "the softmax runs over the queries (dim=-2): each query's weights over the keys "
            "must sum to 1, softmax(dim=-1)",
            lambda q, k, v: attend(q, k, v, dim=-2),
        ),
        Mistake(
            "the scores are k q^T, keys by queries: compute q @ k.transpose(-2, -1), (L, S)",
            lambda q, k, v: attend(k, q, v),
        ),
        Mistake(
            "the scores are multiplied by sqrt(d_k): divide them by it, the scale 1/sqrt(D)",
            lambda q, k, v: attend(q, k, v, scale=math.sqrt(q.size(-1))),
        ),
        Mistake(
            "the softmax runs over the first axis (dim=0): each query's weights over the keys, "
            "the last axis, must sum to 1, softmax(dim=-1)",
            lambda q, k, v: attend(q, k, v, dim=0),
        ),
        *(
            Mistake(
                "the scale uses the size of another axis: D is the last, "
                "q.size(-1), whatever the leading axes",
                lambda q, k, v, axis=axis: attend(
                    q, k, v, scale=1 / math.sqrt(q.size(axis))
                ),
            )
            for axis in (0, 1, -2)
        ),
        Mistake(
            "the softmax runs over axis 1, the keys only when q is 2-D: count from "
            "the end, softmax(dim=-1)",
            lambda q, k, v: attend(q, k, v, dim=1),
        ),
        Mistake(
            "the output is divided by sqrt(D): the scale goes on the scores, inside "
            "the softmax, softmax(q k^T / sqrt(D)) v",
            lambda q, k, v: attend(q, k, v, scale=1.0) / math.sqrt(q.size(-1)),
        ),
        Mistake(NO_MAX, lambda q, k, v: attend(q, k, v, softmax=naive_softmax)),
        Mistake(
            "the softmax is missing: weights = softmax(scores, dim=-1), then weights @ v",
            lambda q, k, v: q @ k.transpose(-2, -1) / math.sqrt(q.size(-1)) @ v,
        ),
        Mistake(
            "these are the attention weights: multiply them by v",
            lambda q, k, v: torch.softmax(
                q @ k.transpose(-2, -1) / math.sqrt(q.size(-1)), -1
            ),
        ),
    ),
)


# --- scaling/stable-softmax --------------------------------------------------------------------------------


def softmax_cases(gen: torch.Generator) -> list[Case]:
    masked = normal(gen, 3, 5)
    # masked scores, no row wholly masked
    masked[[0, 1, 1, 2], [1, 0, 4, 2]] = -math.inf
    # rows far apart: one max for all would fail
    offsets = torch.tensor([[1e4], [-1e4], [0.0]])
    large = integers(gen, 3, 6, low=-8, high=8, dtype=torch.float64) + offsets
    large[2, :2] = torch.tensor([1e4, -1e4])  # one row spread from -1e4 to 1e4
    return [
        Case("square", {"scores": normal(gen, 4, 4)}),
        Case("one row", {"scores": normal(gen, 3)}),
        Case("rows", {"scores": normal(gen, 2, 5)}),
        Case("length 1", {"scores": normal(gen, 1)}),
        Case("batch and heads", {"scores": normal(gen, 2, 3, 4, 6)}),
        Case("masked entries (-inf)", {"scores": masked}),
        Case("float32", {"scores": normal(gen, 2, 5, dtype=torch.float32)}),
        Case("float32, scores up to 1e4", {"scores": large.float()}, LOOSE),
        Case("float64, scores up to 1e4", {"scores": large}, LOOSE),
    ]


STABLE_SOFTMAX = Exercise(
    name="scaling/stable-softmax",
    signature="fn(scores)",
    outputs=("weights",),
    reference=safe_softmax,
    cases=softmax_cases,
    mistakes=(
        Mistake(NO_MAX, naive_softmax),
        Mistake(
            "subtract each row's own max (dim=-1, keepdim=True), not the max of the whole "
            "tensor: rows far below it underflow to 0 / 0",
            lambda scores: naive_softmax(scores - scores.max()),
        ),
        Mistake(
            "max(dim=-1) drops the axis, so the row maxima are subtracted along the wrong "
            "axis: keep it with keepdim=True",
            lambda scores: naive_softmax(scores - scores.max(-1).values),
        ),
        Mistake(
            "the softmax normalises the wrong axis: each row, the last axis (dim=-1), must sum to 1",
            lambda scores: torch.softmax(scores, dim=-2),
        ),
        Mistake(
            "the softmax normalises the wrong axis: each row, the last axis (dim=-1), must sum to 1",
            lambda scores: torch.softmax(scores, dim=0),
        ),
        Mistake(
            "sum(dim=-1) drops the axis, so each row is divided by the wrong sums: keep it with "
            "keepdim=True",
            lambda scores: unkept(scores - scores.amax(-1, keepdim=True)),
        ),
        Mistake(
            "subtract each row's max, not its min: exp(x - min) still overflows",
            lambda scores: naive_softmax(
                scores - scores.amin(-1, keepdim=True)
            ),
        ),
        Mistake(
            "the exponentials are shifted by the max but their sum is not: divide exp(x - max) "
            "by the sum of exp(x - max)",
            lambda scores: (
                (scores - scores.amax(-1, keepdim=True)).exp()
                / scores.exp().sum(-1, keepdim=True)
            ),
        ),
        Mistake(
            "the rows are not divided by their sums: exp(x - max) / exp(x - max).sum(-1, keepdim=True)",
            lambda scores: (scores - scores.amax(-1, keepdim=True)).exp(),
        ),
        Mistake(
            "that is the log of the softmax (log_softmax): take exp(x - max) / its sum",
            lambda scores: torch.log_softmax(scores, -1),
        ),
        Mistake(
            "subtract each row's max, not its mean: exp(x - mean) overflows, and "
            "a masked -inf makes the mean -inf",
            lambda scores: naive_softmax(
                scores - scores.mean(-1, keepdim=True)
            ),
        ),
    ),
)


def unkept(shifted: Tensor) -> Tensor:
    """exp over a sum taken without keepdim, which broadcasts along the wrong axis (or fails)."""
    e = shifted.exp()
    return e / e.sum(-1)


# --- masking/causal-mask -----------------------------------------------------------------------------------


def causal_cases(gen: torch.Generator) -> list[Case]:
    shapes = [
        ("square", 3, 3),
        ("length 1", 1, 1),
        ("L < S", 3, 5),
        ("L > S: fully masked rows bottom-right", 5, 3),
        ("one query (decoding)", 1, 6),
        ("one key", 6, 1),
        ("L < S", 4, 7),
    ]
    return [
        Case(label, {"L": L, "S": S, "alignment": alignment})
        for label, L, S in shapes
        for alignment in ("top_left", "bottom_right")
    ]


def causal(L: int, S: int, alignment: str) -> Tensor:
    """The package's mask, with its spelling of the alignments."""
    return causal_mask(L, S, alignment=alignment)


def lower_triangle(L: int, S: int, offset: int) -> Tensor:
    return torch.ones(L, S, dtype=torch.bool).tril(offset)


CAUSAL_MASK = Exercise(
    name="masking/causal-mask",
    signature="fn(L, S, alignment)",
    outputs=("mask",),
    reference=causal,
    cases=causal_cases,
    mistakes=(
        Mistake(INVERTED, lambda L, S, alignment: ~causal(L, S, alignment)),
        Mistake(
            "that is the top-left mask: bottom-right moves the diagonal S - L keys to the right, "
            "so that the last query sees every key",
            lambda L, S, alignment: causal(L, S, "top_left"),
        ),
        Mistake(
            "that is the bottom-right mask: top-left is the lower triangle of the (L, S) ones, "
            "query i sees keys j <= i",
            lambda L, S, alignment: causal(L, S, "bottom_right"),
        ),
        Mistake(
            "the diagonal moves by S - L (keys minus queries), not by L - S",
            lambda L, S, alignment: lower_triangle(
                L, S, L - S if alignment == "bottom_right" else 0
            ),
        ),
        Mistake(
            "the diagonal is masked: a query may attend its own position (tril's diagonal "
            "itself is kept)",
            lambda L, S, alignment: lower_triangle(
                L, S, (S - L if alignment == "bottom_right" else 0) - 1
            ),
        ),
        Mistake(
            "the alignments are swapped: top-left keeps j <= i, bottom-right j <= i + S - L",
            lambda L, S, alignment: lower_triangle(
                L, S, S - L if alignment == "top_left" else 0
            ),
        ),
        Mistake(
            "that is the upper triangle (triu): each query would see the future; causal keeps "
            "the lower triangle (tril)",
            lambda L, S, alignment: torch.ones(L, S, dtype=torch.bool).triu(
                S - L if alignment == "bottom_right" else 0
            ),
        ),
    ),
)


# --- masking/padding-mask ----------------------------------------------------------------------------------


def padding_cases(gen: torch.Generator) -> list[Case]:
    rows = [
        ("small", [2], 3),
        ("batch", [3, 1], 4),
        ("length 1", [1], 1),
        ("an empty sequence: a fully masked row", [0, 2], 3),
        ("no padding", [4, 4], 4),
        ("S longer than every sequence", [2, 5, 3, 1], 6),
        ("int32 lengths", [3, 2], 5),
        ("as many sequences as positions", [3, 1, 2], 3),
    ]
    return [
        Case(
            label,
            {
                "lengths": torch.tensor(
                    lengths, dtype=torch.int32 if "int32" in label else None
                ),
                "S": S,
            },
        )
        for label, lengths, S in rows
    ]


PADDING_MASK = Exercise(
    name="masking/padding-mask",
    signature="fn(lengths, S)",
    outputs=("mask",),
    reference=padding_mask,
    cases=padding_cases,
    mistakes=(
        Mistake(INVERTED, lambda lengths, S: ~padding_mask(lengths, S)),
        Mistake(
            "that is (B, S); the scores are (B, H, L, S): add the head and query axes, "
            "mask[:, None, None, :]",
            lambda lengths, S: padding_mask(lengths, S)[:, 0, 0, :],
        ),
        Mistake(
            "(B, 1, S, 1) hides queries (the rows of the scores); keys are the last axis: (B, 1, 1, S)",
            lambda lengths, S: padding_mask(lengths, S).transpose(-2, -1),
        ),
        Mistake(
            "(B, 1, S) lines B up with the heads of the scores (B, H, L, S): make it (B, 1, 1, S)",
            lambda lengths, S: padding_mask(lengths, S)[:, 0],
        ),
        Mistake(
            "one padding key too many is kept: key j of a sequence of length n is real for j < n",
            lambda lengths, S: padding_mask(lengths.clamp(max=S - 1) + 1, S),
        ),
        Mistake(
            "one real key is dropped: key j of a sequence of length n is real for j < n",
            lambda lengths, S: padding_mask((lengths - 1).clamp(min=0), S),
        ),
        Mistake(
            "the lengths need an axis of their own: torch.arange(S) < lengths[:, None] is (B, S); "
            "a range against the (B,) lengths compares them one by one",
            lambda lengths, S: (torch.arange(S) < lengths)[:, None, None, :],
        ),
        Mistake(
            "that masks the padded queries too, (B, 1, S, S): the padding mask is over keys "
            "only, (B, 1, 1, S), and broadcasts over the queries",
            lambda lengths, S: (
                padding_mask(lengths, S)
                & padding_mask(lengths, S).transpose(-2, -1)
            ),
        ),
    ),
)


# --- additive-vs-dot-product/additive-scores --------------------------------------------------------------


def additive_scores(query, keys, W, U, v) -> Tensor:
    """`qkv.AdditiveAttention.scores` with these weights and no bias."""
    A, Dq = W.shape
    module = AdditiveAttention(Dq, U.size(1), A).to(W.dtype)
    with torch.no_grad():
        module.query_proj.weight.copy_(W)
        module.key_proj.weight.copy_(U)
        module.key_proj.bias.zero_()
        module.score.weight.copy_(v[None, :])
        return module.scores(query, keys)


def tanh_of_sum(a: Tensor, b: Tensor) -> Tensor:
    return torch.tanh(a + b)


def bahdanau(
    query,
    keys,
    W,
    U,
    v,
    combine=tanh_of_sum,
    transpose_w=False,
    transpose_u=False,
):
    """`v . combine(W q, U k)` as readers write it, with their mistakes' knobs."""
    q = query @ (W if transpose_w else W.T)  # (B, L, A)
    k = keys @ (U if transpose_u else U.T)  # (B, S, A)
    # (B, L, S, A) @ (A,) -> (B, L, S)
    return combine(q[:, :, None, :], k[:, None, :, :]) @ v


def additive_cases(gen: torch.Generator) -> list[Case]:
    shapes = [  # (label, B, L, S, Dq, Dk, A, dtype)
        ("small, square weights", 1, 2, 3, 4, 4, 4, torch.float64),
        ("length 1", 1, 1, 1, 3, 5, 4, torch.float64),
        ("L != S, Dq != Dk", 2, 3, 5, 3, 5, 4, torch.float64),
        ("L > S", 2, 4, 2, 6, 2, 3, torch.float64),
        ("float32", 3, 5, 6, 4, 3, 8, torch.float32),
    ]
    return [
        Case(
            label,
            {
                "query": normal(gen, B, L, Dq, dtype=dtype),
                "keys": normal(gen, B, S, Dk, dtype=dtype),
                "W": normal(gen, A, Dq, dtype=dtype, std=Dq**-0.5),
                "U": normal(gen, A, Dk, dtype=dtype, std=Dk**-0.5),
                "v": normal(gen, A, dtype=dtype),
            },
            counted=True,  # the statement asks for no loop
        )
        for label, B, L, S, Dq, Dk, A, dtype in shapes
    ]


LINEAR_LAYOUT = (
    "W q and U k are query @ W.T and keys @ U.T: W is (A, Dq) and U is (A, Dk), "
    "as an nn.Linear's weight"
)
ADDITIVE_SCORES = Exercise(
    name="additive-vs-dot-product/additive-scores",
    signature="fn(query, keys, W, U, v)",
    outputs=("scores",),
    reference=additive_scores,
    cases=additive_cases,
    mistakes=(
        Mistake(
            "tanh is missing: e_ij = v . tanh(W q_i + U k_j)",
            lambda *args: bahdanau(*args, combine=torch.add),
        ),
        Mistake(
            "tanh of the sum, not a sum of tanhs: q_i and k_j meet inside the tanh",
            lambda *args: bahdanau(
                *args, combine=lambda a, b: a.tanh() + b.tanh()
            ),
        ),
        Mistake(LINEAR_LAYOUT, lambda *args: bahdanau(*args, transpose_w=True)),
        Mistake(LINEAR_LAYOUT, lambda *args: bahdanau(*args, transpose_u=True)),
        Mistake(
            LINEAR_LAYOUT,
            lambda *args: bahdanau(*args, transpose_w=True, transpose_u=True),
        ),
        Mistake(
            "v weighs the hidden units: hidden @ v, not their plain sum",
            lambda query, keys, W, U, v: bahdanau(
                query, keys, W, U, torch.ones_like(v)
            ),
        ),
        Mistake(
            "v comes after the tanh: v . tanh(W q_i + U k_j), not tanh(v . (W q_i + U k_j))",
            lambda *args: bahdanau(*args, combine=torch.add).tanh(),
        ),
        Mistake(
            "these are the attention weights (a softmax of the scores): return the scores e_ij",
            lambda *args: bahdanau(*args).softmax(-1),
        ),
    ),
)
