"""The toys' trained results under each of torch's CPU kernel sets: what the articles may claim on any machine.

torch picks its CPU kernels by what the processor offers (AVX-512, AVX2, or plain vector code on others) and
sums in a different order in each, so a toy trained for a few hundred steps can end in a different place on
another machine. `python -m qkv_lab.cpu_kernels` trains the toys whose numbers the articles state, once per
kernel set (each in a fresh process with `ATEN_CPU_CAPABILITY` set, nothing read from `qkv_lab.remember`'s
cache), and records what each ended at in `results/cpu-kernels.json`. An article's claim about a toy must hold
under every kernel set recorded there; the article's own block checks it on the reader's machine.

    python -m qkv_lab.cpu_kernels --out src/qkv_lab/results/cpu-kernels.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import torch

from qkv_lab.harness import environment, write_json

# torch's x86 kernel sets, widest first
CAPABILITIES = ("avx512", "avx2", "default")
SEEDS = range(5)  # the seeds the articles train


MAX_TOKEN_RUNS = [
    {"pre_ln": pre_ln, "lr": lr, "seed": seed}
    for pre_ln, lr in ((True, 1e-2), (False, 1e-2), (False, 3e-3))
    for seed in SEEDS
]  # transformer-block.md's runs: pre-LN and post-LN at 1e-2, post-LN at 3e-3


def toy_results() -> dict:
    """Train the articles' toys here, with this process's kernels: the numbers their claims rest on."""
    from qkv_lab.toys import measure_induction, train_max_token

    return {
        "capability": torch.backends.cpu.get_cpu_capability(),
        "max_token": [
            {**run, "losses": train_max_token(**run)} for run in MAX_TOKEN_RUNS
        ],
        "induction": [measure_induction(seed) for seed in SEEDS],
    }


def under(capability: str) -> dict:
    """`toy_results()` computed in a fresh process whose torch uses the kernel set `capability`."""
    env = {**os.environ, "ATEN_CPU_CAPABILITY": capability, "QKV_CACHE": "off"}
    done = subprocess.run(
        [sys.executable, "-m", "qkv_lab.cpu_kernels", "--here"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(done.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="where to write the report")
    parser.add_argument(
        "--here",
        action="store_true",
        help="print this process's results as JSON",
    )
    args = parser.parse_args()
    if args.here:
        print(json.dumps(toy_results()))
        return
    if args.out is None:
        parser.error("--out is required unless --here is given")
    runs = {}
    for capability in CAPABILITIES:
        runs[capability] = under(capability)
        print(
            f"{capability}: ran with {runs[capability]['capability']}",
            file=sys.stderr,
        )
    report = {
        "what": "the articles' toys trained once per CPU kernel set of torch, nothing cached",
        "seeds": list(SEEDS),
        **environment(torch.device("cpu")),
        "timing": "none: these are losses and scores, not times",
        "runs": runs,
    }
    write_json(report, args.out)


if __name__ == "__main__":
    main()
