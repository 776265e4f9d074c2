"""One GPU lease of issue 42, prepared: the kernels against cuDNN and torch, with timings that can be trusted.

Steps, in the order a lease runs them (`STEPS`):

1. `forward`: N = 4k and 16k (batch * N = 16k tokens, 16 heads, D = 128, bfloat16), full then causal;
2. `backward`: the same shapes, forward + backward;
3. `decode`: 1 and 16 new queries against 4k to 128k cached keys, 4 sequences, 32 query heads on 8 key/value
   heads, bottom-right causal;
4. `confirm`: in a fresh process, every case again with the configurations the first three chose, pinned;
   writes the measured table that `qkv.attention`'s `"auto"` reads (`measured.json`).

Before the first case, worker processes compile every launch configuration the cases will try
(`qkv_lab.precompile`, `--workers`), so that the tuning below reads them from Triton's cache. Then each case,
in this order:

- the float32 reference of the output (and of dQ, dK and dV with a backward), on every element, and torch's
  own result in the same dtype, the yardstick (`qkv_lab.gradients`);
- a tuning step (`qkv_lab.pinning.tune`): each launch configuration the autotuner would try, pinned, is run,
  checked against the reference (gradients included) and timed; the fastest median that passed is chosen.
  The backward kernels keep the forward configuration of the same shape's forward case;
- the timing of the kernel with the chosen configurations pinned (no autotuner searching), then of torch's
  paths: its own choice, cuDNN forced, FlashAttention-2 forced (`torch-flash`), for decoding the bottom-right
  causal bias instead of FA2 (`torch-lower-right`); each checked as the kernel was, then timed;
- decoding is timed inside a CUDA graph (kernel and torch alike: at short caches the launches, not the
  kernels, set the time), and the kernels one call launches are counted, the split-KV merge included;
  beside the kernel with its merge kernel after it (`qkv-decode`), its variant that merges the splits in
  the split kernel's own launch (`bench.VARIANT_PATHS`) is checked and timed with the same configuration, under `variants`;
- each timing gives the fastest and the median run and the SM clock read right after it.

After each case the run folder `ROOT/<date>-<gpu>/` gets `summary.json` (`qkv_lab.summary`, the schema of
the issue) and `cases.json` (everything: medians, clocks, errors, every tuning trial, the chosen
configurations as `confirm` reads them), so a run stopped by its time limit keeps what it measured, and a
rerun into the same folder measures only the cases it lacks. `--seconds` stops starting cases once that
much time has passed (the command's own limit, `timeout`, is the hard stop).

Usage: `python -m qkv_lab.lease ROOT [--steps forward backward decode] [--seconds 300]`;
`benchmarks/gpu.sh OUT lease` runs the whole lease.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

from qkv_lab import bench, gradients, harness, pinning, precompile
from qkv_lab.harness import Timing
from qkv_lab.summary import Summary, run_folder, write_whole

STEPS = ("forward", "backward", "decode", "confirm")
SQUARE_TORCH_PATHS = ("torch", "torch-cudnn", "torch-flash")
DECODE_TORCH_PATHS = ("torch", "torch-cudnn", bench.LOWER_RIGHT_PATH)
DTYPE_NAMES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}


@dataclasses.dataclass(frozen=True)
class Plan:
    """The shapes of a lease: the issue's on a GPU; the tests give tiny ones."""

    square: tuple[int, ...] = (4096, 16384)
    tokens: int = 16384  # batch * N of the square cases
    heads: int = 16
    head_dim: int = 128
    dtype: str = "bf16"
    decode_keys: tuple[int, ...] = (4096, 16384, 65536, 131072)
    decode_queries: tuple[int, ...] = (1, 16)
    decode_batch: int = 4
    decode_heads: tuple[int, int] = (32, 8)  # query heads, key/value heads


@dataclasses.dataclass
class Tools:
    """How the lease times, reads the clock, captures graphs and counts launches: fakes in the tests."""

    device: torch.device
    timer: Callable[[Callable[[], object], torch.device], Timing] = (
        harness.timing_ms
    )
    clock: Callable[[torch.device], int | None] = harness.sm_clock_mhz
    graphed: Callable = harness.graphed
    launches: Callable = harness.kernel_launches


def cases(step: str, plan: Plan) -> list[bench.Case]:
    """The cases of one step, in the order they are measured, each as its kernel path's `Case`."""
    shape = {"dtype": plan.dtype, "head_dim": plan.head_dim}
    if step in ("forward", "backward"):
        mode = "forward" if step == "forward" else "forward+backward"
        return [
            bench.Case(
                "qkv-flash", mode, causal=causal, seqlen_q=n, seqlen_k=n,
                batch=max(1, plan.tokens // n), heads=plan.heads, heads_kv=plan.heads, **shape,
            )
            for causal in (False, "top_left")
            for n in plan.square
        ]  # fmt: skip
    if step == "decode":
        heads, heads_kv = plan.decode_heads
        return [
            bench.Case(
                "qkv-decode", "forward", causal="bottom_right", seqlen_q=queries, seqlen_k=keys,
                batch=plan.decode_batch, heads=heads, heads_kv=heads_kv, suite="decode", **shape,
            )
            for queries in plan.decode_queries
            for keys in plan.decode_keys
        ]  # fmt: skip
    raise ValueError(
        f"step must be one of {STEPS[:3]} (confirm replays them), got {step!r}"
    )


def op(case: bench.Case) -> str:
    """The summary's name of what a case measures."""
    return "decode" if case.suite == "decode" else case.mode


def summary_identity(case: bench.Case) -> dict:
    """The fields of `qkv_lab.summary.IDENTITY` for a case."""
    return {
        "op": op(case),
        "N": case.seqlen_k,
        "keys": case.seqlen_k,
        "queries": case.seqlen_q,
        "D": case.head_dim,
        "dtype": DTYPE_NAMES[case.dtype],
        "causal": bool(case.causal),
    }


class Checked:
    """One case's inputs with their reference and yardstick (`qkv_lab.gradients.Check`): `check` tells a
    path's errors, `call` gives the function that times it."""

    def __init__(self, case: bench.Case, device: torch.device) -> None:
        self.case = case
        self.q, self.k, self.v, self.masks = bench._inputs(case, device)
        d_out = bench.output_gradient(case, self.q)
        self.reference = gradients.Check(
            self.q, self.k, self.v, self.masks, d_out
        )

    def check(self, path: str) -> tuple[dict, str | None]:
        """The path's errors against the reference, and why they fail the rule (None if they pass)."""
        found = self.reference.errors(bench.attention_function(path))
        return found, gradients.failure(found)

    def call(self, path: str) -> Callable[[], None]:
        """A no-argument function that runs the path once, as it is timed."""
        return bench._make_call(
            dataclasses.replace(self.case, path=path),
            self.q,
            self.k,
            self.v,
            self.masks,
        )


def time_path(
    checked: Checked, path: str, tools: Tools, record: dict, count: bool = True
) -> Timing | str:
    """Check `path` on the case, then time it (decoding inside a CUDA graph); fill `record` with its
    errors, timing, clock, graph flag and, with `count`, the kernels one call launches. Returns the timing,
    or why there is none. A call that cannot be captured in a graph is timed as it is (`graph` false,
    `graph_error` says why)."""
    try:
        found, failed = checked.check(path)
        record["errors"] = found
        if failed:
            record |= {"status": "wrong", "reason": failed}
            return failed
        call = checked.call(path)
        call()  # compiled before it is captured or timed
        if checked.case.suite == "decode":
            if count:
                record["launches"] = tools.launches(call, tools.device)
            call, record["graph"] = _in_graph(call, tools, record)
        timing = tools.timer(call, tools.device)
    except torch.OutOfMemoryError:
        record |= {"status": "oom", "reason": "out of memory"}
        return "out of memory"
    except (TypeError, ValueError, RuntimeError) as error:
        reason = (
            str(error).splitlines()[0] if str(error) else type(error).__name__
        )
        record |= {"status": "unsupported", "reason": reason}
        return reason
    record |= {
        "status": "ok",
        "min_ms": timing.min_ms,
        "median_ms": timing.median_ms,
    }
    record["sm_clock_mhz"] = tools.clock(tools.device)
    return timing


def _in_graph(
    call: Callable[[], None], tools: Tools, record: dict
) -> tuple[Callable, bool]:
    """`tools.graphed(call)`, or the call itself where the capture fails (the reason in `record`)."""
    try:
        return tools.graphed(call, tools.device)
    except RuntimeError as error:
        record["graph_error"] = (
            str(error).splitlines()[0] if str(error) else type(error).__name__
        )
        if tools.device.type == "cuda":
            torch.cuda.synchronize(tools.device)
        return call, False


def measure(case: bench.Case, tools: Tools, fixed: dict | None = None) -> dict:
    """Tune, check and time one case's kernel with its configuration pinned, then torch's paths.

    Args:
        case: the kernel path's case (`cases`).
        tools: the timer and the rest.
        fixed: chosen configurations to keep (the forward's, for a backward case of the same shape).

    Returns:
        The raw record: the case, `paths` (per path: status, min and median ms, SM clock, errors, graph,
        launches), `variants` (the kernel's `bench.VARIANT_PATHS`, timed as it is), `tuning` (every trial) and
        `config` (the chosen configurations, as `pinning.as_dict`).
    """
    checked = Checked(case, tools.device)
    kernel_path = case.path
    record = {
        **dataclasses.asdict(case),
        "paths": {},
        "tuning": [],
        "config": {},
    }

    def attempt(
        choice: dict,
    ) -> Timing | str:  # runs pinned to `choice` (pinning.tune)
        result: dict = {}
        outcome = time_path(checked, kernel_path, tools, result, count=False)
        if isinstance(outcome, str) and result["status"] != "wrong":
            raise RuntimeError(
                outcome
            )  # did not run: the trial is an error, not a wrong result
        return outcome

    fixed = {
        kernel: config
        for kernel, config in (fixed or {}).items()
        if kernel in bench.kernels(case)
    }
    tuned = pinning.tune(
        [kernel for kernel in bench.kernels(case) if kernel not in fixed],
        case.seqlen_q,
        attempt,
        fixed,
    )
    record["tuning"] = [dataclasses.asdict(trial) for trial in tuned.trials]
    kernel_record = {"autotune": False, "config": tuned.describe() or None}
    if tuned.choice:
        record["config"] = {
            kernel: pinning.as_dict(c) for kernel, c in tuned.choice.items()
        }
        with pinning.pinned(tuned.choice):
            time_path(checked, kernel_path, tools, kernel_record)
    else:
        kernel_record |= {
            "status": "wrong",
            "reason": "no configuration passed the check",
        }
    record["paths"][kernel_path] = kernel_record
    record["variants"] = {}
    for variant in (
        bench.VARIANT_PATHS.get(kernel_path, ()) if tuned.choice else ()
    ):
        result = {"autotune": False, "config": kernel_record["config"]}
        with pinning.pinned(tuned.choice):
            time_path(checked, variant, tools, result)
        record["variants"][variant] = result
    torch_paths = (
        DECODE_TORCH_PATHS if case.suite == "decode" else SQUARE_TORCH_PATHS
    )
    for path in torch_paths:
        record["paths"][path] = {"config": path}
        time_path(checked, path, tools, record["paths"][path])
    if tools.device.type == "cuda":
        torch.cuda.empty_cache()
    return record


def summary_line(record: dict) -> dict | None:
    """The summary's line of a raw record, or None where the kernel or every torch path has no time."""
    case = bench.Case(
        **{
            field.name: record[field.name]
            for field in dataclasses.fields(bench.Case)
        }
    )
    paths = record["paths"]
    kernel = paths[case.path]
    torch_times = {
        path: result["min_ms"]
        for path, result in paths.items()
        if path != case.path and result.get("status") == "ok"
    }
    if kernel.get("status") != "ok" or not torch_times:
        return None
    best = min(torch_times, key=torch_times.get)
    return summary_identity(case) | {
        "qkv_ms": kernel["min_ms"],
        "cudnn_ms": torch_times.get("torch-cudnn"),
        "best_torch_ms": torch_times[best],
        "best_torch": best,
        "config": kernel["config"],
        "gradients_checked": case.mode == "forward+backward",
    }


class Run:
    """A lease's run folder: the summary, the raw records, the environment; what is already there."""

    def __init__(self, root: Path, device: torch.device) -> None:
        env = harness.environment(device)
        date = env["date_utc"][:10]
        self.folder = run_folder(root, date, env["device_name"])
        versions = {
            name: env[name] for name in ("torch", "triton", "cudnn", "python")
        }
        versions["cuda"] = torch.version.cuda
        versions["driver"] = (env["gpu_clocks"] or {}).get("driver_version")
        self.summary = Summary(
            self.folder / "summary.json", date, env["device_name"], versions
        )
        self.raw_path = self.folder / "cases.json"
        self.raw = {"environment": env, "cases": []}
        if self.raw_path.exists():
            self.raw["cases"] = json.loads(
                self.raw_path.read_text(encoding="utf-8")
            )["cases"]
        write_whole(env, self.folder / "environment.json")

    def done(self, case: bench.Case) -> bool:
        """Whether a raw record of the case is already in the folder."""
        return any(_same_case(record, case) for record in self.raw["cases"])

    def record(self, record: dict) -> None:
        """Keep the raw record and its summary line; write both files."""
        self.raw["cases"] = [
            r for r in self.raw["cases"] if not _same_case(r, record)
        ] + [record]
        write_whole(self.raw, self.raw_path)
        line = summary_line(record)
        if line is not None:
            self.summary.add(line)

    def forward_choice(self, case: bench.Case) -> dict:
        """The forward configuration chosen for the forward case of `case`'s shape, if one was."""
        forward = dataclasses.replace(case, mode="forward")
        for record in self.raw["cases"]:
            if _same_case(record, forward) and "forward" in record["config"]:
                return {
                    "forward": pinning.from_dict(record["config"]["forward"])
                }
        return {}


def _same_case(record: dict | bench.Case, case: dict | bench.Case) -> bool:
    fields = [field.name for field in dataclasses.fields(bench.Case)]
    as_dict = [
        c if isinstance(c, dict) else dataclasses.asdict(c)
        for c in (record, case)
    ]
    return all(as_dict[0][name] == as_dict[1][name] for name in fields)


def measure_steps(
    run: Run,
    steps: list[str],
    plan: Plan,
    tools: Tools,
    deadline: float,
    log=None,
) -> list[str]:
    """Measure the cases of `steps` not yet in the run folder until `deadline` (time.monotonic);
    return a line for each case, measured or left."""
    lines = []
    for step in steps:
        for case in cases(step, plan):
            label = f"{op(case)} N={case.seqlen_k} L={case.seqlen_q} causal={bool(case.causal)}"
            if run.done(case):
                lines.append(f"{label}: in the folder already")
            elif time.monotonic() > deadline:
                lines.append(f"{label}: left, out of time")
            else:
                started = time.monotonic()
                fixed = (
                    run.forward_choice(case)
                    if case.mode == "forward+backward"
                    else None
                )
                record = measure(case, tools, fixed)
                record["seconds"] = round(time.monotonic() - started, 1)
                run.record(record)
                lines.append(
                    f"{label}: {_outcome(record)} ({record['seconds']} s)"
                )
            print(lines[-1], file=log or sys.stderr, flush=True)
    return lines


def _outcome(record: dict) -> str:
    """`qkv-flash 1.23 ms [config], torch-cudnn 1.00 ms, ...`: a case's results in one line."""
    parts = []
    for path, result in record["paths"].items():
        if result.get("status") == "ok":
            parts.append(f"{path} {result['min_ms']:.4g} ms")
        else:
            parts.append(
                f"{path} {result.get('status')}: {result.get('reason')}"
            )
    return ", ".join(parts)


def confirm(run: Run, tools: Tools, deadline: float, log=None) -> list[str]:
    """Every recorded case again, in this process, with its chosen configurations pinned: the kernel and
    the torch path that was fastest, each checked then timed. Writes `confirm.json` and `measured.json`
    (the forward and forward + backward cases, as `qkv_lab.bench.write_table` does)."""
    path = run.folder / "confirm.json"
    confirmed = {"environment": run.raw["environment"], "results": []}
    if path.exists():
        confirmed["results"] = json.loads(path.read_text(encoding="utf-8"))[
            "results"
        ]
    lines = []
    for record in list(run.raw["cases"]):
        case = bench.Case(
            **{f.name: record[f.name] for f in dataclasses.fields(bench.Case)}
        )
        line = summary_line(record)
        if line is None or not record["config"]:
            continue
        if any(_same_case(r, case) for r in confirmed["results"]):
            continue
        if time.monotonic() > deadline:
            lines.append(f"{op(case)} N={case.seqlen_k}: left, out of time")
            break
        checked = Checked(case, tools.device)
        choice = {
            kernel: pinning.from_dict(c)
            for kernel, c in record["config"].items()
        }
        for timed in (case.path, line["best_torch"], "torch"):
            if any(
                _same_case(r, dataclasses.replace(case, path=timed))
                for r in confirmed["results"]
            ):
                continue
            result = {
                **dataclasses.asdict(dataclasses.replace(case, path=timed))
            }
            if timed == case.path:
                with pinning.pinned(choice):
                    time_path(checked, timed, tools, result)
                result["config"] = line["config"]
            else:
                time_path(checked, timed, tools, result)
            result["ms"] = result.get("min_ms")
            confirmed["results"].append(result)
            write_whole(confirmed, path)
        lines.append(
            f"{op(case)} N={case.seqlen_k} L={case.seqlen_q}: confirmed"
        )
        print(lines[-1], file=log or sys.stderr, flush=True)
    bench.write_table(
        {
            "environment": run.raw["environment"],
            "results": confirmed["results"],
        },
        run.folder / "measured.json",
    )
    return lines


def compile_first(
    run: Run, todo: list[bench.Case], device: str, workers: int
) -> None:
    """Compile the configurations that measuring `todo` will try, on `workers` processes
    (`qkv_lab.precompile`); write what each took to `precompile.json`. A failure costs only time: the
    timing process then compiles what is missing itself."""
    started = time.monotonic()
    try:
        results = precompile.precompile(todo, device, workers)
    except (
        Exception
    ) as error:  # a worker that died, a pool that broke: compile as before
        results = [
            (
                "pool",
                time.monotonic() - started,
                f"{type(error).__name__}: {error}"[:300],
            )
        ]
    seconds = round(time.monotonic() - started, 1)
    jobs = [
        {"job": label, "seconds": round(t, 1), "error": error}
        for label, t, error in results
    ]
    write_whole(
        {"workers": workers, "seconds": seconds, "jobs": jobs},
        run.folder / "precompile.json",
    )
    failed = sum(job["error"] is not None for job in jobs)
    print(
        f"compiled {len(jobs)} configurations in {seconds} s, {failed} failed",
        file=sys.stderr,
    )


def nvidia_smi(folder: Path) -> None:
    """`nvidia-smi -q` into the folder, where there is an nvidia-smi."""
    try:
        result = subprocess.run(
            ["nvidia-smi", "-q"],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        )
    except (OSError, subprocess.SubprocessError):
        return
    (folder / "nvidia-smi.txt").write_text(result.stdout, encoding="utf-8")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m qkv_lab.lease",
        description="The GPU lease of issue 42: kernels against cuDNN and torch, tuned, pinned, checked.",
    )
    parser.add_argument(
        "root", type=Path, help="the run folder <date>-<gpu> is made inside it"
    )
    parser.add_argument(
        "--steps", nargs="+", choices=STEPS, default=list(STEPS[:3])
    )
    parser.add_argument(
        "--seconds",
        type=float,
        default=300.0,
        help="start no case after this many seconds",
    )
    parser.add_argument(
        "--device", default="cuda", help="cuda (cpu: the tests' tiny run)"
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=max(1, min(14, (os.cpu_count() or 2) - 2)),
        help="processes that compile the configurations first (qkv_lab.precompile); 0: none",
    )
    args = parser.parse_args(argv)
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        parser.error("torch sees no CUDA device here: the lease runs on a GPU")
    return args


def main(
    argv: list[str] | None = None,
    plan: Plan | None = None,
    tools: Tools | None = None,
) -> int:
    """Run the steps asked for into the run folder; print where it is and what each case gave."""
    args = parse_args(argv)
    started = time.monotonic()
    device = torch.device(args.device)
    tools = tools or Tools(device)
    run = Run(args.root, device)
    nvidia_smi(run.folder)
    print(f"run folder: {run.folder}", file=sys.stderr, flush=True)
    deadline = started + args.seconds
    try:
        measured = [step for step in args.steps if step != "confirm"]
        todo = [
            c
            for step in measured
            for c in cases(step, plan or Plan())
            if not run.done(c)
        ]
        if (
            todo and args.workers > 0 and device.type == "cuda"
        ):  # nothing to compile on a CPU
            compile_first(run, todo, args.device, args.workers)
        measure_steps(run, measured, plan or Plan(), tools, deadline)
        if "confirm" in args.steps:
            confirm(run, tools, deadline)
    except (
        KeyboardInterrupt
    ):  # timeout's SIGINT: every finished case is in the folder already
        print(
            "stopped: the folder holds every case finished before",
            file=sys.stderr,
        )
        return 130
    stamp = datetime.datetime.now(datetime.timezone.utc).isoformat(
        timespec="seconds"
    )
    print(
        f"done {stamp} after {time.monotonic() - started:.0f} s",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
