"""Benchmark the site GPT's generation on a CPU: `qkv.gpt.generate` (a KV cache) against a loop without one.

Both continue the same prompt greedily by `n` bytes, batch 1, float32, for each `n` of `NEW_TOKENS`: the cached
loop is `qkv.gpt.generate(..., temperature=0)`, a prefill then one byte per step; the uncached loop,
`generate_uncached`, runs the model over the whole sequence so far at every step. Times are
`qkv_lab.harness.fastest_ms` (the fastest of blocked runs) and the sweep runs `rounds` times, each case
keeping its fastest. The JSON report (`--out`) holds the device, versions, thread count and UTC date
(`qkv_lab.harness.environment`) beside the numbers, and says whether the two loops gave the same bytes.

Usage: `python -m qkv_lab.gpt_bench --threads 1 --out src/qkv_lab/results/small-gpt.json`.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import torch
from torch import Tensor

from qkv._checks import check_sizes
from qkv.gpt import GPT, generate
from qkv_lab.gpt_training import encode, trained_site_gpt
from qkv_lab.harness import environment, fastest_ms, write_json

CPU = torch.device("cpu")
PROMPT = "## Exercises\n\n"  # 14 bytes
NEW_TOKENS = (
    16,
    32,
    64,
    112,
)  # the longest fills the context of 128 after the prompt


# --8<-- [start:uncached]
@torch.no_grad()
def generate_uncached(model: GPT, ids: Tensor, max_new_tokens: int) -> Tensor:
    """Greedy decoding without a cache: every step runs the model over all of
    `ids (B, L)` so far.

    Returns:
        `(B, L + max_new_tokens)`, the tokens
        `generate(model, ids, max_new_tokens, temperature=0)` gives.
    """
    check_sizes(0, max_new_tokens=max_new_tokens)
    for _ in range(max_new_tokens):
        # (B, L, V) -> (B, V): the whole prefix, every step
        logits = model(ids)[:, -1]
        # (B, L + 1)
        ids = torch.cat([ids, logits.argmax(-1, keepdim=True)], dim=1)
    return ids


# --8<-- [end:uncached]


def run(
    new_tokens: tuple[int, ...] = NEW_TOKENS,
    rounds: int = 3,
    min_run_time: float = 0.5,
    model: GPT | None = None,
) -> dict:
    """Milliseconds to generate each `n` of `new_tokens` bytes with and without the cache.

    Args:
        new_tokens: how many bytes to generate, each one case.
        rounds: sweeps; each case keeps its fastest.
        min_run_time: seconds of timed blocks per case and round, at least.
        model: the GPT to time; the trained site GPT when None.
    """
    model = trained_site_gpt()[0] if model is None else model
    prompt = encode(PROMPT)[None]  # (1, P)
    calls = {
        "cached": lambda n: generate(model, prompt, n, temperature=0),
        "uncached": lambda n: generate_uncached(model, prompt, n),
    }
    same = all(
        torch.equal(calls["cached"](n), calls["uncached"](n))
        for n in new_tokens
    )
    ms = {(name, n): math.inf for name in calls for n in new_tokens}
    for _ in range(rounds):
        for n in new_tokens:
            for name, call in calls.items():
                call(n)  # warm-up
                ms[name, n] = min(
                    ms[name, n],
                    fastest_ms(lambda c=call, n=n: c(n), CPU, min_run_time),
                )
    return {
        "what": "milliseconds to generate n bytes greedily with the site GPT, batch 1, float32",
        "environment": environment(CPU),
        "model": {
            "width": model.config.width,
            "layers": model.config.layers,
            "heads": model.config.heads,
            "kv_heads": model.config.kv_heads,
            "context": model.config.context,
        },
        "prompt_bytes": prompt.size(1),
        "settings": {"rounds": rounds, "min_run_time_s": min_run_time},
        "same_tokens": same,
        "results": [
            {"loop": name, "new_tokens": n, "ms": round(ms[name, n], 3)}
            for name in calls
            for n in new_tokens
        ],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m qkv_lab.gpt_bench", description=__doc__
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=3,
        help="sweeps; each case keeps its fastest",
    )
    parser.add_argument(
        "--threads", type=int, help="torch threads (default: torch's choice)"
    )
    parser.add_argument("--out", type=Path, default=Path("small-gpt.json"))
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    write_json(run(rounds=args.rounds), args.out)
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
