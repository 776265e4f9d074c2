"""Speculative decoding (Leviathan et al., ICML 2023; Chen et al., 2023): a small model drafts, the large one checks.

Decoding runs the large (target) model once per token, and each run reads all its weights to produce one
token. A small (draft) model, much cheaper per token, guesses the next `k` tokens one by one; the target then
scores all `k` guesses in one forward pass, which costs about as much as scoring one. Each guess is kept or
thrown away by a rule that makes the output exactly what the target alone would produce:

- greedy (temperature 0): a guess is kept while it is the target's own most probable token; at the first
  miss the target's choice replaces it;
- sampling: guess `x`, drawn from the draft's `q`, is kept with probability `min(1, p(x) / q(x))`, `p` the
  target's distribution; at the first rejection the token is drawn from `max(0, p - q)`, renormalised.
  Then each emitted token is distributed as `p`, whatever the draft (both papers prove it).

When every guess is kept, the target's last distribution gives one more token for free: each round emits
between 1 and `k + 1` tokens for one target forward pass.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from qkv._checks import check_sizes
from qkv.cache import KVCache
from qkv.gpt import GPT, _check_generate, next_token_probabilities


@dataclass(frozen=True)
class SpeculativeStats:
    """What a speculative run did: target forward passes, guesses drafted, guesses kept.

    Raises:
        TypeError, ValueError: a count that is not a non-negative int, more guesses kept than drafted.
    """

    target_forwards: int
    drafted: int
    accepted: int

    def __post_init__(self) -> None:
        check_sizes(
            0,
            target_forwards=self.target_forwards,
            drafted=self.drafted,
            accepted=self.accepted,
        )
        if self.accepted > self.drafted:
            raise ValueError(
                f"accepted ({self.accepted}) must be at most drafted ({self.drafted})"
            )

    @property
    def acceptance_rate(self) -> float:
        """The share of drafted tokens that were kept."""
        return self.accepted / self.drafted if self.drafted else 0.0


@torch.no_grad()
def speculative_generate(
    target: GPT,
    draft: GPT,
    ids: Tensor,
    max_new_tokens: int,
    *,
    k: int = 4,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    min_p: float | None = None,
    seed: int = 0,
) -> tuple[Tensor, SpeculativeStats]:
    """Continue `ids` by `max_new_tokens` tokens of `target`, drafting `k` at a time with `draft`.

    The tokens are those of `qkv.gpt.generate(target, ...)` at temperature 0, and distributed as its tokens
    otherwise (the same distribution, not the same draws: the random numbers are used differently).

    Args:
        target: the model whose output this is.
        draft: a model of the same vocabulary, cheaper to run.
        ids: `(1, L)` integer prompt: one sequence (the rounds of several would keep different numbers of
            guesses).
        max_new_tokens: how many tokens to add; `L + max_new_tokens` must fit both models' contexts.
        k: tokens drafted per round, at least 1.
        temperature: as for `qkv.gpt.next_token_probabilities`, applied to both models; 0 is greedy.
        top_k: as for `qkv.gpt.next_token_probabilities`, applied to both models.
        top_p: likewise.
        min_p: likewise.
        seed: seeds the generator of the draws.

    Returns:
        `(ids, stats)`: `(1, L + max_new_tokens)`, the prompt then the new tokens; and the run's counts.

    Raises:
        TypeError, ValueError: as `generate` for either model; models of different vocabularies; a batch
            other than 1; `k` not a positive int.
    """
    for name, model in (("target", target), ("draft", draft)):
        _check_generate(
            model,
            ids,
            max_new_tokens,
            temperature,
            top_k,
            top_p,
            min_p,
            seed,
            name=name,
        )
    if draft.config.vocab_size != target.config.vocab_size:
        raise ValueError(
            f"draft and target must share a vocabulary: the draft has {draft.config.vocab_size} "
            f"tokens, the target {target.config.vocab_size}"
        )
    if ids.size(0) != 1:
        raise ValueError(
            f"ids must be one sequence (1, L), got a batch of {ids.size(0)}"
        )
    check_sizes(k=k)
    sampling = {
        "temperature": temperature,
        "top_k": top_k,
        "top_p": top_p,
        "min_p": min_p,
    }
    generator = torch.Generator(device=ids.device).manual_seed(seed)
    target_cache, draft_cache = target.new_cache(), draft.new_cache()
    tokens = ids[0].tolist()  # the prompt, then every token emitted so far
    end = len(tokens) + max_new_tokens
    forwards = drafted = accepted = 0
    while len(tokens) < end:
        guesses = min(k, end - len(tokens))
        # --8<-- [start:round]
        draft_probs = []  # (V,) per guess: the distribution each guess was drawn from
        for _ in range(guesses):
            # the next token's, (V,)
            logits = _advance(draft, draft_cache, tokens)
            probs = _distribution(logits, sampling)
            tokens.append(_draw(probs, temperature, generator))
            draft_probs.append(probs)
        proposed = tokens[len(tokens) - guesses :]
        del tokens[len(tokens) - guesses :]
        # one target pass over the tokens it has not seen and every guess:
        # guesses + 1 distributions
        logits = _advance(
            target, target_cache, tokens + proposed, every=guesses + 1
        )  # (g + 1, V)
        target_probs = [_distribution(row, sampling) for row in logits]
        forwards, drafted = forwards + 1, drafted + guesses
        for guess, p, q in zip(
            proposed, target_probs, draft_probs, strict=False
        ):
            if _keep(guess, p, q, temperature, generator):
                tokens.append(guess)
                accepted += 1
                continue
            tokens.append(_replacement(p, q, temperature, generator))
            break
        else:  # all kept: the target's last distribution gives one more token
            tokens.append(_draw(target_probs[-1], temperature, generator))
        # --8<-- [end:round]
        # each cache may keep the tokens before the newest, no more
        seen = len(tokens) - 1
        for cache in (*target_cache, *draft_cache):
            cache.crop(min(len(cache), seen))
    # (1, L + new)
    out = torch.tensor(tokens[:end], device=ids.device, dtype=ids.dtype)[None]
    return out, SpeculativeStats(forwards, drafted, accepted)


def _advance(
    model: GPT, cache: list[KVCache], tokens: list[int], every: int = 1
) -> Tensor:
    """Feed `model` the tokens its cache has not seen; the logits after the last `every` of them.

    Returns `(V,)` for `every` = 1, else `(every, V)`.
    """
    new = torch.tensor(
        tokens[len(cache[0]) :], device=model.embed.weight.device
    )[None]  # (1, n)
    logits = model(new, cache)[0, -every:]  # (every, V)
    return logits[0] if every == 1 else logits


def _distribution(logits: Tensor, sampling: dict) -> Tensor:
    """The distribution the next token is drawn from; at temperature 0, all mass on the most probable."""
    if sampling["temperature"] == 0:
        return torch.nn.functional.one_hot(logits.argmax(), logits.size(-1)).to(
            logits.dtype
        )
    return next_token_probabilities(logits, **sampling)


def _draw(probs: Tensor, temperature: float, generator: torch.Generator) -> int:
    if temperature == 0:
        return int(probs.argmax())
    return int(torch.multinomial(probs, 1, generator=generator))


def _keep(
    guess: int,
    p: Tensor,
    q: Tensor,
    temperature: float,
    generator: torch.Generator,
) -> bool:
    """Whether the target keeps a guess drawn from `q`: with probability `min(1, p / q)` (greedy: p's top)."""
    if temperature == 0:
        return guess == int(p.argmax())
    u = torch.rand((), generator=generator, device=p.device)
    return bool(u * q[guess] < p[guess])  # u < p / q, without dividing by q


def _replacement(
    p: Tensor, q: Tensor, temperature: float, generator: torch.Generator
) -> int:
    """The token after a rejected guess: from `max(0, p - q)` renormalised (greedy: p's top)."""
    if temperature == 0:
        return int(p.argmax())
    residual = (p - q).clamp(min=0)
    return int(
        torch.multinomial(residual / residual.sum(), 1, generator=generator)
    )
