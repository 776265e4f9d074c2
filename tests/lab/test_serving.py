"""qkv_lab.serving: the draft GPT, the speculative measurement's counts, the shared-prompt paged cache.

The tests that need the trained models share the site GPT's xdist group (see tests/lab/test_gpt_training.py).
"""

import math

import pytest
import torch

from qkv.gpt import generate
from qkv.speculative import speculative_generate
from qkv_lab import serving
from qkv_lab.gpt_training import SITE_CONFIG, STEPS, trained_site_gpt

trained = pytest.mark.xdist_group("site-gpt")


def test_the_draft_is_smaller_with_the_same_tokens_and_context():
    assert serving.DRAFT_CONFIG.vocab_size == SITE_CONFIG.vocab_size
    assert serving.DRAFT_CONFIG.context == SITE_CONFIG.context
    assert serving.DRAFT_CONFIG.width < SITE_CONFIG.width
    assert serving.DRAFT_CONFIG.layers < SITE_CONFIG.layers
    assert serving.DRAFT_STEPS < STEPS


def test_prompts_are_from_the_validation_text():
    prompts = serving.prompts()
    assert len(prompts) == serving.PROMPTS
    assert all(p.shape == (1, serving.PROMPT_BYTES) for p in prompts)
    assert SITE_CONFIG.context >= serving.PROMPT_BYTES + serving.NEW_TOKENS


@trained
def test_the_draft_trains_and_is_a_weaker_model():
    draft, run = serving.trained_draft_gpt()
    assert len(run["losses"]) == serving.DRAFT_STEPS
    assert run["losses"][0] > math.log(256) - 0.5  # untrained: about a uniform guess
    assert sum(run["losses"][-50:]) < 0.7 * sum(run["losses"][:50])
    target, _ = trained_site_gpt()
    assert (
        sum(p.numel() for p in draft.parameters()) < sum(p.numel() for p in target.parameters()) / 2
    )


@trained
def test_the_counts_of_each_round_hold():
    rows = serving.acceptance_by_k()
    assert [(r["mode"], r["k"]) for r in rows] == [
        (mode, k) for mode in ("greedy", "sampled") for k in serving.KS
    ]
    for r in rows:
        assert r["tokens"] == serving.PROMPTS * serving.NEW_TOKENS
        assert 0 <= r["accepted"] <= r["drafted"] <= r["k"] * r["target_forwards"]
        # each round: one target forward, its kept guesses and one token of the target's own
        assert r["target_forwards"] + r["accepted"] >= r["tokens"]
        assert r["target_forwards"] <= r["tokens"]


@trained
def test_greedy_speculation_gives_the_targets_tokens():
    target, _ = trained_site_gpt()
    draft, _ = serving.trained_draft_gpt()
    ids = serving.prompts()[0]
    out, stats = speculative_generate(target, draft, ids, 40, k=3, temperature=0)
    assert torch.equal(out, generate(target, ids, 40, temperature=0))
    assert stats.accepted > 0  # the draft has learned something of the text


def test_the_forks_share_pages_and_a_write_copies_the_shared_one():
    cache = serving.shared_prompt_cache()
    assert cache.block_table("prompt") == [0, 1, 2] == cache.block_table("b")
    assert cache.block_table("a") == [0, 1, 3, 4]  # page 2 copied to 3, then a new page 4
    assert cache.references.tolist() == [3, 3, 2, 1, 1, 0, 0, 0]
    assert [cache.length(s) for s in ("prompt", "a", "b")] == [10, 13, 10]
    prompt_keys, _ = cache.contiguous("prompt")
    a_keys, _ = cache.contiguous("a")
    assert torch.equal(a_keys[:, :10], prompt_keys)  # the copy holds the prompt's tokens
