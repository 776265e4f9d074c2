"""Figures for the post "Additive vs dot-product attention".

`additive-vs-dot-product-time`: one forward pass of each classic module, timed on this machine's CPU when
the site is built; the machine, torch version, thread count and date are printed in the title.
`additive-vs-dot-product-weights`: the weights of the four scores for the same queries and keys.
"""

import datetime
import functools
import platform
import time

import torch
from matplotlib.figure import Figure

from qkv import AdditiveAttention, LuongAttention

BATCH, DIM = 4, 64  # hidden = DIM for the additive module
LENGTHS = (32, 64, 128, 256)  # L = S
REPEATS = 7


def _cpu_name() -> str:
    """The CPU model from /proc/cpuinfo where there is one, else what `platform` knows."""
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _seconds(module: torch.nn.Module, query: torch.Tensor, keys: torch.Tensor) -> float:
    """Wall-clock seconds of one forward pass."""
    start = time.perf_counter()
    module(query, keys, keys)
    return time.perf_counter() - start


@functools.cache  # timed once per build: the light and the dark figure show the same run
def _best_seconds() -> tuple[tuple[str, ...], dict[tuple[str, int], float]]:
    """The modules' names and the fastest seconds of each (name, length) point.

    Every (module, length) point is timed once per round, round after round, so that a stall of the machine
    spoils one sample of a few points rather than every sample of one point; each point keeps its fastest.
    """
    torch.manual_seed(0)
    modules = {
        "additive (Bahdanau)": AdditiveAttention(DIM, DIM, DIM),
        "concat (Luong)": LuongAttention(DIM, score="concat"),
        "general (Luong)": LuongAttention(DIM, score="general"),
        "dot (Luong)": LuongAttention(DIM, score="dot"),
    }
    inputs = {n: torch.randn(BATCH, n, DIM) for n in LENGTHS}  # queries and keys alike
    samples = {(name, n): [] for name in modules for n in LENGTHS}
    with torch.inference_mode():
        for _ in range(1 + REPEATS):
            for (name, n), times in samples.items():
                times.append(_seconds(modules[name], inputs[n], inputs[n]))
    # the first round is a warm-up
    return tuple(modules), {point: min(times[1:]) for point, times in samples.items()}


def scoring_time() -> Figure:
    """Milliseconds per forward pass against sequence length, for additive and the three Luong scores."""
    modules, best = _best_seconds()
    fig = Figure(figsize=(5.5, 4.8), layout="constrained")
    ax = fig.add_subplot()
    for name in modules:
        ax.plot(LENGTHS, [1e3 * best[name, n] for n in LENGTHS], marker="o", label=name)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("sequence length L = S")
    ax.set_ylabel(f"ms per forward pass (best of {REPEATS})")
    fig.legend(loc="outside lower center", ncols=2)
    ax.grid(True, which="both")
    today = datetime.date.today().isoformat()
    fig.suptitle(
        f"B = {BATCH}, d = hidden = {DIM}, float32 on CPU, measured at build time\n"
        f"{_cpu_name()}\ntorch {torch.__version__}, {torch.get_num_threads()} threads, {today}",
        fontsize="medium",
    )
    return fig


def classic_weights() -> Figure:
    """Heat maps, two by two, of the (L, S) weights that each score gives the same random queries and keys."""
    torch.manual_seed(0)
    length, source, dim = 6, 8, 16
    query, keys = torch.randn(1, length, dim), torch.randn(1, source, dim)
    modules = {
        "additive": AdditiveAttention(dim, dim, dim),
        "dot": LuongAttention(dim, score="dot"),
        "general": LuongAttention(dim, score="general"),
        "concat": LuongAttention(dim, score="concat"),
    }
    fig = Figure(figsize=(5.5, 4.4), layout="constrained")
    axes = fig.subplots(2, 2, sharex=True, sharey=True)
    with torch.no_grad():
        for ax, (name, module) in zip(axes.flat, modules.items(), strict=True):
            _, weights = module(query, keys, keys)
            image = ax.imshow(weights[0].numpy(), vmin=0, vmax=1)
            ax.set_title(name)
    for ax in axes[1]:
        ax.set_xlabel("key j")
    for ax in axes[:, 0]:
        ax.set_ylabel("query i")
    fig.colorbar(image, ax=axes, shrink=0.8, label="weight")
    return fig


FIGURES = {
    "additive-vs-dot-product-time": scoring_time,
    "additive-vs-dot-product-weights": classic_weights,
}
