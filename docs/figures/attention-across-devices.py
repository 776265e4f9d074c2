"""Figures for the post "Attention across devices".

`attention-across-devices-ring`: `qkv.ring_schedule` for 4 ranks, without and with the causal mask: which
rank's key and value block each rank attends to at each step, and the steps that compute nothing.
`attention-across-devices-communication`: the recorded run of `python -m qkv_lab.ring_bench`
(`src/qkv_lab/results/attention-across-devices.json`): the ring's time, its computation alone and its communication alone
against N, for 2 and 4 processes.
"""

import matplotlib
from _style import ink_on, on_page
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

import qkv
from qkv_lab.results import recorded

WORLD = 4


def ring() -> Figure:
    """Two grids of ranks x steps; each cell names the block attended, coloured by its owner."""
    fig = Figure(figsize=(5.5, 7.4), layout="constrained")
    for ax, causal in zip(fig.subplots(2, 1), (False, True), strict=True):
        schedule = qkv.ring_schedule(WORLD, causal)
        for rank, sources in enumerate(schedule):
            for step, source in enumerate(sources):
                if source is None:
                    face, text = on_page(matplotlib.rcParams["text.color"], 0.1), "skip"
                else:
                    face = f"C{source}"  # one colour per block owner
                    text = f"K{source}V{source}" + ("\n(tril)" if causal and source == rank else "")
                ax.add_patch(_cell(step, rank, face))
                ax.text(step, rank, text, ha="center", va="center", color=ink_on(face))
        ax.set_xlim(-0.5, WORLD - 0.5)
        ax.set_ylim(WORLD - 0.5, -0.5)
        ax.set_xticks(range(WORLD))
        ax.set_yticks(range(WORLD), [f"rank {r}" for r in range(WORLD)])
        ax.set_xlabel("step")
        ax.set_aspect("equal")
        ax.tick_params(length=0)
        ax.spines[:].set_visible(False)
        computed = sum(source is not None for row in schedule for source in row)
        title = "causal" if causal else "full"
        ax.set_title(f"{title}: {computed} of {WORLD * WORLD} blocks computed")
    return fig


def _cell(x: float, y: float, face: str) -> Rectangle:
    return Rectangle((x - 0.48, y - 0.48), 0.96, 0.96, facecolor=face, edgecolor="none")


def communication() -> Figure:
    """Milliseconds against N per world size: the ring, computation alone, communication alone."""
    report = recorded("attention-across-devices")
    worlds = sorted({row["world"] for row in report["results"]})
    fig = Figure(figsize=(5.5, 3.4 * len(worlds) + 1.6), layout="constrained")
    for ax, world in zip(fig.subplots(len(worlds), 1, sharex=True), worlds, strict=True):
        rows = [row for row in report["results"] if row["world"] == world]
        ns = [row["n"] for row in rows]
        for key, label, marker in (
            ("ring_ms", "ring attention", "o"),
            ("compute_ms", "its computation alone", "s"),
            ("communication_ms", "its communication alone", "^"),
        ):
            ax.plot(ns, [row[key] for row in rows], marker=marker, label=label)
        for row in rows:
            share = row["communication_share"]
            ax.annotate(
                f"{share:.1%}",
                (row["n"], row["communication_ms"]),
                textcoords="offset points",
                xytext=(0, 8),
                ha="center",
            )
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_ylabel("ms, slowest rank")
        ax.set_title(f"{world} processes, gloo", fontsize="medium")
        ax.grid(True, which="major")
    fig.legend(*ax.get_legend_handles_labels(), loc="outside lower center", ncols=2)
    ax.set_xlabel("sequence length N (whole sequence;\neach rank holds N / world)")
    env, shape = report["environment"], report["shape"]
    fig.suptitle(
        f"Forward, B={shape['batch']}, H={shape['heads']}, D={shape['head_dim']}, {shape['dtype']};\n"
        f"percentages: communication share\n{env['device_name']},\n1 thread per process, "
        f"torch {env['torch']}, {env['date_utc'][:10]}",
        fontsize="medium",
    )
    return fig


FIGURES = {
    "attention-across-devices-ring": ring,
    "attention-across-devices-communication": communication,
}
