"""Training sweeps: every variant once per seed, each run timed and logged, the report written as it grows.

`block_changes`, `recall` and `hybrid` train a few small models, each once per seed, and record one list per
number per model (`bits_per_byte`, `accuracy`, ...) with one value per seed. `sweep` is that loop, written
once: every variant runs seed `seeds[0]`, then every variant the next seed, so that a stopped sweep holds
whole seeds; after every run the report is written again, so that it keeps what ran. `arguments` is the
command line those modules share (`--steps`, `--seeds`, `--out`).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from qkv_lab.harness import write_json


def sweep(
    report: dict,
    entries: dict[str, dict],
    seeds: Sequence[int],
    trial: Callable[[str, int], dict[str, float]],
    out: Path | None = None,
) -> dict:
    """Run `trial(name, seed)` for every seed and every name of `entries`, filling the entries in place.

    Args:
        report: the whole report, written to `out` after every run.
        entries: per variant name, its entry in `report`: a list for each number `trial` returns, and
            `seconds`, each appended one value per seed.
        seeds: the seeds, outer loop; the names of `entries` are the inner loop, in their order.
        trial: trains and scores one variant at one seed; returns its numbers by name.
        out: None, or where to write the report.

    Returns:
        `report`. The seconds are wall-clock seconds of each `trial` call, measured once.
    """
    for seed in seeds:
        for name, entry in entries.items():
            start = time.perf_counter()
            numbers = trial(name, seed)
            for key, value in numbers.items():
                entry[key].append(value)
            entry["seconds"].append(round(time.perf_counter() - start, 1))
            shown = ", ".join(
                f"{key} {value:.4f}" for key, value in numbers.items()
            )
            print(
                f"{time.strftime('%H:%M:%S')} {name:>14} seed {seed}: {shown}",
                file=sys.stderr,
                flush=True,
            )
            if out is not None:
                write_json(report, out)
    return report


def arguments(
    module: str,
    description: str | None,
    steps: int,
    seeds: Sequence[int],
    out: Path,
) -> argparse.ArgumentParser:
    """The command line of `python -m qkv_lab.<module>`: `--steps`, `--seeds` and `--out`, with defaults."""
    parser = argparse.ArgumentParser(
        prog=f"python -m qkv_lab.{module}", description=description
    )
    parser.add_argument("--steps", type=int, default=steps)
    parser.add_argument("--seeds", type=int, nargs="+", default=list(seeds))
    parser.add_argument("--out", type=Path, default=out)
    return parser
