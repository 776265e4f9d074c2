"""Figures for the post "Long context in practice", drawn from the recorded sweep, never trained at build time.

`long-context-streaming`: bits per byte against the position in a stream of 8 contexts, by bucket of 128
positions, for the site GPT decoded through a sliding cache of one context (without and with its first 4
bytes kept), and for the model with learned sinks through the sliding cache; the mean over seeds, each seed
faint. (The recomputed window, predicted at one byte in eight, is left out: a bucket of it averages an
eighth of the bytes, and differs from the others by its sample as much as by its method.) `long-context-rope`: bits per byte at 1x, 2x and 4x
the context under each RoPE scaling rule, as trained and after the fine-tune at 4x; the mean over seeds, a
bar from the lowest seed to the highest. Both read `qkv_lab.results.recorded("long-context")`.
"""

import statistics

from matplotlib.figure import Figure

from qkv_lab.results import recorded


def streaming() -> Figure:
    """Loss by position bucket, one line per way of holding the stream."""
    report = recorded("long-context")
    settings = report["settings"]
    plain, sinks = report["models"]["plain"]["streaming"], report["models"]["sinks"]["streaming"]
    kept = f"first {settings['kept']} kept"
    lines = [
        ("sliding window", plain["sliding window"], "C3", "-", "o"),
        (f"{kept} (StreamingLLM)", plain[kept], "C0", "--", "s"),
        ("learned sinks, sliding window", sinks["sliding window"], "C2", "-.", "^"),
    ]
    bucket = settings["bucket"]
    fig = Figure(figsize=(5.5, 4.0), layout="constrained")
    ax = fig.subplots()
    for label, per_seed, color, style, marker in lines:
        starts = [i * bucket for i in range(len(per_seed[0]))]
        for seed in per_seed:
            ax.plot(starts, seed, color=color, linestyle=style, alpha=0.25, linewidth=1)
        mean = [statistics.mean(values) for values in zip(*per_seed, strict=True)]
        ax.plot(starts, mean, color=color, linestyle=style, marker=marker, label=label)
    ax.axvline(settings["window"], color="C7", linewidth=1)
    ax.annotate(
        " the cache is full",
        (settings["window"], 1),
        xycoords=("data", "axes fraction"),
        va="top",
    )
    ax.set_xlabel(f"position in the stream (buckets of {bucket} bytes)")
    ax.set_ylabel("bits per byte")
    ax.set_title(f"A stream of {settings['stream']} bytes, a cache of {settings['window']}")
    fig.legend(loc="outside lower center", ncols=2)
    ax.grid(True)
    return fig


def rope() -> Figure:
    """Bits per byte against the length for each rule: as trained, and fine-tuned at the longest length."""
    report = recorded("long-context")
    lengths = report["settings"]["lengths"]
    fig = Figure(figsize=(5.5, 5.2), layout="constrained")
    axes = fig.subplots(1, 2, sharey=True)
    panels = (("as_trained", "as trained"), ("fine_tuned", f"fine-tuned at {lengths[-1]}"))
    for ax, (key, title) in zip(axes, panels, strict=True):
        for index, (name, rule) in enumerate(report["rope"].items()):
            per_seed = rule[key]
            means = [statistics.mean(values) for values in zip(*per_seed, strict=True)]
            lows = [m - min(v) for m, v in zip(means, zip(*per_seed, strict=True), strict=True)]
            highs = [max(v) - m for m, v in zip(means, zip(*per_seed, strict=True), strict=True)]
            ax.errorbar(
                lengths, means, yerr=[lows, highs], marker="os^vDP"[index], color=f"C{index}",
                label=name, capsize=2,
            )  # fmt: skip
        ax.set_xscale("log", base=2)
        ax.set_xticks(lengths, [f"{length // lengths[0]}x" for length in lengths])
        ax.set_title(title)
        ax.set_xlabel(f"length (x {lengths[0]})")
        ax.grid(True)
    axes[0].set_ylabel("validation bits per byte")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncols=3)
    return fig


FIGURES = {"long-context-streaming": streaming, "long-context-rope": rope}
