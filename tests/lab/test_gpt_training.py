"""qkv_lab.gpt_training: the text, the byte tokens, the n-gram baselines by hand, the training, the result.

The tests of the trained model share one xdist group: the first of them trains it (once, then it is on disk,
`qkv_lab.remember`) while the other tests run on the other worker.
"""

import copy
import dataclasses
import math
import re
from fractions import Fraction
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from qkv.gpt import GPT, GPTConfig, generate, to_transformers
from qkv_lab import gpt_training as lab

POSTS = Path(__file__).resolve().parents[2] / "docs" / "blog" / "posts"
trained = pytest.mark.xdist_group("site-gpt")


def test_bytes_are_the_tokens_and_round_trip():
    assert lab.encode("aé").tolist() == [97, 0xC3, 0xA9]  # é is two bytes in UTF-8
    text = "QKV: softmax(q·k/√d) → π, λ\n```python\nimport torch\n```"
    assert lab.decode(lab.encode(text)) == text
    assert lab.decode(torch.tensor([0xC3])) == "\ufffd"  # half a character


def test_the_text_is_the_sites_articles_in_file_name_order():
    text = lab.site_text()
    assert len(text.encode("utf-8")) > 250_000
    front_matters = re.findall(r"^---\ndate: ", text, flags=re.MULTILINE)
    assert len(front_matters) == len(
        list(POSTS.glob("*.md"))
    )  # each article starts with its front matter
    assert "import torch" in text  # code as well as prose
    assert text.index("additive") < text.index("# The transformer block")
    shipped = sorted(path.name for path in (Path(lab.__file__).parent / "articles").glob("*.md"))
    assert set(shipped) <= {path.name for path in POSTS.glob("*.md")}  # a copy of the site's posts


def test_split_keeps_the_last_tenth_for_validation():
    train, validation = lab.split(torch.arange(20))
    assert train.tolist() == list(range(18))
    assert validation.tolist() == [18, 19]


# --- the baselines, by hand: train "abab", validation "abb"; bytes 1 and 2 of the validation are scored ------


def uniform_mix(count: int, kinds: int, total: int) -> Fraction:
    """The unigram's Witten-Bell estimate: `(c(w) + T / 256) / (N + T)`."""
    return (count + Fraction(kinds, 256)) / (total + kinds)


def test_unigram_by_hand():
    p_b = uniform_mix(2, 2, 4)  # "abab": b twice in 4 bytes, 2 kinds of byte
    assert lab.ngram_bits_per_byte(b"abab", b"abb", 1) == pytest.approx(-math.log2(p_b))


def test_bigram_by_hand():
    p_b = uniform_mix(2, 2, 4)
    after_a = (2 + 1 * p_b) / (2 + 1)  # "ab" twice; a is followed twice, by 1 kind of byte
    after_b = (0 + 1 * p_b) / (1 + 1)  # "bb" never; b is followed once (the last b by nothing)
    expected = -(math.log2(after_a) + math.log2(after_b)) / 2
    assert lab.ngram_bits_per_byte(b"abab", b"abb", 2) == pytest.approx(expected)


def test_trigram_by_hand():
    p_b = uniform_mix(2, 2, 4)
    after_a = (2 + 1 * p_b) / (2 + 1)  # byte 1 has one byte of context: the bigram's estimate
    after_b = (0 + 1 * p_b) / (1 + 1)
    after_ab = (0 + 1 * after_b) / (1 + 1)  # "ab" is followed once (by a), "abb" never seen
    expected = -(math.log2(after_a) + math.log2(after_ab)) / 2
    assert lab.ngram_bits_per_byte(b"abab", b"abb", 3) == pytest.approx(expected)


def test_an_unseen_context_falls_back_to_the_order_below():
    p_a = uniform_mix(4, 1, 4)  # "aaaa"; the context "b" never occurs in it
    assert lab.ngram_bits_per_byte(b"aaaa", b"ba", 2) == pytest.approx(-math.log2(p_a))


def test_baselines_reject_what_they_cannot_score():
    with pytest.raises(ValueError, match="order must be positive"):
        lab.ngram_bits_per_byte(b"ab", b"ab", 0)
    with pytest.raises(ValueError, match="validation must hold at least 2 bytes, got 1"):
        lab.ngram_bits_per_byte(b"ab", b"a", 1)


# --- the model's bits per byte, and training -----------------------------------------------------------------

TINY = GPTConfig(width=16, layers=1, heads=2, context=8)


def test_bits_per_byte_predicts_each_byte_from_its_window_once():
    torch.manual_seed(0)
    model = GPT(TINY).eval()
    validation = lab.encode("Attention is all you need!")  # 26 bytes: 3 windows of 8, then one of 1
    nats = []
    with torch.no_grad():
        for i in range(1, len(validation)):
            start = (i - 1) // 8 * 8  # the window that predicts byte i starts there
            logits = model(validation[None, start:i])[0, -1]
            nats.append(-F.log_softmax(logits, -1)[validation[i]].item())
    expected = sum(nats) / len(nats) / math.log(2)
    assert lab.bits_per_byte(model, validation) == pytest.approx(expected, rel=1e-6)


def test_bits_per_byte_needs_a_byte_to_predict():
    with pytest.raises(ValueError, match="validation must hold at least 2 bytes, got 1"):
        lab.bits_per_byte(GPT(TINY), lab.encode("a"))


def test_a_model_that_knows_nothing_spends_eight_bits_per_byte():
    model = GPT(TINY)
    with torch.no_grad():
        model.lm_head.weight.zero_()  # every logit 0: the uniform distribution over 256 bytes
    assert lab.bits_per_byte(model, lab.encode("any text at all")) == pytest.approx(8.0)


def small_run(steps: int) -> tuple[GPT, list[float]]:
    train, _ = lab.split(lab.encode(lab.site_text()[:20_000]))
    return lab.train_gpt(TINY, train, steps=steps, batch=4, lr=1e-2, seed=0)


def test_training_is_deterministic_and_leaves_the_thread_count_alone():
    threads = torch.get_num_threads()
    (first, losses), (second, again) = small_run(6), small_run(6)
    assert torch.get_num_threads() == threads
    assert losses == again
    assert all(
        torch.equal(p, q) for p, q in zip(first.parameters(), second.parameters(), strict=True)
    )
    assert not first.training


def test_a_fine_tune_starts_from_the_weights_it_is_given():
    trained, _ = small_run(6)
    longer = dataclasses.replace(TINY, context=16)  # RoPE has no weights: the same state fits
    train, _ = lab.split(lab.encode(lab.site_text()[:20_000]))
    start = {name: p.clone() for name, p in trained.state_dict().items()}
    unchanged, _ = lab.train_gpt(longer, train, steps=1, batch=2, lr=0.0, seed=5, start=start)
    assert all(torch.equal(p, start[n]) for n, p in unchanged.state_dict().items())  # lr 0
    tuned, losses = lab.train_gpt(longer, train, steps=3, batch=2, lr=1e-2, seed=5, start=start)
    _, fresh = lab.train_gpt(longer, train, steps=3, batch=2, lr=1e-2, seed=5)
    assert losses[0] < fresh[0]  # trained weights predict the first batch better than fresh ones
    assert not torch.equal(tuned.embed.weight, start["embed.weight"])


def test_training_lowers_the_loss():
    _, losses = small_run(60)
    assert len(losses) == 60
    assert losses[0] == pytest.approx(
        math.log(256), abs=0.05
    )  # small initial weights: near uniform
    assert sum(losses[-10:]) / 10 < losses[0] - 1.0


# --- the trained model (trained once, then read from disk) --------------------------------------------------


@pytest.fixture(scope="module")
def site_gpt() -> GPT:
    model, _ = lab.trained_site_gpt()
    return model


@trained
def test_the_trained_model_beats_every_baseline():
    report = lab.site_report()
    assert report["unigram"] > report["bigram"] > report["trigram"]
    assert report["gpt"] < report["trigram"] - 0.4


@trained
def test_samples_are_the_sites_english_and_python(site_gpt):
    # After prose, words of the site's vocabulary; inside a Python block that imported torch and qkv, the
    # names of torch and qkv again (calls, imports), which prose samples write far less often within the
    # same length. Over 24 seeds, comparing the two prompts rather than fixing a count for prose, so that
    # an edit of the articles (the training text) does not decide the test: on 2026-11-26, 11 and 13 code
    # samples of 24 named torch or qkv within 40 and 60 bytes, and no prose sample did; on 2026-11-29,
    # 16 code samples and 2 prose samples within 60 bytes (6 prose samples within 100: the site's prose
    # names `torch` too). A model that had not learnt code from prose would score alike on both.
    seeds = range(24)
    words = set(re.findall(r"[a-z]{3,}", lab.site_text()))
    prose_prompt, code_prompt = (
        "The attention weights ",
        "```python\nimport torch\n\nimport qkv\n\n",
    )

    def samples(prompt, length):
        return [
            lab.sample(site_gpt, prompt, length, temperature=0.5, seed=seed)[len(prompt) :]
            for seed in seeds
        ]

    prose, code = samples(prose_prompt, 100), samples(code_prompt, 60)
    new_words = re.findall(r"[a-z]{3,}", " ".join(prose))
    assert len(new_words) >= len(seeds) * 8
    assert sum(word in words for word in new_words) >= 0.7 * len(new_words)
    python = re.compile(r"torch|qkv")  # the names the site's blocks are made of

    def naming(texts):  # how many name torch or qkv in their first 60 bytes
        return sum(bool(python.search(text[:60])) for text in texts)

    assert naming(code) >= len(seeds) // 4, code
    assert naming(code) >= 3 * max(naming(prose), 1), (naming(code), naming(prose), prose)


@trained
def test_the_trained_model_equals_llama_for_causal_lm(site_gpt):
    model = copy.deepcopy(site_gpt).double()
    hf_model = to_transformers(model)
    _, validation = lab.split(lab.encode(lab.site_text()))
    windows = validation[: 4 * 128].view(4, 128)  # (B, C): whole contexts
    with torch.no_grad():
        difference = (model(windows) - hf_model(windows).logits).abs().max().item()
    assert (
        difference <= 1e-4
    )  # float32 RoPE angles and RMSNorm in transformers (tests/library/test_gpt.py)
    prompt = windows[:, :16]
    ours = generate(model, prompt, 40, temperature=0)
    assert torch.equal(ours, hf_model.generate(prompt, max_new_tokens=40, do_sample=False))
