"""Registers, stack (spills) and shared memory of every kernel configuration, compiled for sm_90 on any host.

    TRITON_INTERPRET=0 QKV_FLASH_AUTOTUNE=1 PYTHONPATH=src python benchmarks/gpu/sm90_resources.py [OUT.json]

Needs no GPU: each configuration that the autotuners of `qkv.kernels.flash` and `qkv.kernels.decode`
may try, and the variants that the lease tries (`flash.FORWARD_VARIANTS`, `flash.BACKWARD_VARIANTS`), is
compiled for Hopper (`qkv_lab.sm90.compile_for_sm90`, D = 128, bfloat16, pointers 16-byte aligned as
torch's are, full and causal), and the cubin read with the `cuobjdump` that Triton bundles
(`qkv_lab.sm90.usage`): `REG` registers per thread, `STACK` bytes of stack frame per thread (above zero
at 255 registers: ptxas spilled), and Triton's own count of shared memory (at most 232,448 bytes on an
H100). The numbers are those of the Triton installed where it runs, which may not be the GPU machine's.
One JSON line per configuration on stdout; all of them in OUT.json if given.
"""

import json
import sys
import time
from pathlib import Path

import triton

from qkv.kernels import decode, flash
from qkv_lab.sm90 import compile_for_sm90, usage


def resources(kernel, constants: dict, config: triton.Config) -> dict:
    """Compile `kernel` for sm_90 with `constants` and the launch options of `config`; read its cubin."""
    compiled = compile_for_sm90(
        kernel, constants, num_warps=config.num_warps, num_stages=config.num_stages
    )
    return usage(compiled)


def configurations():
    """`(kernel name, kernel, constants, config)` for every configuration the autotuners may try."""
    padded = {"CuSeqlensQ": None, "CuSeqlensK": None, "KeyLengths": None, "WINDOW": False}
    tuned = {
        "forward": (flash._tuned_forward, flash.FORWARD_VARIANTS),
        "dkdv": (flash._tuned_backward_dkdv, flash.BACKWARD_VARIANTS),
        "dq": (flash._tuned_backward_dq, []),
    }
    for name, (autotuner, variants) in tuned.items():
        for config in [*autotuner.configs, *variants]:
            for causal in (False, True):
                constants = {"HEAD_DIM": 128, "CAUSAL": causal, **padded, **config.kwargs}
                yield name, autotuner.fn, constants, config
    for config in [*decode._tuned_split.configs, *decode.DECODE_VARIANTS]:
        for block_m in (16, 64):  # one query, and sixteen, of a group of four heads
            for merge in (True, False):  # the merge in the same launch, or the merge kernel's
                constants = {"HEAD_DIM": 128, "BLOCK_M": block_m, "BlockTables": None}
                constants |= {"MERGE_IN_LAUNCH": merge, **config.kwargs}
                yield "decode", decode._tuned_split.fn, constants, config


def main() -> None:
    if flash.INTERPRETED:
        sys.exit(
            "TRITON_INTERPRET=1: the kernels are interpreted, not compiled; set TRITON_INTERPRET=0"
        )
    rows = []
    for name, kernel, constants, config in configurations():
        started = time.monotonic()
        row = {"kernel": name, "warps": config.num_warps, "stages": config.num_stages}
        row |= {key: value for key, value in constants.items() if value is not None}
        try:
            row |= resources(kernel, constants, config)
        except Exception as error:  # a configuration the compiler refuses is a result too
            row["error"] = f"{type(error).__name__}: {error}"[:200]
        row["compile_seconds"] = round(time.monotonic() - started, 1)
        rows.append(row)
        print(json.dumps(row), flush=True)
    if len(sys.argv) > 1:
        Path(sys.argv[1]).write_text(json.dumps(rows, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
