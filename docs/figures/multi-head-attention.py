"""Figures for the post "Multi-head attention".

`multi-head-attention-heads`: the per-head attention weights of `qkv_lab.examples.position_heads`, the hand-set
module that the post includes and whose heads it asserts (the previous token, the token itself, the next
token and the first token).
`multi-head-attention-induction`: the previous-token head of layer 1 and the induction head of layer 2 of
`qkv_lab.toys.train_induction`'s model (seed 0), on a test sequence of 8 tokens repeated once; the heads are
those that `measure_induction(0)` scored highest.
"""

import functools

import torch
from _diagram import arrow, canvas, cells, crop
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from torch.overrides import TorchFunctionMode

import qkv
from qkv_lab.examples import position_heads
from qkv_lab.toys import TEST_SEED, measure_induction, repeated_segments, train_induction

N_TOKENS = 6
TITLES = ("head 0: previous", "head 1: itself", "head 2: next", "head 3: first")

# trained once per build, however many times (colour schemes) the figure is drawn
_trained = functools.cache(train_induction)


def head_heatmaps() -> Figure:
    """One heat map per head, two by two, queries as rows and keys as columns."""
    mha, x = position_heads(N_TOKENS)
    _, weights = mha(x, need_weights=True)  # (1, H, N, N), as the post computes them
    fig = Figure(figsize=(5.5, 5.4), layout="constrained")
    axes = fig.subplots(2, 2, sharex=True, sharey=True)
    for ax, head, title in zip(axes.flat, weights[0].detach(), TITLES, strict=True):
        image = ax.imshow(head.numpy(), vmin=0.0, vmax=1.0)
        ax.set_title(title)
        ax.set_xticks(range(N_TOKENS))
        ax.set_yticks(range(N_TOKENS))
    for ax in axes[1]:
        ax.set_xlabel("key position")
    for ax in axes[:, 0]:
        ax.set_ylabel("query position")
    fig.colorbar(image, ax=axes, label="weight", shrink=0.8)
    return fig


# --- splitting and merging heads (issue 9, diagrams) ------------------------------------------------------

B, N, E, H = 2, 5, 16, 4  # the sizes of the post's split-and-merge block
RESHAPES = {"unflatten", "flatten", "transpose", "view", "reshape", "permute"}
CELL, GAP = (
    0.09,
    0.05,
)  # inches: one element, and the gap that separates the outer index of a picture


class _Calls(TorchFunctionMode):
    """Records the reshapes and the attention call that run inside a block: `(name, args, output shape)`."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[str, tuple, tuple[int, ...]]] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        output = func(*args, **(kwargs or {}))
        name = getattr(func, "__name__", "")
        if name in RESHAPES or name == "scaled_dot_product_attention":
            self.calls.append((name, args[1:], tuple(output.shape)))
        return output


def _head_steps() -> list[tuple[str, tuple[int, ...]]]:
    """The calls from the queries' projection to the merged heads in one forward of the package's module.

    Returns `(call, output shape)` pairs: the split of the queries, the attention, the merge.
    """
    torch.manual_seed(0)
    mha = qkv.MultiHeadAttention(E, H)
    with _Calls() as recorded, torch.no_grad():
        mha(torch.randn(B, N, E))
    attention = [name for name, _, _ in recorded.calls].index("scaled_dot_product_attention")
    # the queries' split comes first, then the keys' and the values'
    steps = recorded.calls[:2] + recorded.calls[attention:]
    return [
        (
            f".{name}({', '.join(map(repr, args))})" if name in RESHAPES else f"{name}(q, k, v)",
            shape,
        )
        for name, args, shape in steps
    ]


def _token_major(ax: Axes, x: float, y: float, split: bool) -> float:
    """`(N, E)` of one sequence, head h's features in colour Ch; `split`: a gap after each token's row."""
    heads = [[f"C{h}" for h in range(H) for _ in range(E // H)]]
    for token in range(N):
        cells(ax, x, y + token * (CELL + GAP * split), heads, CELL)
    return N * CELL + (N - 1) * GAP * split


def _head_major(ax: Axes, x: float, y: float) -> float:
    """`(H, N, E/H)` of one sequence: one block of tokens by features per head, a gap after each head."""
    for h in range(H):
        cells(ax, x + h * (E // H * CELL + 2 * GAP), y, [[f"C{h}"] * (E // H)] * N, CELL)
    return N * CELL


# What each tensor of the split and merge holds: how to draw one sequence of it, its shape, in words.
SPLIT_MERGE_ROWS = (
    ("whole", "(B, N, E)", "q_proj(x), one of the B sequences"),
    ("tokens", "(B, N, H, E/H)", "one row per token, H slices in each"),
    ("heads", "(B, H, N, E/H)", "one block per head: H attentions"),
    ("heads", "(B, H, N, E/H)", "each head's output"),
    ("tokens", "(B, N, H, E/H)", "one row per token again"),
    ("whole", "(B, N, E)", "the Concat, then out_proj"),
)


def head_split_and_merge() -> Figure:
    """The queries of one sequence through split, attention and merge, with the calls and shapes of a run."""
    steps = _head_steps()
    shapes = [(B, N, E), *(shape for _, shape in steps)]
    calls = [call for call, _ in steps]
    fig, ax = canvas(5.5, 8.0)
    left = 0.25
    text_x = left + E * CELL + 2 * GAP * (H - 1) + 0.2
    arrow_x = left + E * CELL / 2
    y = 0.2
    for (layout, name, words), shape, call in zip(
        SPLIT_MERGE_ROWS, shapes, [*calls, None], strict=True
    ):
        if layout == "heads":
            height = _head_major(ax, left, y)
        else:
            height = _token_major(ax, left, y, split=layout == "tokens")
        ax.text(text_x, y + height / 2, f"{name} = {shape}\n{words}", va="center")
        if call is not None:
            start, end = (arrow_x, y + height + 0.08), (arrow_x, y + height + 0.42)
            arrow(ax, start, end, call, label_at=(arrow_x + 0.1, y + height + 0.25))
        y += height + 0.5
    crop(fig, ax, y - 0.3)
    return fig


def induction_heatmaps() -> Figure:
    """The learned previous-token head (layer 1) above the learned induction head (layer 2), one sequence."""
    model, run = _trained(), measure_induction(0)
    heads = {  # the heads that the post's blocks score highest, in layers 1 and 2
        1: run["previous_1"].index(max(run["previous_1"])),
        2: run["induction_2"].index(max(run["induction_2"])),
    }
    tokens, n = repeated_segments(512, 24, 32, torch.Generator().manual_seed(TEST_SEED))
    sequence = tokens[n == 8][0, :16]  # 8 tokens, then the same 8 again
    with torch.no_grad():
        _, (first, second) = model(sequence[None])  # (1, H, N, N) each
    maps = {
        f"layer 1, head {heads[1]}: previous token": first[0, heads[1]],
        f"layer 2, head {heads[2]}: induction": second[0, heads[2]],
    }
    fig = Figure(figsize=(4.5, 8.2), layout="constrained")
    axes = fig.subplots(2, 1)
    labels = [str(t) for t in sequence.tolist()]
    for ax, (title, weights) in zip(axes, maps.items(), strict=True):
        image = ax.imshow(weights.numpy(), vmin=0.0, vmax=1.0)
        ax.set_title(title)
        ax.set_xticks(range(16), labels, rotation=90)
        ax.set_yticks(range(16), labels)
        ax.set_xlabel("key token")
        ax.set_ylabel("query token")
    fig.colorbar(image, ax=axes, label="weight", shrink=0.6)
    return fig


FIGURES = {
    "multi-head-attention-heads": head_heatmaps,
    "multi-head-attention-split-merge": head_split_and_merge,
    "multi-head-attention-induction": induction_heatmaps,
}
