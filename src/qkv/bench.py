"""Benchmark attention implementations: TFLOP/s and peak memory, forward and forward + backward.

Paths measured:

- `reference`: `qkv.scaled_dot_product_attention`, the explicit formula;
- `torch-math`, `torch-flash`, `torch-efficient`, `torch-cudnn`: `torch.nn.functional.scaled_dot_product_attention`
  with one backend forced by `torch.nn.attention.sdpa_kernel`;
- `qkv-flash`: `qkv.flash_attention`, the package's Triton kernels (CUDA only: the interpreter's timings would
  mean nothing).

A path that cannot run a case is recorded, not dropped: status `unsupported` (no kernel for these inputs, with
torch's or qkv's reason) or `oom`. Shapes follow the FlashAttention papers: `batch * N` = `--tokens` and
`heads * D` = `--hidden`. FLOPs count the two matrix products, `4 * B * H * N^2 * D`, halved when causal;
the backward pass counts 2.5 times the forward. On CUDA each case is timed by `triton.testing.do_bench`
(median) after a first call that compiles and autotunes; on CPU by `torch.utils.benchmark` (median of
blocked runs), where peak memory is not measured.

The JSON report (`--out`) holds the device, its clocks where `nvidia-smi` reports them, the versions of
Python, torch, Triton and cuDNN, the platform and the UTC date beside the numbers. `--plot DIR` draws one PNG of
TFLOP/s against N per (mode, dtype, head size, causal).

Usage: `python -m qkv.bench --help`; on a CPU host, e.g. `python -m qkv.bench --device cpu --n 128 256`.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import importlib.metadata
import json
import platform
import subprocess
import sys
import warnings
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.nn.attention import SDPBackend, sdpa_kernel

from qkv.functional import scaled_dot_product_attention
from qkv.kernels import flash_attention

if TYPE_CHECKING:
    from matplotlib.figure import Figure

TORCH_BACKENDS = {
    "torch-math": SDPBackend.MATH,
    "torch-flash": SDPBackend.FLASH_ATTENTION,
    "torch-efficient": SDPBackend.EFFICIENT_ATTENTION,
    "torch-cudnn": SDPBackend.CUDNN_ATTENTION,
}
PATHS = ("reference", *TORCH_BACKENDS, "qkv-flash")
MODES = ("forward", "forward+backward")
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
BACKWARD_FLOPS_FACTOR = 2.5  # the backward pass does 2.5 times the forward's matrix-product FLOPs

Attention = Callable[[Tensor, Tensor, Tensor, bool], Tensor]


@dataclass(frozen=True)
class Case:
    """One measurement: a path on one shape, dtype and mode."""

    path: str
    mode: str
    dtype: str
    head_dim: int
    causal: bool
    n: int
    batch: int
    heads: int


def attention_flops(case: Case) -> float:
    """Matrix-product FLOPs of one call: `4 B H N^2 D`, halved when causal, times 3.5 with the backward."""
    flops = 4 * case.batch * case.heads * case.n**2 * case.head_dim
    if case.causal:
        flops /= 2
    if case.mode == "forward+backward":
        flops *= 1 + BACKWARD_FLOPS_FACTOR
    return flops


def attention_function(path: str) -> Attention:
    """`(q, k, v, causal) -> output` for a path, with its torch backend forced where it has one."""
    if path == "reference":
        return lambda q, k, v, causal: scaled_dot_product_attention(q, k, v, is_causal=causal)
    if path == "qkv-flash":
        return lambda q, k, v, causal: flash_attention(q, k, v, causal=causal)
    backend = TORCH_BACKENDS[path]

    def forced(q: Tensor, k: Tensor, v: Tensor, causal: bool) -> Tensor:
        with sdpa_kernel(backend):
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

    return forced


def measure(case: Case, device: torch.device) -> dict:
    """Time one case; return its fields with `status`, `ms`, `tflops`, `peak_memory_bytes` and `reason`."""
    record = {**asdict(case), "status": "ok", "ms": None, "tflops": None}
    record |= {"peak_memory_bytes": None, "reason": None}
    if case.path == "qkv-flash" and device.type != "cuda":
        return record | {"status": "unsupported", "reason": "needs CUDA"}
    try:
        with _warnings_as_reason() as reasons:
            call = _make_call(case, device)
            call()  # compiles, autotunes, and fails early on inputs a backend cannot take
            if device.type == "cuda":
                record["peak_memory_bytes"] = _cuda_peak_memory(call)
                record["ms"] = _time_cuda(call)
            else:
                record["ms"] = _time_cpu(call)
    except torch.OutOfMemoryError:
        return record | {"status": "oom", "reason": "out of memory"}
    except (TypeError, ValueError) as error:  # qkv's checks refusing inputs, e.g. qkv-flash in fp32
        return record | {"status": "unsupported", "reason": str(error).splitlines()[0]}
    except RuntimeError as error:
        missing = ("no available kernel", "no viable backend")
        status = "unsupported" if any(m in str(error).lower() for m in missing) else "error"
        return record | {
            "status": status,
            "reason": " ".join(reasons) or str(error).splitlines()[0],
        }
    finally:
        if device.type == "cuda":
            torch.cuda.empty_cache()
    record["tflops"] = attention_flops(case) / (record["ms"] * 1e-3) / 1e12
    return record


def _make_call(case: Case, device: torch.device) -> Callable[[], None]:
    """A no-argument function that runs the case once (forward, or forward and backward)."""
    generator = torch.Generator(device=device).manual_seed(0)
    shape = (case.batch, case.heads, case.n, case.head_dim)
    dtype = DTYPES[case.dtype]
    backward = case.mode == "forward+backward"
    q, k, v = (
        torch.randn(shape, device=device, dtype=dtype, generator=generator).requires_grad_(backward)
        for _ in range(3)
    )
    d_out = torch.randn(shape, device=device, dtype=dtype, generator=generator)
    attention = attention_function(case.path)

    def call() -> None:
        if backward:
            attention(q, k, v, case.causal).backward(d_out)
            # Drop the gradients: the next call must not accumulate into them, and memory measured
            # from before a call must not count the previous call's gradients as already there.
            q.grad = k.grad = v.grad = None
        else:
            with torch.no_grad():
                attention(q, k, v, case.causal)

    return call


@contextlib.contextmanager
def _warnings_as_reason() -> Iterator[list[str]]:
    """Collect warnings (torch explains a missing kernel in warnings) as one-line reasons."""
    reasons: list[str] = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            yield reasons
        finally:
            reasons.extend(str(warning.message).splitlines()[0] for warning in caught)


def _cuda_peak_memory(call: Callable[[], None]) -> int:
    """Bytes allocated by one call beyond what was allocated before it."""
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    call()
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated() - before


def _time_cuda(call: Callable[[], None]) -> float:
    """Median milliseconds per call by `triton.testing.do_bench` (warm-up, repetitions, L2 flushed)."""
    import triton.testing

    return triton.testing.do_bench(call, return_mode="median")


def _time_cpu(call: Callable[[], None]) -> float:
    """Median milliseconds per call by `torch.utils.benchmark` (blocked runs of at least 0.2 s)."""
    from torch.utils import benchmark

    timer = benchmark.Timer(
        stmt="call()", globals={"call": call}, num_threads=torch.get_num_threads()
    )
    return timer.blocked_autorange(min_run_time=0.2).median * 1e3


def environment(device: torch.device) -> dict:
    """Where and when the numbers were taken: device, clocks, versions, platform, UTC date."""
    info = {
        "date_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "device": str(device),
        "device_name": _cpu_name(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "torch": torch.__version__,
        "triton": _version("triton"),
        "cudnn": None,
        "gpu_clocks": None,
        "cpu_threads": torch.get_num_threads(),
    }
    if device.type == "cuda":
        info["device_name"] = torch.cuda.get_device_name(device)
        info["cudnn"] = torch.backends.cudnn.version()
        info["gpu_clocks"] = _nvidia_smi_clocks()
    return info


def _cpu_name() -> str:
    """The CPU's model name from /proc/cpuinfo where there is one, else what `platform` knows."""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def _version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def _nvidia_smi_clocks() -> dict | None:
    """SM and memory clocks (current and maximum, MHz) and the driver, as nvidia-smi reports them."""
    fields = ["clocks.sm", "clocks.max.sm", "clocks.mem", "clocks.max.mem", "driver_version"]
    try:
        result = subprocess.run(
            ["nvidia-smi", f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    values = [value.strip() for value in result.stdout.splitlines()[0].split(",")]
    return dict(zip(fields, values, strict=False))


def cases(args: argparse.Namespace) -> list[Case]:
    """Every combination asked for on the command line, in the order they are measured."""
    return [
        Case(
            path,
            mode,
            dtype,
            head_dim,
            causal,
            n,
            max(1, args.tokens // n),
            args.hidden // head_dim,
        )
        for mode in args.mode
        for dtype in args.dtype
        for head_dim in args.head_dim
        for causal in args.causal
        for n in args.n
        for path in args.paths
    ]


def run(args: argparse.Namespace, progress: TextIO | None = sys.stderr) -> dict:
    """Measure every case, with a progress line on `progress`; return the report (environment + results)."""
    device = torch.device(args.device)
    todo = cases(args)
    results = []
    # do_bench, the memory statistics and Triton's launches all use the current CUDA device.
    current = torch.cuda.device(device) if device.type == "cuda" else contextlib.nullcontext()
    with current:
        for index, case in enumerate(todo, start=1):
            if progress:
                label = f"{case.path} {case.mode} {case.dtype} D={case.head_dim} N={case.n}"
                label += " causal" if case.causal else ""
                print(f"\r[{index:>3}/{len(todo)}] {label:<60}", end="", file=progress, flush=True)
            results.append(measure(case, device))
    if progress:
        print(file=progress)
    return {"environment": environment(device), "arguments": vars(args), "results": results}


def draw(report: dict, mode: str, dtype: str, head_dim: int, causal: bool) -> Figure:
    """TFLOP/s against N for one configuration, a line per path that ran; device and date in the title."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6.4, 4.2), layout="constrained")
    ax = fig.subplots()
    for path in PATHS:
        points = [
            (record["n"], record["tflops"])
            for record in report["results"]
            if (record["path"], record["mode"], record["dtype"]) == (path, mode, dtype)
            and (record["head_dim"], record["causal"]) == (head_dim, causal)
            and record["tflops"]
        ]
        if points:
            ax.plot(*zip(*points, strict=True), "o-", label=path)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("sequence length N")
    ax.set_ylabel("TFLOP/s")
    env = report["environment"]
    masking = "causal" if causal else "full"
    ax.set_title(
        f"{mode}, {dtype}, D={head_dim}, {masking}\n"
        f"{env['device_name']}, torch {env['torch']}, {env['date_utc']}",
        fontsize="medium",
    )
    ax.legend()
    return fig


def plot(report: dict, directory: Path) -> list[Path]:
    """One PNG per (mode, dtype, head size, causal) measured, drawn by `draw`; return their paths."""
    directory.mkdir(parents=True, exist_ok=True)
    configurations = dict.fromkeys(
        (r["mode"], r["dtype"], r["head_dim"], r["causal"]) for r in report["results"]
    )
    written = []
    for mode, dtype, head_dim, causal in configurations:
        masking = "causal" if causal else "full"
        path = directory / f"{mode.replace('+', '-')}_{dtype}_d{head_dim}_{masking}.png"
        draw(report, mode, dtype, head_dim, causal).savefig(path, dpi=120)
        written.append(path)
    return written


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m qkv.bench",
        description="TFLOP/s and peak memory of attention implementations, forward and forward+backward.",
    )
    cuda = torch.cuda.is_available()
    parser.add_argument("--device", default="cuda" if cuda else "cpu", help="cuda or cpu")
    parser.add_argument(
        "--n",
        type=int,
        nargs="+",
        help="sequence lengths (default 512 .. 16384 on CUDA, 128 256 on CPU)",
    )
    parser.add_argument("--head-dim", type=int, nargs="+", default=[64, 128], help="head sizes D")
    parser.add_argument("--dtype", nargs="+", choices=DTYPES, default=["bf16", "fp16"])
    parser.add_argument(
        "--causal",
        nargs="+",
        choices=["no", "yes"],
        default=["no", "yes"],
        help="measure without and/or with the causal mask",
    )
    parser.add_argument("--mode", nargs="+", choices=MODES, default=list(MODES))
    parser.add_argument("--paths", nargs="+", choices=PATHS, default=list(PATHS))
    parser.add_argument(
        "--tokens",
        type=int,
        help="batch * N (default 16384 on CUDA, 512 on CPU; batch is at least 1)",
    )
    parser.add_argument(
        "--hidden", type=int, help="heads * D (default 2048 on CUDA, 256 on CPU; must divide by D)"
    )
    parser.add_argument("--out", type=Path, default=Path("results.json"), help="JSON report")
    parser.add_argument("--plot", type=Path, help="directory for one PNG per configuration")
    args = parser.parse_args(argv)
    on_cuda = args.device.startswith("cuda")
    if on_cuda and not cuda:
        parser.error("--device cuda: torch sees no CUDA device here; use --device cpu")
    args.n = args.n or ([2**i for i in range(9, 15)] if on_cuda else [128, 256])
    args.tokens = args.tokens or (16384 if on_cuda else 512)
    args.hidden = args.hidden or (2048 if on_cuda else 256)
    if any(args.hidden % head_dim for head_dim in args.head_dim):
        parser.error(
            f"--hidden {args.hidden} must be a multiple of every --head-dim {args.head_dim}"
        )
    args.causal = [answer == "yes" for answer in args.causal]
    return args


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark from the command line; write the JSON report and, if asked, the plots."""
    args = parse_args(argv)
    report = run(args)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2, default=str) + "\n", encoding="utf-8")
    print(f"wrote {args.out}", file=sys.stderr)
    if args.plot:
        for path in plot(report, args.plot):
            print(f"wrote {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
