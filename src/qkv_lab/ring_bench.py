"""Ring attention's communication against its computation, on CPU processes (gloo) or GPUs (NCCL).

For each sequence length N, every rank times, as the fastest of `--repeats` runs started together (other work
on the machine only ever adds time):

- `ring`: `qkv.ring_attention` on its shard, as a user calls it (input checks included);
- `compute`: the same attention blocks and online-softmax merges with nothing sent;
- `communication`: the same `W - 1` passes of the key and value blocks around the ring with nothing computed;
- `checks`: the input checks alone, which compare every rank's shapes (a collective of their own).

The report keeps the slowest rank of each (the ring waits for it), the communication share
`communication / (communication + compute)` and the largest difference between the ring's output and
attention over the whole sequence on one process.

Two ways to start it:

- `python -m qkv_lab.ring_bench --world 2 4` starts that many CPU processes on this machine (gloo on loopback);
  `--masks full causal` measures the ring without and with the causal mask, one after the other;
- `torchrun --nproc-per-node 8 -m qkv_lab.ring_bench --device cuda` runs one process per GPU (NCCL); torchrun
  sets the rank and the address of the group in the environment.

The JSON report (`--out`) holds the device, versions and UTC date (`qkv_lab.harness.environment`) beside the numbers.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F

from qkv.distributed import (
    _attend,
    _check_shards,
    _merge,
    _pass_along,
    _wait,
    ring_attention,
    ring_schedule,
)
from qkv_lab.harness import environment, write_json

BATCH, HEADS, HEAD_DIM = 1, 2, 64


def run(
    world: int, ns: list[int], causal: bool = False, repeats: int = 5
) -> list[dict]:
    """Start `world` CPU processes joined by gloo on loopback, measure every N, return rank 0's rows.

    Each process is a fresh `python -m qkv_lab.ring_bench --rank r`, never a copy of the caller: a script that
    calls `run` at its top level needs no `if __name__ == "__main__":` guard (with multiprocessing's spawn,
    every process would run that script again from the top).

    Raises:
        RuntimeError: a process failed; its error is on stderr.
    """
    with socket.socket() as probe:  # a free port for the group's rendezvous
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    command = [
        sys.executable,
        "-m",
        "qkv_lab.ring_bench",
        "--world",
        str(world),
        "--port",
        str(port),
    ]
    command += [
        "--n",
        *map(str, ns),
        "--repeats",
        str(repeats),
        *(["--causal"] if causal else []),
    ]
    processes = [
        subprocess.Popen(
            [*command, "--rank", str(rank)], stdout=subprocess.PIPE, text=True
        )
        for rank in range(world)
    ]
    # only rank 0 prints
    outputs = [process.communicate()[0] for process in processes]
    failed = {
        rank: p.returncode
        for rank, p in enumerate(processes)
        if p.returncode != 0
    }
    if failed:
        raise RuntimeError(
            f"ring_bench processes failed, rank: exit code {failed}"
        )
    return json.loads(outputs[0])


def _rank(
    rank: int, world: int, port: int, ns: list[int], causal: bool, repeats: int
) -> None:
    """One process of `run`: join the group, measure, and on rank 0 print the rows as JSON."""
    # --8<-- [start:launch]
    dist.init_process_group(
        "gloo",  # CPU tensors; "nccl" for GPUs
        # where the ranks meet: rank 0's address
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=world,
        timeout=datetime.timedelta(seconds=120),
    )
    # --8<-- [end:launch]
    torch.set_num_threads(1)  # one core per process
    try:
        rows = [measure(n, causal, repeats, torch.device("cpu")) for n in ns]
        if rank == 0:
            print(json.dumps(rows))
    finally:
        dist.destroy_process_group()


def measure(n: int, causal: bool, repeats: int, device: torch.device) -> dict:
    """On every rank of the default group: time the ring, its computation and its communication at length n."""
    rank, world = dist.get_rank(), dist.get_world_size()
    # --8<-- [start:shard]
    # every rank draws the same whole sequence
    generator = torch.Generator().manual_seed(0)
    q, k, v = (
        torch.randn(BATCH, HEADS, n, HEAD_DIM, generator=generator)
        for _ in range(3)
    )
    shard = n // world
    # rank r holds positions r*n/W ... (r+1)*n/W - 1
    mine = slice(rank * shard, (rank + 1) * shard)
    q_shard, k_shard, v_shard = (
        x[..., mine, :].contiguous().to(device) for x in (q, k, v)
    )
    out = ring_attention(q_shard, k_shard, v_shard, causal=causal)
    # one process, whole sequence
    whole = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    error = (out.cpu() - whole[..., mine, :]).abs().max()
    # --8<-- [end:shard]
    dist.all_reduce(error, op=dist.ReduceOp.MAX)

    def compute() -> None:
        out = torch.zeros_like(q_shard)
        lse = torch.full(q_shard.shape[:-1], float("-inf"), device=device)
        for source in ring_schedule(world, causal)[rank]:
            if source is not None:
                mask = None
                if causal and source == rank:
                    mask = torch.ones(
                        shard, shard, dtype=torch.bool, device=device
                    ).tril()
                out, lse = _merge(
                    out, lse, *_attend(q_shard, k_shard, v_shard, mask)
                )

    def communicate() -> None:
        k, v = k_shard, v_shard
        for _ in range(world - 1):
            k, v = _wait(*_pass_along([k, v], dist.group.WORLD))

    def ring() -> None:
        ring_attention(q_shard, k_shard, v_shard, causal=causal)

    def checks() -> None:
        _check_shards(q_shard, k_shard, v_shard, causal, dist.group.WORLD)

    row = {"n": n, "world": world, "causal": causal, "shard": shard}
    row["max_error"] = float(error)
    calls = {
        "ring": ring,
        "compute": compute,
        "communication": communicate,
        "checks": checks,
    }
    for name, ms in _slowest_rank_fastest_ms(calls, repeats, device).items():
        row[f"{name}_ms"] = ms
    row["communication_share"] = row["communication_ms"] / (
        row["communication_ms"] + row["compute_ms"]
    )
    return row


def _slowest_rank_fastest_ms(
    calls: dict[str, Callable[[], None]], repeats: int, device: torch.device
) -> dict[str, float]:
    """Each call's fastest of `repeats` runs, started together on every rank; the slowest rank's.

    The calls take turns within each repeat, so that a burst of other work on the machine falls on all alike.
    """
    for call in calls.values():
        call()  # warm-up
    fastest = dict.fromkeys(calls, float("inf"))
    for _ in range(repeats):
        for name, call in calls.items():
            dist.barrier()
            start = time.perf_counter()
            call()
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            fastest[name] = min(
                fastest[name], (time.perf_counter() - start) * 1e3
            )
    slowest = torch.tensor(list(fastest.values()), dtype=torch.float64)
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
    return dict(zip(calls, slowest.tolist(), strict=True))


def _under_torchrun(args: argparse.Namespace) -> list[dict]:
    """Join the group torchrun describes in the environment (NCCL on CUDA, gloo on CPU) and measure."""
    device = torch.device(args.device)
    if device.type == "cuda":
        device = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
        torch.cuda.set_device(device)
    dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    try:
        return [
            measure(n, mask == "causal", args.repeats, device)
            for mask in args.masks
            for n in args.n
        ]
    finally:
        dist.destroy_process_group()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m qkv_lab.ring_bench", description=__doc__
    )
    parser.add_argument(
        "--world",
        type=int,
        nargs="+",
        default=[2, 4],
        help="processes to start",
    )
    parser.add_argument(
        "--n", type=int, nargs="+", default=[512, 1024, 2048, 4096]
    )
    parser.add_argument(
        "--masks",
        nargs="+",
        choices=["full", "causal"],
        default=["full"],
        help="one run for each",
    )
    # one process of run()
    parser.add_argument("--causal", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument(
        "--device", default="cpu", help="cpu, or cuda under torchrun"
    )
    parser.add_argument(
        "--out", type=Path, default=Path("attention-across-devices.json")
    )
    # one process of run()
    parser.add_argument("--rank", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.rank is not None:
        (world,) = args.world
        _rank(args.rank, world, args.port, args.n, args.causal, args.repeats)
        return 0
    if "RANK" in os.environ:  # started by torchrun: one process of the group
        rows = _under_torchrun(args)
        if int(os.environ["RANK"]) != 0:
            return 0
        device = torch.device(args.device)
    else:
        rows = [
            row
            for world in args.world
            for mask in args.masks
            for row in run(world, args.n, mask == "causal", args.repeats)
        ]
        device = torch.device("cpu")
    settings = {
        "batch": BATCH,
        "heads": HEADS,
        "head_dim": HEAD_DIM,
        "dtype": "float32",
    }
    info = environment(device) | {
        "threads_per_process": 1 if device.type == "cpu" else None
    }
    report = {"environment": info, "shape": settings, "results": rows}
    write_json(report, args.out)
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
