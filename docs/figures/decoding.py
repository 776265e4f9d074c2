"""Figures for the post "Decoding with a KV cache", and the benchmark behind the last one.

`decoding-masks`: the masks of a prefill of 4 tokens, a chunk of 2 more, and one decoded token, each as a 0/1
grid of `qkv.causal_mask(..., alignment="bottom_right")`. `decoding-cache-memory`: the KV cache per token of
four published model configurations (the post's table). `decoding-step-time`: the time of one decoding step
with and without a cache against the context length, read from `src/qkv_lab/results/decoding.json` (`qkv_lab.results.recorded`), which

    python docs/figures/decoding.py

records (CPU, torch and Python versions, thread count and date beside the numbers). The benchmark runs
outside the build on purpose: a timing taken while the site builds is as noisy as the machine is busy. Keep
the model in step with the post's `TinyDecoder`.
"""

import json
import statistics
import time
from pathlib import Path

import torch
from _style import kinds_cmap, label_cells
from matplotlib.figure import Figure
from matplotlib.ticker import NullFormatter, ScalarFormatter
from torch import nn

import qkv
from qkv_lab.harness import environment
from qkv_lab.results import recorded

BENCHMARK = (
    Path(__file__).parents[2] / "src" / "qkv_lab" / "results" / "decoding.json"
)  # where it is written
CONTEXTS = (64, 128, 256, 512, 1024)
REPEATS = 15

# (layers, KV heads, elements cached per head and token); see the post for the sources
CONFIGS = {
    "Llama 2 7B (MHA)": (32, 32, 2 * 128),
    "Llama 2 70B (GQA, 8 KV heads)": (80, 8, 2 * 128),
    "Falcon-7B (MQA)": (32, 1, 2 * 64),
    "DeepSeek-V2 (MLA)": (60, 1, 512 + 64),
    "DeepSeek-V2's shape with MHA": (60, 128, 2 * 128),
}


def masks() -> Figure:
    """Prefill of 4, a chunk of 2, one decoded token, stacked: the bottom-right causal masks, new rows only."""
    steps = {
        "prefill: 4 new, 0 cached": qkv.causal_mask(4, 4, alignment="bottom_right"),
        "chunk: 2 new, 4 cached": qkv.causal_mask(2, 6, alignment="bottom_right"),
        "decode: 1 new, 6 cached": qkv.causal_mask(1, 7, alignment="bottom_right"),
    }
    fig = Figure(figsize=(5.5, 6.6), layout="constrained")
    axes = fig.subplots(len(steps), 1, sharex=True, height_ratios=[4, 2, 1])  # keys aligned
    for ax, (title, mask) in zip(axes, steps.items(), strict=True):
        rows, cols = mask.shape
        image = ax.imshow(mask.int().numpy(), cmap=kinds_cmap(2), vmin=0, vmax=1)
        label_cells(ax, image, [[str(int(kept)) for kept in row] for row in mask.tolist()])
        ax.set_title(title)
        ax.set_yticks(range(rows), [str(cols - rows + i) for i in range(rows)])
        ax.tick_params(length=0, labelbottom=True)
        ax.spines[:].set_visible(False)
        ax.set_ylabel("query")
    axes[-1].set_xticks(range(cols))
    axes[-1].set_xlim(-0.5, cols - 0.5)
    axes[-1].set_xlabel("key position")
    return fig


def cache_memory() -> Figure:
    """KiB of cache per token in 16-bit precision, one bar per configuration, log scale."""
    kib = [layers * heads * per_head * 2 / 1024 for layers, heads, per_head in CONFIGS.values()]
    fig = Figure(figsize=(5.5, 3.8), layout="constrained")
    ax = fig.subplots()
    bars = ax.barh(list(CONFIGS), kib, color="C0")
    ax.bar_label(bars, [f"{k:,.1f}" for k in kib], padding=3)
    ax.set_xscale("log")
    ax.set_xlim(1, 100000)
    ax.xaxis.set_major_formatter(ScalarFormatter())
    ax.invert_yaxis()
    ax.set_xlabel("KiB per token, 16-bit (log scale)")
    ax.set_title("KV cache per token of context")
    ax.grid(True, axis="x")
    return fig


class TinyDecoder(nn.Module):
    """The post's decoder-only model: embeddings, learned positions, pre-LN blocks, a head."""

    def __init__(self, vocab=256, dim=128, heads=4, layers=4, max_len=1024) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.positions = nn.Embedding(max_len, dim)
        self.blocks = nn.ModuleList(qkv.TransformerBlock(dim, heads) for _ in range(layers))
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab)

    def forward(self, tokens: torch.Tensor, caches: list | None = None) -> torch.Tensor:
        start = 0 if caches is None else len(caches[0])
        x = self.embed(tokens) + self.positions(torch.arange(start, start + tokens.size(1)))
        for i, block in enumerate(self.blocks):
            x = block(x, is_causal=True, cache=None if caches is None else caches[i])
        return self.head(self.norm(x))


def _median_ms(step, repeats: int = REPEATS) -> float:
    step()  # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    return 1000 * statistics.median(times)


@torch.no_grad()
def benchmark() -> dict:
    """Time one decoding step at each context length T: the uncached step runs the model over T tokens, the
    cached step runs it over 1 token with T - 1 cached (copies of the caches, so every repeat sees T - 1)."""
    torch.manual_seed(0)
    model = TinyDecoder().eval()
    tokens = torch.randint(0, 256, (1, max(CONTEXTS)))
    uncached, cached = [], []
    for context in CONTEXTS:
        uncached.append(_median_ms(lambda c=context: model(tokens[:, :c])))
        caches = [qkv.KVCache() for _ in model.blocks]
        model(tokens[:, : context - 1], caches)

        def decode_step(c=context, full=caches):
            fresh = [qkv.KVCache() for _ in full]
            for mine, theirs in zip(fresh, full, strict=True):
                mine.key, mine.value = theirs.key, theirs.value  # no copy: update concatenates
            model(tokens[:, c - 1 : c], fresh)

        cached.append(_median_ms(decode_step))
    env = environment(torch.device("cpu"))  # the lab's record of where and when
    return {
        "what": "milliseconds per decoding step of the post's TinyDecoder (median of 15), batch 1",
        "model": {"vocab": 256, "dim": 128, "heads": 4, "layers": 4},
        "contexts": list(CONTEXTS),
        "uncached_ms": [round(ms, 3) for ms in uncached],
        "cached_ms": [round(ms, 3) for ms in cached],
        "cpu": env["device_name"],
        "threads": env["cpu_threads"],
        "torch": env["torch"],
        "python": env["python"],
        "date": env["date_utc"][:10],
    }


def step_time() -> Figure:
    """The recorded step times against the context length, log-log, with the machine in the title."""
    record = recorded("decoding")
    fig = Figure(figsize=(5.5, 4.2), layout="constrained")
    ax = fig.subplots()
    ax.plot(record["contexts"], record["uncached_ms"], "o-", label="no cache: the whole sequence")
    ax.plot(record["contexts"], record["cached_ms"], "s-", label="KV cache: one new token")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks(record["contexts"], [str(c) for c in record["contexts"]])
    ticks = [1, 2, 5, 10, 20, 50, 100, 200]
    ax.set_yticks(ticks, [str(t) for t in ticks])
    ax.yaxis.set_minor_formatter(NullFormatter())
    ax.set_ylim(1, 200)
    ax.set_xlabel("context length T (tokens)")
    ax.set_ylabel("time of one decoding step (ms)")
    ax.set_title(
        f"{record['cpu']}\n{record['threads']} thread, torch {record['torch']}, {record['date']}",
        fontsize="medium",
    )
    ax.legend()
    ax.grid(True, which="both")
    return fig


FIGURES = {
    "decoding-masks": masks,
    "decoding-cache-memory": cache_memory,
    "decoding-step-time": step_time,
}

if __name__ == "__main__":
    torch.set_num_threads(1)  # one thread: steadier on a shared machine, and recorded as such
    BENCHMARK.write_text(json.dumps(benchmark(), indent=2) + "\n")
    print(BENCHMARK.read_text())
