"""Figures for the post "Serving attention", drawn from the package and the lab when the site is built.

`serving-waste`: the slots a contiguous cache reserves for each request of `REQUEST_LENGTHS`, the slots its
pages hold and the tokens it uses. `serving-block-table`: the block tables of `shared_prompt_cache()` and the
reference count of each page of its pool. `serving-acceptance`: speculative decoding of the site GPT with the
draft (`acceptance_by_k()`, the run the page reads): the share of guesses kept and the target's forward
passes per token, against k.
"""

import math

import torch
from _style import kinds_cmap, label_cells
from matplotlib.figure import Figure

from qkv_lab.serving import (
    MAX_LENGTH,
    PAGE_SIZE,
    REQUEST_LENGTHS,
    acceptance_by_k,
    shared_prompt_cache,
)

SEQUENCES = ("prompt", "a", "b")  # the cache's sequences, one row each


def waste() -> Figure:
    """One bar per request: reserved by a contiguous cache, held by its pages, used."""
    fig = Figure(figsize=(5.5, 3.6), layout="constrained")
    ax = fig.subplots()
    rows = range(len(REQUEST_LENGTHS))
    paged = [PAGE_SIZE * math.ceil(n / PAGE_SIZE) for n in REQUEST_LENGTHS]
    ax.barh(rows, [MAX_LENGTH] * len(REQUEST_LENGTHS), color="C7", alpha=0.35, label="reserved")
    ax.barh(rows, paged, color="C1", label=f"in pages of {PAGE_SIZE}")
    ax.barh(rows, REQUEST_LENGTHS, color="C0", label="used")
    ax.set_yticks(rows, [f"{n} tokens" for n in REQUEST_LENGTHS])
    ax.invert_yaxis()
    ax.set_xlabel("cache slots per request")
    fig.legend(loc="outside upper center", ncols=3)
    return fig


def block_table() -> Figure:
    """Top: each sequence's block table (page numbers); bottom: the pool, each page with its readers."""
    cache = shared_prompt_cache()
    tables = [cache.block_table(name) for name in SEQUENCES]
    width = max(map(len, tables))
    references = cache.references.tolist()
    cmap = kinds_cmap(max(references) + 1)
    kinds = [[references[t[i]] if i < len(t) else 0 for i in range(width)] for t in tables]
    fig = Figure(figsize=(5.5, 3.8), layout="constrained")
    top, bottom = fig.subplots(2, 1, height_ratios=(3, 1.4))
    image = top.imshow(kinds, cmap=cmap, vmin=0, vmax=max(references))
    label_cells(
        top, image, [[str(t[i]) if i < len(t) else "" for i in range(width)] for t in tables]
    )
    top.set_yticks(range(len(SEQUENCES)), [f'"{name}"' for name in SEQUENCES])
    size = cache.page_size
    top.set_xticks(range(width), [f"{size * i}-{size * i + size - 1}" for i in range(width)])
    top.set_xlabel("tokens")
    top.set_aspect("auto")
    top.set_title("block tables: a page per stretch of tokens", loc="left")
    pool = bottom.imshow([references], cmap=cmap, vmin=0, vmax=max(references))
    label_cells(bottom, pool, [[str(r) if r else "free" for r in references]])
    bottom.set_xticks(range(len(references)))
    bottom.set_xlabel("page of the pool")
    bottom.set_yticks([])
    bottom.set_title("the pool: readers of each page", loc="left")
    return fig


def acceptance() -> Figure:
    """Two panels against k: the share of drafted tokens kept; the target's forward passes per token."""
    rows = acceptance_by_k()
    fig = Figure(figsize=(5.5, 5.0), layout="constrained")
    kept, forwards = fig.subplots(2, 1, sharex=True)
    for colour, mode in (("C0", "greedy"), ("C1", "sampled")):
        mine = [r for r in rows if r["mode"] == mode]
        ks = [r["k"] for r in mine]
        kept.plot(ks, [r["accepted"] / r["drafted"] for r in mine], "o-", color=colour, label=mode)
        forwards.plot(
            ks, [r["target_forwards"] / r["tokens"] for r in mine], "o-", color=colour, label=mode
        )
    ks = torch.arange(1, max(r["k"] for r in rows) + 1)
    forwards.axhline(1, color="C7", linestyle="--", label="without a draft")
    forwards.plot(ks, 1 / (ks + 1), ":", color="C7", label="every guess kept")
    kept.set_ylabel("guesses kept")
    kept.set_ylim(0, 1)
    kept.legend(loc="upper right")
    forwards.set_ylabel("target passes per byte")
    forwards.set_ylim(0, 1.6)
    forwards.set_xlabel("k, tokens drafted per round")
    forwards.legend(loc="upper right", ncols=2)
    for ax in (kept, forwards):
        ax.grid(True)
    return fig


FIGURES = {
    "serving-waste": waste,
    "serving-block-table": block_table,
    "serving-acceptance": acceptance,
}
