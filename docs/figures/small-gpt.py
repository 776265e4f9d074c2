"""Figures for the post "A small GPT, trained here", drawn from the trained site GPT when the site is built.

`small-gpt-loss`: the training loss of every step (`trained_site_gpt()`'s run), in bits per byte, with the
validation bits of the model and of the n-gram baselines (`site_report()`). `small-gpt-sampling`: the
next-byte distribution after one prompt, as each sampling rule reshapes or cuts it
(`qkv.gpt.next_token_probabilities`). `small-gpt-heads`: every head's attention map over `PASSAGE`
(`qkv_lab.gpt_attention.attention_maps`), the static figure under the interactive one; `DATA` gives the
same maps as JSON for it (docs/javascripts/widgets/attention-heads.js). Nothing is trained here but the one
remembered model.
"""

import math

import torch
from matplotlib.figure import Figure

from qkv.gpt import next_token_probabilities
from qkv_lab.gpt_attention import PASSAGE, attention_maps
from qkv_lab.gpt_training import decode, encode, site_report, trained_site_gpt

PROMPT = "The attention weights of each query sum to "  # the sampling figure's context
RULES = {  # label: the arguments of next_token_probabilities
    "temperature 1": {},
    "temperature 0.5": {"temperature": 0.5},
    "top-k, k = 3": {"top_k": 3},
    "top-p, p = 0.9": {"top_p": 0.9},
    "min-p, p = 0.2": {"min_p": 0.2},
}
SHOWN = 8  # bars per panel: the most probable bytes at temperature 1


def loss() -> Figure:
    """Training loss per step and its running mean over 50 steps; validation bits as horizontal lines."""
    _, run = trained_site_gpt()
    bits = torch.tensor(run["losses"]) / math.log(2)  # (steps,) nats -> bits
    mean = bits.unfold(0, 50, 1).mean(-1)  # (steps - 49,)
    report = site_report()
    fig = Figure(figsize=(5.5, 3.8), layout="constrained")
    ax = fig.subplots()
    ax.plot(bits, color="C0", alpha=0.3, linewidth=0.8)
    ax.plot(range(49, len(bits)), mean, color="C0", label="training, mean of 50 steps")
    for colour, name in zip(("C1", "C2", "C3"), ("unigram", "bigram", "trigram"), strict=True):
        ax.axhline(report[name], color=colour, linestyle="--", label=f"{name}, validation")
    ax.axhline(report["gpt"], color="C0", linestyle=":", label="GPT, validation")
    ax.set_ylim(0, 8.5)
    ax.set_xlabel("training step")
    ax.set_ylabel("bits per byte")
    ax.legend(loc="upper right", fontsize="medium")
    ax.grid(True)
    return fig


def _shown(text: str) -> str:
    """A byte as a label: its character, or a name for the invisible ones."""
    return {" ": "space", "\n": "newline"}.get(text, text)


def sampling() -> Figure:
    """One panel per rule: the probability of the `SHOWN` most probable next bytes after `PROMPT`."""
    model, _ = trained_site_gpt()
    with torch.no_grad():
        logits = model(encode(PROMPT)[None])[0, -1]  # (V,), the next byte's
    order = logits.argsort(descending=True)[:SHOWN]  # (SHOWN,)
    labels = [_shown(decode(order[i : i + 1])) for i in range(SHOWN)]
    fig = Figure(figsize=(5.5, 7.0), layout="constrained")
    axes = fig.subplots(len(RULES), 1, sharex=True, sharey=True)
    for ax, (title, rule) in zip(axes, RULES.items(), strict=True):
        probs = next_token_probabilities(logits, **rule)[order]  # (SHOWN,)
        bars = ax.bar(range(SHOWN), probs, color=["C0" if p > 0 else "C7" for p in probs])
        ax.bar_label(bars, [f"{p:.2f}" if p > 0 else "cut" for p in probs], padding=2)
        ax.set_title(title, loc="left")
        ax.set_ylim(0, 1.25)
        ax.set_yticks([0, 1])
    axes[-1].set_xticks(range(SHOWN), labels)
    axes[-1].set_xlabel(f"next byte after “…{PROMPT[-12:]}”")
    return fig


def _maps() -> torch.Tensor:
    """Every head's weights over `PASSAGE`: `(layers, H, L, L)`."""
    model, _ = trained_site_gpt()
    return attention_maps(model, encode(PASSAGE)[None])[:, 0]


def heads() -> Figure:
    """A grid of maps, one row per layer, one column per head."""
    maps = _maps()
    layers, count = maps.shape[:2]
    fig = Figure(figsize=(5.5, 4.6), layout="constrained")
    axes = fig.subplots(layers, count, squeeze=False)
    for (layer, head), ax in zip(
        ((lay, h) for lay in range(layers) for h in range(count)), axes.flat, strict=True
    ):
        ax.imshow(maps[layer, head] ** 0.5, vmin=0, vmax=1)  # square root: small weights show
        ax.set_title(f"layer {layer}, head {head}", fontsize="medium")
        ax.set_xticks([])
        ax.set_yticks([])
    fig.supxlabel("key (byte of the passage) →")
    fig.supylabel("← query")
    return fig


def heads_data() -> dict:
    """What the interactive map shows: the passage's bytes and every head's weights, in percent."""
    maps = _maps()
    return {
        "bytes": [decode(encode(PASSAGE)[i : i + 1]) for i in range(len(PASSAGE.encode()))],
        "percent": [
            [
                [[round(100 * w, 1) for w in row[: i + 1]] for i, row in enumerate(head.tolist())]
                for head in layer
            ]
            for layer in maps
        ],  # [layer][head][query][key], keys up to the query's own
    }


FIGURES = {"small-gpt-loss": loss, "small-gpt-sampling": sampling, "small-gpt-heads": heads}
DATA = {"small-gpt-attention": heads_data}
