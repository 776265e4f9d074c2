"""`qkv.gpt` trained on the site's own articles, on a CPU, and the n-gram baselines it must beat.

- The text: the Markdown of the site's articles as written, prose and code (a block that an article
  includes from src/ is its one `--8<--` line). `articles/` in this package is a link to docs/blog/posts,
  which the wheel stores as files, so that a reader's installed package trains on the same bytes as the
  repository. Editing an article changes the text, and the text's hash is part of the cache key: the
  model trains anew, and what a page says of it is asserted, not copied, so it holds after the edit.
- The tokens: the text's UTF-8 bytes, ids 0 to 255. No tokenizer to train or download, every character
  encodes (Greek letters, math, code), and the loss in bits per byte compares directly with the n-gram
  baselines and with any other model of the same text; the price is about one token per character.
- The split: the articles joined in file-name order; the first 90% trains, the last 10% validates.
- The baselines: unigram, bigram and trigram models of the training bytes with Witten-Bell smoothing (each
  order interpolated with the one below, the unigram with the uniform distribution over 256 bytes).

Training runs a fixed number of steps on one thread from fixed seeds, so its losses are the same on every
run on the same machine (other machines may differ in the last bits of a float: assert behaviour, not
numbers). `trained_site_gpt` keeps its result on disk (`qkv_lab.remember`): it trains once per build.
"""

import hashlib
import math
import time
from collections import Counter
from importlib.resources import files

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from qkv._checks import check_sizes
from qkv.gpt import GPT, GPTConfig, generate
from qkv_lab.remember import remembered
from qkv_lab.toys import one_thread

# --8<-- [start:config]
# Llama's shape: RMSNorm, SwiGLU, RoPE, grouped-query attention (2 key-value
# heads), tied embeddings
SITE_CONFIG = GPTConfig(
    vocab_size=256, width=64, layers=3, heads=4, kv_heads=2, context=128
)
STEPS, BATCH, LR, SEED = 1000, 8, 5e-3, 0  # about a minute on one thread
VALIDATION = 0.1  # the last tenth of the text
# --8<-- [end:config]


def site_text() -> str:
    """The articles' Markdown, joined in file-name order by a newline (see the module docstring)."""
    folder = files(__package__).joinpath("articles")
    names = sorted(
        path.name for path in folder.iterdir() if path.name.endswith(".md")
    )
    return "\n".join(
        folder.joinpath(name).read_text(encoding="utf-8") for name in names
    )


def encode(text: str) -> Tensor:
    """`text` as token ids: its UTF-8 bytes, int64 `(N,)` in `[0, 256)`."""
    return torch.tensor(list(text.encode("utf-8")), dtype=torch.long)


def decode(ids: Tensor) -> str:
    """Token ids (bytes) back to text; a byte sequence that is not UTF-8 becomes U+FFFD."""
    return bytes(ids.tolist()).decode("utf-8", errors="replace")


def split(
    data: Tensor, validation: float = VALIDATION
) -> tuple[Tensor, Tensor]:
    """`(train, validation)`: the first `1 - validation` of `data`, and the rest."""
    cut = round(len(data) * (1 - validation))
    return data[:cut], data[cut:]


# --8<-- [start:ngram]
def ngram_bits_per_byte(train: bytes, validation: bytes, order: int) -> float:
    """The bits per byte of an n-gram model of `train` on every byte of
    `validation` but the first.

    Witten-Bell smoothing: with `h` the `order - 1` bytes before `w`, `c(h, w)`
    the count of `h` then `w` in `train`, `c(h)` the count of `h` followed by
    any byte and `T(h)` the number of distinct bytes that follow it,

        P(w | h) = (c(h, w) + T(h) P(w | h')) / (c(h) + T(h))

    where `h'` is `h` without its first byte; the unigram interpolates with
    `1/256`, and a context never seen in `train` (`c(h) = 0`) gives `P(w | h')`.
    A byte whose context is cut short by the start of `validation` is predicted
    from the context there is.

    Raises:
        ValueError: `order` not positive, or a `validation` of fewer than 2
            bytes.
    """
    check_sizes(order=order)
    if len(validation) < 2:
        raise ValueError(
            f"validation must hold at least 2 bytes, got {len(validation)}"
        )
    # --8<-- [start:ngram-counts]
    follows = Counter()  # c(h, w), h of 0 to order - 1 bytes
    for n in range(1, order + 1):
        follows.update(train[i : i + n] for i in range(len(train) - n + 1))
    seen, kinds = Counter(), Counter()  # c(h), T(h)
    for gram, count in follows.items():
        seen[gram[:-1]] += count
        kinds[gram[:-1]] += 1

    def probability(context: bytes, byte: int) -> float:
        lower = probability(context[1:], byte) if context else 1 / 256
        if seen[context] == 0:
            return lower
        return (follows[context + bytes([byte])] + kinds[context] * lower) / (
            seen[context] + kinds[context]
        )

    # --8<-- [end:ngram-counts]
    bits = [
        -math.log2(
            probability(validation[max(0, i - order + 1) : i], validation[i])
        )
        for i in range(1, len(validation))
    ]
    return sum(bits) / len(bits)


# --8<-- [end:ngram]


@torch.no_grad()
def bits_per_byte(model: GPT, validation: Tensor) -> float:
    """The model's bits per byte on every byte of `validation` but the first.

    `validation` is cut into windows of `context + 1` bytes that share their edge bytes (the last may be
    shorter); within a window each byte is predicted from the bytes before it in the window.

    Raises:
        ValueError: a `validation` of fewer than 2 bytes.
    """
    if len(validation) < 2:
        raise ValueError(
            f"validation must hold at least 2 bytes, got {len(validation)}"
        )
    context = model.config.context
    windows = [
        validation[s : s + context + 1]
        for s in range(0, len(validation) - 1, context)
    ]
    *full, last = windows
    batches = [
        torch.stack(full[i : i + 64]) for i in range(0, len(full), 64)
    ] + [last[None]]
    nats = sum(
        F.cross_entropy(
            model(x[:, :-1]).flatten(0, 1), x[:, 1:].flatten(), reduction="sum"
        ).item()
        for x in batches  # (B, context + 1) bytes -> logits (B, context, V)
    )
    return nats / (len(validation) - 1) / math.log(2)


# --8<-- [start:train]
def train_gpt(
    config: GPTConfig,
    train: Tensor,
    steps: int,
    batch: int,
    lr: float,
    seed: int,
    start: dict[str, Tensor] | None = None,
) -> tuple[GPT, list[float]]:
    """A `GPT` trained by AdamW on random windows of `train`; the model (eval
    mode) and every step's loss.

    The weights start from `seed`, or from the state dict `start` (a
    fine-tune); `train_bytes_model` trains them.
    """
    torch.manual_seed(seed)  # the initial weights
    model = GPT(config)
    if start is not None:
        model.load_state_dict(start)
    return train_bytes_model(
        model, config.context, train, steps, batch, lr, seed
    )


def train_bytes_model(
    model: nn.Module,
    context: int,
    train: Tensor,
    steps: int,
    batch: int,
    lr: float,
    seed: int,
) -> tuple[nn.Module, list[float]]:
    """`model`, a causal model of bytes, trained by AdamW on random windows of
    `train`; the model (eval mode) and every step's loss.

    Each step draws `batch` windows of `context + 1` bytes from a generator
    seeded with `seed` and minimises the cross-entropy of each byte given the
    ones before it, its gradient clipped to norm 1. The learning rate rises
    linearly over the first tenth of the steps, then falls along a cosine to a
    tenth of `lr`. One thread: see `qkv_lab.toys`.
    """
    check_sizes(steps=steps, batch=batch)
    generator = torch.Generator().manual_seed(seed)  # the windows
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    warmup = max(1, steps // 10)

    def rate(step: int) -> float:
        """The learning rate at `step`, as a multiple of `lr`: the lower of the
        ramp and the cosine."""
        # 1 at step 0, 0.1 at the end
        cosine = 0.1 + 0.9 * (1 + math.cos(math.pi * step / steps)) / 2
        return min((step + 1) / warmup, cosine)

    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, rate)
    offsets = torch.arange(context + 1)  # (C + 1,)
    losses = []
    with one_thread():
        # --8<-- [start:train-step]
        for _ in range(steps):
            starts = torch.randint(
                len(train) - context, (batch, 1), generator=generator
            )
            windows = train[starts + offsets]  # (B, C + 1)
            logits = model(windows[:, :-1])  # (B, C, V)
            loss = F.cross_entropy(
                logits.flatten(0, 1), windows[:, 1:].flatten()
            )
            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            schedule.step()
            losses.append(loss.item())
        # --8<-- [end:train-step]
    return model.eval(), losses


# --8<-- [end:train]


@remembered
def _train_site_gpt(
    text_sha256: str,
    config: GPTConfig,
    steps: int,
    batch: int,
    lr: float,
    seed: int,
) -> dict:
    """`train_gpt` on the site's training split, as plain data: weights, losses, seconds taken."""
    train, _ = split(encode(site_text()))
    start = time.perf_counter()
    model, losses = train_gpt(config, train, steps, batch, lr, seed)
    seconds = time.perf_counter() - start
    return {"state": model.state_dict(), "losses": losses, "seconds": seconds}


def trained_site_gpt() -> tuple[GPT, dict]:
    """The GPT of `SITE_CONFIG` trained on the site (`STEPS` steps of `BATCH` windows), kept on disk.

    Returns:
        `(model, run)`: the model in eval mode, and the run's `losses` (one per step) and `seconds`.
    """
    text_sha256 = hashlib.sha256(site_text().encode("utf-8")).hexdigest()
    run = _train_site_gpt(text_sha256, SITE_CONFIG, STEPS, BATCH, LR, SEED)
    model = GPT(SITE_CONFIG)
    model.load_state_dict(run.pop("state"))
    return model.eval(), run


def site_report() -> dict[str, float]:
    """Bits per byte on the validation split: the trained model's and the three n-gram baselines'."""
    model, _ = trained_site_gpt()
    train, validation = split(encode(site_text()))
    train_bytes, validation_bytes = (
        bytes(train.tolist()),
        bytes(validation.tolist()),
    )
    report = {
        name: ngram_bits_per_byte(train_bytes, validation_bytes, order)
        for order, name in enumerate(("unigram", "bigram", "trigram"), start=1)
    }
    with one_thread():
        report["gpt"] = bits_per_byte(model, validation)
    return report


def sample(
    model: GPT, prompt: str, length: int, **sampling: float | int
) -> str:
    """`prompt` continued by `length` bytes; `sampling` as for `qkv.gpt.generate` (temperature, seed...)."""
    ids = encode(prompt)[None]  # (1, N)
    with one_thread():
        out = generate(model, ids, length, **sampling)  # (1, N + length)
    return decode(out[0])
