"""qkv.speculative: greedy output equal to the target's alone; sampled output distributed as the target's.

The statistical test draws `DRAWS` two-token continuations with different seeds and compares their counts
with the target's own distribution over the 16 pairs of a 4-token vocabulary, computed exactly from the
target's logits, by Pearson's chi-square statistic. With 15 degrees of freedom, a correct sampler exceeds
`CRITICAL` = 37.70 with probability 0.001 (the chi-square table); a sampler that keeps every guess (the
draft's distribution), or draws the replacement from p instead of max(0, p - q), lands far above it
(checked below). The seeds are fixed, so the test gives the same statistic on every run.
"""

from __future__ import annotations

import itertools

import pytest
import torch

from qkv.cache import KVCache
from qkv.gpt import GPT, GPTConfig, generate
from qkv.speculative import speculative_generate

DRAWS = 1000
CRITICAL = 37.70  # chi-square, 15 degrees of freedom, upper 0.001


pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models: see tests/conftest.py


def model(seed, vocab=11, width=16, layers=2, context=40, scale=1.0):
    torch.manual_seed(seed)
    config = GPTConfig(vocab_size=vocab, width=width, layers=layers, heads=2, context=context)
    gpt = GPT(config).double().eval()
    with torch.no_grad():  # sharper than the 0.02 initial weights, so that the two models disagree
        for parameter in gpt.parameters():
            parameter.mul_(scale)
    return gpt


@pytest.mark.parametrize("k", [1, 2, 4, 7])
@pytest.mark.parametrize("draft_seed", [0, 1, 2], ids=["draft=target", "draft-1", "draft-2"])
def test_greedy_tokens_are_the_targets_alone(k, draft_seed):
    target = model(0, scale=20.0)
    draft = target if draft_seed == 0 else model(draft_seed, width=8, layers=1, scale=20.0)
    prompt = torch.tensor([[3, 1, 4, 1, 5]])
    expected = generate(target, prompt, 30, temperature=0)
    out, stats = speculative_generate(target, draft, prompt, 30, k=k, temperature=0)
    assert torch.equal(out, expected)
    assert stats.accepted <= stats.drafted
    if draft_seed == 0:  # a draft that is the target is always right: k + 1 tokens per target pass
        assert stats.acceptance_rate == 1.0
        assert stats.target_forwards == -(-30 // (k + 1))  # ceil(30 / (k + 1))


def exact_pairs(target, prompt, sampling):
    """The target's probability of each two-token continuation, `(V, V)`."""
    from qkv.gpt import next_token_probabilities

    vocab = target.config.vocab_size
    with torch.no_grad():
        first = next_token_probabilities(target(prompt)[0, -1], **sampling)  # (V,)
        pairs = torch.zeros(vocab, vocab, dtype=torch.float64)
        for token in range(vocab):
            extended = torch.cat([prompt, torch.tensor([[token]])], dim=1)
            second = next_token_probabilities(target(extended)[0, -1], **sampling)
            pairs[token] = first[token] * second
    return pairs


def chi_square(target, draft, prompt, sampling, k):
    vocab = target.config.vocab_size
    counts = torch.zeros(vocab, vocab, dtype=torch.float64)
    for seed in range(DRAWS):
        out, _ = speculative_generate(target, draft, prompt, 2, k=k, seed=seed, **sampling)
        counts[out[0, -2], out[0, -1]] += 1
    expected = DRAWS * exact_pairs(target, prompt, sampling)
    return float(((counts - expected) ** 2 / expected).sum())


def pair_of_models():
    """A 4-token target and a draft that disagrees with it (total variation 0.8 over the pairs below)."""
    return model(0, vocab=4, scale=4.0), model(6, vocab=4, width=8, layers=1, scale=4.0)


PROMPT = torch.tensor([[0, 1, 2]])


def test_sampled_tokens_are_distributed_as_the_targets():
    target, draft = pair_of_models()
    statistic = chi_square(target, draft, PROMPT, {"temperature": 1.0}, k=2)
    assert statistic < CRITICAL, statistic


@pytest.mark.parametrize("fault", ["keep-every-guess", "replace-from-p"])
def test_the_chi_square_test_catches_a_wrong_sampler(monkeypatch, fault):
    import qkv.speculative as speculative

    if fault == "keep-every-guess":  # the draft's distribution
        monkeypatch.setattr(speculative, "_keep", lambda *args: True)
    else:  # after a rejection, a token from p: p's own tokens come out too often
        monkeypatch.setattr(
            speculative,
            "_replacement",
            lambda p, q, t, g: int(torch.multinomial(p, 1, generator=g)),
        )
    assert chi_square(*pair_of_models(), PROMPT, {"temperature": 1.0}, k=2) > 2 * CRITICAL


def test_sampling_is_seeded_and_stats_add_up():
    target, draft = model(0, scale=20.0), model(3, width=8, layers=1, scale=20.0)
    prompt = torch.tensor([[1, 2, 3]])
    a, stats = speculative_generate(
        target, draft, prompt, 25, k=3, seed=4, temperature=0.8, top_k=5
    )
    b, _ = speculative_generate(target, draft, prompt, 25, k=3, seed=4, temperature=0.8, top_k=5)
    assert torch.equal(a, b)
    assert a.shape == (1, 28)
    assert 0.0 <= stats.acceptance_rate <= 1.0
    # each pass emits the kept guesses and one more token; the last pass may stop early
    assert stats.target_forwards <= 25 <= stats.accepted + stats.target_forwards


def test_kv_cache_crop_keeps_the_first_tokens():
    cache = KVCache()
    key, value = torch.randn(1, 2, 5, 4), torch.randn(1, 2, 5, 3)
    cache.update(key, value)
    cache.crop(3)
    assert len(cache) == 3
    assert torch.equal(cache.key, key[..., :3, :])
    assert torch.equal(cache.value, value[..., :3, :])
    with pytest.raises(ValueError, match=r"at most the 3 tokens cached, got 4"):
        cache.crop(4)
    with pytest.raises(ValueError, match=r"length must be non-negative"):
        cache.crop(-1)


def test_bad_calls_are_refused_by_name():
    target, prompt = model(0), torch.tensor([[1, 2]])
    with pytest.raises(
        ValueError, match=r"share a vocabulary: the draft has 7 tokens, the target 11"
    ):
        speculative_generate(target, model(1, vocab=7), prompt, 3)
    with pytest.raises(ValueError, match=r"k must be positive, got 0"):
        speculative_generate(target, model(1), prompt, 3, k=0)
    with pytest.raises(ValueError, match=r"one sequence \(1, L\), got a batch of 2"):
        speculative_generate(target, model(1), prompt.expand(2, 2), 3)
    with pytest.raises(
        ValueError, match=r"max_new_tokens \(50\) is more than the target's context"
    ):
        speculative_generate(target, model(1), prompt, 50)
    with pytest.raises(TypeError, match=r"draft must be a qkv\.gpt\.GPT"):
        speculative_generate(target, "draft", prompt, 3)


def test_every_pair_has_some_probability():
    # Pearson's statistic wants an expected count of 5 or more in every cell
    target, draft = pair_of_models()
    pairs = exact_pairs(target, PROMPT, {"temperature": 1.0})
    assert float(pairs.sum()) == pytest.approx(1.0)
    assert all(DRAWS * pairs[i, j] >= 5 for i, j in itertools.product(range(4), repeat=2))
    distance = 0.5 * (pairs - exact_pairs(draft, PROMPT, {"temperature": 1.0})).abs().sum()
    assert distance > 0.5  # the draft is often wrong: the rejection path is exercised
