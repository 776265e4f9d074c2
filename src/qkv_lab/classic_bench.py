"""Benchmark the classic scores on a CPU: additive and concat (a network per pair) against dot and general.

Every module of `qkv.classic` runs one forward pass (inference mode, float32) on `B = 4` sequences with queries
and keys of size `d = 64` (the additive module's hidden width is `d` too), for `L = S = N`. For the additive
module the report also times each stage of its score on its own, to show where the time goes:

- `projections`: `W q` and `U k + b`, two small matrix products;
- `broadcast sum`: `W q + U k + b` broadcast into the `(B, L, S, hidden)` tensor;
- `tanh`: the `tanh` of that tensor, a new tensor of the same size;
- `v_a`: the product with `v_a` that reduces it to the `(B, L, S)` scores;
- `softmax + sum`: the weights and the weighted sum of the values, as every score does.

And, to price one element of that tensor, three elementwise operations on a tensor of its size at the
longest N (`B * N * N * hidden` floats), each written into a new tensor (as the module does) and into one
that already exists (`out=`): `add` (`x + 1`), `tanh` and `sigmoid`, with the minor page faults of one
call (memory the operating system maps on first touch; Linux and macOS, None elsewhere).

Times are `qkv_lab.harness.fastest_ms` (the fastest of blocked runs), and the whole sweep runs `rounds`
times, each case keeping its fastest round. The JSON report (`--out`) holds the device, versions, thread count
and UTC date (`qkv_lab.harness.environment`) beside the numbers.

Usage: `python -m qkv_lab.classic_bench --threads 1 --out src/qkv_lab/results/additive-vs-dot-product.json`.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn

try:
    import resource
except ImportError:  # Windows
    resource = None

from qkv.classic import AdditiveAttention, LuongAttention
from qkv.functional import safe_softmax
from qkv_lab.harness import environment, fastest_ms

CPU = torch.device("cpu")  # the lab's CPU benchmarks run here
BATCH, DIM = 4, 64  # the additive module's hidden width is DIM too
LENGTHS = (32, 64, 128, 256)  # L = S = N
MODULES = ("additive", "concat", "general", "dot")
STAGES = ("projections", "broadcast sum", "tanh", "v_a", "softmax + sum")
ELEMENTWISE = {"add": torch.add, "tanh": torch.tanh, "sigmoid": torch.sigmoid}


def modules() -> dict[str, nn.Module]:
    """The four scores at the benchmark's sizes, freshly initialised from seed 0."""
    torch.manual_seed(0)
    return {
        "additive": AdditiveAttention(DIM, DIM, DIM),
        "concat": LuongAttention(DIM, score="concat"),
        "general": LuongAttention(DIM, score="general"),
        "dot": LuongAttention(DIM, score="dot"),
    }


def additive_stages(
    attn: AdditiveAttention, x: torch.Tensor
) -> dict[str, Callable[[], object]]:
    """Each stage of `attn`'s forward pass on `x (B, N, DIM)` as queries, keys and values, on its own."""
    q = attn.query_proj(x)[:, :, None, :]  # (B, L, 1, hidden)
    k = attn.key_proj(x)[:, None, :, :]  # (B, 1, S, hidden)
    summed = q + k  # (B, L, S, hidden)
    hidden = torch.tanh(summed)  # (B, L, S, hidden)
    scores = attn.score(hidden).squeeze(-1)  # (B, L, S)
    return {
        "projections": lambda: (attn.query_proj(x), attn.key_proj(x)),
        "broadcast sum": lambda: q + k,
        "tanh": lambda: torch.tanh(summed),
        "v_a": lambda: attn.score(hidden),
        "softmax + sum": lambda: safe_softmax(scores) @ x,
    }


def elementwise(numel: int) -> dict[tuple[str, str], Callable[[], object]]:
    """Each of `ELEMENTWISE` on `numel` floats, into a new tensor and into an existing one."""
    x, out = torch.randn(numel), torch.empty(numel)
    args = {name: (x, 1.0) if name == "add" else (x,) for name in ELEMENTWISE}
    calls = {}
    for name, op in ELEMENTWISE.items():
        calls[name, "new"] = lambda op=op, a=args[name]: op(*a)
        calls[name, "existing"] = lambda op=op, a=args[name]: op(*a, out=out)
    return calls


def page_faults(call: Callable[[], object]) -> int | None:
    """Minor page faults of the process during one `call()`, or None where the OS does not count them."""
    if resource is None:
        return None
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    call()
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before


def run(
    lengths: tuple[int, ...] = LENGTHS,
    rounds: int = 3,
    min_run_time: float = 0.3,
) -> dict:
    """Milliseconds of each module's forward pass and of each additive stage, at every N."""
    scores = modules()
    # (kind, name, n or into) -> fastest milliseconds
    ms: dict[tuple, float] = {}
    faults: dict[tuple, int | None] = {}
    with torch.inference_mode():
        for _ in range(rounds):
            for n in lengths:
                x = torch.randn(
                    BATCH, n, DIM, generator=torch.Generator().manual_seed(n)
                )
                cases = {
                    ("module", name): lambda m=m, x=x: m(x, x, x)
                    for name, m in scores.items()
                }
                stages = additive_stages(scores["additive"], x)
                cases |= {
                    ("stage", name): call for name, call in stages.items()
                }
                for (kind, name), call in cases.items():
                    call()  # warm-up
                    best = ms.get((kind, name, n), math.inf)
                    ms[kind, name, n] = min(
                        best, fastest_ms(call, CPU, min_run_time)
                    )
            # the (B, N, N, hidden) tensor at the longest N
            numel = BATCH * max(lengths) ** 2 * DIM
            for (name, into), call in elementwise(numel).items():
                call()  # warm-up
                best = ms.get(("elementwise", name, into), math.inf)
                ms["elementwise", name, into] = min(
                    best, fastest_ms(call, CPU, min_run_time)
                )
                faults["elementwise", name, into] = page_faults(call)
    return {
        "environment": environment(CPU),
        "shape": {
            "batch": BATCH,
            "dim": DIM,
            "hidden": DIM,
            "dtype": "float32",
        },
        "settings": {"rounds": rounds, "min_run_time_s": min_run_time},
        "results": [
            {"module": name, "n": n, "ms": ms["module", name, n]}
            for name in MODULES
            for n in lengths
        ],
        "additive_stages": [
            {"stage": name, "n": n, "ms": ms["stage", name, n]}
            for name in STAGES
            for n in lengths
        ],
        "elementwise": [
            {
                "op": name,
                "into": into,
                "numel": numel,
                "ms": ms["elementwise", name, into],
                "page_faults": faults["elementwise", name, into],
                "page_bytes": resource.getpagesize() if resource else None,
            }
            for name in ELEMENTWISE
            for into in ("new", "existing")
        ],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m qkv_lab.classic_bench", description=__doc__
    )
    parser.add_argument("--n", type=int, nargs="+", default=list(LENGTHS))
    parser.add_argument(
        "--rounds",
        type=int,
        default=3,
        help="sweeps; each case keeps its fastest",
    )
    parser.add_argument(
        "--threads", type=int, help="torch threads (default: torch's choice)"
    )
    parser.add_argument(
        "--out", type=Path, default=Path("additive-vs-dot-product.json")
    )
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    report = run(tuple(args.n), args.rounds)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
