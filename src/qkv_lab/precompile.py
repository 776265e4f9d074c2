"""Compile every launch configuration a lease will tune, in parallel processes, before it times anything.

A lease tunes some hundred configurations of the kernels; compiling one takes seconds, one after the other in
the process that times them (Triton compiles on first launch). Triton keeps what it compiles on disk
(`~/.triton/cache`), keyed by the kernel's source, its constants, its launch options and the arguments'
specialisation, none of which depend on the sequence lengths here (the kernels do not specialise on them). So
worker processes that launch each configuration once, pinned, on small inputs of the same kind fill the cache
that the timing process then reads: the compiling runs on all the host's cores at once.

`jobs` lists one launch per (kernel, configuration, masks, mode) the lease's steps will try; `precompile`
runs them on `workers` processes (none: in this process, as the tests do under the interpreter). A job that
fails is reported, not raised: the lease then compiles that configuration itself, as it would have.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import multiprocessing
import time

import torch

from qkv_lab import bench, pinning

SMALL_N = 256  # queries of a square job: the forward and dQ kernels keep the same query blocks as at 4k
SMALL_KEYS = 1024  # cached keys of a decoding job


@dataclasses.dataclass(frozen=True)
class Job:
    """One launch that compiles one configuration of one kernel: the small case and what it pins."""

    case: bench.Case
    kernel: str
    config: dict  # pinning.as_dict of the configuration
    others: tuple[
        tuple[str, dict], ...
    ]  # the case's other kernels, at their first configuration


def small(case: bench.Case) -> bench.Case:
    """The case on small inputs that compile the same kernels (same masks, mode, head size, group)."""
    if case.suite == "decode":
        return dataclasses.replace(
            case, seqlen_k=min(case.seqlen_k, SMALL_KEYS), batch=1
        )
    n = min(case.seqlen_q, SMALL_N)
    return dataclasses.replace(case, seqlen_q=n, seqlen_k=n, batch=1)


def jobs(cases: list[bench.Case]) -> list[Job]:
    """A job per configuration that tuning `cases` will try, each (kernel, configuration, small case) once."""
    found = {}
    for case in cases:
        shrunk = small(case)
        kernels = bench.kernels(case)
        firsts = {
            kernel: pinning.candidates(kernel, case.seqlen_q)[0]
            for kernel in kernels
        }
        for kernel in kernels:
            for config in pinning.candidates(kernel, case.seqlen_q):
                others = tuple(
                    (other, pinning.as_dict(first))
                    for other, first in firsts.items()
                    if other != kernel
                )
                # the case's path and its variants (bench.VARIANT_PATHS), which the lease times too
                for path in (
                    case.path,
                    *bench.VARIANT_PATHS.get(case.path, ()),
                ):
                    run = dataclasses.replace(shrunk, path=path)
                    job = Job(run, kernel, pinning.as_dict(config), others)
                    # the forward kernel is the same in both modes: compiled by whichever job comes first
                    same = (
                        dataclasses.replace(run, mode="forward")
                        if kernel == "forward"
                        else run
                    )
                    found.setdefault(
                        (same, kernel, pinning.describe(config)), job
                    )
    return list(found.values())


def run_job(job: Job, device: str) -> tuple[str, float, str | None]:
    """Launch the job's case once with its configurations pinned: `(label, seconds, error or None)`."""
    started = time.monotonic()
    label = f"{job.kernel} {pinning.describe(pinning.from_dict(job.config))} {job.case.mode}"
    label += f" causal={job.case.causal} L={job.case.seqlen_q}"
    choice = {
        kernel: pinning.from_dict(config) for kernel, config in job.others
    }
    choice[job.kernel] = pinning.from_dict(job.config)
    try:
        q, k, v, masks = bench._inputs(job.case, torch.device(device))
        with pinning.pinned(choice):
            bench._make_call(job.case, q, k, v, masks)()
    except Exception as error:  # reported: the lease compiles it again itself
        return (
            label,
            time.monotonic() - started,
            f"{type(error).__name__}: {error}"[:300],
        )
    return label, time.monotonic() - started, None


def precompile(
    cases: list[bench.Case], device: str, workers: int
) -> list[tuple[str, float, str | None]]:
    """Run the jobs of `cases` on `workers` new processes (0: here, one after the other); their results."""
    todo = jobs(cases)
    if workers == 0:
        return [run_job(job, device) for job in todo]
    context = multiprocessing.get_context(
        "spawn"
    )  # CUDA cannot be used in a forked child
    with concurrent.futures.ProcessPoolExecutor(
        workers, mp_context=context
    ) as pool:
        return list(pool.map(run_job, todo, [device] * len(todo)))
