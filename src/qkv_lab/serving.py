"""What the post "Serving attention" measures: a draft GPT for speculative decoding, and a paged cache to draw.

- `trained_draft_gpt()`: a smaller GPT (`DRAFT_CONFIG`) trained by `train_gpt` on the same training split of
  the site's text as the site GPT, in a fixed number of steps; kept on disk like it (`qkv_lab.remember`).
- `acceptance_by_k()`: `qkv.speculative_generate` with the site GPT as the target and the draft, for each
  `k` of `KS`, greedy and sampled, from prompts taken out of the validation text; the counts of each run.
  Remembered, so the page and its figure read one computation.
- `REQUEST_LENGTHS`, `MAX_LENGTH`, `PAGE_SIZE`: the batch whose memory the page counts and the figure draws.
- `shared_prompt_cache()`: a small `PagedKVCache` in which two requests share a prompt's pages and one has
  copied a page on write; the page shows it and the figure draws its block tables.
"""

import hashlib
import time

import torch

from qkv.gpt import GPT, GPTConfig
from qkv.paged import PagedKVCache
from qkv.speculative import speculative_generate
from qkv_lab.gpt_training import (
    BATCH,
    LR,
    SEED,
    _train_site_gpt,
    encode,
    site_text,
    split,
    trained_site_gpt,
)
from qkv_lab.remember import remembered
from qkv_lab.toys import one_thread

# --8<-- [start:draft]
DRAFT_CONFIG = GPTConfig(
    vocab_size=256, width=32, layers=2, heads=2, kv_heads=1, context=128
)  # the site GPT's tokens and context, half its width, two layers of its three
# trained like the site GPT (same split, batch, rate, seed), fewer steps
DRAFT_STEPS = 600
# --8<-- [end:draft]
# --8<-- [start:batch]
REQUEST_LENGTHS = (
    1843,
    97,
    412,
    1210,
    33,
    688,
    256,
    1501,
)  # tokens each request holds now
# what a contiguous cache reserves per request; tokens per page
MAX_LENGTH, PAGE_SIZE = (2048, 16)
# --8<-- [end:batch]
KS = (1, 2, 3, 4, 5, 6)  # tokens drafted per round
# prompts from the validation text, bytes each, bytes added
PROMPTS, PROMPT_BYTES, NEW_TOKENS = (6, 32, 96)


def _text_sha256() -> str:
    return hashlib.sha256(site_text().encode("utf-8")).hexdigest()


def trained_draft_gpt() -> tuple[GPT, dict]:
    """The draft: `DRAFT_CONFIG` trained for `DRAFT_STEPS` steps on the site's training split, kept on disk.

    Returns:
        `(model, run)`: the model in eval mode, and the run's `losses` (one per step) and `seconds`.
    """
    run = _train_site_gpt(
        _text_sha256(), DRAFT_CONFIG, DRAFT_STEPS, BATCH, LR, SEED
    )
    model = GPT(DRAFT_CONFIG)
    model.load_state_dict(run.pop("state"))
    return model.eval(), run


def prompts() -> list[torch.Tensor]:
    """`PROMPTS` prompts of `PROMPT_BYTES` bytes each, evenly spaced in the validation text: `(1, N)` each."""
    _, validation = split(encode(site_text()))
    step = (len(validation) - PROMPT_BYTES) // PROMPTS
    return [
        validation[i * step : i * step + PROMPT_BYTES][None]
        for i in range(PROMPTS)
    ]


@remembered
def _acceptance(
    text_sha256: str, ks: tuple[int, ...], new_tokens: int
) -> list[dict]:
    target, _ = trained_site_gpt()
    draft, _ = trained_draft_gpt()
    rows = []
    with one_thread():
        for mode, temperature in (("greedy", 0.0), ("sampled", 1.0)):
            for k in ks:
                forwards = drafted = accepted = 0
                start = time.perf_counter()
                for seed, ids in enumerate(prompts()):
                    _, stats = speculative_generate(
                        target,
                        draft,
                        ids,
                        new_tokens,
                        k=k,
                        temperature=temperature,
                        seed=seed,
                    )
                    forwards += stats.target_forwards
                    drafted += stats.drafted
                    accepted += stats.accepted
                rows.append(
                    {
                        "mode": mode,
                        "k": k,
                        "tokens": new_tokens * PROMPTS,
                        "target_forwards": forwards,
                        "drafted": drafted,
                        "accepted": accepted,
                        "seconds": time.perf_counter() - start,
                    }
                )
    return rows


def acceptance_by_k() -> list[dict]:
    """Speculative decoding of the site GPT with the draft, for each k of `KS`, greedy then sampled (T = 1).

    Each row sums the runs from every prompt of `prompts()`, `NEW_TOKENS` new tokens each: `mode`
    ("greedy" or "sampled"), `k`, `tokens` (emitted), `target_forwards`, `drafted`, `accepted`, `seconds`.
    """
    return _acceptance(_text_sha256(), KS, NEW_TOKENS)


def shared_prompt_cache(seed: int = 0) -> PagedKVCache:
    """A cache of pages of 4 tokens, 1 head of 8 features, in which two requests share a prompt.

    "prompt" holds 10 tokens (3 pages, the last half full); "a" and "b" are forks of it, so all three read
    its pages; "a" then appends 3 tokens, which copies the shared, half-full last page on write and takes one
    new page; "b" appends nothing yet. Random keys and values from `seed`.
    """
    gen = torch.Generator().manual_seed(seed)
    # --8<-- [start:shared]
    cache = PagedKVCache(num_pages=8, page_size=4, kv_heads=1, head_dim=8)
    cache.add("prompt")
    key, value = torch.randn(2, 1, 10, 8, generator=gen)  # (H_kv, T, D) each
    cache.append("prompt", key, value)
    cache.add("a", fork_of="prompt")
    cache.add("b", fork_of="prompt")
    key, value = torch.randn(2, 1, 3, 8, generator=gen)
    cache.append("a", key, value)
    # --8<-- [end:shared]
    return cache
