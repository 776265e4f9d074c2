"""The package's Triton kernels compiled for Hopper (sm_90) on any host, with Triton's bundled ptxas.

Needs no GPU: `compile_for_sm90` hands a kernel to Triton's compiler for `GPUTarget("cuda", 90, 32)`, with
every pointer marked 16-byte aligned, as torch's allocations are and a real launch specialises them. Only
then does Triton pipeline the loads through multi-buffered shared memory, the code an H100 actually runs.
The tests use it to catch what only the compiler rejects; `usage` reads the registers, spills and shared
memory of what it compiles (the tests, `benchmarks/gpu/sm90_resources.py`).
"""

from __future__ import annotations

import re
import subprocess
import tempfile
from pathlib import Path

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

# bytes of shared memory one program may use on an H100 (227 KiB)
H100_SHARED_MEMORY = 232_448

# the kernels' arguments that are not tensors of the inputs' dtype
TYPES = {"scale": "fp32", "qk_scale": "fp32"}
TYPES |= dict.fromkeys(
    ["LSE", "LSE2", "Delta", "dQAccum", "PartialOut", "PartialLSE"], "*fp32"
)
TYPES |= dict.fromkeys(
    ["KeyLengths", "CuSeqlensQ", "CuSeqlensK", "BlockTables", "Lengths"], "*i32"
)
TYPES |= {
    "Counters": "*i32",
    "max_keys": "i32",
    "batch": "i32",
    "pool_rows": "i32",
}
TYPES |= dict.fromkeys(
    ["seqlen_q", "seqlen_k", "bottom_right", "window", "group", "heads_kv"],
    "i32",
)
TYPES |= dict.fromkeys(["page_size", "max_pages", "num_splits"], "i32")


def compile_for_sm90(
    kernel: triton.JITFunction,
    constants: dict,
    *,
    pointers: str = "*bf16",
    num_warps: int = 4,
    num_stages: int = 3,
) -> triton.compiler.CompiledKernel:
    """`kernel` compiled for sm_90 with `constants` and these launch options.

    Args:
        kernel: a `triton.jit` function of `qkv.kernels`.
        constants: values of its `tl.constexpr` parameters (others in it are ignored; one not given takes
            its default); a pointer given as None is compiled as absent, as a launch without that tensor is.
        pointers: the type of every pointer not named in `TYPES`: the inputs' dtype, `"*bf16"` or `"*fp16"`.
        num_warps, num_stages: the launch options of one autotuner configuration.

    Returns:
        The compiled kernel: its cubin in `.asm["cubin"]`, the shared memory it takes in `.metadata.shared`.
    """
    defaults = {
        p.name: p.default
        for p in kernel.params
        if p.is_constexpr and p.has_default
    }
    constexprs = {
        name: constants.get(name, defaults.get(name))
        for name in kernel.arg_names
        if name in constants or name in defaults
    }
    signature = {
        p.name: "constexpr"
        if p.name in constexprs
        else TYPES.get(p.name, pointers)
        for p in kernel.params
    }
    aligned = {
        (i,): [["tt.divisibility", 16]]
        for i, p in enumerate(kernel.params)
        if signature[p.name].startswith("*")
    }
    return triton.compile(
        ASTSource(kernel, signature, constexprs, aligned),
        target=GPUTarget("cuda", 90, 32),
        options={"num_warps": num_warps, "num_stages": num_stages},
    )


# the cuobjdump that Triton bundles, which reads a cubin on any host
CUOBJDUMP = (
    Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
)


def usage(compiled: triton.compiler.CompiledKernel) -> dict[str, int]:
    """What a kernel that `compile_for_sm90` compiled takes, read from its cubin.

    Returns:
        `registers` per thread, `stack` bytes of stack frame per thread (above zero at 255 registers:
        ptxas spilled), and `shared`, Triton's count of shared memory bytes per program.
    """
    with tempfile.NamedTemporaryFile(suffix=".cubin") as cubin:
        cubin.write(compiled.asm["cubin"])
        cubin.flush()
        report = subprocess.run(
            [str(CUOBJDUMP), "--dump-resource-usage", cubin.name],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    registers, stack = (
        int(re.search(rf"{field}:(\d+)", report).group(1))
        for field in ("REG", "STACK")
    )
    return {
        "registers": registers,
        "stack": stack,
        "shared": compiled.metadata.shared,
    }
