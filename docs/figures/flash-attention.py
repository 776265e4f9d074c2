"""Figures for the post "FlashAttention from scratch".

`flash-attention-tiles`: what the forward kernel does with each tile of 128 queries by 64 keys, for 1024
queries and keys, causal and with a window of 256: never loaded, computed without a mask, or masked; the
classes come from `qkv.kernels.tiles`, the functions the kernel itself calls.

`flash-attention-cpu`: `qkv.bench` run on the CPU of the machine that builds the site, at build time, for the
paths that run there (the explicit reference and torch's math and flash backends; the Triton kernel needs
CUDA). The title carries the processor, the torch version and the UTC date of the run.
"""

from matplotlib.colors import ListedColormap
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from qkv import bench
from qkv.kernels.tiles import classify_tiles

N, BLOCK_M, BLOCK_N = 1024, 128, 64
KINDS = {
    "empty": "#f2f2f2",
    "partial": "#8fb3dd",
    "full": "#1f5fa8",
}  # never loaded, masked, no mask

CPU_RUN = [
    *("--device", "cpu", "--n", "128", "256", "512", "--head-dim", "64", "--dtype", "fp32"),
    *("--causal", "no", "--mode", "forward", "--tokens", "1024", "--hidden", "256"),
    *("--paths", "reference", "torch-math", "torch-flash"),
]


def tile_maps() -> Figure:
    """Two grids of tiles, causal and a window of 256, coloured by what the kernel does with each."""
    masks = {"causal": {"causal": True}, "window of 256": {"causal": True, "window": 256}}
    fig = Figure(figsize=(7.2, 3.4), layout="constrained")
    axes = fig.subplots(1, len(masks))
    kinds = list(KINDS)
    for ax, (title, mask) in zip(axes, masks.items(), strict=True):
        classes = classify_tiles(N, N, BLOCK_M, BLOCK_N, **mask)
        grid = [[kinds.index(kind) for kind in row] for row in classes]
        ax.imshow(grid, cmap=ListedColormap(list(KINDS.values())), vmin=0, vmax=2)
        computed = sum(kind != "empty" for row in classes for kind in row)
        ax.set_title(f"{title}: {computed} of {len(grid) * len(grid[0])} tiles", fontsize=10)
        ax.set_xticks(
            range(0, N // BLOCK_N, 4), [f"{j * BLOCK_N}" for j in range(0, N // BLOCK_N, 4)]
        )
        ax.set_yticks(range(N // BLOCK_M), [f"{i * BLOCK_M}" for i in range(N // BLOCK_M)])
        ax.set_xticks([x - 0.5 for x in range(1, N // BLOCK_N)], minor=True)
        ax.set_yticks([y - 0.5 for y in range(1, N // BLOCK_M)], minor=True)
        ax.grid(which="minor", color="white", linewidth=1)
        ax.tick_params(which="minor", length=0)
        ax.set_xlabel("first key of the tile")
    axes[0].set_ylabel("first query of the tile")
    labels = {"empty": "never loaded", "partial": "masked", "full": "no mask"}
    handles = [Patch(color=color, label=labels[kind]) for kind, color in KINDS.items()]
    fig.legend(handles=handles, loc="outside lower center", ncols=3, frameon=False)
    return fig


def cpu_benchmark() -> Figure:
    """Forward TFLOP/s against N on this machine's CPU, float32, D = 64, no mask."""
    report = bench.run(bench.parse_args(CPU_RUN), progress=None)
    return bench.draw(report, mode="forward", dtype="fp32", head_dim=64, causal=False)


FIGURES = {"flash-attention-tiles": tile_maps, "flash-attention-cpu": cpu_benchmark}
