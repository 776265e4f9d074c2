"""Figures for the post "Efficient attention".

`efficient-attention-scaling`: time and peak memory against N for every method, from the benchmark recorded in
`src/qkv_lab/results/efficient-attention.json` by `python -m qkv_lab.efficient_bench` (device, torch and date in the title).
`efficient-attention-patterns`: the four sparse patterns of `qkv.sparse_mask` at N = 32 as 0/1 grids, with the
8 x 8 tiles that `qkv.block_layout` keeps shaded. `efficient-attention-performer`: Performer's error against the
number of random features (`qkv_lab.efficient_bench.performer_errors`). `efficient-attention-tradeoff`: each
method's error on the two families of inputs against its recorded time at N = 4096. The errors are those of
seed 0 (inputs and random matrices), the seed the post names; it asserts all five. The lab keeps them on disk
(`qkv_lab.remember`): the dark figure reuses the light one's, and the trade-off reuses the post's.
"""

import matplotlib
import torch
from _style import kinds_cmap
from matplotlib.figure import Figure

import qkv
from qkv_lab import efficient_bench
from qkv_lab.results import recorded

STYLE = {  # one colour of the cycle and one marker per method, the same in every figure
    "exact": ("C6", "o"),
    "torch-sdpa": ("C7", "x"),
    "window-as-mask": ("C5", "x"),
    "sliding-window": ("C0", "s"),
    "block-sparse": ("C9", "D"),
    "axial": ("C4", "v"),
    "linear": ("C2", "^"),
    "linear-causal": ("C8", "^"),
    "performer": ("C1", "P"),
    "linformer": ("C3", "*"),
}
TRADEOFF_N = 4096


def _report() -> dict:
    return recorded("efficient-attention")


def _subtitle(report: dict) -> str:
    env = report["environment"]
    return f"{env['device_name']}, {env['cpu_threads']} thread, torch {env['torch']}, {env['date_utc'][:10]}"


def scaling() -> Figure:
    """Two log-log panels: milliseconds and peak MiB against N, a line per method."""
    report = _report()
    fig = Figure(figsize=(5.5, 8.4), layout="constrained")
    time_ax, memory_ax = fig.subplots(2, 1, sharex=True)
    for method, (colour, marker) in STYLE.items():
        rows = [row for row in report["results"] if row["method"] == method]
        ns = [row["n"] for row in rows]
        time_ax.plot(ns, [row["ms"] for row in rows], marker=marker, color=colour, label=method)
        memory_ax.plot(
            ns, [row["peak_memory_bytes"] / 2**20 for row in rows], marker=marker, color=colour
        )
    for ax, label in ((time_ax, "time per call (ms)"), (memory_ax, "peak memory (MiB)")):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_ylabel(label)
        ax.grid(True, which="major")
    memory_ax.set_xlabel("sequence length N")
    shape = report["shape"]
    time_ax.set_title(
        f"Forward pass, B={shape['batch']}, H={shape['heads']}, D={shape['head_dim']}, "
        f"{shape['dtype']}\n{_subtitle(report)}",
        fontsize="medium",
    )
    fig.legend(loc="outside lower center", ncols=3)
    return fig


def patterns() -> Figure:
    """The four patterns at N = 32 in a 2 x 2 grid; kept tiles of 8 x 8 shaded behind the kept pairs."""
    n, block = 32, 8
    generator = torch.Generator().manual_seed(0)
    masks = {
        "strided (stride 4)": qkv.sparse_mask("strided", n, 4),
        "fixed (block 4)": qkv.sparse_mask("fixed", n, 4),
        "longformer (band ±2, 1 global)": qkv.sparse_mask("longformer", n, 2, num_global=1),
        "bigbird (+ 2 random keys)": qkv.sparse_mask(
            "bigbird", n, 2, num_global=1, num_random=2, generator=generator
        ),
    }
    fig = Figure(figsize=(5.5, 6.8), layout="constrained")
    cmap = kinds_cmap(3)
    axes = fig.subplots(2, 2, sharex=True, sharey=True)
    counts = []
    for ax, (title, mask) in zip(axes.flat, masks.items(), strict=True):
        tiles = (
            qkv.block_layout(mask, block).repeat_interleave(block, 0).repeat_interleave(block, 1)
        )
        picture = tiles.int() + mask.int()  # 0 skipped, 1 computed but masked, 2 kept
        ax.imshow(picture.numpy(), cmap=cmap, vmin=0, vmax=2)
        computed = int(qkv.block_layout(mask, block).sum())
        counts.append(computed)
        ax.set_title(f"{title}\n{computed} of {(n // block) ** 2} tiles computed")
        ax.set_xticks(range(0, n, block))
        ax.set_yticks(range(0, n, block))
        for edge in range(block, n, block):
            ax.axhline(edge - 0.5, color=matplotlib.rcParams["axes.facecolor"], linewidth=1)
            ax.axvline(edge - 0.5, color=matplotlib.rcParams["axes.facecolor"], linewidth=1)
    for ax in axes[1]:
        ax.set_xlabel("key j")
    for ax in axes[:, 0]:
        ax.set_ylabel("query i")
    assert counts == [10, 10, 14, 16], counts  # the alt text: tiles computed of 16
    return fig


PERFORMER_FEATURES = [16, 64, 256, 1024, 4096]


def performer() -> Figure:
    """Relative error against M, iid and orthogonal features, with the 1/sqrt(M) slope and the averaging baseline."""
    n = 512
    fig = Figure(figsize=(5.5, 4.8), layout="constrained")
    ax = fig.subplots()
    for orthogonal, marker in ((False, "o"), (True, "s")):
        errors = efficient_bench.performer_errors(
            n, PERFORMER_FEATURES, orthogonal=orthogonal, seed=0
        )
        label = "orthogonal features" if orthogonal else "independent features"
        ax.plot(PERFORMER_FEATURES, errors, marker=marker, label=label)
    last = errors[
        -1
    ]  # the 1/sqrt(M) line through the last point, where the estimate is in its regime
    slope = [last * (PERFORMER_FEATURES[-1] / m) ** 0.5 for m in PERFORMER_FEATURES]
    ax.plot(PERFORMER_FEATURES, slope, color="C7", linestyle="--", label=r"$\propto 1/$√$M$")
    baseline = efficient_bench.relative_errors(n, "diffuse", seed=0)["mean-of-values"]
    at_1024 = errors[PERFORMER_FEATURES.index(1024)]  # the orthogonal features'
    assert abs(at_1024 - baseline) < 0.02, (at_1024, baseline)  # the alt text: level near M = 1024
    ax.axhline(baseline, color="C3", linestyle=":", label="mean of the values")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("random features M")
    ax.set_ylabel("|out - exact| / |exact|")
    ax.set_title(f"Performer (FAVOR+) on diffuse inputs,\nN={n}, D=64, seed 0")
    fig.legend(loc="outside lower center", ncols=2)
    ax.grid(True, which="major")
    return fig


def tradeoff() -> Figure:
    """Two panels (local, diffuse inputs): relative error against recorded time at N = 4096."""
    report = _report()
    ms = {row["method"]: row["ms"] for row in report["results"] if row["n"] == TRADEOFF_N}
    fig = Figure(figsize=(5.5, 9.0), layout="constrained")
    for ax, kind in zip(fig.subplots(2, 1, sharex=True), ("local", "diffuse"), strict=True):
        errors = dict(efficient_bench.relative_errors(TRADEOFF_N, kind, seed=0))
        ax.axhline(
            errors.pop("mean-of-values"), color="C7", linestyle=":", label="mean of the values"
        )
        ax.axvline(ms["exact"], color=STYLE["exact"][0], linestyle="--", label="exact (error 0)")
        for method, error in errors.items():
            colour, marker = STYLE[method]
            ax.plot(ms[method], error, marker=marker, color=colour, markersize=9, linestyle="")
            below = method == "linear-causal"  # its neighbour "performer" is labelled above
            ax.annotate(
                method,
                (ms[method], error),
                textcoords="offset points",
                xytext=(6, -14 if below else 4),
            )
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.margins(x=0.3, y=0.25)
        ax.set_ylabel("|out - exact| / |exact|")
        ax.set_title(f"{kind} inputs, N={TRADEOFF_N}, seed 0")
        ax.grid(True, which="major")
    fig.legend(*ax.get_legend_handles_labels(), loc="outside lower center", ncols=2)
    ax.set_xlabel(f"recorded time per call (ms),\n{_subtitle(report)}")
    return fig


FIGURES = {
    "efficient-attention-scaling": scaling,
    "efficient-attention-patterns": patterns,
    "efficient-attention-performer": performer,
    "efficient-attention-tradeoff": tradeoff,
}
