"""Long context on the site's GPT: attention sinks, a streaming cache, learned sinks and RoPE scaling.

Every model here is trained with the site GPT's recipe (`qkv_lab.gpt_training`: `SITE_CONFIG`, `STEPS` steps of
`BATCH` windows at `LR`), once per seed, and scored on the validation split of the site's text.

- `attention_shares`: the weight each head puts on the first byte of a window (queries 1 to C - 1; query 0
  has nothing else to attend to), and the share its learned sink takes, averaged over the validation split
  cut into windows of the context.
- `streaming_bits`: the validation split cut into streams of `stream` bytes (8 contexts), each decoded one
  byte at a time through a cache of `window` tokens that keeps the first `kept` (StreamingLLM, Xiao et al.,
  2024; `qkv.streaming_window`), or none (a plain sliding window). Positions are assigned within the cache,
  as StreamingLLM does: keys are cached before RoPE and turned at each step by their place in the cache, so
  no query meets a key further than the window away, and the kept tokens sit just before the recent ones.
  `recomputed_bits` is the slow baseline: each prediction from a fresh forward over the `window` bytes
  before it, for one prediction in `recompute_every` past the first window. Each is reported as bits per
  byte by bucket of `bucket` positions, and, for the plain model, as one mean over the positions that the
  baseline recomputed past the first window, where the three compare on the same bytes.
- Learned sinks: the same recipe with `GPTConfig(sinks=True)`: bits per byte, first-byte weight, the sinks'
  share, the streaming loss.
- RoPE scaling: the plain model at each of `lengths` (1x, 2x and 4x the context) under each rule of
  `scalings`, as trained, and after `fine_tune_steps` steps at the longest length with that rule.

`python -m qkv_lab.long_context` runs it all (41 minutes when it was recorded, on one thread of a 2-core
machine shared with other work; the report holds each run's seconds) and writes the report the long-context
article draws from (`qkv_lab.results.recorded("long-context")`), after every measurement, so a stopped run
keeps what it measured; the site's build never trains it. The report holds the text's hash: the text is the
site's articles, so a later edit makes a different text.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import math
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor

import qkv
from qkv.gpt import GPT, GPTConfig
from qkv.positions import apply_rope
from qkv_lab.gpt_attention import attention_maps
from qkv_lab.gpt_training import (
    BATCH,
    LR,
    SITE_CONFIG,
    STEPS,
    bits_per_byte,
    encode,
    site_text,
    split,
    train_gpt,
)
from qkv_lab.harness import environment, write_json
from qkv_lab.toys import one_thread

OUT = Path(__file__).parent / "results" / "long-context.json"


# --8<-- [start:settings]
@dataclasses.dataclass(frozen=True)
class Settings:
    """What the sweep trains and measures; the defaults are the recorded
    run's."""

    config: GPTConfig = SITE_CONFIG  # the site's GPT: context 128
    # the site GPT's recipe: 1,000 steps of 8 windows at 5e-3
    steps: int = STEPS
    batch: int = BATCH
    lr: float = LR
    seeds: tuple[int, ...] = (0, 1, 2)
    stream: int = 1024  # bytes per stream: 8 contexts
    window: int = 128  # the streaming cache holds one context
    kept: int = 4  # StreamingLLM's first tokens kept
    bucket: int = 128  # positions per bucket of the streaming loss
    # the recomputed baseline: 1 prediction in 8 past the first window
    recompute_every: int = 8
    lengths: tuple[int, ...] = (128, 256, 512)  # 1x, 2x and 4x the context
    # qkv.rope_frequencies' format, stretching 4x
    scalings: tuple[tuple[str, dict | None], ...] = (
        ("plain", None),
        ("linear", {"rope_type": "linear", "factor": 4.0}),
        ("NTK", {"rope_type": "ntk", "factor": 4.0}),
        (  # factor 1: NTK at exactly the stretch each length needs, L / 128
            "dynamic NTK",
            {
                "rope_type": "dynamic", "factor": 1.0,
                "original_max_position_embeddings": 128,
            },
        ),
        (
            "YaRN",
            {
                "rope_type": "yarn", "factor": 4.0,
                "original_max_position_embeddings": 128,
            },
        ),
        (
            "Llama 3",
            {
                "rope_type": "llama3", "factor": 4.0,
                "original_max_position_embeddings": 128,
                "low_freq_factor": 1.0, "high_freq_factor": 4.0,
            },
        ),
    )  # fmt: skip
    # at the longest length, 4 windows of 512 bytes a step
    fine_tune_steps: int = 100
    fine_tune_batch: int = 4
    fine_tune_lr: float = 1e-3


# --8<-- [end:settings]


def with_context(model: GPT, context: int, rope_scaling: dict | None) -> GPT:
    """`model`'s weights in a GPT of another context and RoPE scaling (RoPE itself has no weights)."""
    config = dataclasses.replace(
        model.config, context=context, rope_scaling=rope_scaling
    )
    weight = model.embed.weight
    longer = GPT(config).to(device=weight.device, dtype=weight.dtype)
    longer.load_state_dict(model.state_dict())
    return longer.eval()


@torch.no_grad()
def attention_shares(
    model: GPT, validation: Tensor, batch: int = 32
) -> tuple[Tensor, Tensor]:
    """Per head, the weight on a window's first byte and the weight its learned sink takes.

    `validation` is cut into windows of the model's context (a last shorter piece is dropped); the first-byte
    weight is averaged over queries 1 to C - 1 (query 0 sees byte 0 alone) and the windows, the sink's share,
    `1 - sum_j w_ij`, over every query and window (0 without sinks).

    Returns:
        `(first, sink)`, float `(layers, H)` each.

    Raises:
        ValueError: `validation` shorter than one window; as `attention_maps`.
    """
    context = model.config.context
    if len(validation) < context:
        raise ValueError(
            f"validation ({len(validation)} bytes) is shorter than the context {context}"
        )
    windows = validation[: len(validation) // context * context].view(
        -1, context
    )  # (N, C)
    first = sink = 0
    with one_thread():
        for ids in windows.split(batch):
            maps = attention_maps(model, ids)  # (layers, B, H, C, C)
            first = first + maps[..., 1:, 0].mean(-1).sum(1)  # (layers, H)
            sink = sink + (1 - maps.sum(-1)).mean(-1).sum(1)
    return first / len(windows), sink / len(windows)


def _check_streamable(model: GPT) -> None:
    """Raise unless the streaming loop below computes what `model` computes."""
    if not isinstance(model, GPT):
        raise TypeError(
            f"model must be a qkv.gpt.GPT, got {type(model).__name__}"
        )
    config = model.config
    for option, needed in (
        ("positions", "rope"),
        ("norm_position", "pre"),
        ("softcap", None),
    ):
        if getattr(config, option) != needed:
            raise ValueError(
                f"streaming_bits needs {option}={needed!r} (positions within the cache are RoPE's), "
                f"got {option}={getattr(config, option)!r}"
            )


# --8<-- [start:streaming]
@torch.no_grad()
def streaming_bits(model: GPT, ids: Tensor, window: int, kept: int) -> Tensor:
    """The bits of each next byte of `ids (B, N)`, decoded one at a time through
    a cache of `window` tokens.

    Each block caches its keys before RoPE and, after appending the new token,
    keeps what `qkv.streaming_window(., window, kept)` keeps; then the cached
    keys turn by their place in the cache, `0 .. n - 1`, and the new query by
    `n - 1`, its own place.

    Returns:
        `(B, N - 1)`: entry `i` is
        `-log2 p(ids[:, i + 1] | what the cache holds after ids[:, i])`.
    """
    _check_streamable(model)
    # per block: (B, Hkv, n, D)
    keys, values = ([None] * len(model.blocks), [None] * len(model.blocks))
    bits = []
    for t in range(ids.size(1) - 1):
        x = model.embed(ids[:, t : t + 1])  # (B, 1, E)
        for i, block in enumerate(model.blocks):
            attn, h = block.attn, block.attn_norm(x)
            q = attn._split_heads(attn.q_proj(h))  # (B, H, 1, D)
            k = attn._split_heads(attn.k_proj(h))  # (B, Hkv, 1, D)
            v = attn._split_heads(attn.v_proj(h))
            if attn.q_norm is not None:
                q, k = attn.q_norm(q), attn.k_norm(k)
            # --8<-- [start:streaming-cache]
            keys[i] = k if keys[i] is None else torch.cat([keys[i], k], dim=-2)
            values[i] = (
                v if values[i] is None else torch.cat([values[i], v], dim=-2)
            )
            # (B, Hkv, n, D), n <= window
            keys[i] = qkv.streaming_window(keys[i], window, kept)
            values[i] = qkv.streaming_window(values[i], window, kept)
            # positions within the cache
            places = torch.arange(keys[i].size(-2))
            rope = {"base": attn.rope_base, "scaling": attn.rope_scaling}
            q = apply_rope(q, places[-1:], **rope)
            k = apply_rope(keys[i], places, **rope)
            # --8<-- [end:streaming-cache]
            out = qkv.attention(
                q, k, values[i], enable_gqa=True, sinks=attn.sinks
            )  # (B, H, 1, D)
            x = x + attn.out_proj(out.transpose(1, 2).flatten(2))
            x = x + block.mlp(block.mlp_norm(x))
        logits = model.lm_head(model.norm(x))[:, 0]  # (B, V)
        bits.append(
            F.cross_entropy(logits, ids[:, t + 1], reduction="none")
            / math.log(2)
        )
    return torch.stack(bits, dim=1)  # (B, N - 1)


# --8<-- [end:streaming]


@torch.no_grad()
def recomputed_bits(
    model: GPT, ids: Tensor, window: int, every: int, batch: int = 64
) -> Tensor:
    """The bits of next bytes of `ids (B, N)`, each from a fresh forward over the `window` bytes before it.

    Bytes 1 to `window` come from one forward over the first `window` bytes (their whole past fits); after
    that only every `every`-th byte is predicted (positions `window + every`, `window + 2 every`, ...).

    Returns:
        `(B, N - 1)` as `streaming_bits`, NaN where no prediction was made.
    """
    first = model(ids[:, :window])  # (B, window, V): predicts bytes 1 .. window
    bits = torch.full(
        (ids.size(0), ids.size(1) - 1), math.nan, dtype=first.dtype
    )
    targets = ids[:, 1 : window + 1]
    bits[:, : targets.size(1)] = _bits(first[:, : targets.size(1)], targets)
    # the predicted positions p
    later = range(window + every, ids.size(1), every)
    if later:
        # (B, P, window)
        contexts = torch.stack([ids[:, p - window : p] for p in later], dim=1)
        logits = torch.cat(
            [
                model(chunk)[:, -1]
                for chunk in contexts.flatten(0, 1).split(batch)
            ]
        )  # (B * P, V)
        targets = ids[:, list(later)]  # (B, P)
        bits[:, [p - 1 for p in later]] = _bits(
            logits.view(*targets.shape, -1), targets
        )
    return bits


def _bits(logits: Tensor, targets: Tensor) -> Tensor:
    """`-log2 p(target)`: logits `(..., V)`, targets `(...)`."""
    return F.cross_entropy(
        logits.transpose(1, -1), targets, reduction="none"
    ) / math.log(2)


def by_bucket(bits: Tensor, bucket: int) -> list[float]:
    """The mean of `bits (B, N - 1)` (entry i: byte i + 1) over each bucket of positions, NaN ignored.

    Bucket k holds the bytes at positions `k * bucket` to `(k + 1) * bucket - 1` (byte 0 is never
    predicted); the last bucket may be shorter.
    """
    positions = torch.arange(1, bits.size(1) + 1)
    return [
        bits[:, (positions >= start) & (positions < start + bucket)]
        .nanmean()
        .item()
        for start in range(0, bits.size(1) + 1, bucket)
    ]


def run(settings: Settings, text: str, out: Path | None = None) -> dict:
    """Train and measure everything of the module docstring on `text`'s split, once per seed.

    Args:
        settings: what to train and measure.
        text: the text, split by `qkv_lab.gpt_training.split`.
        out: None, or where to write the report after every measurement.

    Returns:
        The report: the settings, the text's hash and sizes, the environment, and per seed (lists in the
        order of `settings.seeds`) each model's bits per byte, attention shares and streaming loss by
        bucket, and for each RoPE rule the bits per byte at each length, as trained and fine-tuned.
    """
    train, validation = split(encode(text))
    streams = validation[: len(validation) // settings.stream * settings.stream]
    streams = streams.view(-1, settings.stream)  # (streams, stream)
    # the thread count that training runs with, as `environment` records it
    with one_thread():
        machine = environment(torch.device("cpu"))
    report = {
        "what": "attention sinks, a streaming cache, learned sinks and RoPE scaling on the site's GPT",
        "text_sha256": hashlib.sha256(text.encode("utf-8")).hexdigest(),
        "text_bytes": len(train) + len(validation),
        "validation_bytes": len(validation),
        "streams": len(streams),
        "settings": dataclasses.asdict(settings),
        **machine,
        "timing": "wall-clock seconds of each training and its measurements, measured once",
        "models": {},
        "rope": {
            name: {"scaling": scaling} for name, scaling in settings.scalings
        },
    }

    def save() -> None:
        if out is not None:
            write_json(report, out)

    def record(where: dict, name: str, value: object) -> None:
        where.setdefault(name, []).append(value)

    def log(message: str) -> None:
        print(f"{time.strftime('%H:%M:%S')} {message}", file=sys.stderr)

    for seed in settings.seeds:
        trained = {}
        for kind, config in (
            ("plain", settings.config),
            ("sinks", dataclasses.replace(settings.config, sinks=True)),
        ):
            start = time.perf_counter()
            model, _ = train_gpt(
                config, train, settings.steps, settings.batch, settings.lr, seed
            )
            trained[kind] = model
            where = report["models"].setdefault(
                kind, {"config": dataclasses.asdict(config)}
            )
            with one_thread():
                record(where, "bits_per_byte", bits_per_byte(model, validation))
                first, sink = attention_shares(model, validation)
                record(where, "first_token_weight", first.tolist())
                record(where, "sink_weight", sink.tolist())
                streaming = where.setdefault("streaming", {})
                kinds = [
                    ("sliding window", 0),
                    (f"first {settings.kept} kept", settings.kept),
                ]
                streamed = {
                    name: streaming_bits(model, streams, settings.window, kept)
                    for name, kept in kinds
                }  # each (streams, stream - 1)
                if kind == "plain":
                    streamed["recomputed"] = recomputed_bits(
                        model,
                        streams,
                        settings.window,
                        settings.recompute_every,
                    )
                    # the recomputed positions past the first window, where all three compare
                    shared = ~streamed["recomputed"][0].isnan()
                    shared[: settings.window] = False
                    at_shared = where.setdefault("recomputed_positions", {})
                    for name, bits in streamed.items():
                        record(at_shared, name, bits[:, shared].mean().item())
                for name, bits in streamed.items():
                    record(streaming, name, by_bucket(bits, settings.bucket))
            record(where, "seconds", round(time.perf_counter() - start, 1))
            log(
                f"{kind} seed {seed}: {where['bits_per_byte'][-1]:.4f} bits per byte"
            )
            save()

        plain, longest = trained["plain"], max(settings.lengths)
        for name, scaling in settings.scalings:
            start, where = time.perf_counter(), report["rope"][name]
            with one_thread():
                as_trained = [
                    bits_per_byte(
                        with_context(plain, length, scaling), validation
                    )
                    for length in settings.lengths
                ]
            stretched = with_context(plain, longest, scaling)
            tuned, _ = train_gpt(
                stretched.config, train, settings.fine_tune_steps, settings.fine_tune_batch,
                settings.fine_tune_lr, seed, start=stretched.state_dict(),
            )  # fmt: skip
            with one_thread():
                fine_tuned = [
                    bits_per_byte(
                        with_context(tuned, length, scaling), validation
                    )
                    for length in settings.lengths
                ]
            record(where, "as_trained", as_trained)
            record(where, "fine_tuned", fine_tuned)
            record(where, "seconds", round(time.perf_counter() - start, 1))
            log(f"{name} seed {seed}: {as_trained} -> {fine_tuned}")
            save()
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m qkv_lab.long_context", description=__doc__
    )
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    run(Settings(), site_text(), args.out)
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
