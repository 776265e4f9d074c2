"""Figures for the post "Sparse attention that learns where to look", drawn from the recorded run.

`sparse-attention-mass`: per layer of the site's GPT, the share of its dense attention (averaged over the
heads and the queries with more than K keys) that K keys per query hold, for each way of choosing them: the
top-K by the dense attention itself (the ceiling), the distilled indexer's top-K, the last K keys and K
random keys; one panel per K, the mean over seeds as a bar and each seed as a dot. Reads
`qkv_lab.results.recorded("sparse-attention")`; nothing is trained at build time.
"""

import statistics

from matplotlib.figure import Figure

from qkv_lab.results import recorded
from qkv_lab.sparse_run import SCHEMES

NAMES = {
    "ceiling": "top-K by the attention",
    "indexer": "indexer's top-K",
    "window": "last K keys",
    "random": "K random keys",
}


def mass() -> Figure:
    """Grouped bars: layers along x, one bar per scheme, one panel per K."""
    report = recorded("sparse-attention")
    top_ks = report["settings"]["top_ks"]
    fig = Figure(figsize=(5.5, 3.8), layout="constrained")
    axes = fig.subplots(1, len(top_ks), sharey=True)
    width = 0.8 / len(SCHEMES)
    for ax, top_k in zip(axes, top_ks, strict=True):
        per_scheme = report["top_k"][str(top_k)]["mass"]
        for index, scheme in enumerate(SCHEMES):
            per_seed = per_scheme[scheme]  # (seeds, layers)
            layers = range(len(per_seed[0]))
            xs = [layer + (index - 1.5) * width for layer in layers]
            means = [statistics.mean(v) for v in zip(*per_seed, strict=True)]
            ax.bar(xs, means, width, color=f"C{index}", label=NAMES[scheme])
            for seed in per_seed:
                ax.plot(xs, seed, "o", color="C7", markersize=2)
        ax.set_xticks(list(layers), [f"layer {layer}" for layer in layers])
        ax.set_title(f"K = {top_k}")
        ax.set_ylim(0, 1)
        ax.grid(True, axis="y")
    axes[0].set_ylabel("share of the dense attention held")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncols=2)
    return fig


FIGURES = {"sparse-attention-mass": mass}
