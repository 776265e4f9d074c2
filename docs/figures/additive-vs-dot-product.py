"""Figures for the post "Additive vs dot-product attention".

`additive-vs-dot-product-time`: one forward pass of each classic module and of each stage of the additive
score, read from the run that `python -m qkv_lab.classic_bench` recorded (`qkv_lab.results.recorded`), with that run's
device, torch version, thread count and date in the title.
`additive-vs-dot-product-weights`: the weights of the four scores for the same queries and keys.
`additive-vs-dot-product-alignment`: the alignment that `qkv_lab.toys.train_aligner` learns on the reverse task
(seed 0, on the first of the test sequences that `measure_aligner` measures every seed on).
"""

import functools

import torch
from matplotlib.figure import Figure

from qkv import AdditiveAttention, LuongAttention
from qkv_lab.results import recorded
from qkv_lab.toys import TEST_SEED, reverse_task, train_aligner

LABELS = {
    "additive": "additive (Bahdanau)",
    "concat": "concat (Luong)",
    "general": "general (Luong)",
    "dot": "dot (Luong)",
}

# trained once per build, however many times (colour schemes) the figure is drawn
_trained = functools.cache(train_aligner)


def scoring_time() -> Figure:
    """Milliseconds per forward pass against N (top), and the additive score's stages at the longest N."""
    report = recorded("additive-vs-dot-product")
    env, shape = report["environment"], report["shape"]
    lengths = sorted({row["n"] for row in report["results"]})
    ms = {(row["module"], row["n"]): row["ms"] for row in report["results"]}
    longest = lengths[-1]
    stages = {row["stage"]: row["ms"] for row in report["additive_stages"] if row["n"] == longest}

    fig = Figure(figsize=(5.5, 7.0), layout="constrained")
    top, bottom = fig.subplots(2, 1, height_ratios=(3, 2))
    for module, label in LABELS.items():
        top.plot(lengths, [ms[module, n] for n in lengths], marker="o", label=label)
    top.set_xscale("log", base=2)
    top.set_yscale("log")
    top.set_xticks(lengths, [str(n) for n in lengths])
    top.set_xlabel("sequence length N = L = S")
    top.set_ylabel("ms per forward pass")
    top.legend()
    top.grid(True, which="both", alpha=0.3)

    names = [*stages, "dot: whole forward"]
    bottom.barh(names, [*stages.values(), ms["dot", longest]], color=["C0"] * len(stages) + ["C3"])
    bottom.invert_yaxis()
    bottom.set_xscale("log")
    bottom.set_xlabel(f"ms at N = {longest}")
    bottom.set_title("additive score, stage by stage")
    date = env["date_utc"][:10]
    threads = f"{env['cpu_threads']} thread" + ("s" if env["cpu_threads"] > 1 else "")
    fig.suptitle(
        f"B = {shape['batch']}, d = hidden = {shape['dim']}, {shape['dtype']}\n"
        f"{env['device_name']} CPU, {threads}, torch {env['torch']}, {date}"
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
    top = {}  # the mean over the queries of each one's largest weight
    with torch.no_grad():
        for ax, (name, module) in zip(axes.flat, modules.items(), strict=True):
            _, weights = module(query, keys, keys)
            top[name] = weights[0].max(dim=-1).values.mean().item()
            image = ax.imshow(weights[0].numpy(), vmin=0, vmax=1)
            ax.set_title(name)
    # the caption: additive and concat nearly uniform (1/8 a key), dot sharply peaked, general between
    assert max(top["additive"], top["concat"]) < 0.2 < top["general"] < 0.6 < top["dot"], top
    for ax in axes[1]:
        ax.set_xlabel("key j")
    for ax in axes[:, 0]:
        ax.set_ylabel("query i")
    fig.colorbar(image, ax=axes, shrink=0.8, label="weight")
    return fig


def learned_alignment() -> Figure:
    """The weights of the trained `ReverseAligner` on one test sequence: output steps by source tokens."""
    model = _trained()
    source, target = reverse_task(1, 8, 10, torch.Generator().manual_seed(TEST_SEED))
    with torch.no_grad():
        _, weights = model(source)  # (1, S, S)
    fig = Figure(figsize=(4.5, 4.0), layout="constrained")
    ax = fig.add_subplot()
    image = ax.imshow(weights[0].numpy(), vmin=0, vmax=1)
    positions = range(source.shape[-1])
    ax.set_xticks(positions, [str(t) for t in source[0].tolist()])
    ax.set_yticks(positions, [str(t) for t in target[0].tolist()])
    ax.set_xlabel("source token (position 0 to 7)")
    ax.set_ylabel("output token (step 0 to 7)")
    fig.colorbar(image, ax=ax, label="weight")
    return fig


FIGURES = {
    "additive-vs-dot-product-time": scoring_time,
    "additive-vs-dot-product-weights": classic_weights,
    "additive-vs-dot-product-alignment": learned_alignment,
}
