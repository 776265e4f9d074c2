"""Benchmark efficient attention against exact attention: time and peak memory against the sequence length.

Every method runs on the same inputs, `(B, H, N, D)` float32 from `inputs`, for each N:

- `exact`: `qkv.scaled_dot_product_attention`, the formula, which builds the `(N, N)` scores;
- `torch-sdpa`: `torch.nn.functional.scaled_dot_product_attention` (on a CPU, a tiled kernel: `O(N)` memory);
- `window-as-mask`: the formula again, under `qkv.sliding_window_mask`: the window as a mask on all N^2 scores;
- `sliding-window`, `block-sparse`, `axial`, `linear`, `linear-causal`, `performer`, `linformer`: the methods of
  `qkv.efficient` with the settings in `METHODS`.

Time is the fastest of `torch.utils.benchmark`'s blocked runs over several sweeps (other work on the
machine only ever adds time). Peak memory is what torch allocates during one
call, above what was allocated before it, replayed from the allocation events of `torch.profiler`: sizes of
tensors, not the process's resident memory, so it does not depend on the load of the machine.

The JSON report (`--out`) holds the device, versions and UTC date (`qkv_lab.harness.environment`) beside the numbers;
`fit_exponent` fits `time ~ N^p` to a report's rows. `inputs` also makes the two families of inputs the quality
comparison uses (`"local"`: attention concentrated near the diagonal, `"diffuse"`: spread over every key).
The quality measurements, `relative_errors` and `performer_errors`, draw their inputs and random matrices from
a `seed` and are kept on disk (`qkv_lab.remember`): the post, its figures and a reader's rerun share them.

Usage: `python -m qkv_lab.efficient_bench --out src/qkv_lab/results/efficient-attention.json`.
"""

from __future__ import annotations

import argparse
import functools
import math
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor

from qkv import efficient
from qkv.functional import scaled_dot_product_attention
from qkv.masks import sliding_window_mask
from qkv_lab.harness import (
    environment,
    fastest_ms,
    peak_memory_bytes,
    write_json,
)
from qkv_lab.remember import remembered

CPU = torch.device("cpu")  # the lab's CPU benchmarks run here
WINDOW = 128  # keys per query for the sliding window
BAND = 64  # half-width of the Longformer band, and the tile of the block-sparse computation
FEATURES = 256  # Performer's random features
PROJECTED = 256  # Linformer's projected length
# Performer's and Linformer's random matrices come from their own seed: drawn from the inputs' seed, the
# first rows of W would repeat the first queries, and the estimate would be far worse than chance.
RANDOM_MATRICES_SEED = 1_000

# the methods that mask the future
CAUSAL = ("window-as-mask", "sliding-window", "linear-causal")
QUADRATIC = ("exact", "window-as-mask")  # the methods that build all N^2 scores

Attention = Callable[[Tensor, Tensor, Tensor], Tensor]


def inputs(
    n: int,
    *,
    batch: int = 1,
    heads: int = 2,
    head_dim: int = 64,
    kind: Literal["random", "local", "diffuse"] = "random",
    seed: int = 0,
) -> tuple[Tensor, Tensor, Tensor]:
    """q, k, v of shape `(B, H, N, D)`, float32.

    - `"random"`: every entry `N(0, 1)`.
    - `"local"`: q and k share a sinusoidal code of the position scaled by 2 (plus noise of std 0.5), so that a
      query's weight falls off with the distance to the key: most of it lies within a few dozen positions.
    - `"diffuse"`: entries `N(0, 0.5^2)` for q and k: small scores, weights spread over every key.

    Values are `N(0, 1)` in every case.
    """
    generator = torch.Generator().manual_seed(seed)

    def noise(std: float = 1.0) -> Tensor:
        return std * torch.randn(batch, heads, n, head_dim, generator=generator)

    if kind == "random":
        return noise(), noise(), noise()
    if kind == "diffuse":
        return noise(0.5), noise(0.5), noise()
    if kind != "local":
        raise ValueError(
            f"kind must be 'random', 'local' or 'diffuse', got {kind!r}"
        )
    position = torch.arange(n)[:, None]  # (N, 1)
    frequency = 10_000 ** (-torch.arange(0, head_dim, 2) / head_dim)  # (D/2,)
    code = torch.cat(
        [torch.sin(position * frequency), torch.cos(position * frequency)],
        dim=-1,
    )
    return 2 * code + noise(0.5), 2 * code + noise(0.5), noise()


def methods(n: int, head_dim: int = 64, seed: int = 0) -> dict[str, Attention]:
    """Every method at sequence length `n`, as `(q, k, v) -> out`; masks and random matrices drawn once.

    Performer's features and Linformer's projection come from `RANDOM_MATRICES_SEED + seed`.
    """
    generator = torch.Generator().manual_seed(RANDOM_MATRICES_SEED + seed)
    band = efficient.sparse_mask("longformer", n, BAND, num_global=1)
    features = efficient.PerformerFeatures(
        head_dim, FEATURES, generator=generator
    )
    projection = efficient.linformer_projection(
        n, min(PROJECTED, n), generator=generator
    )
    # a grid as square as a power of two allows
    rows = 2 ** (int(math.log2(n)) // 2)

    def axial(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        # (B, H, R, C, D)
        grid = [x.unflatten(-2, (rows, n // rows)) for x in (q, k, v)]
        out = efficient.axial_attention(*grid, "row")
        # rows, then columns
        out = efficient.axial_attention(out, grid[1], grid[2], "column")
        return out.flatten(-3, -2)

    window = sliding_window_mask(n, window=WINDOW)
    return {
        "exact": lambda q, k, v: scaled_dot_product_attention(q, k, v),
        "torch-sdpa": lambda q, k, v: F.scaled_dot_product_attention(q, k, v),
        "window-as-mask": lambda q, k, v: scaled_dot_product_attention(
            q, k, v, attn_mask=window
        ),
        "sliding-window": lambda q, k, v: efficient.sliding_window_attention(
            q, k, v, WINDOW
        ),
        "block-sparse": lambda q, k, v: efficient.block_sparse_attention(
            q, k, v, band, BAND
        ),
        "axial": axial,
        "linear": lambda q, k, v: efficient.linear_attention(q, k, v),
        "linear-causal": lambda q, k, v: efficient.linear_attention(
            q, k, v, causal=True
        ),
        "performer": lambda q, k, v: efficient.linear_attention(
            q, k, v, feature_map=features
        ),
        "linformer": lambda q, k, v: efficient.linformer_attention(
            q, k, v, projection
        ),
    }


@remembered
def relative_errors(
    n: int, kind: Literal["random", "local", "diffuse"], seed: int = 0
) -> dict[str, float]:
    """How far each method lands from exact attention on the same inputs: `|out - exact| / |exact|`.

    `seed` draws the inputs and the random matrices (see `methods`). Causal methods are compared with causal
    exact attention, the others with full attention. `mean-of-values` is the baseline of an attention that
    ignores the scores and averages every value. Axial attention is left out: it is a different layer (two
    of them, rows then columns), not an estimate of one full attention.
    """
    q, k, v = inputs(n, kind=kind, seed=seed)
    exact = {
        causal: F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        for causal in (False, True)
    }
    errors = {
        "mean-of-values": _relative(
            v.mean(dim=-2, keepdim=True).expand_as(v), exact[False]
        )
    }
    for name, attend in methods(n, seed=seed).items():
        if name not in ("exact", "torch-sdpa", "window-as-mask", "axial"):
            errors[name] = _relative(attend(q, k, v), exact[name in CAUSAL])
    return errors


@remembered
def performer_errors(
    n: int, num_features: list[int], *, orthogonal: bool = True, seed: int = 0
) -> list[float]:
    """Performer's relative error against exact attention on `"diffuse"` inputs, for each count of features.

    `seed` draws the inputs and, from `RANDOM_MATRICES_SEED + seed`, the features `W` (anew for each count).
    """
    q, k, v = inputs(n, kind="diffuse", seed=seed)
    exact = F.scaled_dot_product_attention(q, k, v)
    errors = []
    for count in num_features:
        generator = torch.Generator().manual_seed(RANDOM_MATRICES_SEED + seed)
        phi = efficient.PerformerFeatures(
            q.size(-1), count, orthogonal=orthogonal, generator=generator
        )
        errors.append(
            _relative(
                efficient.linear_attention(q, k, v, feature_map=phi), exact
            )
        )
    return errors


def _relative(out: Tensor, exact: Tensor) -> float:
    return float((out - exact).norm() / exact.norm())


def fit_exponent(ns: list[int], values: list[float]) -> float:
    """The slope `p` of the least-squares line through `(log N, log value)`: `value ~ N^p`."""
    x = torch.tensor(ns, dtype=torch.float64).log()
    y = torch.tensor(values, dtype=torch.float64).log()
    x, y = x - x.mean(), y - y.mean()
    return float((x * y).sum() / (x * x).sum())


def run(
    ns: list[int], exact_max: int, rounds: int = 3, progress: bool = True
) -> dict:
    """Time and peak memory of every method at every N (the N^2 ones only up to `exact_max`).

    The whole sweep is timed `rounds` times and each case keeps its fastest round, so that a burst of other
    work on the machine has to hit the same case in every round to show.
    """
    cases = [
        (n, name)
        for n in ns
        for name in methods(n)
        if n <= exact_max or name not in QUADRATIC
    ]
    ms = dict.fromkeys(cases, math.inf)
    memory = {}
    for round_ in range(rounds):
        for n, name in cases:
            if progress:
                print(
                    f"\rround {round_ + 1}/{rounds} N={n:<6} {name:<16}",
                    end="",
                    file=sys.stderr,
                )
            q, k, v = inputs(n)
            call = functools.partial(methods(n)[name], q, k, v)
            call()  # warm-up
            ms[n, name] = min(
                ms[n, name], fastest_ms(call, CPU, min_run_time=0.3)
            )
            if round_ == 0:
                memory[n, name] = peak_memory_bytes(call, CPU)
    if progress:
        print(file=sys.stderr)
    rows = [
        {
            "method": name,
            "n": n,
            "ms": ms[n, name],
            "peak_memory_bytes": memory[n, name],
        }
        for n, name in cases
    ]
    shape = {"batch": 1, "heads": 2, "head_dim": 64, "dtype": "float32"}
    settings = {
        "window": WINDOW,
        "band": BAND,
        "performer_features": FEATURES,
        "linformer_length": PROJECTED,
        "rounds": rounds,
    }
    return {
        "environment": environment(CPU),
        "shape": shape,
        "settings": settings,
        "results": rows,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m qkv_lab.efficient_bench", description=__doc__
    )
    parser.add_argument(
        "--n", type=int, nargs="+", default=[256, 512, 1024, 2048, 4096, 8192]
    )
    parser.add_argument(
        "--exact-max",
        type=int,
        default=8192,
        help="longest N for the methods that build all N^2 scores",
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
    parser.add_argument(
        "--out", type=Path, default=Path("efficient-attention.json")
    )
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    report = run(args.n, args.exact_max, args.rounds)
    write_json(report, args.out)
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
