"""qkv.speculative_generate fed malformed input: clear errors naming the argument; float16 at a tiny
temperature gives the target's greedy tokens (the docstring's promise at temperature 0), never a crash."""

from __future__ import annotations

import pytest
import torch

from qkv.gpt import GPT, GPTConfig, generate
from qkv.speculative import SpeculativeStats, speculative_generate

META = "meta"  # a device with no data: stands in for another device than the CPU


def small_model(width=16, vocab_size=16, context=12, dtype=torch.float64, weight_scale=1.0):
    torch.manual_seed(width)
    config = GPTConfig(vocab_size=vocab_size, width=width, layers=1, heads=2, context=context)
    model = GPT(config).to(dtype).eval()
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.mul_(weight_scale)
    return model


def test_float16_models_at_a_tiny_temperature_give_the_targets_greedy_tokens():
    target = small_model(dtype=torch.float16, weight_scale=10.0)
    draft = small_model(width=8, dtype=torch.float16, weight_scale=10.0)
    ids = torch.randint(0, 16, (1, 3))
    out, _ = speculative_generate(target, draft, ids, 6, temperature=1e-4, seed=1)
    torch.testing.assert_close(out, generate(target, ids, 6, temperature=0), rtol=0, atol=0)


def test_a_draft_of_another_dtype_still_gives_the_targets_tokens():
    target, draft = small_model(), small_model(width=8, dtype=torch.float32)
    ids = torch.randint(0, 16, (1, 3))
    out, _ = speculative_generate(target, draft, ids, 4, temperature=0)
    torch.testing.assert_close(out, generate(target, ids, 4, temperature=0), rtol=0, atol=0)


SPECULATIVE = {  # case -> (arguments, error, what the message must say)
    "a target that is not a GPT": ({"target": torch.nn.Linear(1, 1)}, TypeError, r"target must be a qkv\.gpt\.GPT, got Linear"),
    "a draft that is not a GPT": ({"draft": "draft"}, TypeError, r"draft must be a qkv\.gpt\.GPT, got str"),
    "another vocabulary": ({"draft": lambda: small_model(width=8, vocab_size=17)}, ValueError, r"draft and target must share a vocabulary"),
    "a draft on another device": ({"draft": lambda: small_model(width=8).to(META)}, ValueError, r"ids is on cpu but the model is on meta"),
    "a batch of 2": ({"ids": torch.zeros(2, 3, dtype=torch.long)}, ValueError, r"ids must be one sequence \(1, L\)"),
    "ids of floats": ({"ids": torch.zeros(1, 3)}, TypeError, r"ids must be an integer tensor"),
    "ids of bytes": ({"ids": torch.zeros(1, 3, dtype=torch.uint8)}, TypeError, r"ids must be int64 or int32"),
    "k 0": ({"k": 0}, ValueError, r"k must be positive, got 0"),
    "k a bool": ({"k": True}, TypeError, r"k must be an int"),
    "temperature below 0": ({"temperature": -1}, ValueError, r"temperature must be 0 \(greedy\) or above"),
    "top_p above 1": ({"top_p": 2}, ValueError, r"top_p must lie in \(0, 1\]"),
    "past the draft's context": ({"draft": lambda: small_model(width=8, context=6), "max_new_tokens": 5}, ValueError, r"max_new_tokens \(5\) is more than the draft's context \(6\)"),
}  # fmt: skip


@pytest.mark.parametrize(
    ("arguments", "error", "match"), SPECULATIVE.values(), ids=SPECULATIVE.keys()
)
def test_speculative_generate_refuses_malformed_input_by_name(arguments, error, match):
    call = {"target": small_model(), "draft": small_model(width=8)}
    call |= {"ids": torch.zeros(1, 3, dtype=torch.long), "max_new_tokens": 3}
    call |= {
        name: made() if callable(made) and name == "draft" else made
        for name, made in arguments.items()
    }
    with pytest.raises(error, match=match):
        speculative_generate(
            call.pop("target"),
            call.pop("draft"),
            call.pop("ids"),
            call.pop("max_new_tokens"),
            **call,
        )


@pytest.mark.parametrize(
    ("counts", "error", "match"),
    [
        ((1, 2, 3), ValueError, r"accepted \(3\) must be at most drafted \(2\)"),
        ((-1, 0, 0), ValueError, r"target_forwards must be non-negative, got -1"),
        ((1, 2.0, 1), TypeError, r"drafted must be an int, got float"),
    ],
    ids=["more-kept-than-drafted", "negative", "float"],
)
def test_stats_refuse_counts_that_cannot_be(counts, error, match):
    with pytest.raises(error, match=match):
        SpeculativeStats(*counts)
