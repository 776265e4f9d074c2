"""Figures for the post "Queries, keys and values".

`qkv-cat-sat-heatmap`: the attention weights of "the cat sat on the mat" with the hand-made embeddings and
projections of `qkv_lab.examples.cat_sat`, which the post includes and whose numbers it asserts.
"""

import torch
from _diagram import arrow, canvas, matrix
from _style import label_cells
from matplotlib.figure import Figure
from torch import nn

import qkv
from qkv_lab.examples import cat_sat


def cat_sat_heatmap() -> Figure:
    """Heat map of the hand-made attention weights, one row per query token, values printed in the cells."""
    tokens, x, w_q, w_k = cat_sat()
    weights = qkv.attention_weights(x @ w_q, x @ w_k)  # (6, 6), as the post computes them
    fig = Figure(figsize=(5.5, 4.6), layout="constrained")
    ax = fig.subplots()
    image = ax.imshow(weights.numpy(), vmin=0.0, vmax=1.0)
    ax.set_xticks(range(len(tokens)), tokens)
    ax.set_yticks(range(len(tokens)), tokens)
    ax.set_xlabel("key (attended to)")
    ax.set_ylabel("query (attending)")
    ax.set_title("Hand-made attention weights (not learned)")
    label_cells(ax, image, [[f"{w:.2f}" for w in row] for row in weights.tolist()])
    fig.colorbar(image, ax=ax, label="weight (each row sums to 1)")
    return fig


# --- the data flow of attention, with shapes (issue 9, diagrams) ------------------------------------------

N, D_MODEL, D_K, D_V = 6, 16, 8, 12  # the sizes of the post's projection block, without the batch
CELL = 0.1  # inches per element


def _self_attention() -> dict[str, torch.Tensor]:
    """Every tensor of one self-attention on random inputs, computed as the post computes it."""
    torch.manual_seed(0)
    x = torch.randn(N, D_MODEL)
    w_q, w_k, w_v = (nn.Linear(D_MODEL, d, bias=False) for d in (D_K, D_K, D_V))
    with torch.no_grad():
        q, k, v = w_q(x), w_k(x), w_v(x)
        scores = q @ k.T / D_K**0.5  # (L, S)
        weights = qkv.attention_weights(q, k)  # (L, S)
        out = qkv.scaled_dot_product_attention(q, k, v)  # (L, d_v)
    torch.testing.assert_close(weights, scores.softmax(dim=-1))
    torch.testing.assert_close(weights.sum(dim=-1), torch.ones(N))
    torch.testing.assert_close(out, weights @ v)
    return {"x": x, "q": q, "k": k, "v": v, "scores": scores, "weights": weights, "out": out}


def _shape(t: torch.Tensor) -> str:
    return str(tuple(t.shape))


def attention_flow() -> Figure:
    """X, its three projections, the scores, the weights and the output, each drawn at its real shape."""
    t = _self_attention()
    fig, ax = canvas(5.5, 4.6)
    width = {name: t[name].shape[1] * CELL for name in t}
    height = N * CELL
    rows = (0.45, 1.95, 3.55)  # top of each row of tensors

    x_left = 2.75 - width["x"] / 2
    matrix(
        ax,
        x_left,
        rows[0],
        t["x"].shape,
        CELL,
        "C7",
        "$X$  $(L, d_\\mathrm{model})$",
        _shape(t["x"]),
    )
    projected = {"q": (0.35, "Q", "L, d_k"), "k": (2.15, "K", "S, d_k"), "v": (3.75, "V", "S, d_v")}
    for (name, (left, symbol, dims)), fill in zip(
        projected.items(), ("C0", "C1", "C2"), strict=True
    ):
        matrix(
            ax, left, rows[1], t[name].shape, CELL, fill, f"${symbol}$  $({dims})$", _shape(t[name])
        )
        arrow(
            ax,
            (2.75, rows[0] + height + 0.22),
            (left + width[name] / 2, rows[1] - 0.26),
            f"$W_{symbol}$",
            label_at=((2.75 + left + width[name] / 2) / 2 + 0.06, rows[0] + height + 0.55),
        )

    matrix(ax, 0.35, rows[2], t["scores"].shape, CELL, "C4", "scores $(L, S)$", _shape(t["scores"]))
    arrow(
        ax,
        (0.35 + width["q"] / 2, rows[1] + height + 0.22),
        (0.35 + width["scores"] / 2, rows[2] - 0.26),
    )
    arrow(
        ax,
        (2.15 + width["k"] / 2, rows[1] + height + 0.22),
        (0.35 + width["scores"], rows[2] - 0.26),
        "$QK^\\top / \\sqrt{d_k}$",
        label_at=(0.75, rows[1] + height + 0.32),
    )

    weights_left = 2.0
    ax.imshow(
        t["weights"].numpy(),
        extent=(weights_left, weights_left + width["weights"], rows[2] + height, rows[2]),
        vmin=0.0,
        vmax=1.0,
    )
    caption = f"{_shape(t['weights'])}\nrows sum to 1"
    matrix(ax, weights_left, rows[2], t["weights"].shape, CELL, None, "weights", caption)
    arrow(
        ax,
        (0.35 + width["scores"] + 0.1, rows[2] + height / 2),
        (weights_left - 0.1, rows[2] + height / 2),
        "softmax",
        label_at=((0.35 + width["scores"] + weights_left) / 2, rows[2] + height / 2 + 0.12),
        ha="center",
        va="top",
    )

    out_left = 3.75
    matrix(ax, out_left, rows[2], t["out"].shape, CELL, "C2", "output $(L, d_v)$", _shape(t["out"]))
    arrow(
        ax,
        (out_left + width["v"] / 2, rows[1] + height + 0.22),
        (out_left + width["out"] / 2, rows[2] - 0.26),
    )
    arrow(
        ax,
        (weights_left + width["weights"] + 0.1, rows[2] + height / 2),
        (out_left - 0.1, rows[2] + height / 2),
        "$@\\,V$",
        label_at=((weights_left + width["weights"] + out_left) / 2, rows[2] + height / 2 + 0.12),
        ha="center",
        va="top",
    )
    return fig


FIGURES = {"qkv-cat-sat-heatmap": cat_sat_heatmap, "qkv-attention-flow": attention_flow}
