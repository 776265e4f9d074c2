"""How the lab measures: time per call, peak memory, where and when, and the JSON report.

Every benchmark of the lab takes its numbers through these functions, so that all the numbers on the site were
taken one way:

- `timing_ms(call, device)`: milliseconds per call, the fastest and the median of several timed runs (on a
  shared machine other work only ever adds time; the median says how far the fastest stands from the rest).
  CUDA: `triton.testing.do_bench` (warm-up, repetitions, L2 cache flushed between calls); CPU:
  `torch.utils.benchmark`'s blocked runs with torch's current number of threads. `fastest_ms` is its minimum.
- `graphed(call, device)`: on CUDA, one call captured in a CUDA graph and its replay, so that a timing of a
  few microseconds of work measures the kernels, not the Python and the launches around them.
- `kernel_launches(call, device)`: the names of the GPU kernels one call launches (torch's profiler).
- `sm_clock_mhz(device)`: the SM clock now, in MHz, as nvidia-smi (or torch) reports it; read right after a
  timing, it is the clock the case ran at, near enough.
- `peak_memory_bytes(call, device)`: the most bytes torch held at once during one call, above what it held
  before. CUDA: the caching allocator's peak statistic; CPU: replayed from the profiler's memory events.
- `environment(device)`: device, clocks, versions, platform, UTC date and how times were taken.
- `write_json(data, path)`: the report, indented, its folder created.
"""

from __future__ import annotations

import contextlib
import datetime
import importlib.metadata
import json
import platform
import statistics
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import torch
from torch.profiler import ProfilerActivity, profile

TIMING = "fastest of repeated runs (CUDA: triton.testing.do_bench; CPU: torch.utils.benchmark blocks)"


class Timing(NamedTuple):
    """Milliseconds per call: the fastest and the median of the timed runs."""

    min_ms: float
    median_ms: float


def timing_ms(
    call: Callable[[], object], device: torch.device, min_run_time: float = 0.2
) -> Timing:
    """Milliseconds per call of `call()`, the fastest and the median of several runs (module docstring).

    Args:
        call: runs the work once; compile it, and pin its launch configuration, before timing.
        device: where the work runs (`cuda` or `cpu`).
        min_run_time: on CPU, seconds of timed blocks at least.
    """
    if device.type == "cuda":
        import triton.testing

        # quantiles, not return_mode: both Triton 3.6 (the GPU machine's) and 3.9 take them
        fastest, median = triton.testing.do_bench(call, quantiles=[0.0, 0.5])
        return Timing(fastest, median)
    from torch.utils import benchmark

    timer = benchmark.Timer(
        stmt="call()",
        globals={"call": call},
        num_threads=torch.get_num_threads(),
    )
    times = sorted(timer.blocked_autorange(min_run_time=min_run_time).times)
    return Timing(times[0] * 1e3, statistics.median(times) * 1e3)


def fastest_ms(
    call: Callable[[], object], device: torch.device, min_run_time: float = 0.2
) -> float:
    """Milliseconds per call of `call()`, the fastest of several runs: `timing_ms(...).min_ms`."""
    return timing_ms(call, device, min_run_time).min_ms


def graphed(
    call: Callable[[], object], device: torch.device
) -> tuple[Callable[[], object], bool]:
    """`(replay, True)`: one `call()` captured in a CUDA graph and the function that replays it; on a
    CPU, `(call, False)`.

    The call must not synchronise with the host (no `.item()`) and must be compiled and its launch
    configuration pinned beforehand: a capture records launches, it cannot wait for an autotuner.
    Raises what the capture raises (a call that synchronises, a library that cannot be captured).
    """
    if device.type != "cuda":
        return call, False
    side = torch.cuda.Stream(device)
    side.wait_stream(torch.cuda.current_stream(device))
    # warm-up on a side stream, as torch's CUDA graph notes advise
    with torch.cuda.stream(side):
        call()
    torch.cuda.current_stream(device).wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        call()
    return graph.replay, True


def kernel_launches(
    call: Callable[[], object], device: torch.device
) -> list[str] | None:
    """The names of the GPU kernels that one `call()` launches, in order; None on a CPU, or where the
    profiler sees no GPU activity (no CUPTI)."""
    if device.type != "cuda":
        return None
    torch.cuda.synchronize(device)
    try:
        with profile(activities=[ProfilerActivity.CUDA]) as profiler:
            call()
            torch.cuda.synchronize(device)
    except RuntimeError:
        return None
    kernels = [
        event
        for event in profiler.events()
        if event.device_type == torch.autograd.DeviceType.CUDA
        and not event.name.startswith(("Memcpy", "Memset", "[memory]"))
    ]
    kernels.sort(key=lambda event: event.time_range.start)
    return [event.name for event in kernels] or None


def sm_clock_mhz(device: torch.device) -> int | None:
    """The GPU's SM clock now, in MHz: nvidia-smi's `clocks.sm`, else `torch.cuda.clock_rate` (which
    needs pynvml); None on a CPU or where neither answers."""
    if device.type != "cuda":
        return None
    reported = (nvidia_smi_clocks() or {}).get("clocks.sm")
    if reported is not None and reported.isdigit():
        return int(reported)
    try:
        return int(torch.cuda.clock_rate(device))
    except (ModuleNotFoundError, RuntimeError, ValueError, AttributeError):
        return None


def peak_memory_bytes(call: Callable[[], object], device: torch.device) -> int:
    """The most bytes torch held at once during one `call()`, above what it held before."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        before = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
        call()
        torch.cuda.synchronize(device)
        return torch.cuda.max_memory_allocated(device) - before
    with profile(
        activities=[ProfilerActivity.CPU], profile_memory=True
    ) as profiler:
        call()
    changes = [
        (event.time_range.start, event.cpu_memory_usage)
        if event.name
        == "[memory]"  # a free (or allocation) outside any operator
        else (event.time_range.start, event.self_cpu_memory_usage)
        for event in profiler.events()
    ]
    held = peak = 0
    for _, change in sorted(changes, key=lambda item: item[0]):
        held += change
        peak = max(peak, held)
    return peak


def environment(device: torch.device) -> dict:
    """Where and when the numbers were taken: device, clocks, versions, platform, UTC date, timing rule."""
    info = {
        "date_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(
            timespec="seconds"
        ),
        "device": str(device),
        "device_name": _cpu_name(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "torch": torch.__version__,
        "triton": _version("triton"),
        "cudnn": None,
        "gpu_clocks": None,
        "cpu_threads": torch.get_num_threads(),
        "timing": TIMING,
    }
    if device.type == "cuda":
        info["device_name"] = torch.cuda.get_device_name(device)
        info["cudnn"] = torch.backends.cudnn.version()
        info["gpu_clocks"] = nvidia_smi_clocks()
    return info


def nvidia_smi_clocks() -> dict | None:
    """SM and memory clocks (current and maximum, MHz) and the driver, as nvidia-smi reports them."""
    fields = [
        "clocks.sm",
        "clocks.max.sm",
        "clocks.mem",
        "clocks.max.mem",
        "driver_version",
    ]
    try:
        result = subprocess.run(
            [
                "nvidia-smi",
                f"--query-gpu={','.join(fields)}",
                "--format=csv,noheader,nounits",
            ],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    values = [
        value.strip() for value in result.stdout.splitlines()[0].split(",")
    ]
    return dict(zip(fields, values, strict=False))


def write_json(data: dict, path: Path) -> None:
    """Write `data` (a report, the measured table) to `path` as indented JSON, creating its folder."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        json.dumps(data, indent=2, default=str) + "\n", encoding="utf-8"
    )


def _cpu_name() -> str:
    """The CPU's model name from /proc/cpuinfo where there is one, else what `platform` knows."""
    with contextlib.suppress(OSError):
        for line in (
            Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines()
        ):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def _version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None
