"""Figures for the post "FlashAttention from scratch".

`flash-attention-tiles`: what the forward kernel does with each tile of 128 queries by 64 keys, for 1024
queries and keys, causal and with a window of 256: never loaded, computed without a mask, or masked; the
classes come from `qkv.kernels.tiles`, the functions the kernel itself calls.

`flash-attention-h100-full` and `flash-attention-h100-causal`: TFLOP/s against N on an H100, forward and
forward + backward, from the recorded run `qkv_lab.results.recorded("flash-attention")` (`benchmarks/gpu.sh`); the
build measures nothing.
"""

import matplotlib
from _diagram import canvas, cells, crop
from _style import kinds_cmap
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from qkv.kernels.tiles import classify_tiles, key_bounds, tile_ranges
from qkv_lab.results import recorded

N, BLOCK_M, BLOCK_N = 1024, 128, 64
KINDS = {"empty": "never loaded", "partial": "masked", "full": "no mask"}  # from faint to strong

H100_PATHS = {  # path in the report: legend, as the post names it
    "qkv-flash": "qkv.flash_attention",
    "torch-cudnn": "torch, cuDNN",
    "torch-flash": "torch, FlashAttention-2",
    "torch-efficient": "torch, memory-efficient",
}
H100_MODES = {"forward": "forward", "forward+backward": "forward + backward"}


def tile_maps() -> Figure:
    """Two grids of tiles, causal and a window of 256, coloured by what the kernel does with each."""
    masks = {"causal": {"causal": True}, "window of 256": {"causal": True, "window": 256}}
    fig = Figure(figsize=(5.5, 6.6), layout="constrained")
    axes = fig.subplots(len(masks), 1, sharex=True)
    kinds, cmap = list(KINDS), kinds_cmap(len(KINDS))
    for ax, (title, mask) in zip(axes, masks.items(), strict=True):
        classes = classify_tiles(N, N, BLOCK_M, BLOCK_N, **mask)
        grid = [[kinds.index(kind) for kind in row] for row in classes]
        ax.imshow(grid, cmap=cmap, vmin=0, vmax=2)
        computed = sum(kind != "empty" for row in classes for kind in row)
        ax.set_title(f"{title}: {computed} of {len(grid) * len(grid[0])} tiles")
        ax.set_xticks(
            range(0, N // BLOCK_N, 4), [f"{j * BLOCK_N}" for j in range(0, N // BLOCK_N, 4)]
        )
        ax.set_yticks(
            range(0, N // BLOCK_M, 2), [f"{i * BLOCK_M}" for i in range(0, N // BLOCK_M, 2)]
        )
        ax.set_xticks([x - 0.5 for x in range(1, N // BLOCK_N)], minor=True)
        ax.set_yticks([y - 0.5 for y in range(1, N // BLOCK_M)], minor=True)
        ax.grid(which="minor", color=matplotlib.rcParams["axes.facecolor"], linewidth=1, alpha=1)
        ax.tick_params(which="minor", length=0)
        ax.set_ylabel("first query")
    axes[-1].set_xlabel("first key of the tile")
    handles = [Patch(color=cmap(k), label=label) for k, label in enumerate(KINDS.values())]
    fig.legend(handles=handles, loc="outside lower center", ncols=3, frameon=False)
    return fig


def h100_speed(causal: bool) -> Figure:
    """TFLOP/s against N of each path, forward above and forward + backward below, bf16, D = 128."""
    report = recorded("flash-attention")
    fig = Figure(figsize=(5.5, 6.6), layout="constrained")
    axes = fig.subplots(len(H100_MODES), 1, sharex=True, sharey=True)
    for ax, (mode, title) in zip(axes, H100_MODES.items(), strict=True):
        for path, label in H100_PATHS.items():
            points = [
                (r["seqlen_k"], r["tflops"])
                for r in report["results"]
                if r["suite"] == "square" and r["status"] == "ok" and r["head_dim"] == 128
                and (r["path"], r["mode"], bool(r["causal"])) == (path, mode, causal)
            ]  # fmt: skip
            ax.plot(*zip(*points, strict=True), "o-", label=label)
        ax.set_title(title)
        ax.set_ylabel("TFLOP/s")
        ax.set_ylim(0, 700)
    axes[-1].set_xscale("log", base=2)
    ns = sorted({r["seqlen_k"] for r in report["results"] if r["suite"] == "square"})
    axes[-1].set_xticks(ns, [f"{n // 1024}k" for n in ns])
    axes[-1].set_xlabel("sequence length N (batch x N = 16k tokens, 16 heads)")
    env = report["environment"]
    fig.suptitle(
        f"{'causal' if causal else 'full'}, bf16, D = 128, H100 SXM, {env['date_utc'][:10]}"
    )
    fig.legend(
        *axes[0].get_legend_handles_labels(), loc="outside lower center", ncols=2, frameon=False
    )
    return fig


# --- the loop of the forward kernel (issue 9, diagrams) ---------------------------------------------------

LOOP_N = 512  # queries and keys: four programs of BLOCK_M queries, eight tiles of BLOCK_N keys
LOOP_MASKS = {"causal": None, "causal, window of 192 keys": 192}
TILE = 0.3  # inches
FILLS = {"full": "C0", "partial": "C1"}


def _visits(first_row: int, window: int | None) -> list[tuple[int, str]]:
    """The key tiles that the program of queries `first_row, ...` visits, in order: `(first key, kind)`.

    The kernel's three stages, from the bounds it computes itself: the partial tiles at the window's far
    edge, the full tiles, the partial tiles at the diagonal.
    """
    last_row = min(first_row + BLOCK_M, LOOP_N) - 1
    bounds = key_bounds(first_row, last_row, LOOP_N, 0, window or 0, True, window is not None)
    start, full_start, full_end, end = tile_ranges(*bounds, BLOCK_N)
    stages = (
        (start, full_start, "partial"),
        (full_start, full_end, "full"),
        (full_end, end, "partial"),
    )
    return [(tile, kind) for lo, hi, kind in stages for tile in range(lo, hi, BLOCK_N)]


def _loop_panel(ax: Axes, top: float, title: str, window: int | None) -> float:
    """Tiles of one mask, visited ones numbered in the order of the loop; returns the panel's bottom."""
    left, tiles = 1.45, LOOP_N // BLOCK_N
    ax.text(left + tiles * TILE / 2, top, title, ha="center", va="top")
    top += 0.3
    for j in range(0, tiles, 2):
        ax.text(left + (j + 0.5) * TILE, top + 0.22, str(j * BLOCK_N), ha="center", va="bottom")
    top += 0.3
    for block, first_row in enumerate(range(0, LOOP_N, BLOCK_M)):
        y = top + block * TILE
        visits = _visits(first_row, window)
        kinds = dict(visits)
        fills = [[FILLS.get(kinds.get(j * BLOCK_N)) for j in range(tiles)]]
        cells(ax, left, y, fills, TILE)
        for order, (tile, _) in enumerate(visits, start=1):
            ax.text(
                left + (tile // BLOCK_N + 0.5) * TILE, y + TILE / 2, order, ha="center", va="center"
            )
        label = f"queries {first_row}-{first_row + BLOCK_M - 1}"
        ax.text(left - 0.08, y + TILE / 2, label, ha="right", va="center")
        ax.text(left + tiles * TILE + 0.1, y + TILE / 2, r"→ acc / $\ell$", va="center")
    return top + LOOP_N // BLOCK_M * TILE


def kernel_loop() -> Figure:
    """One program per block of queries, each walking its key tiles in order with its running m, ℓ, acc."""
    fig, ax = canvas(5.5, 6.0)
    lines = (
        f"One program per {BLOCK_M} queries (a row), all in parallel.",
        f"Each walks its tiles of {BLOCK_N} keys in the numbered order,",
        r"carrying its running $m$, $\ell$ and acc from tile to tile.",
    )
    ax.text(0.1, 0.1, "\n".join(lines), va="top", linespacing=1.4)
    y = 0.85
    for title, window in LOOP_MASKS.items():
        y = _loop_panel(ax, y, title, window) + 0.3
    legend = (("C0", "no mask"), ("C1", "masked"), (None, "never loaded"))
    x = 0.3
    for fill, label in legend:
        cells(ax, x, y, [[fill]], TILE * 0.8)
        ax.text(x + TILE, y + TILE * 0.4, label, va="center")
        x += 1.5
    crop(fig, ax, y + TILE + 0.1)
    return fig


FIGURES = {
    "flash-attention-tiles": tile_maps,
    "flash-attention-h100-full": lambda: h100_speed(causal=False),
    "flash-attention-h100-causal": lambda: h100_speed(causal=True),
    "flash-attention-loop": kernel_loop,
}
