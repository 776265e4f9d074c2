"""Figures for the post "FlashAttention from scratch".

`flash-attention-tiles`: what the forward kernel does with each tile of 128 queries by 64 keys, for 1024
queries and keys, causal and with a window of 256: never loaded, computed without a mask, or masked; the
classes come from `qkv.kernels.tiles`, the functions the kernel itself calls.

`flash-attention-cpu`: `qkv.bench` run on the CPU of the machine that builds the site, at build time, for the
paths that run there (the explicit reference and torch's math and flash backends; the Triton kernel needs
CUDA). The title carries the processor, the torch version and the UTC date of the run.
"""

import functools

import matplotlib
from matplotlib.figure import Figure
from matplotlib.patches import Patch
from style import kinds_cmap

from qkv import bench
from qkv.kernels.tiles import classify_tiles

N, BLOCK_M, BLOCK_N = 1024, 128, 64
KINDS = {"empty": "never loaded", "partial": "masked", "full": "no mask"}  # from faint to strong

CPU_RUN = [
    *("--device", "cpu", "--n", "128", "256", "512", "--head-dim", "64", "--dtype", "fp32"),
    *("--causal", "no", "--mode", "forward", "--tokens", "1024", "--hidden", "256"),
    *("--paths", "reference", "torch-math", "torch-flash"),
]


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


def cpu_benchmark() -> Figure:
    """Forward TFLOP/s against N on this machine's CPU, float32, D = 64, no mask."""
    figure = bench.draw(_cpu_report(), mode="forward", dtype="fp32", head_dim=64, causal=False)
    figure.set_size_inches(5.5, 4.2)
    return figure


@functools.cache  # run once per build: the light and the dark figure show the same run
def _cpu_report() -> dict:
    return bench.run(bench.parse_args(CPU_RUN), progress=None)


FIGURES = {"flash-attention-tiles": tile_maps, "flash-attention-cpu": cpu_benchmark}
